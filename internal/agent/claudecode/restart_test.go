package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Restart tests: the runner in the executor sandbox (the test binary is
// the executor, and the fake CLI), a server restart played in one process:
// the first runner is detached (its server is gone: it stores nothing
// more), a second environment re-attaches to the same executor over a new
// connection (Recover), and a second runner resumes from what the first
// one's host holds.

const executorEnv = "AGENTD_TEST_EXECUTOR"

type execWorld struct {
	t    testing.TB
	prov *executor.Provider
	spec sandbox.Spec
	env  sandbox.Environment
}

func newExecWorld(t testing.TB, mod func(*executor.Options)) *execWorld {
	t.Helper()
	dir, err := os.MkdirTemp("", "cx") // socket paths are limited to 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opts := executor.Options{
		Binary: os.Args[0], RunDir: filepath.Join(dir, "run"), ExecutorEnv: []string{executorEnv + "=1"},
		Path: fakeCLIDir(t) + ":/usr/bin:/bin", StartTimeout: 20 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mod != nil {
		mod(&opts)
	}
	prov, err := executor.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	w := &execWorld{t: t, prov: prov, spec: sandbox.Spec{SessionID: "s1", Workspace: filepath.Join(dir, "ws"),
		Env: map[string]string{"ANTHROPIC_API_KEY": "test-key"}}}
	w.env, err = prov.Create(context.Background(), w.spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.env.Terminate(ctx); err != nil {
			t.Errorf("terminate: %v", err)
		}
	})
	return w
}

// recover connects to the executor again, as a restarted server does.
func (w *execWorld) recover() sandbox.Environment {
	w.t.Helper()
	env, err := w.prov.Recover(context.Background(), w.spec, w.env.(sandbox.HandleReporter).Handle())
	if err != nil {
		w.t.Fatal(err)
	}
	return env
}

// host is a journaling host on env.
func (w *execWorld) host(env sandbox.Environment) *testHost {
	h := newHostOn(env)
	h.journaling, h.permEvents = true, true
	return h
}

// successor is the host of the next server: the log and state h holds
// (or the first n journal entries of it, when n >= 0), on a new connection.
func (w *execWorld) successor(h *testHost, n int) *testHost {
	w.t.Helper()
	h.mu.Lock()
	entries := h.journal
	if n >= 0 {
		entries = entries[:n]
	}
	next := w.host(w.recover())
	for _, e := range entries {
		if e.state != nil {
			next.state = e.state
		}
		next.events = append(next.events, e.events...)
	}
	next.transcripts = maps.Clone(h.transcripts)
	next.answer = h.answer
	h.mu.Unlock()
	next.journal = nil
	return next
}

func startOn(t testing.TB, h *testHost) *runner {
	t.Helper()
	r, err := New(fastOpts).Start(context.Background(), h)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*runner)
}

// userTurn writes the turn's user_message block, as the session does, and
// runs the turn.
func userTurn(t testing.TB, h *testHost, r *runner, q, content string) (agent.TurnResult, error) {
	t.Helper()
	_ = h.Emit(context.Background(), conversation.Upsert(conversation.Block{ID: userBlockID(q), Type: conversation.BlockUserMessage,
		Status: conversation.StatusComplete, Content: content}).From(conversation.SourceClient))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Turn(ctx, agent.Turn{QueryID: q, Content: content})
}

func resume(t *testing.T, h *testHost, r *runner, q, content string) (agent.TurnResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.Resume(ctx, agent.Turn{QueryID: q, Content: content}, h.reduce(t))
}

// pidGone reports whether the process pid has exited (and was reaped).
func pidGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	if errors.Is(err, syscall.ESRCH) {
		return true
	}
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	_, after, _ := strings.Cut(string(data), ") ")
	return strings.HasPrefix(after, "Z")
}

func startPIDs(t *testing.T, h *testHost) []int {
	t.Helper()
	data, err := h.env.ReadFile(context.Background(), configRel+"/fake-starts.jsonl")
	if err != nil {
		return nil
	}
	var pids []int
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var s struct{ PID int }
		if json.Unmarshal([]byte(l), &s) == nil {
			pids = append(pids, s.PID)
		}
	}
	return pids
}

