package codex

import "github.com/agentd/agentd/internal/agent/convkit"

// Option configures a converter.
type Option func(*convkit.Options)

// WithIDPrefix scopes block ids the CLI does not make unique across
// processes (codex exec numbers its items item_0, item_1, … in every
// process). The live runner passes the turn's query id so a resumed thread
// never reuses a block id of an earlier turn.
func WithIDPrefix(prefix string) Option { return func(o *convkit.Options) { o.IDPrefix = prefix } }

// WithoutUserMessages drops the user messages the CLI echoes: in a live
// session agentd has already appended the user's message itself.
func WithoutUserMessages() Option { return func(o *convkit.Options) { o.OmitUserMessages = true } }

// WithoutPermissionEvents drops permission:requested for approval requests:
// a live runner asks through agent.Host.RequestPermission, which emits its
// own events.
func WithoutPermissionEvents() Option {
	return func(o *convkit.Options) { o.OmitPermissionEvents = true }
}
