package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

// FakeHost is an agent.Host for runner tests: it records the events, the
// agent state and info and the permission requests in memory. Set the
// exported fields before the runner starts; the methods are safe for
// concurrent use.
type FakeHost struct {
	Environment sandbox.Environment
	Prof        profile.Profile
	Opts        agent.Options
	// Decide answers permission requests; nil leaves them open until the
	// asking context ends.
	Decide func(agent.PermissionRequest) agent.PermissionDecision
	// KeepTranscripts makes SaveTranscript keep what it is given for
	// LoadTranscript; without it nothing is kept and LoadTranscript fails.
	KeepTranscripts bool
	// EmitDelay is how long Emit takes before it records, as a real
	// event log's append does: a runner's ordering races show up.
	EmitDelay time.Duration

	mu          sync.Mutex
	events      []conversation.Event
	state       json.RawMessage
	perms       []agent.PermissionRequest
	info        [2]string
	transcripts map[string][]byte
}

var _ agent.Host = (*FakeHost)(nil)

// errNoTranscript is what LoadTranscript returns for a name it does not hold.
var errNoTranscript = errors.New("none")

func (h *FakeHost) SessionID() string        { return "s" }
func (h *FakeHost) Env() sandbox.Environment { return h.Environment }
func (h *FakeHost) Profile() profile.Profile { return h.Prof }
func (h *FakeHost) Options() agent.Options   { return h.Opts }
func (h *FakeHost) Logger() *slog.Logger     { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (h *FakeHost) LoadTranscript(_ context.Context, name string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.transcripts[name]; ok {
		return b, nil
	}
	return nil, errNoTranscript
}

func (h *FakeHost) SaveTranscript(_ context.Context, name string, b []byte) error {
	if !h.KeepTranscripts {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.transcripts == nil {
		h.transcripts = map[string][]byte{}
	}
	h.transcripts[name] = append([]byte(nil), b...)
	return nil
}

func (h *FakeHost) Emit(_ context.Context, evs ...conversation.Event) error {
	if h.EmitDelay > 0 {
		time.Sleep(h.EmitDelay)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, evs...)
	return nil
}

func (h *FakeHost) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
	h.mu.Lock()
	h.perms = append(h.perms, req)
	h.mu.Unlock()
	if h.Decide == nil {
		<-ctx.Done()
		return agent.PermissionDecision{}, ctx.Err()
	}
	return h.Decide(req), nil
}

func (h *FakeHost) AgentState() json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

func (h *FakeHost) SaveAgentState(_ context.Context, s json.RawMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = append(json.RawMessage(nil), s...)
	return nil
}

func (h *FakeHost) SetAgentInfo(_ context.Context, v, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.info = [2]string{v, id}
	return nil
}

// Info is the last SetAgentInfo: version and agent session id.
func (h *FakeHost) Info() [2]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.info
}

// Perms returns the permission requests so far.
func (h *FakeHost) Perms() []agent.PermissionRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]agent.PermissionRequest(nil), h.perms...)
}

// Events returns a copy of the events emitted so far.
func (h *FakeHost) Events() []conversation.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]conversation.Event(nil), h.events...)
}

// ResetEvents forgets the events emitted so far (benchmarks, between turns).
func (h *FakeHost) ResetEvents() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = h.events[:0]
}

// Find returns the events of type typ.
func (h *FakeHost) Find(typ conversation.EventType) []conversation.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return OfType(h.events, typ)
}

// Texts returns the non-empty assistant texts, from the block upserts.
func (h *FakeHost) Texts() []string {
	var out []string
	for _, e := range h.Find(conversation.TypeBlockUpsert) {
		var u conversation.BlockUpsert
		_ = json.Unmarshal(e.Payload, &u)
		if u.Block.Type == conversation.BlockAssistantText && u.Block.Content != "" {
			out = append(out, u.Block.Content)
		}
	}
	return out
}

// Logs returns the messages of the log events.
func (h *FakeHost) Logs() []string {
	var out []string
	for _, l := range h.logEvents() {
		out = append(out, l.Message)
	}
	return out
}

// LogsWithData returns the log events as "message data".
func (h *FakeHost) LogsWithData() []string {
	var out []string
	for _, l := range h.logEvents() {
		out = append(out, l.Message+" "+string(l.Data))
	}
	return out
}

func (h *FakeHost) logEvents() []conversation.LogEvent {
	var out []conversation.LogEvent
	for _, e := range h.Find(conversation.TypeLog) {
		var l conversation.LogEvent
		_ = json.Unmarshal(e.Payload, &l)
		out = append(out, l)
	}
	return out
}

// Blocks reduces the events (numbered 1, 2, … as a log would) to the main
// conversation's blocks; a log the reducer refuses fails the test.
func (h *FakeHost) Blocks(t testing.TB) []conversation.Block {
	t.Helper()
	evs := h.Events()
	for i := range evs {
		evs[i].Seq = int64(i + 1)
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