// --- comparing logs ---

// isCheckpoint reports a turn checkpoint (resume.go).
func isCheckpoint(e conversation.Event) bool {
	if e.Type != conversation.TypeBlockUpsert {
		return false
	}
	var u conversation.BlockUpsert
	_ = json.Unmarshal(e.Payload, &u)
	_, ok := u.Block.Metadata[checkpointKey]
	return ok && u.Block.Type == conversation.BlockUserMessage
}

// agentView is what a log says the agent did: the runner's events per
// block, in order, and its other events in order. Checkpoints, the
// session's events and the runner's own notes (starting, re-attached) are
// not part of it: they differ between an uninterrupted run and a resumed
// one by design.
type agentView struct {
	blocks map[string][]string
	other  []string
}

func viewOf(evs []conversation.Event) agentView {
	v := agentView{blocks: map[string][]string{}}
	for _, e := range evs {
		if isCheckpoint(e) || e.Context.Source == conversation.SourceClient ||
			e.Type == conversation.TypePermissionRequest || e.Type == conversation.TypePermissionResolved {
			continue
		}
		if e.Type == conversation.TypeLog && e.Context.Source == conversation.SourceServer {
			var l conversation.LogEvent
			_ = json.Unmarshal(e.Payload, &l)
			if strings.HasPrefix(l.Message, "starting Claude Code") || strings.HasPrefix(l.Message, "re-attached to Claude Code") {
				continue
			}
		}
		id, ok := eventBlockID(e)
		if ok {
			k := e.Context.ConversationID + "/" + id
			v.blocks[k] = append(v.blocks[k], string(e.Type)+" "+string(e.Payload))
			continue
		}
		v.other = append(v.other, e.Context.ConversationID+" "+string(e.Type)+" "+string(e.Payload))
	}
	return v
}

// sameAgentView fails when got and want differ.
func sameAgentView(t *testing.T, what string, got, want []conversation.Event) {
	t.Helper()
	g, w := viewOf(got), viewOf(want)
	if !slices.Equal(g.other, w.other) {
		t.Fatalf("%s: other events differ\ngot  %q\nwant %q", what, g.other, w.other)
	}
	for k, seq := range w.blocks {
		if !slices.Equal(g.blocks[k], seq) {
			t.Fatalf("%s: events of block %s differ\ngot  %q\nwant %q", what, k, g.blocks[k], seq)
		}
	}
	for k := range g.blocks {
		if _, ok := w.blocks[k]; !ok {
			t.Fatalf("%s: unexpected block %s: %q", what, k, g.blocks[k])
		}
	}
	gs, err := conversation.Reduce(got)
	if err != nil {
		t.Fatalf("%s: reduce: %v", what, err)
	}
	ws, _ := conversation.Reduce(want)
	if gs.Usage != ws.Usage || fmt.Sprintf("%.9f", gs.CostUSD) != fmt.Sprintf("%.9f", ws.CostUSD) || gs.Model != ws.Model {
		t.Fatalf("%s: usage %+v cost %v model %q, want %+v %v %q", what, gs.Usage, gs.CostUSD, gs.Model, ws.Usage, ws.CostUSD, ws.Model)
	}
	strip := func(bs []conversation.Block) []conversation.Block {
		out := slices.Clone(bs)
		for i := range out {
			if out[i].Type == conversation.BlockUserMessage {
				out[i].Metadata = nil
			}
		}
		return out
	}
	if !reflect.DeepEqual(strip(gs.Blocks), strip(ws.Blocks)) || !reflect.DeepEqual(gs.Subagents, ws.Subagents) {
		t.Fatalf("%s: reduced blocks differ\ngot  %+v\nwant %+v", what, gs.Blocks, ws.Blocks)
	}
	if len(gs.PendingPermissions) != 0 {
		t.Fatalf("%s: permission requests left open: %+v", what, gs.PendingPermissions)
	}
}

// --- tests ---

