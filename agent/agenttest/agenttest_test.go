package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func upsert(id string, typ conversation.BlockType, conv string) conversation.Event {
	return conversation.NewEvent(conversation.BlockUpsert{Block: conversation.Block{ID: id, Type: typ, Content: "x"}}).In(conv)
}

func delta(id, conv string) conversation.Event {
	return conversation.NewEvent(conversation.BlockDelta{BlockID: id, Delta: "y"}).In(conv)
}

func TestCheckEvents(t *testing.T) {
	good := []conversation.Event{upsert("a", conversation.BlockAssistantText, ""), delta("a", ""),
		upsert("a", conversation.BlockAssistantText, ""), upsert("b", conversation.BlockThinking, "sub")}
	var st conversation.State
	if f := Outcome(t, func(tb testing.TB) { st = CheckEvents(tb, good) }); f != "" {
		t.Fatalf("a good log failed: %s", f)
	}
	if len(st.Blocks) != 1 || st.Blocks[0].ID != "a" {
		t.Fatalf("state blocks %+v", st.Blocks)
	}
	unknown := conversation.Event{Type: "no:such", Payload: json.RawMessage(`{}`)}
	badPayload := conversation.Event{Type: conversation.TypeBlockUpsert, Payload: json.RawMessage(`[]`)}
	for name, tc := range map[string]struct {
		events []conversation.Event
		want   string
	}{
		"unknown type":         {[]conversation.Event{unknown}, "unknown type"},
		"payload":              {[]conversation.Event{badPayload}, "event 0"},
		"no id":                {[]conversation.Event{upsert("", conversation.BlockAssistantText, "")}, "without id"},
		"reused for a type":    {[]conversation.Event{upsert("a", conversation.BlockAssistantText, ""), upsert("a", conversation.BlockThinking, "")}, "reused"},
		"reused in a subagent": {[]conversation.Event{upsert("a", conversation.BlockAssistantText, ""), upsert("a", conversation.BlockAssistantText, "c")}, "reused"},
		"delta first":          {[]conversation.Event{delta("a", "")}, "unknown block"},
		"delta elsewhere":      {[]conversation.Event{upsert("a", conversation.BlockAssistantText, ""), delta("a", "c")}, "in conversation"},
	} {
		if f := Outcome(t, func(tb testing.TB) { CheckEvents(tb, tc.events) }); !strings.Contains(f, tc.want) {
			t.Errorf("%s: failure %q, want %q", name, f, tc.want)
		}
	}
}

func TestBlockHelpers(t *testing.T) {
	bs := []conversation.Block{{ID: "a", Type: conversation.BlockThinking}, {ID: "b", Type: conversation.BlockAssistantText}, {ID: "c", Type: conversation.BlockThinking}}
	if got := BlocksOf(bs, conversation.BlockThinking); len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Fatalf("BlocksOf %+v", got)
	}
	if b := FindBlock(t, bs, "b"); b.Type != conversation.BlockAssistantText {
		t.Fatalf("FindBlock %+v", b)
	}
	if f := Outcome(t, func(tb testing.TB) { FindBlock(tb, bs, "z") }); !strings.Contains(f, `no block "z"`) {
		t.Fatalf("FindBlock of a missing id: %q", f)
	}
	evs := []conversation.Event{delta("a", ""), upsert("a", conversation.BlockThinking, ""), delta("a", "")}
	if n := CountType(evs, conversation.TypeBlockDelta); n != 2 {
		t.Fatalf("CountType %d", n)
	}
}

// flusher keeps the last line back until Flush, as a converter that must
// see what follows a line does.
type flusher struct{ held []byte }

func (f *flusher) Convert(l []byte) ([]conversation.Event, error) {
	if len(l) == 0 {
		return nil, errors.New("empty")
	}
	f.held = l
	return nil, nil
}

func (f *flusher) Flush() []conversation.Event {
	if f.held == nil {
		return nil
	}
	return []conversation.Event{delta(string(f.held), "")}
}

type liar struct{}

func (liar) Convert([]byte) ([]conversation.Event, error) {
	return []conversation.Event{upsert("a", conversation.BlockAssistantText, "")}, errors.New("bad")
}

