package gemini

import "github.com/agentd/agentd/internal/agent/convkit"

// Option configures a converter.
type Option func(*convkit.Options)

// WithIDPrefix sets the prefix of the ids of blocks Gemini gives no id
// (stream-json messages), "<prefix>-<n>"; the default is the session id. A
// live runner that starts one `gemini --resume` process per turn passes the
// turn's query id, so a new process never reuses an earlier turn's ids.
func WithIDPrefix(prefix string) Option { return func(o *convkit.Options) { o.IDPrefix = prefix } }

// WithoutUserMessages drops the user messages the CLI echoes: in a live
// session agentd has already appended the user's message itself.
func WithoutUserMessages() Option { return func(o *convkit.Options) { o.OmitUserMessages = true } }
