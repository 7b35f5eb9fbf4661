package session

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"sync"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
)

// permissions holds a session's open permission requests. Its one mutex
// guards the maps only; it never does I/O while holding it.
//
// Exactly one party resolves a request: a client answer, the waiter itself
// (timeout, cancelled context) or the turn's end. Whoever takes it from the
// open set first decides; a decision made by someone else than the waiter
// is sent to it on ch, and the waiter records it and closes done.
type permissions struct {
	mu       sync.Mutex
	open     map[string]*pending
	resolved map[string]struct{}
	order    []string // resolved ids, oldest first, to bound the set
	rules    sessionRules
}

type pending struct {
	tool string
	ch   chan agent.PermissionDecision // buffered(1)
	done chan struct{}                 // closed once the resolution is recorded
}

func newPermissions() *permissions {
	return &permissions{open: make(map[string]*pending), resolved: make(map[string]struct{})}
}

const maxRemembered = 4096

func (p *permissions) register(id, tool string) *pending {
	pd := &pending{tool: tool, ch: make(chan agent.PermissionDecision, 1), done: make(chan struct{})}
	p.mu.Lock()
	p.open[id] = pd
	p.mu.Unlock()
	return pd
}

// take removes an open request; nil when it was resolved already.
func (p *permissions) take(id string) *pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	pd, ok := p.open[id]
	if !ok {
		return nil
	}
	delete(p.open, id)
	p.rememberLocked(id)
	return pd
}

func (p *permissions) rememberLocked(id string) {
	p.resolved[id] = struct{}{}
	p.order = append(p.order, id)
	if len(p.order) > maxRemembered {
		delete(p.resolved, p.order[0])
		p.order = p.order[1:]
	}
}

// answer delivers a client decision. It returns ErrPermissionResolved for a
// request already resolved, ErrPermissionNotFound for one this process never
// opened.
func (p *permissions) answer(id string, d agent.PermissionDecision) error {
	if pd := p.take(id); pd != nil {
		pd.ch <- d
		return nil
	}
	p.mu.Lock()
	_, done := p.resolved[id]
	p.mu.Unlock()
	if done {
		return ErrPermissionResolved
	}
	return ErrPermissionNotFound
}

// denyAll resolves every open request with d (the turn ended) and returns
// them, so the caller can wait until their waiters recorded it.
func (p *permissions) denyAll(d agent.PermissionDecision) []*pending {
	var out []*pending
	for _, id := range p.openIDs() {
		if pd := p.take(id); pd != nil {
			pd.ch <- d
			out = append(out, pd)
		}
	}
	return out
}

// openIDs returns the ids of the requests still open.
func (p *permissions) openIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.open))
	for id := range p.open {
		ids = append(ids, id)
	}
	return ids
}

// policy decides a tool request from the profile's allowed and disallowed
// tools. Patterns are tool names, optionally with Claude Code's argument
// form ("Bash(git:*)"), whose argument part agentd matches as a glob on the
// input's command / file_path / path when present. ok is false when the
// profile says nothing about the tool.
func policy(allowed, disallowed []string, toolName string, input json.RawMessage) (b conversation.PermissionBehavior, ok bool) {
	if matchAny(disallowed, toolName, input) {
		return conversation.Deny, true
	}
	if matchAny(allowed, toolName, input) {
		return conversation.Allow, true
	}
	return "", false
}

func matchAny(patterns []string, tool string, input json.RawMessage) bool {
	for _, pat := range patterns {
		name, arg, hasArg := strings.Cut(pat, "(")
		if name != tool && name != "*" {
			continue
		}
		if !hasArg {
			return true
		}
		arg = strings.TrimSuffix(arg, ")")
		var in map[string]any
		_ = json.Unmarshal(input, &in)
		for _, key := range []string{"command", "file_path", "path", "url"} {
			v, _ := in[key].(string)
			if v == "" {
				continue
			}
			// "git:*" is Claude Code's prefix form.
			if prefix, found := strings.CutSuffix(arg, ":*"); found {
				if strings.HasPrefix(v, prefix) {
					return true
				}
				continue
			}
			if m, _ := path.Match(arg, v); m || arg == v {
				return true
			}
		}
	}
	return false
}

// requestID derives a deterministic request id from the session's turn and
// a counter, so replays and logs read naturally.
func requestID(queryID string, n int64) string { return fmt.Sprintf("perm-%s-%d", queryID, n) }