func TestFuzzLines(t *testing.T) {
	// The flushed delta has no block: FuzzLines must have flushed to see it.
	if f := Outcome(t, func(tb testing.TB) { FuzzLines(tb, &flusher{}, []byte("x")) }); !strings.Contains(f, "unknown block") {
		t.Fatalf("flush not checked: %q", f)
	}
	if f := Outcome(t, func(tb testing.TB) { FuzzLines(tb, liar{}, []byte("x")) }); !strings.Contains(f, "with 1 events") {
		t.Fatalf("events with an error: %q", f)
	}
	if f := Outcome(t, func(tb testing.TB) { FuzzDocument(tb, []conversation.Event{delta("a", "")}, errors.New("bad")) }); !strings.Contains(f, "with events") {
		t.Fatalf("document events with an error: %q", f)
	}
	if f := Outcome(t, func(tb testing.TB) { FuzzDocument(tb, nil, errors.New("bad")) }); f != "" {
		t.Fatalf("an error alone failed: %q", f)
	}
}

func TestNoPending(t *testing.T) {
	bs := []conversation.Block{{ID: "a", Status: conversation.StatusComplete}, {ID: "b", Status: conversation.StatusPending}}
	if f := Outcome(t, func(tb testing.TB) { NoPending(tb, bs[:1]) }); f != "" {
		t.Fatalf("settled blocks failed: %q", f)
	}
	if f := Outcome(t, func(tb testing.TB) { NoPending(tb, bs) }); !strings.Contains(f, "left pending") {
		t.Fatalf("a pending block passed: %q", f)
	}
}

// lineConv refuses lines starting with "!" and turns the others into
// upserts of a block with the line as id.
type lineConv struct{}

func (lineConv) Convert(l []byte) ([]conversation.Event, error) {
	if strings.HasPrefix(string(l), "!") {
		return nil, errors.New("refused")
	}
	return []conversation.Event{upsert(string(l), conversation.BlockAssistantText, "")}, nil
}

func TestConvertLines(t *testing.T) {
	var evs []conversation.Event
	if f := Outcome(t, func(tb testing.TB) { evs = ConvertLines(tb, lineConv{}, "a", "b") }); f != "" || len(evs) != 2 {
		t.Fatalf("failure %q, %d events", f, len(evs))
	}
	if f := Outcome(t, func(tb testing.TB) { ConvertLines(tb, lineConv{}, "a", "!b") }); !strings.Contains(f, "line 2: refused") {
		t.Fatalf("a refused line: %q", f)
	}
}

func TestBlockKinds(t *testing.T) {
	got := BlockKinds([]conversation.Block{{Type: conversation.BlockUserMessage, Content: "hi"}, {Type: conversation.BlockAssistantText, Content: "Done."}})
	if !slices.Equal(got, []string{"user_message", "assistant_text:Done."}) {
		t.Fatalf("kinds %q", got)
	}
}

func TestWaitForAndReadFile(t *testing.T) {
	n := 0
	if f := Outcome(t, func(tb testing.TB) { WaitFor(tb, time.Minute, "three polls", func() bool { n++; return n == 3 }) }); f != "" || n != 3 {
		t.Fatalf("failure %q after %d polls", f, n)
	}
	if f := Outcome(t, func(tb testing.TB) { WaitFor(tb, 0, "never", func() bool { return false }) }); f != "timed out waiting for never" {
		t.Fatalf("failure %q", f)
	}
	name := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(name, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ReadFile(t, name); got != "data" {
		t.Fatalf("read %q", got)
	}
	if f := Outcome(t, func(tb testing.TB) { ReadFile(tb, name+"-missing") }); f == "" {
		t.Fatal("a missing file read fine")
	}
}

func TestFakeHost(t *testing.T) {
	h := &FakeHost{}
	ctx := context.Background()
	log := conversation.NewEvent(conversation.LogEvent{Message: "hello", Data: json.RawMessage(`{"k":1}`)})
	empty := conversation.NewEvent(conversation.BlockUpsert{Block: conversation.Block{ID: "e", Type: conversation.BlockAssistantText}})
	_ = h.Emit(ctx, upsert("a", conversation.BlockAssistantText, ""), log, empty, upsert("t", conversation.BlockThinking, ""))
	if got := h.Texts(); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("texts %q", got)
	}
	if got := h.Logs(); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("logs %q", got)
	}
	if got := h.LogsWithData(); !slices.Equal(got, []string{`hello {"k":1}`}) {
		t.Fatalf("logs with data %q", got)
	}
	if bs := h.Blocks(t); len(bs) != 3 {
		t.Fatalf("blocks %+v", bs)
	}
	h.ResetEvents()
	if len(h.Events()) != 0 {
		t.Fatal("events kept after ResetEvents")
	}

	// Transcripts are kept only when asked.
	_ = h.SaveTranscript(ctx, "t", []byte("one"))
	if _, err := h.LoadTranscript(ctx, "t"); err == nil {
		t.Fatal("a transcript was kept")
	}
	h.KeepTranscripts = true
	_ = h.SaveTranscript(ctx, "t", []byte("one"))
	if b, err := h.LoadTranscript(ctx, "t"); err != nil || string(b) != "one" {
		t.Fatalf("transcript %q %v", b, err)
	}

	// Without Decide a request waits for its context.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := h.RequestPermission(cctx, agent.PermissionRequest{ToolName: "shell"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	h.Decide = func(agent.PermissionRequest) agent.PermissionDecision {
		return agent.PermissionDecision{Behavior: conversation.Deny}
	}
	if d, err := h.RequestPermission(ctx, agent.PermissionRequest{ToolName: "edit"}); err != nil || d.Behavior != conversation.Deny {
		t.Fatalf("decision %+v %v", d, err)
	}
	if p := h.Perms(); len(p) != 2 || p[1].ToolName != "edit" {
		t.Fatalf("perms %+v", p)
	}
	_ = h.SetAgentInfo(ctx, "1.0", "sess")
	_ = h.SaveAgentState(ctx, json.RawMessage(`{"a":1}`))
	if h.Info() != [2]string{"1.0", "sess"} || string(h.AgentState()) != `{"a":1}` {
		t.Fatalf("info %v state %s", h.Info(), h.AgentState())
	}
}

