package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store/memstore"
)

// The session state machine under random commands: submit (turns that end
// at once, fail, wait to be released, or ask a permission), cancel a
// queued message, interrupt, release a waiting turn, answer a permission,
// terminate, and restart of the manager (and event log) on the same store.
// After every step the session's log is checked from its start:
//   - status changes follow the lifecycle (conversation.SessionStatus);
//   - at most one turn runs: a turn starts only after the one before ended;
//   - every turn ends at most once, and only a started one;
//   - a message is dequeued or cancelled at most once, only while queued,
//     and dequeued in the order queued (cancelled ones aside);
//   - what Submit answered is in the log: a started turn or a queued message.
//
// At the end, with every waiting turn released and every permission
// answered, the session settles: every started turn ended exactly once and
// the queue is empty.
func TestSessionModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sm := newSessionModel(t)
		defer sm.close()
		t.Repeat(map[string]func(*rapid.T){
			"submit": sm.submit,
			"cancelQueued": func(t *rapid.T) {
				if len(sm.queuedIDs) == 0 {
					t.Skip("nothing was queued")
				}
				id := rapid.SampledFrom(sm.queuedIDs).Draw(t, "message")
				err := sm.s.CancelQueued(context.Background(), id, "alice")
				sm.allow(t, "cancel", err, session.ErrMessageNotFound)
			},
			"interrupt": func(t *rapid.T) {
				sm.allow(t, "interrupt", sm.s.Interrupt(context.Background(), "alice"), session.ErrNoActiveTurn)
			},
			"release": func(t *rapid.T) {
				if len(sm.holds) == 0 {
					t.Skip("no waiting turn")
				}
				sm.ctl.release(rapid.SampledFrom(sm.holds).Draw(t, "turn"))
			},
			"answer": func(t *rapid.T) {
				open := sm.openRequests(t)
				if len(open) == 0 {
					t.Skip("no open permission request")
				}
				id := rapid.SampledFrom(open).Draw(t, "request")
				b := rapid.SampledFrom([]conversation.PermissionBehavior{conversation.Allow, conversation.Deny}).Draw(t, "behavior")
				err := sm.s.Answer(context.Background(), id, agent.PermissionDecision{Behavior: b}, "alice")
				sm.allow(t, "answer", err, session.ErrPermissionResolved, session.ErrPermissionNotFound)
			},
			"terminate": func(t *rapid.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				sm.allow(t, "terminate", sm.s.Terminate(ctx, "test", "alice"))
			},
			"restart": sm.restart,
			"":        func(t *rapid.T) { sm.check(t, false) },
		})
		sm.settle(t)
	})
}

type sessionModel struct {
	st   *memstore.Store
	dir  string
	ctl  *scriptCtl
	lg   *eventlog.Log
	m    *session.Manager
	s    *session.Session
	id   string
	n    int
	subs []session.SubmitResult

	queuedIDs []string // every message Submit queued
	holds     []string // every waiting turn's content
}