// TestResumeFromEveryCrashPoint runs a turn to its end, then for every
// point a crash could have cut its host's journal at (after the turn was
// marked), resumes it in a fresh runner from the log and state held at
// that point: the log plus what the resumed runner emits must be what the
// uninterrupted run stored: no event twice, none missing, the same usage
// and cost, and the same reduced blocks.
func TestResumeFromEveryCrashPoint(t *testing.T) {
	for _, sc := range []struct{ name, content, result, code string }{
		{"text", "hello", "turn 1", ""},
		{"permission", "tool Bash", "done", ""},
		{"bad lines", "junk", "survived", ""},
		{"model error", "apierror", "", agent.CodeModelError},
		{"subagent", "subagent", "All done.", ""},
	} {
		t.Run(sc.name, func(t *testing.T) {
			w := newExecWorld(t, nil)
			h := w.host(w.env)
			h.answer = func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
				return agent.PermissionDecision{Behavior: conversation.Allow, By: conversation.ByUser}, nil
			}
			r := startOn(t, h)
			res, err := userTurn(t, h, r, "q1", sc.content)
			if agent.CodeOf(err) != orElse(sc.code, agent.CodeInternal) || (sc.code == "" && (err != nil || res.Result != sc.result)) {
				t.Fatalf("turn: %q %v", res.Result, err)
			}
			r.Detach() // the CLI stays, idle, for the resumes below
			full := h.allEvents()
			h.mu.Lock()
			journal := slices.Clone(h.journal)
			h.mu.Unlock()
			// Cut points start once the turn's mark is stored (before that
			// the message was never sent: another test).
			first := -1
			for i, e := range journal {
				var st agentState
				if e.state != nil && json.Unmarshal(e.state, &st) == nil && st.Turn != nil && st.Turn.QueryID == "q1" {
					first = i + 1
					break
				}
			}
			if first < 0 {
				t.Fatal("the turn was never marked")
			}
			if testing.Verbose() {
				for i, e := range journal {
					if e.state != nil {
						t.Logf("%d state %s", i+1, e.state)
					}
					for _, ev := range e.events {
						t.Logf("%d %s %s %s", i+1, ev.Context.Source, ev.Type, ev.Payload)
					}
				}
			}
			for n := first; n <= len(journal); n++ {
				next := w.successor(h, n)
				prefix := next.allEvents()
				r2 := startOn(t, next)
				res2, err2 := resume(t, next, r2, "q1", sc.content)
				what := fmt.Sprintf("crash after journal entry %d of %d", n, len(journal))
				if agent.CodeOf(err2) != agent.CodeOf(err) || res2.Result != res.Result {
					t.Fatalf("%s: resumed turn ended %q %v, want %q %v", what, res2.Result, err2, res.Result, err)
				}
				r2.Detach()
				sameAgentView(t, what, next.allEvents(), full)
				if strings.Contains(sc.content, "tool") {
					next.mu.Lock()
					asked := len(next.requests)
					next.mu.Unlock()
					if answered := len(prefixStateAnswers(journal[:n])); answered > 0 && asked > 0 {
						t.Fatalf("%s: asked again for a permission already answered", what)
					}
					resolved, before := 0, 0
					for i, e := range next.allEvents() {
						if e.Type == conversation.TypePermissionResolved {
							resolved++
							if i < len(prefix) {
								before++
							}
						}
					}
					// The one window: the session stored the decision but the
					// crash came before the runner recorded its answer. The
					// request is then asked again.
					window := before == 1 && len(prefixStateAnswers(journal[:n])) == 0
					if resolved != 1 && !(window && resolved == 2) {
						t.Fatalf("%s: %d permission resolutions, want 1", what, resolved)
					}
				}
			}
			if n := len(fakeStarts(t, h)); n != 1 {
				t.Errorf("%d CLI starts: resuming must not start another", n)
			}
		})
	}
}

// prefixStateAnswers returns the permission answers the state of a journal
// prefix records.
func prefixStateAnswers(journal []journalEntry) map[string]permAnswer {
	var st agentState
	for _, e := range journal {
		if e.state != nil {
			st = agentState{}
			_ = json.Unmarshal(e.state, &st)
		}
	}
	if st.Turn == nil {
		return nil
	}
	return st.Turn.Perms
}

