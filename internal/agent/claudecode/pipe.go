package claudecode

import (
	"context"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/sandbox"
)

// cliLine is one stdout line of the CLI with its byte offsets in the
// stdout stream: a resumed turn replays the stream from an offset.
type cliLine = agentproc.Line

// pipe runs over one CLI process of the sandbox, started or re-attached:
// an exact agentproc.Proc (stdout lines with offsets, a gap stops it) with
// the error a gap means for a resumed turn. Its methods are safe for
// concurrent use as agentproc.Proc's are; Lines has one consumer.
type pipe struct{ *agentproc.Proc }

var _ cliProc = (*pipe)(nil)

// startPipe runs cmd in env with a stdin pipe. A missing binary is
// reported as agent.CodeAgentNotFound, a tag in use as a sandbox error.
func startPipe(ctx context.Context, env sandbox.Environment, name string, cmd sandbox.Cmd) (*pipe, error) {
	p, err := agentproc.StartExact(ctx, env, name, cmd)
	if err != nil {
		return nil, err
	}
	return &pipe{p}, nil
}

// attachPipe re-attaches the process tagged tag, its stdout replayed from
// byte from (stderr from what the spool still holds). The error wraps
// sandbox.ErrNotFound when there is no such process.
func attachPipe(ctx context.Context, at sandbox.Attacher, name, tag string, from int64) (*pipe, error) {
	p, err := agentproc.Attach(ctx, at, name, tag, from)
	if err != nil {
		return nil, err
	}
	return &pipe{p}, nil
}

func newPipe(name string, p sandbox.Process, from int64) *pipe {
	return &pipe{agentproc.New(name, p, from)}
}

// ExitError describes an unexpected exit as agentproc.Proc does, or, when
// a re-attach found the output it needed gone, as
// agent.CodeServerRestarted.
func (pr *pipe) ExitError() error {
	_, _ = pr.Exit()
	if gap := pr.Gap(); gap != nil {
		return agent.Fail(agent.CodeServerRestarted, "cannot resume the turn after the server restart: %v (the executor's spool is bounded); %s was stopped", gap, pr.Proc.Name())
	}
	return pr.Proc.ExitError()
}
