package session

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

// Session permission rules: "allow for this session". A client answers a
// request with scope "session"; the answer allows that request and adds a
// rule for its tool, so later requests for the tool in the session are
// allowed without asking, and recorded as requested then resolved by
// "rule". The rule lives in the log (the permission:resolved event with
// scope "session", which the reducer turns into permissionRules), so it
// survives a restart; this struct is the in-memory view, loaded from the
// reduced state on first use.
type sessionRules struct {
	mu     sync.Mutex // guards loaded, allow
	loaded bool
	allow  map[string]bool // tool name → allowed
}

// add records a rule for tool.
func (r *sessionRules) add(tool string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.allow == nil {
		r.allow = make(map[string]bool)
	}
	r.allow[tool] = true
}

// allows reports whether a rule allows tool, loading the rules from the
// session's log the first time.
func (s *Session) ruleAllows(ctx context.Context, tool string) (bool, error) {
	r := &s.perms.rules
	r.mu.Lock()
	loaded := r.loaded
	r.mu.Unlock()
	if !loaded {
		st, err := s.m.states.get(ctx, s.id)
		if err != nil {
			return false, err
		}
		r.mu.Lock()
		if !r.loaded {
			r.loaded = true
			if r.allow == nil {
				r.allow = make(map[string]bool)
			}
			for _, rule := range st.PermissionRules {
				if rule.Behavior == conversation.Allow {
					r.allow[rule.ToolName] = true
				}
			}
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.allow[tool], nil
}

// answerForSession allows a request and every later (and other open)
// request for its tool in the session.
func (s *Session) answerForSession(ctx context.Context, requestID string, d agent.PermissionDecision) error {
	if d.Behavior != conversation.Allow {
		return fmt.Errorf("%w: scope \"session\" needs behavior \"allow\"", ErrInvalidRequest)
	}
	s.perms.mu.Lock()
	pd := s.perms.open[requestID]
	s.perms.mu.Unlock()
	if pd == nil {
		// Resolved already, or unknown: answer says which.
		d.Scope = ""
		if err := s.perms.answer(requestID, d); err != nil {
			if known, _ := s.m.permissionInLog(ctx, s.id, requestID); known {
				return ErrPermissionResolved
			}
			return err
		}
		return nil
	}
	tool := pd.tool
	// Load first, so the rule added now is not overwritten by the load.
	if _, err := s.ruleAllows(ctx, tool); err != nil {
		return err
	}
	s.perms.rules.add(tool)
	if err := s.perms.answer(requestID, d); err != nil {
		return err
	}
	// Other requests for the tool that are open now are allowed by the
	// new rule too (an agent may ask for several calls at once).
	for _, id := range s.perms.openIDs() {
		s.perms.mu.Lock()
		other := s.perms.open[id]
		s.perms.mu.Unlock()
		if other == nil || other.tool != tool {
			continue
		}
		_ = s.perms.answer(id, agent.PermissionDecision{Behavior: conversation.Allow, By: conversation.ByRule,
			Message: "allowed for this session", Actor: d.Actor})
	}
	return nil
}

// ruleDecision answers a request that a session rule allows, recording the
// request and its resolution in one append.
func (h *host) ruleDecision(ctx context.Context, req agent.PermissionRequest, input json.RawMessage, cur turnRef) (agent.PermissionDecision, bool) {
	ok, err := h.s.ruleAllows(ctx, req.ToolName)
	if err != nil {
		h.log.Warn("read session permission rules", "err", err)
		return agent.PermissionDecision{}, false
	}
	if !ok {
		return agent.PermissionDecision{}, false
	}
	id := requestID(cur.queryID, h.permSeq.Add(1))
	if req.ToolUseID != "" {
		id = "perm-" + req.ToolUseID
	}
	d := agent.PermissionDecision{Behavior: conversation.Allow, By: conversation.ByRule, Message: "allowed for this session"}
	reqEv := withActor(conversation.NewEvent(conversation.PermissionRequested{
		RequestID: id, ToolName: req.ToolName, Input: input, ToolUseID: req.ToolUseID,
		ExpiresAt: time.Now().UTC().Truncate(time.Millisecond),
	}), cur.actor)
	resEv := withActor(conversation.NewEvent(conversation.PermissionResolved{
		RequestID: id, Behavior: d.Behavior, By: d.By, Message: d.Message, ToolName: req.ToolName,
	}), cur.actor)
	h.s.perms.mu.Lock()
	h.s.perms.rememberLocked(id)
	h.s.perms.mu.Unlock()
	if _, err := h.s.appendEvents(ctx, h.gen, reqEv, resEv); err != nil {
		h.log.Error("record rule decision", "err", err)
	}
	return d, true
}