func TestSeedsInputs(t *testing.T) {
	data := []byte("one\n\nthree33\n")
	for _, tc := range []struct {
		s    Seeds
		want string
	}{
		{Seeds{Whole: true}, "one\n\nthree33\n"},
		{Seeds{Lines: true}, "one|three33"},
		{Seeds{Whole: true, Lines: true}, "one\n\nthree33\n|one|three33"},
		{Seeds{Whole: true, Lines: true, MaxLen: 7}, "one"},
		{Seeds{}, ""},
	} {
		var got []string
		for _, in := range tc.s.inputs(data) {
			got = append(got, string(in))
		}
		if strings.Join(got, "|") != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
}

func TestLocalEnvAndTurnCtx(t *testing.T) {
	h := &FakeHost{}
	bin := FakeEnv(t, h, "AGENTTEST_SCENARIO", "x")
	if bin == "" || h.Env() == nil {
		t.Fatalf("bin %q env %v", bin, h.Env())
	}
	out, err := h.Env().ReadFile(TurnCtx(t), "missing")
	if err == nil {
		t.Fatalf("read a missing file: %q", out)
	}
}

type stubArch struct {
	run agent.Runner
	err error
}

func (stubArch) Name() string { return "stub" }
func (a stubArch) Start(context.Context, agent.Host) (agent.Runner, error) {
	return a.run, a.err
}

type stubRunner struct{ agent.Runner }

type otherRunner struct{ agent.Runner }

func TestStart(t *testing.T) {
	h := &FakeHost{}
	if r := Start[*stubRunner](t, stubArch{run: &stubRunner{}}, h); r == nil {
		t.Fatal("no runner")
	}
	if f := Outcome(t, func(tb testing.TB) { Start[*stubRunner](tb, stubArch{err: errors.New("no CLI")}, h) }); f != "no CLI" {
		t.Fatalf("a failed start: %q", f)
	}
	if f := Outcome(t, func(tb testing.TB) { Start[*stubRunner](tb, stubArch{run: &otherRunner{}}, h) }); !strings.Contains(f, "want *agenttest.stubRunner") {
		t.Fatalf("a runner of another type: %q", f)
	}
}

func TestOutcome(t *testing.T) {
	if got := Outcome(t, func(testing.TB) {}); got != "" {
		t.Fatalf("a clean run: %q", got)
	}
	if got := Outcome(t, func(tb testing.TB) { tb.Fatalf("bad %d", 1); panic("not reached") }); got != "bad 1" {
		t.Fatalf("Fatalf: %q", got)
	}
	if got := Outcome(t, func(tb testing.TB) { tb.Fatal("bad") }); got != "bad" {
		t.Fatalf("Fatal: %q", got)
	}
	if got := Outcome(t, func(tb testing.TB) { tb.Skip("later") }); got != "skip: later" {
		t.Fatalf("Skip: %q", got)
	}
}
