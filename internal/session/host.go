package session

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

// host is what a session gives its runner (agent.Host). It is safe for
// concurrent use.
type host struct {
	s     *Session
	gen   int64 // the lease the environment runs under: fences every write
	env   sandbox.Environment
	marks *watchMarks // the workspace watcher's markers
	bound *bounder    // keeps block texts within the output limit (bound.go)
	prof  profile.Profile
	log   *slog.Logger

	turn    atomic.Pointer[turnRef] // the running turn's actor and query
	permSeq atomic.Int64
}

type turnRef struct{ actor, queryID string }

var _ agent.Host = (*host)(nil)

func (h *host) setTurn(actor, queryID string) { h.turn.Store(&turnRef{actor, queryID}) }

func (h *host) current() turnRef {
	if t := h.turn.Load(); t != nil {
		return *t
	}
	return turnRef{}
}

func (h *host) SessionID() string           { return h.s.id }
func (h *host) Env() sandbox.Environment    { return h.env }
func (h *host) Profile() profile.Profile    { return h.prof }
func (h *host) Options() agent.Options      { return optionsOf(h.s.record().SessionOptions, h.prof) }
func (h *host) Logger() *slog.Logger        { return h.log }
func (h *host) AgentState() json.RawMessage { return h.s.record().AgentState }

// Emit appends runner events; unset sources default to runner and the actor
// to the principal of the running turn. Block texts beyond the output
// limit are bounded first (bound.go); emits are serialised so the log
// holds them in the order the bounder saw them.
func (h *host) Emit(ctx context.Context, events ...conversation.Event) error {
	actor := h.current().actor
	for i := range events {
		if events[i].Context.Source == "" {
			events[i].Context.Source = conversation.SourceRunner
		}
		if events[i].Context.Actor == nil && actor != "" {
			a := actor
			events[i].Context.Actor = &a
		}
	}
	h.bound.mu.Lock()
	defer h.bound.mu.Unlock()
	events = h.bound.boundLocked(ctx, events)
	if len(events) == 0 {
		return nil
	}
	_, err := h.s.appendEvents(ctx, h.gen, events...)
	return err
}

// finishBounds completes the blocks the turn left truncated and open:
// their full texts are stored and upserts say where. Called by the owner
// once the turn's runner returned, before the turn's end is recorded.
func (h *host) finishBounds(ctx context.Context, actor string) {
	h.bound.mu.Lock()
	defer h.bound.mu.Unlock()
	evs := h.bound.finishAllLocked(ctx)
	if len(evs) == 0 {
		return
	}
	for i := range evs {
		evs[i].Context.Source = conversation.SourceRunner
		evs[i] = withActor(evs[i], actor)
	}
	if _, err := h.s.appendEvents(ctx, h.gen, evs...); err != nil {
		h.log.Error("record truncated blocks' artifacts", "err", err)
	}
}

// closeBounds forgets what the bounder follows, keeping its spool files
// (the environment goes on without this server: a later one resumes).
func (h *host) closeBounds() {
	h.bound.mu.Lock()
	defer h.bound.mu.Unlock()
	h.bound.closeLocked()
}

func (h *host) SaveAgentState(ctx context.Context, state json.RawMessage) error {
	h.s.mu.Lock()
	h.s.rec.AgentState = append(json.RawMessage(nil), state...)
	rec := h.s.rec
	h.s.mu.Unlock()
	return h.s.saveRecord(ctx, h.gen, rec)
}

func (h *host) SaveTranscript(ctx context.Context, name string, data []byte) error {
	return h.s.m.cfg.Store.SaveTranscript(ctx, h.s.id, name, data)
}

func (h *host) LoadTranscript(ctx context.Context, name string) ([]byte, error) {
	return h.s.m.cfg.Store.LoadTranscript(ctx, h.s.id, name)
}

func (h *host) SetAgentInfo(ctx context.Context, version, agentSessionID string) error {
	h.s.mu.Lock()
	if version != "" {
		h.s.rec.Runtime.AgentVersion = version
	}
	if agentSessionID != "" {
		h.s.rec.Runtime.AgentSessionID = agentSessionID
	}
	rec := h.s.rec
	h.s.mu.Unlock()
	return h.s.saveRecord(ctx, h.gen, rec)
}

// RequestPermission implements agent.Host.
func (h *host) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionDecision, error) {
	cur := h.current()
	input := req.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	if b, ok := policy(h.prof.AllowedTools, h.prof.DisallowedTools, req.ToolName, input); ok {
		msg := ""
		if b == conversation.Deny {
			msg = fmt.Sprintf("%s is not allowed by the agent profile", req.ToolName)
		}
		return agent.PermissionDecision{Behavior: b, Message: msg, By: conversation.ByPolicy}, nil
	}
	if d, ok := h.ruleDecision(ctx, req, input, cur); ok {
		return d, nil // rules.go
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = h.s.m.cfg.PermissionTimeout
	}
	id := requestID(cur.queryID, h.permSeq.Add(1))
	if req.ToolUseID != "" {
		id = "perm-" + req.ToolUseID
	}
	pd := h.s.perms.register(id, req.ToolName)
	defer close(pd.done)
	expires := time.Now().Add(timeout).UTC().Truncate(time.Millisecond)
	reqEv := withActor(conversation.NewEvent(conversation.PermissionRequested{
		RequestID: id, ToolName: req.ToolName, Input: input, ToolUseID: req.ToolUseID, ExpiresAt: expires,
	}), cur.actor)
	if _, err := h.s.appendEvents(ctx, h.gen, reqEv); err != nil {
		h.s.perms.take(id)
		return agent.PermissionDecision{}, fmt.Errorf("record permission request: %w", err)
	}
	timer := make(chan struct{})
	t := time.AfterFunc(timeout, func() { close(timer) })
	defer t.Stop()

	var d agent.PermissionDecision
	select {
	case d = <-pd.ch:
		// Decided by a client or by the turn's end.
	case <-timer:
		if h.s.perms.take(id) == nil {
			d = <-pd.ch // decided by someone else at the same moment
			break
		}
		d = agent.PermissionDecision{Behavior: conversation.Deny, By: conversation.ByTimeout,
			Message: fmt.Sprintf("no answer within %s", timeout)}
	case <-ctx.Done():
		if h.s.perms.take(id) == nil {
			d = <-pd.ch
			break
		}
		h.resolve(id, agent.PermissionDecision{Behavior: conversation.Deny, By: conversation.ByInterrupt, Message: "the turn ended"}, cur.actor, req.ToolName)
		return agent.PermissionDecision{}, ctx.Err()
	}
	actor := cur.actor
	if d.Actor != "" {
		actor = d.Actor
	}
	h.resolve(id, d, actor, req.ToolName)
	return d, nil
}

func (h *host) resolve(id string, d agent.PermissionDecision, actor, tool string) {
	ev := conversation.NewEvent(conversation.PermissionResolved{
		RequestID: id, Behavior: d.Behavior, By: d.By, Message: d.Message, UpdatedInput: d.UpdatedInput,
		ToolName: tool, Scope: d.Scope,
	})
	if _, err := h.s.appendEvents(context.Background(), h.gen, withActor(ev, actor)); err != nil {
		h.log.Error("record permission resolution", "err", err)
	}
}
