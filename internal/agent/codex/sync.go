package codex

import (
	"context"

	"github.com/agentd/agentd/agent"
)

var _ agent.Syncer = (*runner)(nil)

// Sync implements agent.Syncer: the thread's rollout, as the app-server
// has written it so far, is saved with the session now (as after each
// turn). Without a process there is nothing newer than the last save.
func (r *runner) Sync(ctx context.Context) error {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	if srv != nil {
		r.saveTranscript(ctx, srv)
	}
	return nil
}
