package opencode

import "github.com/agentd/agentd/internal/agent/convkit"

// Option configures a converter.
type Option func(*convkit.Options)

// WithSessionID names the main session: the one the runner prompts.
// Events of other top-level sessions on the same server are then dropped;
// without it the first session seen is the main one.
func WithSessionID(id string) Option { return func(o *convkit.Options) { o.SessionID = id } }

// WithoutUserMessages drops the main session's user messages: in a live
// session agentd has already appended the user's message itself. A
// subagent's prompt (a user message in its child session) is kept.
func WithoutUserMessages() Option { return func(o *convkit.Options) { o.OmitUserMessages = true } }

// WithoutPermissionEvents drops permission:requested/resolved for
// permission.asked/replied: a live runner asks through
// agent.Host.RequestPermission, which emits its own events.
func WithoutPermissionEvents() Option {
	return func(o *convkit.Options) { o.OmitPermissionEvents = true }
}
