package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/sandbox"
)

var (
	_ agent.OptionsChecker = (*Architecture)(nil)
	_ agent.Syncer         = (*runner)(nil)
)

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