func newSessionModel(t *rapid.T) *sessionModel {
	sm := &sessionModel{st: memstore.New(), ctl: &scriptCtl{gates: make(map[string]chan struct{})}}
	var err error
	if sm.dir, err = os.MkdirTemp("", "session-model-"); err != nil {
		t.Fatal(err)
	}
	sm.open(t)
	rec, err := sm.m.Create(context.Background(), session.CreateRequest{Architecture: "script"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	sm.id = rec.ID
	if sm.s, err = sm.m.Get(rec.ID); err != nil {
		t.Fatal(err)
	}
	return sm
}

func (sm *sessionModel) open(t *rapid.T) {
	sm.lg = eventlog.New(sm.st, eventlog.Options{})
	archs := agent.NewRegistry()
	archs.Register(scriptArch{sm.ctl})
	m, err := session.New(session.Config{Store: sm.st, Log: sm.lg, Sandbox: local.New(local.Options{}), Architectures: archs,
		DataDir: sm.dir, InterruptGrace: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sm.m = m
}

func (sm *sessionModel) shut() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sm.ctl.releaseAll() // a turn waiting for its release ends with the shutdown anyway
	sm.m.Close(ctx)
	sm.lg.Close()
}

func (sm *sessionModel) close() {
	sm.shut()
	os.RemoveAll(sm.dir)
}

func (sm *sessionModel) restart(t *rapid.T) {
	sm.shut()
	sm.ctl.reopen()
	sm.open(t)
	var err error
	if sm.s, err = sm.m.Get(sm.id); err != nil {
		t.Fatal(err)
	}
}

// allow fails t unless err is nil or one of ok.
func (sm *sessionModel) allow(t *rapid.T, what string, err error, ok ...error) {
	if err == nil {
		return
	}
	for _, o := range ok {
		if errors.Is(err, o) {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func (sm *sessionModel) submit(t *rapid.T) {
	kind := rapid.SampledFrom([]string{"ok", "fail", "hold", "ask"}).Draw(t, "kind")
	sm.n++
	content := fmt.Sprint(kind, " ", sm.n)
	r, err := sm.s.Submit(context.Background(), content, "alice")
	if err != nil {
		t.Fatalf("submit %q: %v", content, err)
	}
	if (r.QueryID == "") == (r.MessageID == "") {
		t.Fatalf("submit %q: %+v", content, r)
	}
	if r.MessageID != "" {
		sm.queuedIDs = append(sm.queuedIDs, r.MessageID)
	}
	if kind == "hold" {
		sm.holds = append(sm.holds, content)
	}
	sm.subs = append(sm.subs, r)
}

func (sm *sessionModel) events(t *rapid.T) []conversation.Event {
	evs, err := sm.st.ReadEvents(context.Background(), sm.id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// openRequests returns the permission requests not resolved in the log.
func (sm *sessionModel) openRequests(t *rapid.T) []string {
	var open []string
	done := map[string]bool{}
	for _, e := range sm.events(t) {
		switch p := decodeModel(t, e).(type) {
		case *conversation.PermissionResolved:
			done[p.RequestID] = true
		}
	}
	for _, e := range sm.events(t) {
		if p, ok := decodeModel(t, e).(*conversation.PermissionRequested); ok && !done[p.RequestID] {
			open = append(open, p.RequestID)
		}
	}
	return open
}

// lifecycle is the status changes conversation.SessionStatus allows (any
// status may also go to error).
var lifecycle = map[conversation.SessionStatus][]conversation.SessionStatus{
	conversation.SessionCreated:    {conversation.SessionStarting},
	conversation.SessionStarting:   {conversation.SessionReady, conversation.SessionTerminated},
	conversation.SessionReady:      {conversation.SessionRunning, conversation.SessionIdle, conversation.SessionTerminated},
	conversation.SessionRunning:    {conversation.SessionIdle, conversation.SessionTerminated},
	conversation.SessionIdle:       {conversation.SessionRunning, conversation.SessionTerminated},
	conversation.SessionTerminated: {conversation.SessionStarting},
	conversation.SessionError:      {conversation.SessionStarting},
}

// check checks the session's log from its start (see TestSessionModel);
// settled: also that nothing runs and nothing is queued.
func (sm *sessionModel) check(t *rapid.T, settled bool) {
	evs := sm.events(t)
	status := conversation.SessionCreated
	running := ""                // the open turn
	ended := map[string]bool{}   // turns ended
	started := map[string]bool{} // turns started
	var queue []string           // queued messages, in order
	gone := map[string]bool{}    // dequeued or cancelled
	logged := map[string]bool{}  // query and message ids in the log
	for _, e := range evs {
		switch p := decodeModel(t, e).(type) {
		case *conversation.StatusChange:
			if p.Status != status && p.Status != conversation.SessionError && !containsStatus(lifecycle[status], p.Status) {
				t.Fatalf("seq %d: status %s -> %s", e.Seq, status, p.Status)
			}
			status = p.Status
		case *conversation.QueryStarted:
			if running != "" {
				t.Fatalf("seq %d: turn %s starts while %s runs", e.Seq, p.QueryID, running)
			}
			if started[p.QueryID] {
				t.Fatalf("seq %d: turn %s starts again", e.Seq, p.QueryID)
			}
			running, started[p.QueryID], logged[p.QueryID] = p.QueryID, true, true
		case *conversation.QueryCompleted:
			sm.end(t, e, p.QueryID, &running, ended)
		case *conversation.QueryFailed:
			sm.end(t, e, p.QueryID, &running, ended)
		case *conversation.MessageQueued:
			if logged[p.MessageID] {
				t.Fatalf("seq %d: message %s queued again", e.Seq, p.MessageID)
			}
			queue, logged[p.MessageID] = append(queue, p.MessageID), true
		case *conversation.MessageDequeued:
			i := indexOf(queue, p.MessageID)
			if i != 0 {
				t.Fatalf("seq %d: message %s dequeued at place %d of the queue %v", e.Seq, p.MessageID, i, queue)
			}
			queue, gone[p.MessageID] = queue[1:], true
		case *conversation.MessageCancelled:
			i := indexOf(queue, p.MessageID)
			if i < 0 {
				t.Fatalf("seq %d: message %s cancelled, not queued (queue %v, gone %v)", e.Seq, p.MessageID, queue, gone[p.MessageID])
			}
			queue, gone[p.MessageID] = append(queue[:i:i], queue[i+1:]...), true
		}
	}
	for _, r := range sm.subs {
		if !logged[r.QueryID+r.MessageID] {
			t.Fatalf("submit answered %+v; not in the log", r)
		}
	}
	if settled {
		if running != "" || len(queue) > 0 {
			t.Fatalf("settled with turn %q running and queue %v", running, queue)
		}
		for q := range started {
			if !ended[q] {
				t.Fatalf("turn %s never ended", q)
			}
		}
	}
}

func (sm *sessionModel) end(t *rapid.T, e conversation.Event, q string, running *string, ended map[string]bool) {
	if ended[q] {
		t.Fatalf("seq %d: turn %s ends again", e.Seq, q)
	}
	if *running != q {
		t.Fatalf("seq %d: turn %s ends; the running turn is %q", e.Seq, q, *running)
	}
	*running, ended[q] = "", true
}

// settle releases every waiting turn and answers every permission until
// nothing runs and nothing is queued, then checks the log.
func (sm *sessionModel) settle(t *rapid.T) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		sm.ctl.releaseAll()
		for _, id := range sm.openRequests(t) {
			err := sm.s.Answer(context.Background(), id, agent.PermissionDecision{Behavior: conversation.Allow}, "alice")
			sm.allow(t, "answer", err, session.ErrPermissionResolved, session.ErrPermissionNotFound)
		}
		rec, st, err := sm.m.State(context.Background(), sm.id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Runtime.ActiveQueryID == "" && len(st.QueuedMessages) == 0 && rec.Runtime.Status != conversation.SessionRunning {
			break
		}
		if rec.Runtime.ActiveQueryID == "" && !rec.Runtime.Status.Active() && len(st.QueuedMessages) > 0 {
			// Terminate leaves the queue waiting for the next message
			// (which runs it first); a restart runs it by itself.
			sm.n++
			r, err := sm.s.Submit(context.Background(), fmt.Sprint("ok ", sm.n), "alice")
			if err != nil && !errors.Is(err, session.ErrBusy) {
				t.Fatalf("submit to start the queue: %v", err)
			}
			if err == nil {
				sm.subs = append(sm.subs, r)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled: status %s, turn %q, queue %d", rec.Runtime.Status, rec.Runtime.ActiveQueryID, len(st.QueuedMessages))
		}
		time.Sleep(5 * time.Millisecond) // polling, with the deadline above
	}
	sm.check(t, true)
}

func decodeModel(t *rapid.T, e conversation.Event) any {
	p, err := e.Decode()
	if err != nil {
		t.Fatalf("seq %d (%s): %v", e.Seq, e.Type, err)
	}
	return p
}

func containsStatus(list []conversation.SessionStatus, s conversation.SessionStatus) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// scriptArch runs turns as their content says: "ok …" ends at once, "fail
// …" fails, "hold …" waits until the test releases it (or is interrupted),
// "ask …" asks for a permission and ends with the answer.
type scriptArch struct{ ctl *scriptCtl }

func (scriptArch) Name() string { return "script" }
func (a scriptArch) Start(_ context.Context, h agent.Host) (agent.Runner, error) {
	return &scriptRunner{ctl: a.ctl, h: h}, nil
}

// scriptCtl holds the gates of waiting turns, by content.
type scriptCtl struct {
	mu    sync.Mutex
	gates map[string]chan struct{}
	all   bool // released all: gates made from now are open
}

func (c *scriptCtl) gate(content string) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.gates[content]
	if !ok {
		g = make(chan struct{})
		if c.all {
			close(g)
		}
		c.gates[content] = g
	}
	return g
}

func (c *scriptCtl) release(content string) {
	g := c.gate(content)
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-g:
	default:
		close(g)
	}
}

func (c *scriptCtl) releaseAll() {
	c.mu.Lock()
	c.all = true
	gates := make([]string, 0, len(c.gates))
	for k := range c.gates {
		gates = append(gates, k)
	}
	c.mu.Unlock()
	for _, k := range gates {
		c.release(k)
	}
}

// reopen: gates made from now wait again (after a restart).
func (c *scriptCtl) reopen() {
	c.mu.Lock()
	c.all = false
	c.mu.Unlock()
}

type scriptRunner struct {
	ctl *scriptCtl
	h   agent.Host

	mu   sync.Mutex
	stop chan struct{} // closed by Interrupt
}

func (r *scriptRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	stop := make(chan struct{})
	r.mu.Lock()
	r.stop = stop
	r.mu.Unlock()
	kind, _, _ := strings.Cut(t.Content, " ")
	switch kind {
	case "ok":
		return agent.TurnResult{Result: "done"}, nil
	case "fail":
		return agent.TurnResult{}, errors.New("the script says fail")
	case "hold":
		select {
		case <-r.ctl.gate(t.Content):
			return agent.TurnResult{Result: "released"}, nil
		case <-stop:
			return agent.TurnResult{}, agent.ErrInterrupted
		case <-ctx.Done():
			return agent.TurnResult{}, ctx.Err()
		}
	case "ask":
		actx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-stop:
				cancel()
			case <-actx.Done():
			}
		}()
		d, err := r.h.RequestPermission(actx, agent.PermissionRequest{ToolName: "Bash"})
		if err != nil {
			select {
			case <-stop:
				return agent.TurnResult{}, agent.ErrInterrupted
			default:
			}
			return agent.TurnResult{}, err
		}
		return agent.TurnResult{Result: string(d.Behavior)}, nil
	}
	return agent.TurnResult{}, fmt.Errorf("unknown script %q", t.Content)
}

func (r *scriptRunner) Interrupt(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != nil {
		select {
		case <-r.stop:
		default:
			close(r.stop)
		}
	}
	return nil
}

func (r *scriptRunner) Close(context.Context) error { return r.Interrupt(context.Background()) }
