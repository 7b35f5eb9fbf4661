package conversation

// SessionStatus is a session's lifecycle state.
//
//	created → starting → ready → running → idle → (running → idle)* → terminated
//
// Any state may go to error; a terminated or errored session goes back to
// starting when the next message arrives.
type SessionStatus string

const (
	SessionCreated    SessionStatus = "created"
	SessionStarting   SessionStatus = "starting"
	SessionReady      SessionStatus = "ready"
	SessionRunning    SessionStatus = "running"
	SessionIdle       SessionStatus = "idle"
	SessionTerminated SessionStatus = "terminated"
	SessionError      SessionStatus = "error"
)

// SessionStatuses lists every status.
var SessionStatuses = []SessionStatus{
	SessionCreated, SessionStarting, SessionReady, SessionRunning,
	SessionIdle, SessionTerminated, SessionError,
}

// Active reports whether the session's environment is up.
func (s SessionStatus) Active() bool {
	return s == SessionStarting || s == SessionReady || s == SessionRunning || s == SessionIdle
}

// Runtime describes where and how a session runs. It is part of status
// events and of the session state.
type Runtime struct {
	Status       SessionStatus `json:"status"`
	Architecture string        `json:"architecture"`
	// Sandbox is the backend name (local, executor, bwrap, …).
	Sandbox string `json:"sandbox,omitempty"`
	// AgentVersion is the agent CLI's version as it reported it.
	AgentVersion string `json:"agentVersion,omitempty"`
	// AgentSessionID is the agent's own session id (e.g. Claude Code's), used
	// to resume the agent's conversation after a restart.
	AgentSessionID string `json:"agentSessionId,omitempty"`
	// ActiveQueryID is the running turn, if any.
	ActiveQueryID string `json:"activeQueryId,omitempty"`
	// LastError is the most recent error that put the session in error state.
	LastError string `json:"lastError,omitempty"`
	// WorkDir is the workspace root as the agent sees it (agents name
	// files by absolute paths; clients show them relative to it).
	WorkDir string `json:"workDir,omitempty"`
	// Queued is how many messages waited in the session's queue when the
	// record was last saved (the queue itself: the state's queuedMessages).
	Queued int `json:"queued,omitempty"`
}
