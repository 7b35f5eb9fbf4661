package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

// The message queue. A message that arrives while a turn runs is not
// refused: it is appended to the session's log as message:queued and
// starts its own turn, in order, when the turns before it have ended
// (message:dequeued, with the turn's query id). A client may drop a queued
// message (message:cancelled). The log is the queue's only record, so it
// survives a restart and every client sees it (the reduced state's
// queuedMessages). Every change to the queue happens in the session's owner
// goroutine.

// SubmitResult says what Submit did with a message: it started turn
// QueryID, or it is queued as MessageID.
type SubmitResult struct {
	QueryID   string
	MessageID string
}

// Submit sends a user message: it starts a turn at once when none runs
// (and nothing is queued before it), otherwise it queues the message. A
// session without a name is named after its first message.
// In a fleet it runs on the server holding the session's lease, as Send.
func (s *Session) Submit(ctx context.Context, content, actor string) (SubmitResult, error) {
	return s.SubmitMessage(ctx, Message{Content: content}, actor)
}

// SubmitMessage is Submit with a message that may carry images and files
// (already in the session's artifact store). ErrUnsupportedContent when
// the session's architecture takes no images.
func (s *Session) SubmitMessage(ctx context.Context, msg Message, actor string) (SubmitResult, error) {
	if err := s.CheckContent(msg); err != nil {
		return SubmitResult{}, err
	}
	r, err := s.route(ctx, msg.command(opSubmit, actor), true)
	return SubmitResult{QueryID: r.QueryID, MessageID: r.MessageID}, err
}

// submitHere is Submit on this server.
func (s *Session) submitHere(ctx context.Context, content Message, actor string) (SubmitResult, error) {
	return doSync(ctx, s, func(o *owner, done func(SubmitResult, error)) {
		retryAfterTakeOver(o, func() (SubmitResult, error) { return o.submit(ctx, content, actor) }, done)
	})
}

// CancelQueued drops a queued message; ErrMessageNotFound when no message
// with that id waits (it already started, was dropped, or never existed).
// In a fleet it runs on the server holding the session's lease.
func (s *Session) CancelQueued(ctx context.Context, messageID, actor string) error {
	_, err := s.route(ctx, command{Op: opCancelQ, MessageID: messageID, Actor: actor}, false)
	return err
}

// cancelQueuedHere is CancelQueued on this server.
func (s *Session) cancelQueuedHere(ctx context.Context, messageID, actor string) error {
	_, err := doSync(ctx, s, func(o *owner, done func(struct{}, error)) {
		release, err := o.holdForWrite(ctx)
		if err != nil {
			done(struct{}{}, err)
			return
		}
		defer release()
		done(struct{}{}, o.cancelQueued(ctx, messageID, actor))
	})
	return err
}

// Queue returns the messages waiting in the session's queue, in order.
func (m *Manager) Queue(ctx context.Context, id string) ([]conversation.QueuedMessage, error) {
	if _, err := m.Get(id); err != nil {
		return nil, err
	}
	st, err := m.states.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return st.QueuedMessages, nil
}

func (o *owner) submit(ctx context.Context, msg Message, actor string) (SubmitResult, error) {
	content := msg.Content
	if o.terminating != "" {
		return SubmitResult{}, fmt.Errorf("%w: session is terminating", ErrBusy)
	}
	// The session is named once the message is in (after send took the
	// lease, in a fleet): a server writing its record must hold the lease,
	// or it would write back a stale copy.
	if o.turn == nil {
		// Whatever waits goes first: a queue left by a restart, or by a
		// queued message that could not start.
		if err := o.runQueue(ctx); err != nil {
			return SubmitResult{}, err
		}
		if o.turn == nil {
			qid, err := o.send(ctx, msg, actor)
			if err == nil {
				o.nameAfter(ctx, content)
			}
			return SubmitResult{QueryID: qid}, err
		}
	}
	id := "msg-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	ev := withActor(conversation.NewEvent(conversation.MessageQueued{MessageID: id, Content: content, Attachments: msg.attachments()}), actor)
	if _, err := o.s.appendEvents(ctx, o.s.gen(), ev.From(conversation.SourceClient)); err != nil {
		return SubmitResult{}, fmt.Errorf("queue message: %w", err)
	}
	o.s.m.log.Info("message queued", "session", o.s.id, "message", id)
	o.nameAfter(ctx, content)
	o.noteQueue(ctx)
	return SubmitResult{MessageID: id}, nil
}

func (o *owner) cancelQueued(ctx context.Context, id, actor string) error {
	st, err := o.s.m.states.get(ctx, o.s.id)
	if err != nil {
		return err
	}
	for _, q := range st.QueuedMessages {
		if q.ID != id {
			continue
		}
		ev := withActor(conversation.NewEvent(conversation.MessageCancelled{MessageID: id, Reason: "cancelled by a client"}), actor)
		if _, err := o.s.appendEvents(ctx, o.s.gen(), ev.From(conversation.SourceClient)); err != nil {
			return fmt.Errorf("cancel queued message: %w", err)
		}
		o.noteQueue(ctx)
		return nil
	}
	return fmt.Errorf("%w: %q", ErrMessageNotFound, id)
}

