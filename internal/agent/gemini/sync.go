package gemini

import (
	"context"

	"github.com/agentd/agentd/agent"
)

var _ agent.Syncer = (*runner)(nil)

// Sync implements agent.Syncer: the Gemini session's chat files, as the
// CLI has written them so far, are saved with the session now (as after
// each turn).
func (r *runner) Sync(ctx context.Context) error {
	r.saveChat(ctx)
	return nil
}
