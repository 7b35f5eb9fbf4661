package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
)

var (
	_ agent.OptionsChecker = (*Architecture)(nil)
	_ agent.OptionsUpdater = (*runner)(nil)
	_ agent.Syncer         = (*runner)(nil)
)

// UpdateOptions implements agent.OptionsUpdater: a running CLI is told a
// new model and permission mode with the control protocol's set_model and
// set_permission_mode (it uses them from its next model request on);
// without a CLI the next one starts with them (argv).
func (r *runner) UpdateOptions(ctx context.Context) error {
	r.mu.Lock()
	p := r.proc
	r.mu.Unlock()
	if p == nil || p.detached() {
		return nil
	}
	select {
	case <-p.exitedCh:
		return nil
	default:
	}
	opts := r.host.Options()
	model, mode := opts.Model, permissionMode(opts.Extra)
	p.mu.Lock()
	oldModel, oldMode := p.shared.model, p.shared.mode
	p.shared.model, p.shared.mode = model, mode
	p.mu.Unlock()
	orDefault := func(s string) string {
		if s == "" {
			return "default"
		}
		return s
	}
	var errs []error
	if model != oldModel {
		if err := p.sendControlWith("set_model", map[string]any{"model": orDefault(model)}); err != nil {
			errs = append(errs, err)
		} else {
			r.emitLog(ctx, conversation.LevelInfo, "the running Claude Code now uses model "+orDefault(model), nil)
		}
	}
	if mode != oldMode {
		if err := p.sendControlWith("set_permission_mode", map[string]any{"mode": orDefault(mode)}); err != nil {
			errs = append(errs, err)
		} else {
			r.emitLog(ctx, conversation.LevelInfo, "the running Claude Code now uses permission mode "+orDefault(mode), nil)
		}
	}
	return errors.Join(errs...)
}

// CheckOption implements agent.OptionsChecker: besides model, a session
// may set permissionMode (the CLI's --permission-mode, at its next start).
func (a *Architecture) CheckOption(key string, value json.RawMessage) (bool, error) {
	if key != "permissionMode" {
		return false, nil
	}
	var mode *string
	if err := json.Unmarshal(value, &mode); err != nil {
		return true, errors.New("permissionMode must be a string")
	}
	if mode != nil && !permissionModes[*mode] {
		return true, fmt.Errorf("permissionMode %q is not one of default, acceptEdits, plan, dontAsk, auto, bypassPermissions", *mode)
	}
	return true, nil
}

// Sync implements agent.Syncer: the Claude session's transcript, as the CLI
// has written it so far, is saved with the session now (the process's
// saver does it after each turn and when the CLI exits).
func (r *runner) Sync(ctx context.Context) error {
	st := r.currentState()
	if st.ClaudeSessionID == "" || st.ProjectDir == "" {
		return nil // no Claude session yet
	}
	name := transcriptName(st.ClaudeSessionID)
	data, err := r.host.Env().ReadFile(ctx, path.Join(projectsRel, st.ProjectDir, name))
	if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return nil // not written yet
	}
	if err != nil {
		return fmt.Errorf("read Claude Code transcript: %w", err)
	}
	if err := r.host.SaveTranscript(ctx, name, data); err != nil {
		return fmt.Errorf("save Claude Code transcript: %w", err)
	}
	return nil
}
