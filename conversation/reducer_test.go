package conversation_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

func seq(n int64, e conversation.Event) conversation.Event {
	e.Seq = n
	return e
}

func TestUpsertShallowMergesAndDeltasAppend(t *testing.T) {
	evs := []conversation.Event{
		seq(1, conversation.Upsert(conversation.Block{ID: "m-0", Type: conversation.BlockAssistantText, Status: conversation.StatusPending})),
		seq(2, conversation.Delta("m-0", "Hel")),
		seq(3, conversation.Delta("m-0", "lo")),
		// A merge that omits content keeps the streamed text.
		seq(4, conversation.Upsert(conversation.Block{ID: "m-0", Type: conversation.BlockAssistantText, Status: conversation.StatusComplete, Model: "m"})),
		seq(5, conversation.Upsert(conversation.Block{ID: "t1", Type: conversation.BlockToolUse, ToolName: "Bash", ToolUseID: "t1", Input: json.RawMessage(`{"command":"ls"}`)})),
		seq(6, conversation.Upsert(conversation.Block{ID: "t1-result", Type: conversation.BlockToolResult, ToolUseID: "t1", Status: conversation.StatusPending})),
		seq(7, conversation.Delta("t1-result", "a\n")),
		seq(8, conversation.Delta("t1-result", "b\n")),
		seq(9, conversation.Upsert(conversation.Block{ID: "t1-result", Type: conversation.BlockToolResult, Status: conversation.StatusError, IsError: true, Metadata: map[string]any{"exitCode": 2}})),
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Blocks) != 3 {
		t.Fatalf("%d blocks", len(st.Blocks))
	}
	b := st.Blocks[0]
	if b.Content != "Hello" || b.Status != conversation.StatusComplete || b.Model != "m" {
		t.Fatalf("text block %+v", b)
	}
	r := st.Blocks[2]
	if r.Output != "a\nb\n" || !r.IsError || r.Content != "" || r.ToolUseID != "t1" || r.Metadata["exitCode"] != float64(2) {
		t.Fatalf("result block %+v", r)
	}
	if st.LastSeq != 9 {
		t.Fatalf("last seq %d", st.LastSeq)
	}
}

