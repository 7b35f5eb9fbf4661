package convkit

// Options are the converter options the architectures share. Each converter
// package has its own Option type and exports the With… functions its
// converters honour.
type Options struct {
	// IDPrefix scopes block ids the CLI does not make unique across
	// processes.
	IDPrefix string
	// SessionID names the main session of a stream that carries several.
	SessionID string
	// OmitUserMessages drops the user messages the CLI echoes: in a live
	// session agentd has already appended the user's message itself.
	OmitUserMessages bool
	// OmitPermissionEvents drops the permission events of approval
	// requests: a live runner asks through agent.Host.RequestPermission,
	// which emits its own.
	OmitPermissionEvents bool
}

// Build applies opts, skipping nil ones, to zero Options.
func Build[O ~func(*Options)](opts []O) Options {
	var o Options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}
