package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// shellFixture is a manager with the shell and perm architectures over st
// (a fresh memstore when nil) and dataDir (a temp folder when "").
type shellFixture struct {
	m       *session.Manager
	log     *eventlog.Log
	st      store.Store
	dataDir string
}

func newShellFixture(t *testing.T, st store.Store, dataDir string) *shellFixture {
	t.Helper()
	if st == nil {
		st = memstore.New()
	}
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	lg := eventlog.New(st, eventlog.Options{})
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	archs.Register(permArch{})
	archs.Register(missingArch{})
	m, err := session.New(session.Config{Store: st, Log: lg, Sandbox: local.New(local.Options{}), Architectures: archs,
		DataDir: dataDir, InterruptGrace: 2 * time.Second, RefuseMissingAgents: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	f := &shellFixture{m: m, log: lg, st: st, dataDir: dataDir}
	t.Cleanup(f.close)
	return f
}

func (f *shellFixture) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.m.Close(ctx)
	f.log.Close()
}

func (f *shellFixture) create(t *testing.T, req session.CreateRequest) (*session.Session, *eventlog.Subscription) {
	t.Helper()
	if req.Architecture == "" {
		req.Architecture = "shell"
	}
	rec, err := f.m.Create(context.Background(), req, "alice")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := f.m.Get(rec.ID)
	sub, err := f.log.Subscribe(context.Background(), rec.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return s, sub
}

// missingArch's CLI is never installed.
type missingArch struct{}

func (missingArch) Name() string { return "missing" }
func (missingArch) Start(context.Context, agent.Host) (agent.Runner, error) {
	return nil, errors.New("unreachable")
}
func (missingArch) Probe(context.Context) (string, error) {
	return "", agent.NotInstalled("missing-cli")
}

// until returns the events up to and including the n-th of type typ.
func until(t *testing.T, sub *eventlog.Subscription, typ conversation.EventType, n int) []conversation.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []conversation.Event
	for n > 0 {
		r, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v (after %d events)", typ, err, len(out))
		}
		out = append(out, r.Event)
		if r.Event.Type == typ {
			n--
		}
	}
	return out
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Messages sent while a turn runs are queued and run, in order, each in
// its own turn once the one before has ended; every client sees the queue
// in the log and the state.
func TestQueueRunsMessagesInOrder(t *testing.T) {
	f := newShellFixture(t, nil, "")
	s, sub := f.create(t, session.CreateRequest{})
	ctx := context.Background()
	release := filepath.Join(t.TempDir(), "release")
	first, err := s.Submit(ctx, "until [ -e "+release+" ]; do sleep 0.02; done; echo one", "alice")
	if err != nil || first.QueryID != "q1" || first.MessageID != "" {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, err := s.Submit(ctx, "echo two", "bob")
	if err != nil || second.MessageID == "" || second.QueryID != "" {
		t.Fatalf("second: %+v %v", second, err)
	}
	third, _ := s.Submit(ctx, "echo three", "alice")
	q, err := f.m.Queue(ctx, s.ID())
	if err != nil || len(q) != 2 || q[0].ID != second.MessageID || q[0].Content != "echo two" || q[0].Actor != "bob" || q[1].ID != third.MessageID {
		t.Fatalf("queue %+v %v", q, err)
	}
	if rec, _, _ := f.m.State(ctx, s.ID()); rec.Runtime.Queued != 2 || rec.Name != session.NameFromPrompt("until [ -e "+release+" ]; do sleep 0.02; done; echo one") {
		t.Fatalf("record %+v", rec)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	evs := until(t, sub, conversation.TypeQueryCompleted, 3)
	var users, dequeued []string
	for _, e := range evs {
		switch e.Type {
		case conversation.TypeBlockUpsert:
			var p conversation.BlockUpsert
			json.Unmarshal(e.Payload, &p)
			if p.Block.Type == conversation.BlockUserMessage {
				users = append(users, p.Block.ID+":"+p.Block.Content)
			}
		case conversation.TypeMessageDequeued:
			var p conversation.MessageDequeued
			json.Unmarshal(e.Payload, &p)
			dequeued = append(dequeued, p.MessageID+">"+p.QueryID)
		}
	}
	if len(users) != 3 || !strings.HasSuffix(users[1], "q2-user:echo two") || !strings.HasSuffix(users[2], "q3-user:echo three") {
		t.Fatalf("user messages %q", users)
	}
	if strings.Join(dequeued, ",") != second.MessageID+">q2,"+third.MessageID+">q3" {
		t.Fatalf("dequeued %q", dequeued)
	}
	_, st, _ := f.m.State(ctx, s.ID())
	if len(st.QueuedMessages) != 0 || len(st.Turns) != 3 {
		t.Fatalf("state queue %+v turns %d", st.QueuedMessages, len(st.Turns))
	}
	waitUntil(t, "the record's queue count back to 0", func() bool {
		rec, _, _ := f.m.State(ctx, s.ID())
		return rec.Runtime.Queued == 0
	})
}

// A queued message can be cancelled once; a cancelled message never runs,
// and neither does an unknown one.
func TestQueueCancel(t *testing.T) {
	f := newShellFixture(t, nil, "")
	s, sub := f.create(t, session.CreateRequest{Name: "kept"})
	ctx := context.Background()
	if _, err := s.Submit(ctx, "sleep 30", "alice"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Submit(ctx, "echo never", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CancelQueued(ctx, r.MessageID, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := s.CancelQueued(ctx, r.MessageID, "bob"); !errors.Is(err, session.ErrMessageNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
	if err := s.CancelQueued(ctx, "msg-nope", "bob"); !errors.Is(err, session.ErrMessageNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if err := s.Interrupt(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeSessionIdle, 1)
	_, st, _ := f.m.State(ctx, s.ID())
	if len(st.Turns) != 1 || len(st.QueuedMessages) != 0 {
		t.Fatalf("turns %+v queue %+v", st.Turns, st.QueuedMessages)
	}
	if rec, _, _ := f.m.State(ctx, s.ID()); rec.Name != "kept" {
		t.Fatalf("a named session was renamed: %q", rec.Name)
	}
	// The plain Send still refuses a busy session (the API's queue:false).
	if _, err := s.Send(ctx, "sleep 30", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Send(ctx, "echo no", "alice"); !errors.Is(err, session.ErrBusy) {
		t.Fatalf("Send while busy: %v", err)
	}
	_ = s.Interrupt(ctx, "alice")
}

// Queued messages are in the log: after a crash (the running turn dies
// with the server) the next server finds them and runs them.
func TestQueueSurvivesRestart(t *testing.T) {
	st := memstore.New()
	dir := t.TempDir()
	f := newShellFixture(t, st, dir)
	s, sub := f.create(t, session.CreateRequest{})
	ctx := context.Background()
	if _, err := s.Submit(ctx, "sleep 30", "alice"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeQueryStarted, 1)
	r, err := s.Submit(ctx, "echo after-restart", "alice")
	if err != nil {
		t.Fatal(err)
	}
	id := s.ID()
	// A crash: the record still says running, with one message queued.
	rec, _ := st.LoadSession(ctx, id)
	f.close()
	rec.Status, rec.Runtime.Status = conversation.SessionRunning, conversation.SessionRunning
	if err := st.UpdateSession(ctx, rec); err != nil {
		t.Fatal(err)
	}
	g := newShellFixture(t, st, dir)
	sub2, _ := g.log.Subscribe(ctx, id, 0)
	defer sub2.Close()
	var dequeued conversation.MessageDequeued
	json.Unmarshal(next(t, sub2, conversation.TypeMessageDequeued).Payload, &dequeued)
	if dequeued.MessageID != r.MessageID || dequeued.QueryID != "q2" {
		t.Fatalf("the queued message did not run after the restart: %+v", dequeued)
	}
	next(t, sub2, conversation.TypeSessionIdle)
	_, state, _ := g.m.State(ctx, id)
	last := state.Blocks[len(state.Blocks)-1]
	if !strings.Contains(last.Output, "after-restart") {
		t.Fatalf("last block %+v", last)
	}
}

func TestRenameAndNameFromPrompt(t *testing.T) {
	f := newShellFixture(t, nil, "")
	s, sub := f.create(t, session.CreateRequest{})
	ctx := context.Background()
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	w := f.m.WatchSessions(wctx)
	if _, err := s.Submit(ctx, "\n  echo hi  \nsecond line", "alice"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeQueryCompleted, 1)
	if rec, _, _ := f.m.State(ctx, s.ID()); rec.Name != "echo hi" {
		t.Fatalf("name %q", rec.Name)
	}
	sum, err := f.m.Rename(ctx, s.ID(), "  my work ", "bob")
	if err != nil || sum.Name != "my work" {
		t.Fatalf("rename: %+v %v", sum, err)
	}
	waitUntil(t, "a list notification with the new name", func() bool {
		for {
			select {
			case x := <-w:
				if x.Name == "my work" {
					return true
				}
			default:
				return false
			}
		}
	})
	if _, err := f.m.Rename(ctx, s.ID(), strings.Repeat("x", 201), "bob"); !errors.Is(err, session.ErrInvalidRequest) {
		t.Fatalf("long name: %v", err)
	}
	if _, err := f.m.Rename(ctx, "nope", "x", "bob"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	if got := session.NameFromPrompt(strings.Repeat("é", 80)); len([]rune(got)) != 60 || !strings.HasSuffix(got, "…") {
		t.Fatalf("long prompt name %q", got)
	}
}

// "Allow for this session": the answer allows the request and adds a rule;
// later requests for the tool are allowed by the rule (recorded as
// requested and resolved by "rule"), other tools still ask, and the rule
// is still there for a new server.
func TestAllowForSession(t *testing.T) {
	st := memstore.New()
	dir := t.TempDir()
	f := newShellFixture(t, st, dir)
	s, sub := f.create(t, session.CreateRequest{Architecture: "perm"})
	ctx := context.Background()
	if _, err := s.Submit(ctx, "Bash", "alice"); err != nil {
		t.Fatal(err)
	}
	req := next(t, sub, conversation.TypePermissionRequest)
	var p conversation.PermissionRequested
	json.Unmarshal(req.Payload, &p)
	if err := s.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Deny, Scope: conversation.ScopeSession}, "bob"); !errors.Is(err, session.ErrInvalidRequest) {
		t.Fatalf("deny for the session: %v", err)
	}
	if err := s.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Allow, Scope: conversation.ScopeSession}, "bob"); err != nil {
		t.Fatal(err)
	}
	var res conversation.PermissionResolved
	json.Unmarshal(next(t, sub, conversation.TypePermissionResolved).Payload, &res)
	if res.Scope != conversation.ScopeSession || res.ToolName != "Bash" || res.By != conversation.ByUser {
		t.Fatalf("resolution %+v", res)
	}
	if got := result(t, sub); got != "allow:user:" {
		t.Fatalf("first call %q", got)
	}
	// The next Bash request is decided by the rule, without waiting.
	if _, err := s.Submit(ctx, "Bash", "alice"); err != nil {
		t.Fatal(err)
	}
	evs := until(t, sub, conversation.TypeQueryCompleted, 1)
	var q conversation.QueryCompleted
	json.Unmarshal(evs[len(evs)-1].Payload, &q)
	if q.Result != "allow:rule:allowed for this session" {
		t.Fatalf("second call %q", q.Result)
	}
	var sawReq, sawRes bool
	for _, e := range evs {
		switch e.Type {
		case conversation.TypePermissionRequest:
			sawReq = true
		case conversation.TypePermissionResolved:
			var r conversation.PermissionResolved
			json.Unmarshal(e.Payload, &r)
			sawRes = r.By == conversation.ByRule && r.ToolName == "Bash"
		}
	}
	if !sawReq || !sawRes {
		t.Fatalf("the rule's decision is not in the log: %v %v", sawReq, sawRes)
	}
	_, state, _ := f.m.State(ctx, s.ID())
	if len(state.PermissionRules) != 1 || state.PermissionRules[0].ToolName != "Bash" || len(state.PendingPermissions) != 0 {
		t.Fatalf("rules %+v pending %+v", state.PermissionRules, state.PendingPermissions)
	}
	// Another tool still asks.
	if _, err := s.Submit(ctx, "Write", "alice"); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(next(t, sub, conversation.TypePermissionRequest).Payload, &p)
	if p.ToolName != "Write" {
		t.Fatalf("request %+v", p)
	}
	if err := s.Answer(ctx, p.RequestID, agent.PermissionDecision{Behavior: conversation.Allow}, "bob"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeSessionIdle, 1)
	id := s.ID()
	f.close()
	// A new server loads the rule from the log.
	g := newShellFixture(t, st, dir)
	s2, _ := g.m.Get(id)
	sub2, _ := g.log.Subscribe(ctx, id, 0)
	defer sub2.Close()
	r, err := s2.Submit(ctx, "Bash", "alice")
	if err != nil {
		t.Fatal(err)
	}
	for {
		e := next(t, sub2, conversation.TypeQueryCompleted)
		json.Unmarshal(e.Payload, &q)
		if q.QueryID == r.QueryID {
			break
		}
	}
	if q.Result != "allow:rule:allowed for this session" {
		t.Fatalf("after restart %q", q.Result)
	}
}

// Creating a session whose agent CLI is not installed fails at once.
func TestCreateRefusesMissingAgent(t *testing.T) {
	f := newShellFixture(t, nil, "")
	_, err := f.m.Create(context.Background(), session.CreateRequest{Architecture: "missing"}, "a")
	if !errors.Is(err, session.ErrAgentNotFound) || !strings.Contains(err.Error(), "missing-cli is not installed") {
		t.Fatalf("create: %v", err)
	}
}

// A workspace source is checked at creation and cloned, inside the
// sandbox, when the environment first starts; git run in a workspace never
// sees a repository above it.
func TestWorkspaceFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	gitRun(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "README.md"), []byte("from the repo\n"), 0o644)
	gitRun(t, repo, "add", ".")
	gitRun(t, repo, "commit", "-q", "-m", "one")
	gitRun(t, repo, "checkout", "-q", "-b", "feature")
	os.WriteFile(filepath.Join(repo, "feature.txt"), []byte("on the branch\n"), 0o644)
	gitRun(t, repo, "add", ".")
	gitRun(t, repo, "commit", "-q", "-m", "two")
	gitRun(t, repo, "checkout", "-q", "main")

	// The data folder inside a git work tree, as ./data in a checkout.
	outer := t.TempDir()
	gitRun(t, outer, "init", "-q")
	f := newShellFixture(t, nil, filepath.Join(outer, "data"))
	ctx := context.Background()
	for _, bad := range []string{`{"workspace":{"git":"-uhoh"}}`, `{"workspace":{"git":"ext::sh -c touch% /tmp/x"}}`,
		`{"workspace":{"git":"file:///r","branch":"--force"}}`, `{"workspace":{"branch":"main"}}`, `{"workspace":"x"}`} {
		if _, err := f.m.Create(ctx, session.CreateRequest{Architecture: "shell", SessionOptions: json.RawMessage(bad)}, "a"); !errors.Is(err, session.ErrInvalidRequest) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	s, sub := f.create(t, session.CreateRequest{SessionOptions: json.RawMessage(`{"workspace":{"git":"file://` + repo + `","branch":"feature"}}`)})
	if _, err := s.Submit(ctx, "cat README.md feature.txt && git rev-parse --abbrev-ref HEAD && git status --porcelain | wc -l", "a"); err != nil {
		t.Fatal(err)
	}
	until(t, sub, conversation.TypeQueryCompleted, 1)
	_, st, _ := f.m.State(ctx, s.ID())
	out := st.Blocks[len(st.Blocks)-1].Output
	if out != "from the repo\non the branch\nfeature\n0\n" {
		t.Fatalf("output %q", out)
	}
	// An empty workspace is in no repository at all.
	s2, sub2 := f.create(t, session.CreateRequest{})
	if _, err := s2.Submit(ctx, "git status", "a"); err != nil {
		t.Fatal(err)
	}
	until(t, sub2, conversation.TypeQueryCompleted, 1)
	_, st, _ = f.m.State(ctx, s2.ID())
	if out := st.Blocks[len(st.Blocks)-1].Output; !strings.Contains(out, "not a git repository") {
		t.Fatalf("git status in a fresh workspace: %q", out)
	}
	// A clone that fails fails the turn and says why.
	s3, sub3 := f.create(t, session.CreateRequest{SessionOptions: json.RawMessage(`{"workspace":{"git":"file://` + repo + `/nope"}}`)})
	if _, err := s3.Submit(ctx, "true", "a"); err != nil {
		t.Fatal(err)
	}
	evs := until(t, sub3, conversation.TypeQueryFailed, 1)
	var qf conversation.QueryFailed
	json.Unmarshal(evs[len(evs)-1].Payload, &qf)
	if qf.Code != agent.CodeSandboxError || !strings.Contains(qf.Error, "clone file://") {
		t.Fatalf("failed clone: %+v", qf)
	}
}

func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// The changes of each turn and of the whole session, from the snapshots
// taken before each turn, with the contents they keep.
func TestChanges(t *testing.T) {
	f := newShellFixture(t, nil, "")
	s, sub := f.create(t, session.CreateRequest{})
	ctx := context.Background()
	for _, cmd := range []string{
		"printf 'a\\nb\\n' > keep.txt && echo gone > old.txt",
		"printf 'a\\nB\\n' > keep.txt && rm old.txt && echo new > new.txt",
		"true",
	} {
		if _, err := s.Submit(ctx, cmd, "a"); err != nil {
			t.Fatal(err)
		}
		until(t, sub, conversation.TypeQueryCompleted, 1)
	}
	ch, err := f.m.Changes(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	summary := func(fs []session.FileDiff) string {
		var out []string
		for _, d := range fs {
			out = append(out, d.Change+" "+d.Path)
		}
		return strings.Join(out, ", ")
	}
	if len(ch.Turns) != 3 {
		t.Fatalf("turns %+v", ch.Turns)
	}
	if got := summary(ch.Turns[0].Files); got != "added keep.txt, added old.txt" {
		t.Fatalf("turn 1: %s", got)
	}
	if got := summary(ch.Turns[1].Files); got != "modified keep.txt, added new.txt, deleted old.txt" {
		t.Fatalf("turn 2: %s", got)
	}
	if got := summary(ch.Turns[2].Files); got != "" {
		t.Fatalf("turn 3: %s", got)
	}
	if got := summary(ch.Overall); got != "added keep.txt, added new.txt" {
		t.Fatalf("overall: %s", got)
	}
	mod := ch.Turns[1].Files[0]
	before, err := f.m.ChangedContent(ctx, s.ID(), mod.Before.SHA256)
	if err != nil || string(before) != "a\nb\n" {
		t.Fatalf("before %q %v", before, err)
	}
	after, _ := f.m.ChangedContent(ctx, s.ID(), mod.After.SHA256)
	if string(after) != "a\nB\n" {
		t.Fatalf("after %q", after)
	}
	if _, err := f.m.ChangedContent(ctx, s.ID(), "../../etc/passwd"); !errors.Is(err, session.ErrInvalidRequest) {
		t.Fatalf("bad sha: %v", err)
	}
	if _, err := f.m.ChangedContent(ctx, s.ID(), strings.Repeat("0", 64)); err == nil {
		t.Fatal("unknown content found")
	}
	// Purging the session removes its snapshots.
	if err := f.m.Delete(ctx, s.ID(), true, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, "changes", s.ID())); !os.IsNotExist(err) {
		t.Fatalf("snapshots left after purge: %v", err)
	}
}