func TestDuplicatesIgnoredAndUnsequencedApply(t *testing.T) {
	r := conversation.NewReducer()
	a := seq(1, conversation.Upsert(conversation.Block{ID: "x", Type: conversation.BlockAssistantText}))
	d := seq(2, conversation.Delta("x", "once"))
	for _, e := range []conversation.Event{a, d} {
		if err := r.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Apply(d); !errors.Is(err, conversation.ErrDuplicate) {
		t.Fatalf("replayed delta: %v", err)
	}
	if err := r.Apply(seq(1, conversation.Delta("x", "again"))); !errors.Is(err, conversation.ErrDuplicate) {
		t.Fatalf("older event: %v", err)
	}
	if got := r.State().Blocks[0].Content; got != "once" {
		t.Fatalf("content %q: a duplicate was applied", got)
	}
	// Unsequenced (converter) events always apply.
	r.Apply(conversation.Delta("x", "+"))
	if got := r.State().Blocks[0].Content; got != "once+" {
		t.Fatalf("content %q", got)
	}
}

func TestStateIsASnapshot(t *testing.T) {
	r := conversation.NewReducer()
	r.Apply(seq(1, conversation.Upsert(conversation.Block{ID: "x", Type: conversation.BlockAssistantText, Metadata: map[string]any{"a": 1}})))
	before := r.State()
	r.Apply(seq(2, conversation.Delta("x", "more")))
	r.Apply(seq(3, conversation.Upsert(conversation.Block{ID: "x", Type: conversation.BlockAssistantText, Metadata: map[string]any{"b": 2}})))
	if before.Blocks[0].Content != "" || len(before.Blocks[0].Metadata) != 1 {
		t.Fatalf("earlier state changed: %+v", before.Blocks[0])
	}
}

// A later upsert never changes a State taken before it, its input included
// (json.Unmarshal would reuse the RawMessage's array).
func TestStateKeepsInputAfterMerge(t *testing.T) {
	r := conversation.NewReducer()
	_ = r.Apply(conversation.Upsert(conversation.Block{ID: "t", Type: conversation.BlockToolUse, Input: json.RawMessage(`{"command":"a long command"}`)}))
	before := r.State()
	_ = r.Apply(conversation.Upsert(conversation.Block{ID: "t", Type: conversation.BlockToolUse, Input: json.RawMessage(`{"c":1}`)}))
	if got := string(before.Blocks[0].Input); got != `{"command":"a long command"}` {
		t.Fatalf("the earlier state's input became %q", got)
	}
	if got := string(r.State().Blocks[0].Input); got != `{"c":1}` {
		t.Fatalf("input %q", got)
	}
}

func TestSubagentsPermissionsFilesUsage(t *testing.T) {
	cost := 0.5
	evs := []conversation.Event{
		conversation.NewEvent(conversation.SubagentSpawned{ToolUseID: "task1", Prompt: "do it", SubagentType: "general"}),
		conversation.Upsert(conversation.Block{ID: "s-0", Type: conversation.BlockAssistantText, Content: "sub text"}).In("task1"),
		conversation.NewEvent(conversation.SubagentCompleted{ToolUseID: "task1", Status: conversation.StatusComplete, Output: "done"}),
		conversation.NewEvent(conversation.PermissionRequested{RequestID: "p1", ToolName: "Bash"}),
		conversation.NewEvent(conversation.PermissionRequested{RequestID: "p2", ToolName: "Write"}),
		conversation.NewEvent(conversation.PermissionResolved{RequestID: "p1", Behavior: conversation.Allow, By: conversation.ByUser}),
		conversation.NewEvent(conversation.FileChange{Kind: conversation.TypeFileCreated, Path: "b.txt"}),
		conversation.NewEvent(conversation.FileChange{Kind: conversation.TypeFileCreated, Path: "a.txt"}),
		conversation.NewEvent(conversation.FileChange{Kind: conversation.TypeFileDeleted, Path: "b.txt"}),
		conversation.NewEvent(conversation.MetadataUpdate{Usage: &conversation.Usage{InputTokens: 10, OutputTokens: 3}, CostUSD: &cost, Model: "m1"}),
		conversation.NewEvent(conversation.MetadataUpdate{Usage: &conversation.Usage{InputTokens: 5}, CostUSD: &cost}),
		conversation.NewEvent(conversation.QueryStarted{QueryID: "q1"}),
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Blocks) != 0 || len(st.Subagents) != 1 {
		t.Fatalf("main %d blocks, %d subagents", len(st.Blocks), len(st.Subagents))
	}
	s := st.Subagents[0]
	if s.ID != "task1" || s.Prompt != "do it" || s.Status != conversation.StatusComplete || s.Output != "done" || len(s.Blocks) != 1 || s.Blocks[0].Content != "sub text" {
		t.Fatalf("subagent %+v", s)
	}
	if len(st.PendingPermissions) != 1 || st.PendingPermissions[0].RequestID != "p2" {
		t.Fatalf("pending %+v", st.PendingPermissions)
	}
	if len(st.WorkspaceFiles) != 1 || st.WorkspaceFiles[0].Path != "a.txt" {
		t.Fatalf("files %+v", st.WorkspaceFiles)
	}
	if st.Usage.InputTokens != 15 || st.Usage.OutputTokens != 3 || st.CostUSD != 1.0 || st.Model != "m1" {
		t.Fatalf("usage %+v cost %v model %q", st.Usage, st.CostUSD, st.Model)
	}
	if st.ActiveQueryID != "q1" {
		t.Fatalf("active query %q", st.ActiveQueryID)
	}
}

func TestTurnsRecordEachQueryAndHowItEnded(t *testing.T) {
	user := func(id string) conversation.Event {
		return conversation.Upsert(conversation.Block{ID: id, Type: conversation.BlockUserMessage, Content: "go"})
	}
	evs := []conversation.Event{
		user("q1-user"),
		conversation.NewEvent(conversation.QueryStarted{QueryID: "q1", Content: "go"}),
		conversation.Upsert(conversation.Block{ID: "a1", Type: conversation.BlockAssistantText, Content: "done"}),
		conversation.NewEvent(conversation.QueryCompleted{QueryID: "q1", DurationMs: 12, Result: "done"}),
		user("q2-user"),
		conversation.NewEvent(conversation.QueryStarted{QueryID: "q2"}),
		// A subagent's blocks do not move the main conversation's position.
		conversation.Upsert(conversation.Block{ID: "s1", Type: conversation.BlockAssistantText}).In("task"),
		conversation.NewEvent(conversation.QueryFailed{QueryID: "q2", Error: "API Error: 400", Code: "MODEL_ERROR", DurationMs: 7}),
		user("q3-user"),
		conversation.NewEvent(conversation.QueryStarted{QueryID: "q3"}),
		conversation.NewEvent(conversation.QueryCompleted{QueryID: "q3", Interrupted: true}),
		// An end for a query that never started records nothing.
		conversation.NewEvent(conversation.QueryFailed{QueryID: "nope", Error: "x"}),
		user("q4-user"),
		conversation.NewEvent(conversation.QueryStarted{QueryID: "q4"}),
	}
	for i := range evs {
		evs[i].Seq = int64(i + 1)
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	want := []conversation.Turn{
		{QueryID: "q1", Status: conversation.TurnCompleted, DurationMs: 12, Result: "done", AfterBlock: 2},
		{QueryID: "q2", Status: conversation.TurnFailed, Error: "API Error: 400", Code: "MODEL_ERROR", DurationMs: 7, AfterBlock: 3},
		{QueryID: "q3", Status: conversation.TurnCompleted, Interrupted: true, AfterBlock: 4},
		{QueryID: "q4", Status: conversation.TurnRunning},
	}
	if !reflect.DeepEqual(st.Turns, want) {
		t.Fatalf("turns\n got %+v\nwant %+v", st.Turns, want)
	}
	if st.ActiveQueryID != "q4" {
		t.Fatalf("active query %q", st.ActiveQueryID)
	}
	// The wire shape: what the UI reads after a reload.
	b, err := json.Marshal(st.Turns[1:3])
	if err != nil {
		t.Fatal(err)
	}
	const wire = `[{"queryId":"q2","status":"failed","error":"API Error: 400","code":"MODEL_ERROR","durationMs":7,"afterBlock":3},` +
		`{"queryId":"q3","status":"completed","interrupted":true,"afterBlock":4}]`
	if string(b) != wire {
		t.Fatalf("json %s", b)
	}
}

func TestTurnsEndLatestStartAndLastEndWins(t *testing.T) {
	r := conversation.NewReducer()
	apply := func(p conversation.Payload) {
		t.Helper()
		if err := r.Apply(conversation.NewEvent(p)); err != nil {
			t.Fatal(err)
		}
	}
	apply(conversation.QueryStarted{QueryID: "q"})
	apply(conversation.QueryStarted{QueryID: "q"}) // a reused id: the end goes to the latest start
	apply(conversation.QueryFailed{QueryID: "q", Error: "first", Code: "C", Interrupted: true})
	before := r.State()
	// A second end replaces the outcome outright: nothing of the failure stays.
	apply(conversation.QueryCompleted{QueryID: "q", Result: "ok"})
	st := r.State()
	want := []conversation.Turn{
		{QueryID: "q", Status: conversation.TurnRunning},
		{QueryID: "q", Status: conversation.TurnCompleted, Result: "ok"},
	}
	if !reflect.DeepEqual(st.Turns, want) {
		t.Fatalf("turns %+v", st.Turns)
	}
	if before.Turns[1].Status != conversation.TurnFailed || before.Turns[1].Error != "first" {
		t.Fatalf("an earlier State changed: %+v", before.Turns[1])
	}
	// A duplicate (replayed) end changes nothing.
	r2 := conversation.NewReducer()
	r2.Apply(seq(1, conversation.NewEvent(conversation.QueryStarted{QueryID: "q"})))
	end := seq(2, conversation.NewEvent(conversation.QueryFailed{QueryID: "q", Error: "e"}))
	r2.Apply(end)
	r2.Apply(seq(3, conversation.Upsert(conversation.Block{ID: "later", Type: conversation.BlockAssistantText})))
	if err := r2.Apply(end); !errors.Is(err, conversation.ErrDuplicate) {
		t.Fatalf("replayed end: %v", err)
	}
	if got := r2.State().Turns; len(got) != 1 || got[0].AfterBlock != 0 || got[0].Error != "e" {
		t.Fatalf("turns after a replayed end %+v", got)
	}
}

func TestTurnsEmptyAndMalformed(t *testing.T) {
	st, err := conversation.Reduce(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	if !strings.Contains(string(b), `"turns":[]`) {
		t.Fatalf("an empty log must send turns as []: %s", b)
	}
	r := conversation.NewReducer()
	r.Apply(seq(1, conversation.NewEvent(conversation.QueryStarted{QueryID: "q1"})))
	bad := []conversation.Event{
		{Seq: 2, Type: conversation.TypeQueryStarted, Payload: json.RawMessage(`{"queryId":7}`)},
		{Seq: 3, Type: conversation.TypeQueryFailed, Payload: json.RawMessage(`{"queryId":"q1","error":false}`)},
		{Seq: 4, Type: conversation.TypeQueryCompleted, Payload: json.RawMessage(`[]`)},
	}
	for _, e := range bad {
		if err := r.Apply(e); err == nil {
			t.Errorf("seq %d: no error for %s", e.Seq, e.Payload)
		}
	}
	if got := r.State().Turns; !reflect.DeepEqual(got, []conversation.Turn{{QueryID: "q1", Status: conversation.TurnRunning}}) {
		t.Fatalf("malformed query events changed the turns: %+v", got)
	}
}

func TestMalformedEventsReportedNotFatal(t *testing.T) {
	r := conversation.NewReducer()
	bad := []conversation.Event{
		{Seq: 1, Type: conversation.TypeBlockUpsert, Payload: json.RawMessage(`{"block":`)},
		{Seq: 2, Type: conversation.TypeBlockUpsert, Payload: json.RawMessage(`{"block":{"type":"x"}}`)},
		{Seq: 3, Type: conversation.TypeBlockDelta, Payload: json.RawMessage(`{"blockId":"nope","delta":"x"}`)},
		{Seq: 4, Type: "weird", Payload: json.RawMessage(`{}`)},
		{Seq: 5, Type: conversation.TypeMetadataUpdate, Payload: json.RawMessage(`{"usage":"lots"}`)},
	}
	for _, e := range bad {
		if err := r.Apply(e); err == nil {
			t.Errorf("seq %d: no error for %s", e.Seq, e.Payload)
		}
	}
	if err := r.Apply(seq(6, conversation.Upsert(conversation.Block{ID: "ok", Type: conversation.BlockAssistantText}))); err != nil {
		t.Fatal(err)
	}
	if st := r.State(); len(st.Blocks) != 1 || st.LastSeq != 6 {
		t.Fatalf("after bad events: %+v", st)
	}
}

func TestDecodeRoundTripsEveryType(t *testing.T) {
	payloads := []conversation.Payload{
		conversation.BlockUpsert{}, conversation.BlockDelta{}, conversation.MetadataUpdate{}, conversation.StatusChange{},
		conversation.QueryStarted{}, conversation.QueryCompleted{}, conversation.QueryFailed{},
		conversation.PermissionRequested{}, conversation.PermissionResolved{},
		conversation.FileChange{Kind: conversation.TypeFileCreated}, conversation.FileChange{Kind: conversation.TypeFileModified}, conversation.FileChange{Kind: conversation.TypeFileDeleted},
		conversation.SubagentSpawned{}, conversation.SubagentCompleted{}, conversation.ErrorEvent{}, conversation.LogEvent{}, conversation.SessionIdleEvent{},
		conversation.MessageQueued{}, conversation.MessageDequeued{}, conversation.MessageCancelled{},
		conversation.OptionsUpdate{},
	}
	seen := map[conversation.EventType]bool{}
	for _, p := range payloads {
		e := conversation.NewEvent(p)
		got, err := e.Decode()
		if err != nil {
			t.Fatalf("%s: %v", e.Type, err)
		}
		if got.EventType() != e.Type {
			t.Fatalf("%s decoded as %s", e.Type, got.EventType())
		}
		seen[e.Type] = true
	}
	for _, ty := range conversation.EventTypes {
		if !seen[ty] {
			t.Errorf("event type %s not covered", ty)
		}
	}
}

func at(n int64, ts string, e conversation.Event) conversation.Event {
	e.Seq = n
	e.Context.Timestamp, _ = time.Parse(time.RFC3339Nano, ts)
	return e
}

// The queue: queued messages in order, removed when dequeued or cancelled;
// an entry queued twice (a retried append) is kept once, in its place.
func TestQueuedMessages(t *testing.T) {
	evs := []conversation.Event{
		at(1, "2026-01-02T03:04:05.5Z", conversation.NewEvent(conversation.MessageQueued{MessageID: "m1", Content: "first"})),
		at(2, "2026-01-02T03:04:06Z", conversation.NewEvent(conversation.MessageQueued{MessageID: "m2", Content: "second"})),
		at(3, "2026-01-02T03:04:07Z", conversation.NewEvent(conversation.MessageQueued{MessageID: "m3", Content: "third"})),
		seq(4, conversation.NewEvent(conversation.MessageQueued{MessageID: "m1", Content: "first"})),
		seq(5, conversation.NewEvent(conversation.MessageDequeued{MessageID: "m1", QueryID: "q2"})),
		seq(6, conversation.NewEvent(conversation.MessageCancelled{MessageID: "m3"})),
		seq(7, conversation.NewEvent(conversation.MessageCancelled{MessageID: "unknown"})),
	}
	st, err := conversation.Reduce(evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.QueuedMessages) != 1 || st.QueuedMessages[0].ID != "m2" || st.QueuedMessages[0].Content != "second" ||
		!st.QueuedMessages[0].QueuedAt.Equal(time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)) {
		t.Fatalf("queue %+v", st.QueuedMessages)
	}
	if st, _ := conversation.Reduce(nil); st.QueuedMessages == nil || st.PermissionRules == nil {
		t.Fatal("empty lists must be [] in JSON, not null")
	}
}

// An allow with scope "session" adds one rule per tool; a deny, a
// one-off allow or a rule decision adds none.
func TestPermissionRules(t *testing.T) {
	res := func(n int64, p conversation.PermissionResolved) conversation.Event {
		return seq(n, conversation.NewEvent(p))
	}
	st, err := conversation.Reduce([]conversation.Event{
		res(1, conversation.PermissionResolved{RequestID: "r1", Behavior: conversation.Allow, By: conversation.ByUser, ToolName: "Bash"}),
		res(2, conversation.PermissionResolved{RequestID: "r2", Behavior: conversation.Deny, By: conversation.ByUser, ToolName: "Edit", Scope: conversation.ScopeSession}),
		res(3, conversation.PermissionResolved{RequestID: "r3", Behavior: conversation.Allow, By: conversation.ByUser, ToolName: "Write", Scope: conversation.ScopeSession}),
		res(4, conversation.PermissionResolved{RequestID: "r4", Behavior: conversation.Allow, By: conversation.ByRule, ToolName: "Write"}),
		res(5, conversation.PermissionResolved{RequestID: "r5", Behavior: conversation.Allow, By: conversation.ByUser, ToolName: "Write", Scope: conversation.ScopeSession}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []conversation.PermissionRule{{ToolName: "Write", Behavior: conversation.Allow}}; !reflect.DeepEqual(st.PermissionRules, want) {
		t.Fatalf("rules %+v", st.PermissionRules)
	}
}

// A turn keeps its start time and the usage reported while it ran, also
// after it ends; usage outside any turn counts for the session only.
func TestTurnStartAndUsage(t *testing.T) {
	u := func(in, out int64) conversation.Event {
		return conversation.NewEvent(conversation.MetadataUpdate{Usage: &conversation.Usage{InputTokens: in, OutputTokens: out}})
	}
	st, err := conversation.Reduce([]conversation.Event{
		seq(1, u(1, 1)),
		at(2, "2026-01-02T03:04:05.25Z", conversation.NewEvent(conversation.QueryStarted{QueryID: "q1"})),
		seq(3, u(10, 2)),
		seq(4, u(5, 3)),
		seq(5, conversation.NewEvent(conversation.QueryCompleted{QueryID: "q1"})),
		seq(6, u(100, 100)),
		seq(7, conversation.NewEvent(conversation.QueryStarted{QueryID: "q2"})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t1 := st.Turns[0]
	if t1.Status != conversation.TurnCompleted || t1.Usage == nil || *t1.Usage != (conversation.Usage{InputTokens: 15, OutputTokens: 5}) ||
		!t1.StartedAt.Equal(time.Date(2026, 1, 2, 3, 4, 5, 250e6, time.UTC)) {
		t.Fatalf("turn %+v", t1)
	}
	if st.Turns[1].Usage != nil || !st.Turns[1].StartedAt.IsZero() {
		t.Fatalf("turn 2 %+v", st.Turns[1])
	}
	if st.Usage.InputTokens != 116 {
		t.Fatalf("session usage %+v", st.Usage)
	}
	b, _ := json.Marshal(st.Turns[1])
	if strings.Contains(string(b), "startedAt") || strings.Contains(string(b), "usage") {
		t.Fatalf("empty fields serialised: %s", b)
	}
}

func FuzzReducer(f *testing.F) {
	f.Add([]byte(`{"seq":1,"type":"block:upsert","payload":{"block":{"id":"a","type":"assistant_text"}},"context":{"conversationId":"main"}}`))
	f.Add([]byte(`{"seq":2,"type":"block:delta","payload":{"blockId":"a","delta":"x"},"context":{"conversationId":"sub"}}`))
	f.Add([]byte(`{"seq":3,"type":"subagent:completed","payload":{"toolUseId":"t"},"context":{}}`))
	f.Add([]byte(`{"seq":4,"type":"query:failed","payload":{"queryId":"q1","error":"e","code":"C","interrupted":true},"context":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var e conversation.Event
		if json.Unmarshal(data, &e) != nil {
			return
		}
		r := conversation.NewReducer()
		_ = r.Apply(e)
		_ = r.Apply(e)
		_ = r.State()
	})
}

// BenchmarkStateWithTurns measures State() on a long session (1,000 turns,
// 3 blocks each): what GET /api/sessions/{id} pays, the turns clone included.
func BenchmarkStateWithTurns(b *testing.B) {
	r := conversation.NewReducer()
	for i := range 1000 {
		q := "q" + strconv.Itoa(i)
		r.Apply(conversation.Upsert(conversation.Block{ID: q + "-user", Type: conversation.BlockUserMessage, Content: "go"}))
		r.Apply(conversation.NewEvent(conversation.QueryStarted{QueryID: q}))
		r.Apply(conversation.Upsert(conversation.Block{ID: q + "-a", Type: conversation.BlockAssistantText, Content: "answer"}))
		r.Apply(conversation.Upsert(conversation.Block{ID: q + "-e", Type: conversation.BlockError, Message: "x"}))
		r.Apply(conversation.NewEvent(conversation.QueryFailed{QueryID: q, Error: "API Error: 400", Code: "MODEL_ERROR", DurationMs: 5}))
	}
	b.ReportAllocs()
	for b.Loop() {
		if st := r.State(); len(st.Turns) != 1000 {
			b.Fatal(len(st.Turns))
		}
	}
}