// runQueue starts the first queued message's turn when no turn runs. A
// message that cannot start stays queued, and the reason is logged as an
// error event (and returned).
func (o *owner) runQueue(ctx context.Context) error {
	if o.turn != nil || o.starting || o.terminating != "" || o.s.m.isClosed() {
		return nil
	}
	st, err := o.s.m.states.get(ctx, o.s.id)
	if err != nil {
		return fmt.Errorf("read queue: %w", err)
	}
	if len(st.QueuedMessages) == 0 {
		return nil
	}
	q := st.QueuedMessages[0]
	qid, err := o.send(ctx, queuedMessage(q), q.Actor)
	if err != nil {
		o.s.m.log.Warn("queued message did not start", "session", o.s.id, "message", q.ID, "err", err)
		code := agent.CodeOf(err)
		if errors.Is(err, ErrLeased) {
			code = "SESSION_LEASED"
		}
		ev := conversation.NewEvent(conversation.ErrorEvent{Message: fmt.Sprintf("queued message %s could not start: %v", q.ID, err), Code: code})
		if _, aerr := o.s.appendEvents(context.WithoutCancel(ctx), o.s.gen(), ev.From(conversation.SourceServer)); aerr != nil {
			o.s.m.log.Error("record queue error", "session", o.s.id, "err", aerr)
		}
		return err
	}
	ev := withActor(conversation.NewEvent(conversation.MessageDequeued{MessageID: q.ID, QueryID: qid}), q.Actor)
	if _, err := o.s.appendEvents(context.WithoutCancel(ctx), o.s.gen(), ev.From(conversation.SourceServer)); err != nil {
		o.s.m.log.Error("record dequeue", "session", o.s.id, "err", err)
	}
	o.noteQueue(context.WithoutCancel(ctx))
	return nil
}

// noteQueue records the queue's length in the session record, so a
// restarted server knows which sessions have messages waiting without
// reading every log.
func (o *owner) noteQueue(ctx context.Context) {
	st, err := o.s.m.states.get(ctx, o.s.id)
	if err != nil {
		return
	}
	s := o.s
	s.mu.Lock()
	if s.rec.Runtime.Queued == len(st.QueuedMessages) {
		s.mu.Unlock()
		return
	}
	s.rec.Runtime.Queued = len(st.QueuedMessages)
	rec := s.rec
	s.mu.Unlock()
	if err := s.saveRecord(ctx, s.gen(), rec); err != nil {
		s.m.log.Warn("record queue length", "session", s.id, "err", err)
	}
}

// turnEnded runs after a turn has ended: the next queued message starts.
func (o *owner) turnEnded() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = o.runQueue(ctx)
}

// nameAfter names an unnamed session after its first message (the first
// line, shortened), as `agentd run` does.
func (o *owner) nameAfter(ctx context.Context, content string) {
	s := o.s
	s.mu.Lock()
	if s.rec.Name != "" {
		s.mu.Unlock()
		return
	}
	s.rec.Name = NameFromPrompt(content)
	rec := s.rec
	s.mu.Unlock()
	if err := s.saveRecord(ctx, s.gen(), rec); err != nil {
		s.m.log.Warn("name session", "session", s.id, "err", err)
	}
	s.m.watchers.notify(s.m.summary(ctx, rec))
}

// NameFromPrompt is the name a session gets from its first message: the
// first non-empty line, at most 60 characters.
func NameFromPrompt(content string) string {
	line := ""
	for l := range strings.SplitSeq(content, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	if r := []rune(line); len(r) > 60 {
		line = strings.TrimSpace(string(r[:59])) + "…"
	}
	return line
}

// Rename sets a session's name ("" clears it). In a fleet it runs on the
// server holding the session's lease, whose record is the current one.
func (m *Manager) Rename(ctx context.Context, id, name, actor string) (Summary, error) {
	s, err := m.Get(id)
	if err != nil {
		return Summary{}, err
	}
	name = strings.TrimSpace(name)
	if len([]rune(name)) > 200 {
		return Summary{}, fmt.Errorf("%w: name longer than 200 characters", ErrInvalidRequest)
	}
	r, err := s.route(ctx, command{Op: opRename, Name: name, Actor: actor}, false)
	if err != nil {
		return Summary{}, err
	}
	if r.Summary == nil {
		return Summary{}, fmt.Errorf("%w: rename: no session in the reply", ErrUnavailable)
	}
	return *r.Summary, nil
}

// renameHere is Rename on this server.
func (s *Session) renameHere(ctx context.Context, name, actor string) (Summary, error) {
	m, id := s.m, s.id
	return doSync(ctx, s, func(o *owner, done func(Summary, error)) {
		release, err := o.holdForWrite(ctx)
		if err != nil {
			done(Summary{}, err)
			return
		}
		defer release()
		s.mu.Lock()
		s.rec.Name = name
		rec := s.rec
		s.mu.Unlock()
		if err := s.saveRecord(ctx, s.gen(), rec); err != nil {
			done(Summary{}, fmt.Errorf("update session: %w", err))
			return
		}
		sum := m.summary(ctx, rec)
		m.watchers.notify(sum)
		m.log.Info("session renamed", "session", id, "actor", actor)
		done(sum, nil)
	})
}

// resumeQueues starts the queued messages of sessions whose record says
// messages wait (Runtime.Queued) and that have no turn running now: the
// turn they waited for ended with the previous server. A session whose
// environment is being recovered starts its queue with its next turn end or
// message.
func (m *Manager) resumeQueues(ctx context.Context, sessions []*Session) {
	for _, s := range sessions {
		st, err := m.states.get(ctx, s.id)
		if err != nil || len(st.QueuedMessages) == 0 || st.ActiveQueryID != "" {
			continue
		}
		_ = s.do(func(o *owner) { o.turnEnded() })
	}
}
