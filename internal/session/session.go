package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// Session is one session. Its exported methods are safe for concurrent
// use: they hand work to the session's owner goroutine and wait for its
// answer.
type Session struct {
	m     *Manager
	id    string
	perms *permissions

	mu  sync.Mutex // guards rec and own; never held across I/O or channel sends
	rec store.Session
	own *owner

	turnActor atomic.Pointer[string] // the running turn's principal (TurnActor)

	// lease is the generation of the session's lease this server holds
	// (0: none); set and cleared by the owner goroutine (lease.go).
	lease atomic.Int64
	// serveStop ends the answering of commands other servers forward
	// (cluster.go); owner goroutine only.
	serveStop func()
}

func newSession(m *Manager, rec store.Session) *Session {
	return &Session{m: m, id: rec.ID, rec: rec, perms: newPermissions()}
}

// ID returns the session id.
func (s *Session) ID() string { return s.id }

func (s *Session) record() store.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec
}

// owner is the state of a session's owner goroutine. Every field is
// touched only by that goroutine, except pending (atomic).
type owner struct {
	s       *Session
	cmds    chan func(*owner)
	results chan func(*owner) // from goroutines the owner started
	pending atomic.Int64      // commands announced but not yet received
	jobs    int               // goroutines started that will post a result

	env       sandbox.Environment
	runner    agent.Runner
	host      *host
	envCancel context.CancelFunc // stops the watcher and lease renewal
	envLost   bool               // env died; it is being dropped (loseEnv)
	starting  bool
	// recovering: the start in progress re-attaches to an environment a
	// previous server left (recover.go); a turn it ran may be resumed.
	recovering bool
	// afterRecover: commands that came while recovering, run when it ends
	// (whenRecovered).
	afterRecover []func()
	readyWait    []func(error) // run when the environment start finishes

	turn *turnState

	idleGen   int
	idleTimer *time.Timer

	terminating    string // reason, when a terminate waits for the turn
	terminateActor string
	terminated     []chan struct{}
	detach         bool // shutdown: leave the environment running
	// shut: the manager's shutdown reached this owner. Commands queued
	// behind it (their callers checked closed before Close set it) start
	// no environment and no turn: Close is waiting for this owner to end.
	shut bool
}

type turnState struct {
	queryID     string
	actor       string
	started     time.Time
	cancel      context.CancelFunc
	interrupted bool
	graceTimer  *time.Timer
	failure     error // set by FailTurn: the turn ends failed with it
}

// do runs f in the owner goroutine, starting it if needed. Once the
// manager is closed no owner starts (ErrClosed), and an owner that has
// run its shutdown starts nothing more (see owner.shut).
func (s *Session) do(f func(*owner)) error {
	if s.m.isClosed() {
		return ErrClosed
	}
	s.mu.Lock()
	o := s.own
	if o == nil {
		// Counted in the manager's WaitGroup under its lock, atomically
		// with the closed check: Close, which sets closed under that lock
		// before it waits, either waits for this owner or prevents it.
		if !s.m.addOwner() {
			s.mu.Unlock()
			return ErrClosed
		}
		o = &owner{s: s, cmds: make(chan func(*owner), 16), results: make(chan func(*owner), 16)}
		s.own = o
		go o.loop()
	}
	o.pending.Add(1)
	s.mu.Unlock()
	o.cmds <- f
	return nil
}

