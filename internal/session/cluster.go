package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// Cluster connects a Manager to the other servers of a fleet, which share
// its store (internal/bus implements it over NATS). With it any server
// serves any session: a command for a session whose lease another server
// holds (a message, an interrupt, a permission answer, a terminate) is
// forwarded to that server and answered as it answers; a session whose
// server died is taken over by whichever server needs it first, or by the
// periodic sweep (Start); session changes are announced so every server's
// session watchers see them.
type Cluster interface {
	// Request sends a command to the server serving the session's
	// commands and returns its reply; an error matching ErrNoHolder when
	// none does.
	Request(ctx context.Context, sessionID string, req []byte) ([]byte, error)
	// Serve answers the session's commands until stop.
	Serve(sessionID string, handle func(ctx context.Context, req []byte) []byte) (stop func(), err error)
	// Announce sends a notice to the other servers.
	Announce(msg []byte) error
	// Notices calls deliver with the other servers' notices until stop,
	// and with nil when some may have been lost.
	Notices(deliver func(msg []byte)) (stop func(), err error)
}

// ErrNoHolder is what a Cluster's Request returns (wrapped) when no server
// serves the session's commands.
var ErrNoHolder = errors.New("no server serves the session")

// errTakingOver: the session is being taken over here (its environment
// re-attached); a moment later it runs here.
var errTakingOver = fmt.Errorf("%w: the session is being taken over from a server that stopped; retry in a moment", ErrUnavailable)

// routeWait is how long a command waits for a session's lease holder that
// does not answer (it is starting to serve the session, or it died and
// its lease has not expired yet) before the command fails ErrUnavailable.
const routeWait = 2 * time.Second

// Commands forwarded to a session's lease holder.
const (
	opSend      = "send"
	opInterrupt = "interrupt"
	opAnswer    = "answer"
	opTerminate = "terminate"
	opSubmit    = "submit"       // send, or queue behind the running turn
	opCancelQ   = "cancelQueued" // drop a queued message
	opRename    = "rename"
	opOptions   = "options" // change the session options
)

type command struct {
	Op        string                     `json:"op"`
	Content   string                     `json:"content,omitempty"`
	Images    []conversation.ArtifactRef `json:"images,omitempty"`
	Files     []conversation.ArtifactRef `json:"files,omitempty"`
	Actor     string                     `json:"actor,omitempty"`
	RequestID string                     `json:"requestId,omitempty"`
	Decision  *agent.PermissionDecision  `json:"decision,omitempty"`
	Reason    string                     `json:"reason,omitempty"`
	MessageID string                     `json:"messageId,omitempty"`
	Name      string                     `json:"name,omitempty"`
	Patch     json.RawMessage            `json:"patch,omitempty"`
}

// outcome is what a command returns, here or from the lease holder.
type outcome struct {
	QueryID   string          `json:"queryId,omitempty"`
	MessageID string          `json:"messageId,omitempty"` // a queued message (submit)
	Options   json.RawMessage `json:"options,omitempty"`   // the options after a change
	Summary   *Summary        `json:"summary,omitempty"`   // the session after a rename
}

type reply struct {
	outcome
	Code  string `json:"code,omitempty"` // "" when it succeeded
	Error string `json:"error,omitempty"`
}

// wireErrors name the errors a forwarded command's reply carries, so the
// sender answers exactly as the holder did.
var wireErrors = []struct {
	code string
	err  error
}{
	{"not_found", ErrNotFound},
	{"busy", ErrBusy},
	{"no_active_turn", ErrNoActiveTurn},
	{"permission_not_found", ErrPermissionNotFound},
	{"permission_resolved", ErrPermissionResolved},
	{"leased", ErrLeased},
	{"unavailable", ErrUnavailable},
	{"closed", ErrClosed},
	{"unavailable", context.DeadlineExceeded},
	{"unavailable", context.Canceled},
	{"invalid", ErrInvalidRequest},
	{"unknown_architecture", ErrUnknownArchitecture},
	{"profile_not_found", ErrProfileNotFound},
	{"message_not_found", ErrMessageNotFound},
	{"agent_not_found", ErrAgentNotFound},
	{"unknown_option", ErrUnknownOption},
}

