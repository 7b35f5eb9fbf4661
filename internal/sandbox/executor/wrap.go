package executor

import "github.com/agentd/agentd/sandbox"

// Launch describes an executor about to start, for a Wrapper.
type Launch struct {
	// Argv is the executor's own command line; Argv[0] is Options.Binary.
	// Its paths (workspace, spool, model proxy socket) are host paths, so
	// a wrapper that mounts them at the same place need not rewrite them.
	Argv []string
	Spec sandbox.Spec
	// Workspace is the workspace's absolute host path (created, owned by
	// the environment's user).
	Workspace string
	// RunDir is the environment's run folder: the executor's spool lives
	// there and must stay writable for it.
	RunDir string
	// ModelProxyDir holds the model proxy's socket for this environment
	// ("" without a model proxy): the executor's forwarder connects to it.
	ModelProxyDir string
	// Path is the PATH of the environment's processes.
	Path string
	// UID and GID are who the environment's processes run as.
	UID, GID int
	// SwitchUser: the command starts as the server's user and the
	// executor switches to UID/GID itself (Options.SwitchUserInside), so
	// the wrapper must leave it the right to (CAP_SETUID, CAP_SETGID).
	SwitchUser bool
}

// Wrapper turns an executor's command line into one that starts it inside
// another sandbox, e.g. bubblewrap. The file descriptors the executor
// inherits (3: its listening socket, 4: its user's lock with a user pool)
// must reach it unchanged. Implementations must be safe for concurrent use.
type Wrapper interface {
	Wrap(l Launch) ([]string, error)
}

// PeerMapper is an optional Wrapper ability: the uid the executor will see
// (SO_PEERCRED) for the server's connections, when the wrapper's user
// namespace shows the server's uid as another one (an unmapped uid is the
// kernel's overflow uid). The executor is told to accept only that uid.
type PeerMapper interface {
	PeerUID(l Launch) int
}