// TestDetachAndResumeMidTurn is the restart as it happens: the server goes
// away in the middle of a streaming turn (Detach: the turn returns at once,
// nothing more is stored), the CLI goes on in the executor, and the next
// server resumes the turn live to its end, every line exactly once.
func TestDetachAndResumeMidTurn(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	errc := make(chan error, 1)
	go func() { _, err := userTurn(t, h, r, "q1", "slow 40"); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "ten lines", func() bool {
		return strings.Count(textOf(h.allEvents()), "\n") >= 10
	})
	start := time.Now()
	r.Detach()
	select {
	case err := <-errc:
		if !errors.Is(err, agent.ErrDetached) {
			t.Fatalf("detached turn returned %v", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the turn did not return at once on Detach")
	}
	t.Logf("Turn returned %v after Detach", time.Since(start))
	before := len(h.allEvents())
	time.Sleep(300 * time.Millisecond)
	if after := len(h.allEvents()); after != before {
		t.Fatalf("%d events stored after Detach", after-before)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	next := w.successor(h, -1)
	r2 := startOn(t, next)
	res, err := resume(t, next, r2, "q1", "slow 40")
	if err != nil || res.Result != "40 lines" {
		t.Fatalf("resumed turn: %q %v", res.Result, err)
	}
	var want strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	all := next.allEvents()
	if got := textOf(all); got != want.String() {
		t.Fatalf("streamed text across the restart:\n%q\nwant\n%q", got, want.String())
	}
	st := next.reduce(t)
	if len(st.Blocks) != 2 || st.Blocks[1].Content != want.String() || st.Blocks[1].Status != conversation.StatusComplete {
		t.Fatalf("blocks %+v", st.Blocks)
	}
	creates := 0
	for _, e := range all {
		if e.Type == conversation.TypeBlockUpsert && !isCheckpoint(e) && e.Context.Source == conversation.SourceRunner {
			creates++
		}
	}
	if creates != 2 { // content_block_start, then the complete line
		t.Errorf("%d upserts of the text block, want 2", creates)
	}
	if st.CostUSD != 0.001 {
		t.Errorf("cost %v: the turn's cost must count once", st.CostUSD)
	}
	if n := len(fakeStarts(t, next)); n != 1 {
		t.Errorf("%d CLI starts", n)
	}
	// The resumed CLI takes the next turn.
	if res, err := userTurn(t, next, r2, "q2", "hello"); err != nil || res.Result != "turn 2" {
		t.Fatalf("next turn: %q %v", res.Result, err)
	}
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pids := startPIDs(t, next); len(pids) != 1 || !waitGone(pids[0]) {
		t.Errorf("the CLI (%v) is still running after Close", pids)
	}
}

func waitGone(pid int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if pidGone(pid) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// textOf concatenates the deltas of a log.
func textOf(evs []conversation.Event) string {
	var sb strings.Builder
	for _, e := range evs {
		if e.Type == conversation.TypeBlockDelta {
			var d conversation.BlockDelta
			_ = json.Unmarshal(e.Payload, &d)
			sb.WriteString(d.Delta)
		}
	}
	return sb.String()
}

// TestResumeAsksAgainForAnOpenPermission: the server went away while a
// permission request was open; the CLI still waits for its answer, so the
// next server asks again (same request id), and the turn completes with
// the new answer.
func TestResumeAsksAgainForAnOpenPermission(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.answer = func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
		<-release // nobody answers before the restart
		return agent.PermissionDecision{Behavior: conversation.Allow, By: conversation.ByUser}, nil
	}
	r := startOn(t, h)
	errc := make(chan error, 1)
	go func() { _, err := userTurn(t, h, r, "q1", "tool Bash"); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "the permission request", func() bool { return len(h.ofType(conversation.TypePermissionRequest)) == 1 })
	r.Detach()
	if err := <-errc; !errors.Is(err, agent.ErrDetached) {
		t.Fatal(err)
	}

	next := w.successor(h, -1)
	if st := next.reduce(t); len(st.PendingPermissions) != 1 {
		t.Fatalf("pending %+v", st.PendingPermissions)
	}
	next.answer = func(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
		return agent.PermissionDecision{Behavior: conversation.Allow, UpdatedInput: json.RawMessage(`{"command":"echo again"}`), By: conversation.ByUser}, nil
	}
	r2 := startOn(t, next)
	if res, err := resume(t, next, r2, "q1", "tool Bash"); err != nil || res.Result != "done" {
		t.Fatalf("resumed: %q %v", res.Result, err)
	}
	r2.Detach()
	st := next.reduce(t)
	var result *conversation.Block
	for i := range st.Blocks {
		if st.Blocks[i].Type == conversation.BlockToolResult {
			result = &st.Blocks[i]
		}
	}
	if result == nil || result.Output != `ran with {"command":"echo again"}` {
		t.Fatalf("tool result %+v", result)
	}
	if len(next.requests) != 1 || next.requests[0].ToolUseID != h.requests[0].ToolUseID {
		t.Fatalf("requests after the restart %+v", next.requests)
	}
	if len(st.PendingPermissions) != 0 || len(next.ofType(conversation.TypePermissionResolved)) != 1 {
		t.Fatalf("pending %+v, resolutions %d", st.PendingPermissions, len(next.ofType(conversation.TypePermissionResolved)))
	}
}

// TestResumeFailsWhenTheSpoolDroppedTheTurn: the executor keeps a bounded
// spool; when the turn's start is no longer in it, the turn fails with a
// reason instead of guessing, and the CLI is stopped.
func TestResumeFailsWhenTheSpoolDroppedTheTurn(t *testing.T) {
	w := newExecWorld(t, func(o *executor.Options) { o.SpoolBytes = 4096 })
	h := w.host(w.env)
	r := startOn(t, h)
	errc := make(chan error, 1)
	go func() { _, err := userTurn(t, h, r, "q1", "big 3000"); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "the big text", func() bool { return len(textOf(h.allEvents())) >= 3000 })
	r.Detach()
	<-errc
	next := w.successor(h, -1)
	r2 := startOn(t, next)
	_, err := resume(t, next, r2, "q1", "big 3000")
	if agent.CodeOf(err) != agent.CodeServerRestarted || !strings.Contains(err.Error(), "spool") {
		t.Fatalf("resume: %v", err)
	}
	if pids := startPIDs(t, next); len(pids) != 1 || !waitGone(pids[0]) {
		t.Errorf("the CLI (%v) was not stopped", pids)
	}
	if strings.Contains(textOf(next.allEvents()), "big end") {
		t.Error("events after the gap were stored")
	}
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestNextTurnStopsTheCLILeftRunning: a restart between turns leaves the
// idle CLI in the executor; the next runner stops it before starting its
// own (resuming the Claude session), so there is never a second one.
func TestNextTurnStopsTheCLILeftRunning(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	if res, err := userTurn(t, h, r, "q1", "hello"); err != nil || res.Result != "turn 1" {
		t.Fatalf("%q %v", res.Result, err)
	}
	r.Detach()
	first := startPIDs(t, h)
	if len(first) != 1 || pidGone(first[0]) {
		t.Fatalf("pids %v", first)
	}
	next := w.successor(h, -1)
	r2 := startOn(t, next)
	if res, err := userTurn(t, next, r2, "q2", "hello"); err != nil || res.Result != "turn 2" {
		t.Fatalf("after restart: %q %v", res.Result, err)
	}
	if !waitGone(first[0]) {
		t.Error("the CLI left by the first server still runs")
	}
	starts := fakeStarts(t, next)
	if len(starts) != 2 || !slices.ContainsFunc(starts[1].Argv, func(a string) bool { return strings.HasPrefix(a, "--resume=") }) {
		t.Fatalf("starts %+v", starts)
	}
	if len(next.logs("stopped the Claude Code process an earlier server left running")) != 1 {
		t.Error("no log of the stop")
	}
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestCloseStopsTheCLILeftRunning: a runner that never ran a turn still
// leaves no CLI behind when it closes.
func TestCloseStopsTheCLILeftRunning(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	if _, err := userTurn(t, h, r, "q1", "hello"); err != nil {
		t.Fatal(err)
	}
	r.Detach()
	pids := startPIDs(t, h)
	next := w.successor(h, -1)
	r2 := startOn(t, next)
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(pids) != 1 || !waitGone(pids[0]) {
		t.Errorf("CLI %v still running after Close", pids)
	}
}

// TestResumeWithoutMarkRunsTheTurn: the server stopped before the turn's
// message reached the CLI (no mark for it): the turn runs as a new one, in
// a new CLI, the old one stopped.
func TestResumeWithoutMarkRunsTheTurn(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	if _, err := userTurn(t, h, r, "q1", "hello"); err != nil {
		t.Fatal(err)
	}
	r.Detach()
	next := w.successor(h, -1)
	_ = next.Emit(context.Background(), conversation.Upsert(conversation.Block{ID: userBlockID("q2"), Type: conversation.BlockUserMessage, Content: "hello"}))
	r2 := startOn(t, next)
	if res, err := resume(t, next, r2, "q2", "hello"); err != nil || res.Result != "turn 2" {
		t.Fatalf("%q %v", res.Result, err)
	}
	if n := len(fakeStarts(t, next)); n != 2 {
		t.Errorf("%d starts", n)
	}
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestResumeSendsAMessageTheCLINeverGot: the turn was marked but the
// server stopped before recording the write, and the CLI printed nothing:
// after FlushTimeout of silence the message is sent.
func TestResumeSendsAMessageTheCLINeverGot(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	if _, err := userTurn(t, h, r, "q1", "hello"); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	p.mu.Lock()
	idle := p.shared.idle
	p.mu.Unlock()
	r.Detach()
	r.markTurn(context.Background(), turnMark{QueryID: "q2", Tag: r.tag, Offset: idle.offset, Seed: idle.seed})
	next := w.successor(h, -1)
	_ = next.Emit(context.Background(), conversation.Upsert(conversation.Block{ID: userBlockID("q2"), Type: conversation.BlockUserMessage, Content: "hello"}))
	r2 := startOn(t, next)
	if res, err := resume(t, next, r2, "q2", "hello"); err != nil || res.Result != "turn 2" {
		t.Fatalf("%q %v", res.Result, err)
	}
	if n := len(fakeStarts(t, next)); n != 1 {
		t.Errorf("%d starts", n)
	}
	r2.Detach()
}

// TestResumeWhenTheCLIIsGone: the executor has no process of the mark's
// tag any more: the turn fails, saying so.
func TestResumeWhenTheCLIIsGone(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	r.markTurn(context.Background(), turnMark{QueryID: "q1", Tag: "no-such-process", Sent: true})
	_, err := resume(t, h, r, "q1", "hello")
	if agent.CodeOf(err) != agent.CodeServerRestarted || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("resume: %v", err)
	}
}

// TestInterruptAResumedTurn: control requests reach the re-attached CLI.
func TestInterruptAResumedTurn(t *testing.T) {
	w := newExecWorld(t, nil)
	h := w.host(w.env)
	r := startOn(t, h)
	errc := make(chan error, 1)
	go func() { _, err := userTurn(t, h, r, "q1", "hang"); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "the tool call", func() bool { return len(h.ofType(conversation.TypeBlockUpsert)) > 1 })
	r.Detach()
	<-errc
	next := w.successor(h, -1)
	r2 := startOn(t, next)
	go func() { _, err := resume(t, next, r2, "q1", "hang"); errc <- err }()
	agenttest.WaitFor(t, 10*time.Second, "the re-attach", func() bool { return len(next.logs("re-attached")) == 1 })
	time.Sleep(100 * time.Millisecond)
	if err := r2.Interrupt(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, agent.ErrInterrupted) {
		t.Fatalf("resumed turn ended with %v", err)
	}
	if len(next.logs("SIGINT")) != 0 {
		t.Error("the control interrupt did not reach the CLI")
	}
	if res, err := userTurn(t, next, r2, "q2", "hello"); err != nil || res.Result != "turn 2" {
		t.Fatalf("after interrupt: %q %v", res.Result, err)
	}
	if err := r2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