// doSync runs f in the owner goroutine and waits for it to call done, or
// ctx to end.
func doSync[T any](ctx context.Context, s *Session, f func(o *owner, done func(T, error))) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	var zero T
	if err := s.do(func(o *owner) {
		f(o, func(v T, err error) { ch <- res{v, err} })
	}); err != nil {
		return zero, err
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

func (o *owner) loop() {
	defer o.s.m.wg.Done()
	for {
		select {
		case f := <-o.cmds:
			o.pending.Add(-1)
			f(o)
		case f := <-o.results:
			o.jobs--
			f(o)
		}
		if o.quiescent() {
			// Nothing runs here any more: neither does the lease stay.
			o.releaseLease()
			o.s.mu.Lock()
			if o.pending.Load() == 0 {
				o.s.own = nil
				o.s.mu.Unlock()
				return
			}
			o.s.mu.Unlock()
		}
	}
}

// quiescent: nothing up, nothing running, nothing coming back.
func (o *owner) quiescent() bool {
	return o.env == nil && o.turn == nil && !o.starting && o.jobs == 0
}

// goJob runs f in a goroutine; f's returned function runs in the owner.
func (o *owner) goJob(f func() func(*owner)) {
	o.jobs++
	go func() { o.results <- f() }()
}

// ---- API commands ----

// Send starts a turn with a user message. It returns the turn's query id
// once the user message is stored; the turn goes on in the background. In
// a fleet, a session whose lease another server holds is sent there
// (cluster.go).
func (s *Session) Send(ctx context.Context, content, actor string) (string, error) {
	return s.SendMessage(ctx, Message{Content: content}, actor)
}

// SendMessage is Send with a message that may carry images and files
// (already in the session's artifact store). ErrUnsupportedContent when
// the session's architecture takes no images.
func (s *Session) SendMessage(ctx context.Context, msg Message, actor string) (string, error) {
	if err := s.CheckContent(msg); err != nil {
		return "", err
	}
	r, err := s.route(ctx, msg.command(opSend, actor), true)
	return r.QueryID, err
}

// sendHere is Send on this server.
func (s *Session) sendHere(ctx context.Context, content Message, actor string) (string, error) {
	return doSync(ctx, s, func(o *owner, done func(string, error)) {
		retryAfterTakeOver(o, func() (string, error) { return o.send(ctx, content, actor) }, done)
	})
}

// whenRecovered runs f now, or, while the environment of a previous
// server is being re-attached, once that has ended (a message sent right
// after a restart waits for it, then finds the session as the re-attach
// left it: idle, or running the resumed turn). Owner goroutine.
func (o *owner) whenRecovered(f func()) {
	if o.recovering {
		o.afterRecover = append(o.afterRecover, f)
		return
	}
	f()
}

// retryAfterTakeOver runs f when no re-attach is under way, and when f
// itself began one (the session's lease was a stopped server's, so f
// took the session over and got errTakingOver), runs f again once the
// re-attach is done instead of failing the request: the caller asked for
// a turn, not for a take-over. Owner goroutine.
func retryAfterTakeOver[T any](o *owner, f func() (T, error), done func(T, error)) {
	var attempt func()
	attempt = func() {
		v, err := f()
		if errors.Is(err, errTakingOver) && o.recovering {
			o.afterRecover = append(o.afterRecover, attempt)
			return
		}
		done(v, err)
	}
	o.whenRecovered(attempt)
}

// runAfterRecover runs what waited for the re-attach. Owner goroutine.
func (o *owner) runAfterRecover() {
	fs := o.afterRecover
	o.afterRecover = nil
	for _, f := range fs {
		f()
	}
}

// Interrupt stops the running turn (on the server running it).
func (s *Session) Interrupt(ctx context.Context, actor string) error {
	_, err := s.route(ctx, command{Op: opInterrupt, Actor: actor}, false)
	return err
}

// interruptHere is Interrupt on this server.
func (s *Session) interruptHere(ctx context.Context, actor string) error {
	_, err := doSync(ctx, s, func(o *owner, done func(struct{}, error)) {
		if err := o.claim(ctx); err != nil {
			done(struct{}{}, err)
			return
		}
		done(struct{}{}, o.interrupt(actor))
	})
	return err
}

// Answer resolves an open permission request (on the server running the
// turn that asked).
func (s *Session) Answer(ctx context.Context, requestID string, d agent.PermissionDecision, actor string) error {
	if d.Behavior != conversation.Allow && d.Behavior != conversation.Deny {
		return fmt.Errorf("%w: behavior must be allow or deny", ErrInvalidRequest)
	}
	_, err := s.route(ctx, command{Op: opAnswer, RequestID: requestID, Decision: &d, Actor: actor}, false)
	return err
}

// answerHere is Answer on this server.
func (s *Session) answerHere(ctx context.Context, requestID string, d agent.PermissionDecision, actor string) error {
	d.By = conversation.ByUser
	d.Actor = actor
	if s.m.cluster != nil && !s.holding() {
		// A request of a session another server left: settled by taking
		// it over (the request then reads as resolved).
		if _, err := doSync(ctx, s, func(o *owner, done func(struct{}, error)) { done(struct{}{}, o.claim(ctx)) }); err != nil {
			return err
		}
	}
	if d.Scope == conversation.ScopeSession {
		return s.answerForSession(ctx, requestID, d) // rules.go
	}
	d.Scope = ""
	err := s.perms.answer(requestID, d)
	if errors.Is(err, ErrPermissionNotFound) {
		// Not opened by this process: a request from before a restart is
		// resolved in the log; anything else is unknown.
		if known, _ := s.m.permissionInLog(ctx, s.id, requestID); known {
			return ErrPermissionResolved
		}
	}
	return err
}

// Terminate stops the environment (after interrupting a running turn) and
// waits until it is down, on the server running it. The session stays
// listed and loadable.
func (s *Session) Terminate(ctx context.Context, reason, actor string) error {
	_, err := s.route(ctx, command{Op: opTerminate, Reason: reason, Actor: actor}, false)
	return err
}

// terminateHere is Terminate on this server.
func (s *Session) terminateHere(ctx context.Context, reason, actor string) error {
	ch, err := doSync(ctx, s, func(o *owner, done func(chan struct{}, error)) {
		if err := o.claim(ctx); err != nil {
			done(nil, err)
			return
		}
		c := make(chan struct{})
		o.terminated = append(o.terminated, c)
		o.terminate(reason, actor)
		done(c, nil)
	})
	if err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// EnsureEnv brings the environment up (without a turn) and returns it, for
// terminals and file access.
func (s *Session) EnsureEnv(ctx context.Context, actor string) (sandbox.Environment, error) {
	type envRes = sandbox.Environment
	ch := make(chan struct {
		env envRes
		err error
	}, 1)
	err := s.do(func(o *owner) {
		o.checkEnv()
		o.whenReady(actor, func(err error) {
			ch <- struct {
				env envRes
				err error
			}{o.env, err}
		})
	})
	if err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		return r.env, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// shutdown is Manager.Close for one session.
func (s *Session) shutdown(ctx context.Context, detach bool) {
	s.mu.Lock()
	running := s.own != nil
	s.mu.Unlock()
	if !running {
		return
	}
	// Bypass do(): the manager is already closed to new commands.
	done := make(chan struct{})
	s.mu.Lock()
	o := s.own
	if o == nil {
		s.mu.Unlock()
		return
	}
	o.pending.Add(1)
	s.mu.Unlock()
	o.cmds <- func(o *owner) {
		o.shut = true
		o.terminated = append(o.terminated, done)
		o.detach = detach
		o.terminate("server shutting down", "")
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// ---- owner logic ----

func (o *owner) send(ctx context.Context, msg Message, actor string) (string, error) {
	content := msg.Content
	s := o.s
	if o.turn != nil {
		return "", ErrBusy
	}
	if o.shut {
		return "", ErrClosed
	}
	if o.terminating != "" {
		return "", fmt.Errorf("%w: session is terminating", ErrBusy)
	}
	// A turn starts entirely or not at all. A request that ended while it
	// waited for the owner starts nothing. From here on its client may go
	// away at any moment (its context then ends): the owner carries the
	// start through on a context of its own, and undoes what it did if a
	// step fails, so that neither the record nor a status event ever names
	// a turn whose message is not in the log.
	if err := ctx.Err(); err != nil {
		return "", err
	}
	ctx = context.WithoutCancel(ctx)
	if o.recovering {
		return "", errTakingOver
	}
	// An environment that died since the last turn is dropped now, so
	// that this turn starts a new one.
	o.checkEnv()
	leaseHeld := o.env != nil || o.starting // held and renewed while the environment is up
	orphaned, err := o.takeLease(ctx)
	if err != nil {
		return "", err
	}
	if orphaned {
		// Another server left the session active (it died, or stopped
		// and handed it over): settle or re-attach that first.
		if err := o.adopt(takeoverReason, agent.CodeServerLost); err != nil {
			o.releaseLease()
			return "", fmt.Errorf("take the session over: %w", err)
		}
		if o.recovering {
			return "", errTakingOver
		}
	}
	gen := s.gen()
	s.mu.Lock()
	before := s.rec
	s.rec.Turns++
	s.rec.LastActivity = time.Now().UTC().Truncate(time.Millisecond)
	queryID := fmt.Sprintf("q%d", s.rec.Turns)
	s.rec.Runtime.ActiveQueryID = queryID
	rec := s.rec
	s.mu.Unlock()
	if err := s.saveRecord(ctx, gen, rec); err != nil {
		o.undoSend(before, false, leaseHeld)
		return "", fmt.Errorf("update session: %w", err)
	}
	user := withActor(conversation.Upsert(conversation.Block{
		ID: queryID + "-user", Type: conversation.BlockUserMessage, Status: conversation.StatusComplete,
		Content: content, Timestamp: rec.LastActivity, Attachments: msg.attachments(),
	}).From(conversation.SourceClient), actor)
	started := withActor(conversation.NewEvent(conversation.QueryStarted{QueryID: queryID, Content: content}), actor)
	if _, err := s.appendEvents(ctx, gen, user, started); err != nil {
		// Nothing of the append was stored: the turn does not exist.
		o.undoSend(before, true, leaseHeld)
		return "", fmt.Errorf("record message: %w", err)
	}
	o.stopIdle()
	tctx, cancel := context.WithCancel(context.Background())
	turn := &turnState{queryID: queryID, actor: actor, started: time.Now(), cancel: cancel}
	o.turn = turn
	s.turnActor.Store(&actor)
	s.m.changed(s.m.summary(ctx, rec))
	t := agent.Turn{QueryID: queryID, Content: content}
	o.whenReady(actor, func(err error) {
		if o.turn != turn {
			return // interrupted while starting and already finished
		}
		if err != nil {
			o.finishTurn(agent.TurnResult{}, err)
			return
		}
		o.setStatus(conversation.SessionRunning, "", actor)
		o.host.setTurn(actor, queryID)
		runner, h, env := o.runner, o.host, o.env
		o.goJob(func() func(*owner) {
			s.m.snapshotTurn(tctx, env, s.id, queryID) // changes.go: the workspace before the turn
			// content.go: the images' bytes, the files into the workspace
			full, err := s.m.turnContent(tctx, env, s.id, t, msg)
			var res agent.TurnResult
			if err == nil {
				res, err = runner.Turn(tctx, full)
			}
			// The turn's file changes go in the log before its end.
			syncTurnFiles(h)
			return func(o *owner) {
				if o.turn == turn { // else abandoned: the lease was lost
					o.finishTurn(res, err)
				}
			}
		})
	})
	return queryID, nil
}

// undoSend takes back a turn start that failed before its message was in
// the log: the record's turn count, active query and activity time as they
// were (in the store too when it had been updated), and the lease unless
// the environment holds it.
func (o *owner) undoSend(before store.Session, stored, leaseHeld bool) {
	s := o.s
	ctx := context.Background()
	s.mu.Lock()
	s.rec.Turns = before.Turns
	s.rec.Runtime.ActiveQueryID = before.Runtime.ActiveQueryID
	s.rec.LastActivity = before.LastActivity
	rec := s.rec
	s.mu.Unlock()
	if stored {
		if err := s.saveRecord(ctx, s.gen(), rec); err != nil {
			s.m.log.Error("undo turn start", "session", s.id, "err", err)
		}
	}
	if !leaseHeld {
		o.releaseLease()
	}
}

func (o *owner) interrupt(actor string) error {
	t := o.turn
	if t == nil {
		return ErrNoActiveTurn
	}
	if t.interrupted {
		return nil
	}
	t.interrupted = true
	o.s.m.log.Info("interrupt", "session", o.s.id, "query", t.queryID, "actor", actor)
	if o.runner == nil || o.starting {
		t.cancel()
		return nil
	}
	runner := o.runner
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), o.s.m.cfg.InterruptGrace)
		defer cancel()
		if err := runner.Interrupt(ctx); err != nil {
			o.s.m.log.Warn("interrupt", "session", o.s.id, "err", err)
		}
	}()
	// Backstop: a runner that does not stop in time is cancelled.
	t.graceTimer = time.AfterFunc(o.s.m.cfg.InterruptGrace, t.cancel)
	return nil
}

func (o *owner) finishTurn(res agent.TurnResult, err error) {
	t := o.turn
	if t == nil {
		return
	}
	o.turn = nil
	o.s.turnActor.Store(nil)
	if o.detach && errors.Is(err, agent.ErrDetached) {
		// Shutting down with the turn still running in the environment:
		// record nothing; the next server resumes it.
		t.cancel()
		o.terminate(o.terminating, o.terminateActor)
		return
	}
	t.cancel()
	if t.graceTimer != nil {
		t.graceTimer.Stop()
	}
	s := o.s
	ctx := context.Background()
	o.resolveOpenPermissions(ctx, conversation.ByInterrupt, t.actor)
	dur := time.Since(t.started).Milliseconds()
	gone := err != nil && o.env != nil && !o.envLost && o.envGone(err)
	if gone && t.failure == nil {
		t.failure = agent.Fail(agent.CodeEnvironmentGone, "the environment is gone: %v", err)
	}
	interrupted := t.interrupted || errors.Is(err, agent.ErrInterrupted)
	var ev conversation.Event
	switch {
	case t.failure != nil:
		ev = conversation.NewEvent(conversation.QueryFailed{QueryID: t.queryID, Error: t.failure.Error(), Code: agent.CodeOf(t.failure), DurationMs: dur})
	case err == nil || (interrupted && (errors.Is(err, agent.ErrInterrupted) || errors.Is(err, context.Canceled))):
		ev = conversation.NewEvent(conversation.QueryCompleted{QueryID: t.queryID, Interrupted: interrupted, DurationMs: dur, Result: res.Result})
	default:
		ev = conversation.NewEvent(conversation.QueryFailed{QueryID: t.queryID, Error: err.Error(), Code: agent.CodeOf(err), Interrupted: interrupted, DurationMs: dur})
	}
	if o.host != nil {
		o.host.finishBounds(ctx, t.actor)
	}
	if aerr := s.appendTurnEnd(ctx, s.gen(), withActor(ev, t.actor)); aerr != nil {
		s.m.log.Error("record turn end", "session", s.id, "err", aerr)
	}
	s.mu.Lock()
	s.rec.Runtime.ActiveQueryID = ""
	s.rec.LastActivity = time.Now().UTC().Truncate(time.Millisecond)
	s.mu.Unlock()
	if o.terminating != "" {
		o.terminate(o.terminating, o.terminateActor)
		return
	}
	if o.env == nil {
		// The environment never came up; the start failure set the status.
		o.saveRecord()
		o.turnEnded()
		return
	}
	if gone {
		o.loseEnv(o.env, err)
		o.turnEnded() // queued messages start a new environment
		return
	}
	o.setStatus(conversation.SessionIdle, "", t.actor)
	if _, aerr := s.appendEvents(ctx, s.gen(), withActor(conversation.NewEvent(conversation.SessionIdleEvent{}), t.actor)); aerr != nil {
		s.m.log.Error("record idle", "session", s.id, "err", aerr)
	}
	o.startIdle()
	o.turnEnded() // the next queued message, if any (queue.go)
}

// terminate stops the environment now, or after the running turn ends.
func (o *owner) terminate(reason, actor string) {
	if o.turn != nil && o.detach {
		if d, ok := o.runner.(agent.Detacher); ok {
			// The turn goes on in the environment; finishTurn sees
			// ErrDetached and comes back here.
			o.terminating, o.terminateActor = reason, actor
			d.Detach()
			return
		}
	}
	if o.turn != nil {
		o.terminating, o.terminateActor = reason, actor
		_ = o.interrupt(actor)
		return
	}
	if o.starting {
		// Finish when the start completes (whenReady sees terminating).
		o.terminating, o.terminateActor = reason, actor
		return
	}
	o.terminating = ""
	o.stopIdle()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if o.env != nil {
		if o.envCancel != nil {
			o.envCancel()
		}
		if o.detach {
			// Leave the environment (and its agent) running, and hand the
			// lease over: another server of a fleet takes the session now,
			// or this one when it starts again.
			if o.host != nil {
				o.host.closeBounds()
			}
			o.env, o.runner, o.host = nil, nil, nil
			o.releaseLease()
		} else {
			if o.runner != nil {
				if err := o.runner.Close(ctx); err != nil {
					o.s.m.log.Warn("close runner", "session", o.s.id, "err", err)
				}
			}
			if err := o.env.Terminate(ctx); err != nil {
				o.s.m.log.Warn("terminate environment", "session", o.s.id, "err", err)
			}
			o.s.m.revokeCredentials(o.s.id)
			if o.host != nil {
				o.host.closeBounds()
			}
			o.env, o.runner, o.host = nil, nil, nil
			o.setStatus(conversation.SessionTerminated, reason, actor)
			o.releaseLease()
		}
	}
	for _, c := range o.terminated {
		close(c)
	}
	o.terminated = nil
}

// envGone reports whether err, from a call on the session's environment,
// means the environment is gone (its executor died): the error wraps
// sandbox.ErrGone, or the environment says it is not running any more
// (runners do not all wrap the errors of their processes).
func (o *owner) envGone(err error) bool {
	return errors.Is(err, sandbox.ErrGone) || (o.env != nil && !o.env.Running())
}

// checkEnv drops an environment that died while nobody used it, before a
// command that needs one.
func (o *owner) checkEnv() {
	if o.env != nil && !o.starting && !o.envLost && !o.env.Running() {
		o.loseEnv(o.env, errors.New("it stopped running"))
	}
}

// loseEnv handles the death of env, the session's environment (an agent
// killed its executor; the executor crashed): instead of failing every
// later message with "environment gone", the session says what happened
// (an error event, code ENVIRONMENT_GONE), drops the environment (status
// terminated) and starts a new one with the next message, on the same
// workspace (restored from the store when the folder is gone), as after a
// restart. A running turn is failed with that code first. A report about
// an environment the session no longer has is ignored.
func (o *owner) loseEnv(env sandbox.Environment, cause error) {
	if env == nil || o.env != env || o.envLost {
		return
	}
	o.envLost = true
	s := o.s
	s.m.log.Warn("environment gone; the next message starts a new one", "session", s.id, "err", cause)
	msg := fmt.Sprintf("The session's environment is gone (%v). Its workspace is kept; the next message starts a new environment.", cause)
	if _, err := s.appendEvents(context.Background(), s.gen(), conversation.NewEvent(conversation.ErrorEvent{Message: msg, Code: agent.CodeEnvironmentGone})); err != nil {
		s.m.log.Error("record environment loss", "session", s.id, "err", err)
	}
	s.mu.Lock()
	s.rec.SandboxState = nil // its handle names a dead executor
	s.mu.Unlock()
	if t := o.turn; t != nil {
		if t.failure == nil {
			t.failure = agent.Fail(agent.CodeEnvironmentGone, "the environment is gone: %v", cause)
		}
		// Nothing is left to stop gracefully: the turn ends now, and the
		// environment is dropped when it has (terminate waits for it).
		t.cancel()
	}
	o.terminate("environment gone", "")
}

// whenReady runs f once the environment and runner are up, starting them
// if needed. f runs in the owner goroutine.
func (o *owner) whenReady(actor string, f func(error)) {
	if o.env != nil && !o.starting {
		f(nil)
		return
	}
	if o.shut {
		f(ErrClosed)
		return
	}
	if o.starting {
		o.readyWait = append(o.readyWait, f)
		return
	}
	s := o.s
	// The environment runs under the session's lease (a turn took it
	// already; a terminal or files call takes it here).
	if !s.holding() {
		orphaned, err := o.takeLease(context.Background())
		if err != nil {
			f(err)
			return
		}
		if orphaned {
			if err := o.adopt(takeoverReason, agent.CodeServerLost); err != nil {
				f(err)
				return
			}
			if o.recovering {
				o.readyWait = append(o.readyWait, f) // answered when it is re-attached
				return
			}
		}
	}
	o.readyWait = append(o.readyWait, f)
	o.starting = true
	gen := s.gen()
	o.setStatus(conversation.SessionStarting, "", actor)
	envCtx, envCancel := context.WithCancel(context.Background())
	rec := s.record()
	o.goJob(func() func(*owner) {
		env, runner, h, err := s.m.startEnvironment(envCtx, s, rec, actor)
		return func(o *owner) {
			o.starting = false
			waiters := o.readyWait
			o.readyWait = nil
			if err == nil && s.gen() != gen {
				// The lease was lost while the environment started: it
				// is not this server's to run.
				envCancel()
				if rel, ok := env.(sandbox.Releaser); ok && o.recoverable() {
					rel.Release()
				} else {
					terminateQuietly(env)
					s.m.revokeCredentials(s.id)
				}
				for _, w := range waiters {
					w(ErrLeased)
				}
				return
			}
			if err != nil {
				envCancel()
				o.s.m.log.Error("start environment", "session", s.id, "err", err)
				o.setError(err, actor)
			} else {
				o.env, o.runner, o.host, o.envCancel, o.envLost = env, runner, h, envCancel, false
				o.setStatus(conversation.SessionReady, "", actor)
				if o.turn == nil {
					o.startIdle()
				}
			}
			for _, w := range waiters {
				w(err)
			}
			if o.terminating != "" && o.turn == nil {
				o.terminate(o.terminating, o.terminateActor)
			}
		}
	})
}

func (o *owner) setError(err error, actor string) {
	o.s.mu.Lock()
	o.s.rec.Runtime.LastError = err.Error()
	o.s.mu.Unlock()
	o.setStatus(conversation.SessionError, err.Error(), actor)
}

// setStatus records a lifecycle transition: record, store, event, watchers.
func (o *owner) setStatus(st conversation.SessionStatus, reason, actor string) {
	s := o.s
	s.mu.Lock()
	from := s.rec.Status
	s.rec.Status = st
	s.rec.Runtime.Status = st
	if st != conversation.SessionError {
		s.rec.Runtime.LastError = ""
	}
	rec := s.rec
	s.mu.Unlock()
	ctx := context.Background()
	gen := s.gen()
	if err := s.saveRecord(ctx, gen, rec); err != nil {
		s.m.log.Error("update session", "session", s.id, "err", err)
	}
	if _, err := s.appendEvents(ctx, gen, statusEvent(rec.Runtime, reason, actor)); err != nil {
		s.m.log.Error("record status", "session", s.id, "err", err)
	}
	if s.m.cfg.Metrics != nil && from != st {
		s.m.cfg.Metrics.StatusChanged(from, st)
	}
	s.m.changed(s.m.summary(ctx, rec))
}

func (o *owner) saveRecord() {
	rec := o.s.record()
	if err := o.s.saveRecord(context.Background(), o.s.gen(), rec); err != nil {
		o.s.m.log.Error("update session", "session", o.s.id, "err", err)
	}
}

// recoverable reports whether environments outlive this server (and can
// be left to another one).
func (o *owner) recoverable() bool {
	_, ok := o.s.m.cfg.Sandbox.(sandbox.Recoverer)
	return ok
}

func (o *owner) startIdle() {
	o.stopIdle()
	o.idleGen++
	gen := o.idleGen
	s := o.s
	o.idleTimer = time.AfterFunc(s.m.cfg.IdleTimeout, func() {
		_ = s.do(func(o *owner) {
			if o.idleGen == gen && o.turn == nil && o.env != nil {
				o.terminate("idle timeout", "")
			}
		})
	})
}

func (o *owner) stopIdle() {
	if o.idleTimer != nil {
		o.idleTimer.Stop()
		o.idleTimer = nil
	}
	o.idleGen++
}

// resolveOpenPermissions denies every open request (the turn ended) and
// waits, briefly, until each waiter has recorded the resolution, so it lands
// in the log before the turn's end.
func (o *owner) resolveOpenPermissions(ctx context.Context, by conversation.ResolvedBy, actor string) {
	open := o.s.perms.denyAll(agent.PermissionDecision{Behavior: conversation.Deny, By: by, Message: "the turn ended", Actor: actor})
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for _, pd := range open {
		select {
		case <-pd.done:
		case <-deadline.C:
			o.s.m.log.Warn("permission waiter did not record its resolution in time", "session", o.s.id)
			return
		}
	}
}

// permissionInLog reports whether the session's log has a request with id.
func (m *Manager) permissionInLog(ctx context.Context, sessionID, requestID string) (bool, error) {
	evs, err := m.cfg.Log.Read(ctx, sessionID, 0, 0)
	if err != nil {
		return false, err
	}
	for _, e := range evs {
		if e.Type != conversation.TypePermissionRequest {
			continue
		}
		var p struct {
			RequestID string `json:"requestId"`
		}
		if json.Unmarshal(e.Payload, &p) == nil && p.RequestID == requestID {
			return true, nil
		}
	}
	return false, nil
}
