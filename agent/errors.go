package agent

import (
	"errors"
	"fmt"
)

// Failure codes reported in query:failed events (CodeEnvironmentGone also
// in the error event that says the session lost its environment).
const (
	CodeAgentNotFound   = "AGENT_NOT_FOUND"  // the agent CLI is not installed / not on PATH
	CodeAgentExited     = "AGENT_EXITED"     // the agent process ended unexpectedly
	CodeAgentProtocol   = "AGENT_PROTOCOL"   // the agent printed something agentd cannot use
	CodeModelError      = "MODEL_ERROR"      // the model API failed (after the agent's retries)
	CodeSandboxError    = "SANDBOX_ERROR"    // the environment could not be started or failed
	CodeEnvironmentGone = "ENVIRONMENT_GONE" // the environment died (its executor was killed); the next message starts a new one
	CodeServerRestarted = "SERVER_RESTARTED" // the server stopped while the turn ran
	CodeShutdown        = "SERVER_SHUTDOWN"  // the server is shutting down
	CodeServerLost      = "SERVER_LOST"      // the server running the turn stopped (a fleet); another took the session over and the turn could not be resumed
	CodeBudgetExceeded  = "BUDGET_EXCEEDED"  // the session's model budget is used up
	CodeCommandFailed   = "COMMAND_FAILED"   // shell: the command exited non-zero
	CodeInternal        = "INTERNAL"
)

// Failure is a turn failure with a code for clients.
type Failure struct {
	Code string
	Err  error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// Fail wraps err with a failure code.
func Fail(code string, format string, args ...any) error {
	return &Failure{Code: code, Err: fmt.Errorf(format, args...)}
}

// CodeOf returns the failure code of err, or CodeInternal.
func CodeOf(err error) string {
	var f *Failure
	if errors.As(err, &f) {
		return f.Code
	}
	return CodeInternal
}
