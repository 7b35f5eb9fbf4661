package session

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
)

// optionsOf is what a runner sees of a session's options: the model (the
// profile's when the options name none) and the whole object.
func optionsOf(raw json.RawMessage, prof profile.Profile) agent.Options {
	var opts agent.Options
	_ = json.Unmarshal(raw, &opts)
	opts.Extra = raw
	if opts.Model == "" {
		opts.Model = prof.Model
	}
	return opts
}

// UpdateOptions changes a session's options: patch is a JSON object whose
// keys replace the session's (a null value removes its key). Every key must
// be one the session's architecture reads (model for all, the rest by its
// agent.OptionsChecker; ErrUnknownOption otherwise); workspace, which
// only creation uses, may only be repeated as it is. The options are saved
// and recorded as an options:update event; the runner reads them when it
// next starts its agent (a CLI started per turn: at the next turn), the
// environment at its next start; a running agent that can take them at
// once (agent.OptionsUpdater: claude-code) is told. It returns the options
// after the change.
func (m *Manager) UpdateOptions(ctx context.Context, id string, patch json.RawMessage, actor string) (json.RawMessage, error) {
	s, err := m.Get(id)
	if err != nil {
		return nil, err
	}
	var changes map[string]json.RawMessage
	if t := bytes.TrimSpace(patch); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &changes) != nil {
		return nil, fmt.Errorf("%w: sessionOptions must be a JSON object", ErrInvalidRequest)
	}
	arch, ok := m.cfg.Architectures.Lookup(s.record().Architecture)
	if !ok {
		return nil, fmt.Errorf("%w: the session's architecture %q is not available on this server", ErrInvalidRequest, s.record().Architecture)
	}
	for _, k := range slices.Sorted(maps.Keys(changes)) {
		if err := checkOption(arch, k, changes[k]); err != nil {
			return nil, err
		}
	}
	r, err := s.route(ctx, command{Op: opOptions, Patch: patch, Actor: actor}, false)
	return r.Options, err
}

// updateOptionsHere is UpdateOptions on this server (in a fleet, the one
// holding the session's lease, whose record is the current one).
func (s *Session) updateOptionsHere(ctx context.Context, patch json.RawMessage, actor string) (json.RawMessage, error) {
	m, id := s.m, s.id
	var changes map[string]json.RawMessage
	if err := json.Unmarshal(patch, &changes); err != nil {
		return nil, fmt.Errorf("%w: sessionOptions must be a JSON object", ErrInvalidRequest)
	}
	type result struct {
		opts   json.RawMessage
		runner agent.Runner // the running agent's, when the options changed
	}
	res, err := doSync(ctx, s, func(o *owner, done func(result, error)) {
		release, err := o.holdForWrite(ctx)
		if err != nil {
			done(result{}, err)
			return
		}
		defer release()
		s.mu.Lock()
		cur := map[string]json.RawMessage{}
		_ = json.Unmarshal(s.rec.SessionOptions, &cur)
		if w, ok := changes["workspace"]; ok && !sameJSON(w, cur["workspace"]) {
			s.mu.Unlock()
			done(result{}, fmt.Errorf("%w: sessionOptions.workspace is set when the session is created and cannot change", ErrInvalidRequest))
			return
		}
		var changed []string
		for _, k := range slices.Sorted(maps.Keys(changes)) {
			v := changes[k]
			old, had := cur[k]
			if isNull(v) {
				if had {
					delete(cur, k)
					changed = append(changed, k)
				}
				continue
			}
			if !had || !sameJSON(old, v) {
				cur[k] = v
				changed = append(changed, k)
			}
		}
		next, err := json.Marshal(cur) // keys sorted
		if err != nil {
			s.mu.Unlock()
			done(result{}, fmt.Errorf("%w: sessionOptions: %v", ErrInvalidRequest, err))
			return
		}
		if len(changed) == 0 {
			s.mu.Unlock()
			done(result{opts: next}, nil) // nothing to save or record: idempotent
			return
		}
		before := s.rec.SessionOptions
		s.rec.SessionOptions = next
		rec := s.rec
		s.mu.Unlock()
		if err := s.saveRecord(ctx, s.gen(), rec); err != nil {
			s.mu.Lock()
			s.rec.SessionOptions = before
			s.mu.Unlock()
			done(result{}, fmt.Errorf("update session: %w", err))
			return
		}
		ev := withActor(conversation.NewEvent(conversation.OptionsUpdate{SessionOptions: next, Changed: changed}).From(conversation.SourceClient), actor)
		if _, err := s.appendEvents(ctx, s.gen(), ev); err != nil {
			done(result{}, fmt.Errorf("record options: %w", err))
			return
		}
		m.log.Info("session options changed", "session", id, "keys", changed, "actor", actor)
		r := result{opts: next}
		if o.env != nil && !o.starting && !o.envLost {
			r.runner = o.runner
		}
		done(r, nil)
	})
	if err != nil {
		return nil, err
	}
	// A running agent that can take them now gets them (outside the owner:
	// it writes to the agent).
	if u, ok := res.runner.(agent.OptionsUpdater); ok {
		if err := u.UpdateOptions(ctx); err != nil {
			m.log.Warn("pass new options to the running agent; they apply at its next start", "session", id, "err", err)
		}
	}
	return res.opts, nil
}

// checkOption validates one key of an options change for arch.
func checkOption(arch agent.Architecture, key string, v json.RawMessage) error {
	switch key {
	case "model":
		var model *string
		if json.Unmarshal(v, &model) != nil {
			return fmt.Errorf("%w: sessionOptions.model must be a string", ErrInvalidRequest)
		}
		return nil
	case "workspace":
		if isNull(v) {
			return nil // compared with the session's in UpdateOptions
		}
		if _, err := workspaceSource(json.RawMessage(`{"workspace":` + string(v) + `}`)); err != nil {
			return err
		}
		return nil
	}
	if c, ok := arch.(agent.OptionsChecker); ok {
		known, err := c.CheckOption(key, v)
		if known {
			if err != nil {
				return fmt.Errorf("%w: sessionOptions.%s: %v", ErrInvalidRequest, key, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not an option of the %s architecture", ErrUnknownOption, key, arch.Name())
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

// sameJSON compares two JSON values by meaning (key order and spacing
// aside); an absent value equals null.
func sameJSON(a, b json.RawMessage) bool {
	if len(bytes.TrimSpace(a)) == 0 {
		a = json.RawMessage("null")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = json.RawMessage("null")
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ca, _ := json.Marshal(x)
	cb, _ := json.Marshal(y)
	return bytes.Equal(ca, cb)
}
