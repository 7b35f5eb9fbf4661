package container

import (
	"context"
	"log/slog"
	"sync"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Environment is a session's environment in a container: the executor
// backend's (everything but Terminate and Release; Handle is the
// backend's to wrap) and the container around it, which Terminate removes
// once the executor has ended and Release leaves running. Safe for
// concurrent use.
type Environment struct {
	*executor.Environment
	remove  func(context.Context) error
	release func()
	log     *slog.Logger
	removed string

	once sync.Once
	err  error
}

var _ sandbox.Releaser = (*Environment)(nil)

// NewEnvironment wraps the executor's environment inner. remove removes
// the container and what is around it; release (when set) lets go of what
// the backend holds of it here, the container left running; log (naming
// the container) says removed when the container is removed.
func NewEnvironment(inner *executor.Environment, remove func(context.Context) error, release func(), log *slog.Logger, removed string) *Environment {
	return &Environment{Environment: inner, remove: remove, release: release, log: log, removed: removed}
}

// Terminate shuts the executor down (it kills every process) and removes
// the container. An environment already gone is not an error; the
// removal's error comes before the executor's; later calls return the
// first one's result, and after Release it does nothing.
func (e *Environment) Terminate(ctx context.Context) error {
	e.once.Do(func() {
		err := e.Environment.Terminate(ctx)
		if rerr := e.remove(ctx); rerr != nil {
			err = rerr
		}
		e.err = err
		e.log.Info(e.removed, "err", err)
	})
	return e.err
}

// Release lets go of the environment without stopping it
// (sandbox.Releaser), for another server to Recover: the connection to
// the executor is closed, and what the backend holds of it here; the
// container and its processes go on. Later calls, and Terminate after it,
// do nothing; after Terminate it does nothing.
func (e *Environment) Release() {
	e.once.Do(func() {
		e.Environment.Release()
		if e.release != nil {
			e.release()
		}
		e.log.Info("released: left running for another server")
	})
}
