package container

import (
	"context"
	"log/slog"
	"sync"

	"github.com/agentd/agentd/internal/sandbox/executor"
)

// Environment is a session's environment in a container: the executor
// backend's (everything but Terminate; Handle is the backend's to wrap)
// and the container around it, which Terminate removes once the executor
// has ended. Safe for concurrent use.
type Environment struct {
	*executor.Environment
	remove  func(context.Context) error
	log     *slog.Logger
	removed string

	once sync.Once
	err  error
}

// NewEnvironment wraps the executor's environment inner. remove removes
// the container and what is around it; log (naming the container) says
// removed when that is done.
func NewEnvironment(inner *executor.Environment, remove func(context.Context) error, log *slog.Logger, removed string) *Environment {
	return &Environment{Environment: inner, remove: remove, log: log, removed: removed}
}

// Terminate shuts the executor down (it kills every process) and removes
// the container. An environment already gone is not an error; the
// removal's error comes before the executor's; later calls return the
// first one's result.
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
