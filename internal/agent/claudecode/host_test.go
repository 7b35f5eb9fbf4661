package claudecode

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// testHost is an agent.Host for runner tests: it keeps events, state and
// transcripts in memory and answers permission requests with answer.
type testHost struct {
	env  sandbox.Environment
	prof profile.Profile
	opts agent.Options

	mu          sync.Mutex
	events      []conversation.Event
	state       json.RawMessage
	transcripts map[string][]byte
	version     string
	agentSess   string
	answer      func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error)
	requests    []agent.PermissionRequest
	notify      chan struct{}

	// permEvents makes RequestPermission record its request and resolution
	// as the session does (restart tests).
	permEvents bool
	// journal, when on, records every Emit and SaveAgentState in order, so
	// a test can cut the run at any point as a crash would.
	journaling bool
	journal    []journalEntry
}

// journalEntry is one Emit (events) or one SaveAgentState (state).
type journalEntry struct {
	events []conversation.Event
	state  json.RawMessage
}

func newTestHost(t testing.TB, path string) *testHost {
	t.Helper()
	if path != "" {
		path += ":" + os.Getenv("PATH")
	} else {
		path = "/usr/bin:/bin"
	}
	env, err := local.New(local.Options{Path: path}).Create(context.Background(),
		sandbox.Spec{SessionID: "s1", Workspace: t.TempDir(), Env: map[string]string{"ANTHROPIC_API_KEY": "test-key"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Terminate(context.Background()) })
	return newHostOn(env)
}

// newHostOn is a test host for an environment the caller manages.
func newHostOn(env sandbox.Environment) *testHost {
	return &testHost{env: env, transcripts: map[string][]byte{}, notify: make(chan struct{}, 1),
		prof: profile.Default()}
}

var _ agent.Host = (*testHost)(nil)

func (h *testHost) SessionID() string        { return "s1" }
func (h *testHost) Env() sandbox.Environment { return h.env }
func (h *testHost) Profile() profile.Profile { return h.prof }
func (h *testHost) Options() agent.Options   { return h.opts }
func (h *testHost) Logger() *slog.Logger     { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (h *testHost) Emit(ctx context.Context, events ...conversation.Event) error {
	h.mu.Lock()
	for _, e := range events {
		if !e.Type.Valid() || !json.Valid(e.Payload) {
			h.mu.Unlock()
			panic("invalid event " + string(e.Type) + " " + string(e.Payload))
		}
		h.events = append(h.events, e)
	}
	if h.journaling {
		h.journal = append(h.journal, journalEntry{events: append([]conversation.Event(nil), events...)})
	}
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
	return nil
}

func (h *testHost) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
	h.mu.Lock()
	h.requests = append(h.requests, req)
	answer, record := h.answer, h.permEvents
	h.mu.Unlock()
	if answer == nil {
		return agent.PermissionDecision{Behavior: conversation.Allow, By: conversation.ByPolicy}, nil
	}
	if !record {
		return answer(ctx, req)
	}
	id := "perm-" + req.ToolUseID
	_ = h.Emit(ctx, conversation.NewEvent(conversation.PermissionRequested{RequestID: id, ToolName: req.ToolName,
		Input: req.Input, ToolUseID: req.ToolUseID}).From(conversation.SourceServer))
	d, err := answer(ctx, req)
	res := conversation.PermissionResolved{RequestID: id, Behavior: d.Behavior, By: d.By}
	if err != nil {
		res.Behavior, res.By = conversation.Deny, conversation.ByInterrupt
	}
	_ = h.Emit(context.WithoutCancel(ctx), conversation.NewEvent(res).From(conversation.SourceServer))
	return d, err
}

func (h *testHost) AgentState() json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

func (h *testHost) SaveAgentState(ctx context.Context, state json.RawMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = append(json.RawMessage(nil), state...)
	if h.journaling {
		h.journal = append(h.journal, journalEntry{state: h.state})
	}
	return nil
}

func (h *testHost) SaveTranscript(ctx context.Context, name string, data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.transcripts[name] = append([]byte(nil), data...)
	return nil
}

func (h *testHost) LoadTranscript(ctx context.Context, name string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.transcripts[name]; ok {
		return b, nil
	}
	return nil, store.ErrNotFound
}

func (h *testHost) SetAgentInfo(ctx context.Context, version, agentSessionID string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.version, h.agentSess = version, agentSessionID
	return nil
}

func (h *testHost) allEvents() []conversation.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]conversation.Event(nil), h.events...)
}

func (h *testHost) reduce(t testing.TB) conversation.State {
	t.Helper()
	st, err := conversation.Reduce(h.allEvents())
	if err != nil {
		t.Fatalf("reduce: %v", err)
	}
	return st
}

// logs returns the messages of the log events containing s.
func (h *testHost) logs(s string) []string {
	var out []string
	for _, e := range h.allEvents() {
		if e.Type != conversation.TypeLog {
			continue
		}
		var l conversation.LogEvent
		_ = json.Unmarshal(e.Payload, &l)
		if strings.Contains(l.Message, s) {
			out = append(out, l.Message)
		}
	}
	return out
}

func (h *testHost) ofType(typ conversation.EventType) []conversation.Event {
	return agenttest.OfType(h.allEvents(), typ)
}

// fakeStarts reads the fake CLI's start records.
func fakeStarts(t *testing.T, h *testHost) []struct {
	Argv []string
	Env  map[string]string
} {
	t.Helper()
	data, err := h.env.ReadFile(context.Background(), configRel+"/fake-starts.jsonl")
	if err != nil {
		return nil
	}
	var out []struct {
		Argv []string
		Env  map[string]string
	}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s struct {
			Argv []string
			Env  map[string]string
		}
		if json.Unmarshal([]byte(l), &s) == nil {
			out = append(out, s)
		}
	}
	return out
}
