package session

import "errors"

// Errors the API maps to codes.
var (
	ErrNotFound            = errors.New("session not found")
	ErrBusy                = errors.New("a turn is already running in this session")
	ErrNoActiveTurn        = errors.New("no turn is running")
	ErrUnknownArchitecture = errors.New("unknown architecture")
	ErrProfileNotFound     = errors.New("agent profile not found")
	ErrPermissionNotFound  = errors.New("permission request not found")
	ErrPermissionResolved  = errors.New("permission request already resolved")
	ErrLeased              = errors.New("session is running on another server")
	ErrClosed              = errors.New("server is shutting down")
	ErrInvalidRequest      = errors.New("invalid request")
	ErrMessageNotFound     = errors.New("queued message not found")
	// ErrUnsupportedContent: the message carries content (images) the
	// session's agent does not take, or the store keeps no artifacts.
	ErrUnsupportedContent = errors.New("unsupported message content")
	// ErrAgentNotFound: the architecture's agent CLI is not installed on
	// this server (not on PATH).
	ErrAgentNotFound = errors.New("agent CLI not found")
	// ErrUnknownOption: a session option the session's architecture does
	// not read.
	ErrUnknownOption = errors.New("unknown session option")
	// ErrUnavailable: the session's server does not answer (in a fleet).
	ErrUnavailable = errors.New("the server running this session is unavailable")
)