// remoteError is an error a lease holder answered: its message, matching
// the sentinel it matched there.
type remoteError struct {
	msg  string
	kind error // nil: internal
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.kind }

func encodeReply(res outcome, err error) []byte {
	r := reply{outcome: res}
	if err != nil {
		r.Code, r.Error = "internal", err.Error()
		for _, w := range wireErrors {
			if errors.Is(err, w.err) {
				r.Code = w.code
				break
			}
		}
	}
	b, _ := json.Marshal(r)
	return b
}

func decodeReply(b []byte) (outcome, error) {
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		return outcome{}, fmt.Errorf("%w: malformed reply from the session's server: %v", ErrUnavailable, err)
	}
	if r.Code == "" {
		return r.outcome, nil
	}
	for _, w := range wireErrors {
		if w.code == r.Code {
			return outcome{}, &remoteError{msg: r.Error, kind: w.err}
		}
	}
	return outcome{}, &remoteError{msg: r.Error}
}

// route runs cmd where the session runs. Without a cluster, or while this
// server holds the lease, that is here. Otherwise: a send (localFirst)
// runs here when no server holds the lease (this server takes it); other
// commands go first to the holder, over the cluster. When no server
// answers, the command runs here, taking over a session its server left
// (an expired lease); while the lease of a server that does not answer is
// unexpired, it waits a little (routeWait), then fails ErrUnavailable.
func (s *Session) route(ctx context.Context, cmd command, localFirst bool) (outcome, error) {
	c := s.m.cluster
	if c == nil {
		return s.here(ctx, cmd)
	}
	start := time.Now()
	backoff := 20 * time.Millisecond
	var req []byte
	for {
		if localFirst || s.holding() {
			r, err := s.here(ctx, cmd)
			if !errors.Is(err, ErrLeased) {
				return r, err
			}
		}
		if req == nil {
			req, _ = json.Marshal(cmd)
		}
		s.m.metrics.forwarded.Inc()
		rctx, cancel := context.WithTimeout(ctx, forwardTimeout(cmd.Op))
		rep, err := c.Request(rctx, s.id, req)
		cancel()
		switch {
		case err == nil:
			r, err := decodeReply(rep)
			if !errors.Is(err, ErrLeased) {
				return r, err
			}
			// That server no longer holds the lease: route again.
		case !errors.Is(err, ErrNoHolder):
			if ctx.Err() != nil {
				return outcome{}, ctx.Err()
			}
			return outcome{}, fmt.Errorf("%w: forward to the session's server: %v", ErrUnavailable, err)
		case !localFirst:
			r, err := s.here(ctx, cmd)
			if !errors.Is(err, ErrLeased) {
				return r, err
			}
		}
		if time.Since(start) > routeWait {
			return outcome{}, fmt.Errorf("%w: the server holding this session's lease does not answer; if it stopped, another server takes the session over once the lease expires (at most %s)", ErrUnavailable, s.m.cfg.LeaseTTL)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return outcome{}, ctx.Err()
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// forwardTimeout bounds the wait for a forwarded command's reply (a
// reply can be lost: the holder stopped serving the session as the
// command reached it).
func forwardTimeout(op string) time.Duration {
	if op == opTerminate {
		return 45 * time.Second // stops the environment first
	}
	return 10 * time.Second
}

// here runs cmd on this server.
func (s *Session) here(ctx context.Context, cmd command) (outcome, error) {
	switch cmd.Op {
	case opSend:
		qid, err := s.sendHere(ctx, cmd.message(), cmd.Actor)
		return outcome{QueryID: qid}, err
	case opSubmit:
		r, err := s.submitHere(ctx, cmd.message(), cmd.Actor)
		return outcome{QueryID: r.QueryID, MessageID: r.MessageID}, err
	case opCancelQ:
		return outcome{}, s.cancelQueuedHere(ctx, cmd.MessageID, cmd.Actor)
	case opRename:
		sum, err := s.renameHere(ctx, cmd.Name, cmd.Actor)
		return outcome{Summary: &sum}, err
	case opOptions:
		opts, err := s.updateOptionsHere(ctx, cmd.Patch, cmd.Actor)
		return outcome{Options: opts}, err
	case opInterrupt:
		return outcome{}, s.interruptHere(ctx, cmd.Actor)
	case opAnswer:
		if cmd.Decision == nil {
			return outcome{}, fmt.Errorf("%w: answer without a decision", ErrInvalidRequest)
		}
		return outcome{}, s.answerHere(ctx, cmd.RequestID, *cmd.Decision, cmd.Actor)
	case opTerminate:
		return outcome{}, s.terminateHere(ctx, cmd.Reason, cmd.Actor)
	}
	return outcome{}, fmt.Errorf("%w: unknown command %q", ErrInvalidRequest, cmd.Op)
}

// handleCommand answers a command another server forwarded (this server
// holds the lease, or did when it was sent).
func (s *Session) handleCommand(ctx context.Context, req []byte) []byte {
	var cmd command
	if err := json.Unmarshal(req, &cmd); err != nil {
		return encodeReply(outcome{}, fmt.Errorf("%w: malformed command: %v", ErrInvalidRequest, err))
	}
	// Not ended when this server stops serving the session: a terminate
	// stops serving while it runs.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 45*time.Second)
	defer cancel()
	r, err := s.here(ctx, cmd)
	return encodeReply(r, err)
}

// serve starts answering forwarded commands (owner goroutine; the lease
// was just taken).
func (o *owner) serve() {
	s := o.s
	c := s.m.cluster
	if c == nil || s.serveStop != nil {
		return
	}
	stop, err := c.Serve(s.id, s.handleCommand)
	if err != nil {
		// Commands sent elsewhere wait, then fail UNAVAILABLE; this
		// server still runs the session.
		s.m.log.Error("serve the session's commands", "session", s.id, "err", err)
		return
	}
	s.serveStop = stop
}

// unserve stops answering forwarded commands (owner goroutine).
func (o *owner) unserve() {
	if stop := o.s.serveStop; stop != nil {
		o.s.serveStop = nil
		stop()
	}
}

// claim, in a fleet, prepares this server to act on a session whose lease
// no server answers for (owner goroutine): a session another server left
// active is taken over (settled, or re-attached) first. ErrLeased while
// that server's lease is unexpired.
func (o *owner) claim(ctx context.Context) error {
	s := o.s
	if s.m.cluster == nil || s.holding() {
		return nil
	}
	rec, err := s.m.cfg.Store.LoadSession(ctx, s.id)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %q", ErrNotFound, s.id)
	}
	if err != nil {
		return fmt.Errorf("load session: %w", err)
	}
	if !rec.Status.Active() {
		s.mu.Lock()
		s.rec = rec
		s.mu.Unlock()
		return nil // nothing runs anywhere
	}
	orphaned, err := o.takeLease(ctx)
	if err != nil || !orphaned {
		return err // the owner releases the lease when nothing runs
	}
	if err := o.adopt(takeoverReason, agent.CodeServerLost); err != nil {
		return err
	}
	if o.recovering {
		return errTakingOver
	}
	return nil
}

// ---- notices ----

const (
	noticeChanged  = "changed"  // created, status or activity changed
	noticeDeleted  = "deleted"  // purged
	noticeReleased = "released" // its lease was handed over (a server stopping)
)

type notice struct {
	Kind      string   `json:"kind"`
	SessionID string   `json:"sessionId"`
	Summary   *Summary `json:"summary,omitempty"`
}

// announce tells the other servers of a fleet about a session.
func (m *Manager) announce(n notice) {
	if m.cluster == nil {
		return
	}
	b, err := json.Marshal(n)
	if err == nil {
		err = m.cluster.Announce(b)
	}
	if err != nil {
		m.log.Warn("announce a session change", "session", n.SessionID, "kind", n.Kind, "err", err)
	}
}

// changed reports a session change to this server's watchers and the
// fleet's.
func (m *Manager) changed(sum Summary) {
	m.watchers.notify(sum)
	m.announce(notice{Kind: noticeChanged, SessionID: sum.SessionID, Summary: &sum})
}

// onNotice handles another server's notice (nil: some may have been lost).
func (m *Manager) onNotice(msg []byte) {
	if msg == nil {
		// Session watchers re-list (they are closed, as slow ones are).
		m.watchers.closeAll()
		return
	}
	var n notice
	if err := json.Unmarshal(msg, &n); err != nil || n.SessionID == "" {
		m.log.Warn("malformed notice from another server", "err", err)
		return
	}
	switch n.Kind {
	case noticeChanged:
		if n.Summary != nil {
			m.watchers.notify(*n.Summary)
		}
	case noticeDeleted:
		m.forget(n.SessionID)
		if n.Summary != nil {
			m.watchers.notify(*n.Summary)
		}
	case noticeReleased:
		// Handed over by a server that stops: take it now rather than at
		// the next sweep (every server tries; one lease wins).
		m.background(func(ctx context.Context) {
			if s, err := m.Get(n.SessionID); err == nil {
				m.claimOrphan(ctx, s)
			}
		})
	}
}

// ---- take-over sweep ----

// sweepLoop takes over, every quarter of the lease ttl, the sessions whose
// server left them active (it died: their lease expired; or it stopped
// and handed them over), until ctx ends.
func (m *Manager) sweepLoop(ctx context.Context) {
	every := max(m.cfg.LeaseTTL/4, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.sweep(ctx)
	}
}

// sweep takes over every session left active without a live lease.
func (m *Manager) sweep(ctx context.Context) {
	ids, err := m.orphans(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("list sessions to take over", "err", err)
		}
		return
	}
	for _, id := range ids {
		s, err := m.Get(id)
		if err != nil || s.holding() {
			continue
		}
		m.claimOrphan(ctx, s)
	}
}

// orphans lists the sessions the sweep may have to take over.
func (m *Manager) orphans(ctx context.Context) ([]string, error) {
	if ol, ok := m.cfg.Store.(store.OrphanLister); ok {
		return ol.OrphanedSessions(ctx)
	}
	recs, err := m.cfg.Store.ListSessions(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, rec := range recs {
		if rec.Status.Active() {
			ids = append(ids, rec.ID) // claimOrphan tries the lease
		}
	}
	return ids, nil
}

// claimOrphan takes s over if its server left it active and its lease is
// free.
func (m *Manager) claimOrphan(ctx context.Context, s *Session) {
	_, err := doSync(ctx, s, func(o *owner, done func(struct{}, error)) {
		if s.holding() || o.env != nil || o.starting || o.turn != nil {
			done(struct{}{}, nil)
			return
		}
		orphaned, err := o.takeLease(ctx)
		if err == nil && orphaned {
			err = o.adopt(takeoverReason, agent.CodeServerLost)
		}
		done(struct{}{}, err)
	})
	if err != nil && !errors.Is(err, ErrLeased) && !errors.Is(err, ErrClosed) && ctx.Err() == nil {
		m.log.Warn("take a session over", "session", s.id, "err", err)
	}
}

// background runs f in a goroutine counted for Close, unless closed.
func (m *Manager) background(f func(ctx context.Context)) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.bg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.bg.Done()
		f(m.bgCtx)
	}()
}
