package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Environment is a session's container: the executor backend's
// environment (everything but Terminate and Handle) plus the container
// around it. Safe for concurrent use.
type Environment struct {
	*executor.Environment
	p   *Provider
	box box

	termOnce sync.Once
	termErr  error
}

var (
	_ sandbox.Environment    = (*Environment)(nil)
	_ sandbox.HandleReporter = (*Environment)(nil)
	_ sandbox.Attacher       = (*Environment)(nil)
)

// removeTimeout bounds a container's removal (docker rm -f: kill, unmount,
// delete its layer), whatever the caller's context.
const removeTimeout = 30 * time.Second

// Handle is what Environment.Handle records and Recover reads.
type Handle struct {
	Container string `json:"container"` // id
	Name      string `json:"name"`
	// Executor is the executor backend's handle (socket, pids, start time).
	Executor json.RawMessage `json:"executor"`
}

func (p *Provider) wrap(inner *executor.Environment, b *box) *Environment {
	return &Environment{Environment: inner, p: p, box: *b}
}

// Handle returns {container, name, executor}.
func (e *Environment) Handle() json.RawMessage {
	b, _ := json.Marshal(Handle{Container: e.box.id, Name: e.box.name, Executor: e.Environment.Handle()})
	return b
}

// Container is the container's id.
func (e *Environment) Container() string { return e.box.id }

// ContainerName is the container's name (also its folders' under RunDir).
func (e *Environment) ContainerName() string { return e.box.name }

// Terminate shuts the executor down (it kills every process), waits for
// the container's init to end, and removes the container and the
// environment's folders. The workspace stays (taken back from the
// sandbox's uid). An environment already gone is not an error; later
// calls return the first one's result.
func (e *Environment) Terminate(ctx context.Context) error {
	e.termOnce.Do(func() {
		err := e.Environment.Terminate(ctx)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		_, rmErr := e.p.cli.ContainerRemove(rctx, e.box.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
			e.termErr = fmt.Errorf("remove container %s: %w", e.box.name, rmErr)
		} else {
			e.p.untrack(e.box.id)
			e.p.untrack(e.box.name)
		}
		e.p.removeDirs(e.box.name)
		if e.termErr == nil && err != nil {
			e.termErr = err
		}
		e.p.log.Info("container removed", "container", e.box.name, "err", e.termErr)
	})
	return e.termErr
}

// Recover re-attaches to the container handle names: sandbox.ErrGone
// when it is gone, stopped, or its executor no longer answers (what is
// left of it is removed then).
func (p *Provider) Recover(ctx context.Context, spec sandbox.Spec, handle json.RawMessage) (sandbox.Environment, error) {
	var h Handle
	if err := json.Unmarshal(handle, &h); err != nil {
		return nil, fmt.Errorf("recover container: bad handle: %w", err)
	}
	var xh executor.Handle
	if err := json.Unmarshal(h.Executor, &xh); err != nil || h.Container == "" || h.Name == "" || filepath.Base(h.Name) != h.Name {
		return nil, fmt.Errorf("recover container: bad handle: %s", handle)
	}
	ws, err := filepath.Abs(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("recover container: %w", err)
	}
	spec.Workspace = ws
	b := &box{id: h.Container, name: h.Name, dir: filepath.Join(p.opts.RunDir, h.Name), ws: ws, pid: xh.PID, startedAt: xh.StartedAt}
	gone := func(why string, args ...any) (sandbox.Environment, error) {
		p.remove(context.WithoutCancel(ctx), b)
		if err := executor.RevokeWorkspace(ws); err != nil {
			p.log.Warn("take the workspace back", "workspace", ws, "err", err)
		}
		return nil, fmt.Errorf("recover container %s: %w: %s", h.Name, sandbox.ErrGone, fmt.Sprintf(why, args...))
	}
	ins, err := p.cli.ContainerInspect(ctx, h.Container, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return gone("no such container")
	case err != nil:
		return nil, fmt.Errorf("recover container %s: %w", h.Name, err)
	case !ins.Container.State.Running:
		return gone("container %s (exit code %d)", ins.Container.State.Status, ins.Container.State.ExitCode)
	case ins.Container.State.Pid != xh.PID:
		return gone("container restarted (pid %d, was %d)", ins.Container.State.Pid, xh.PID)
	}
	p.track(b.id)
	p.track(b.name)
	inner, err := p.exec.Connect(ctx, spec, executor.Handle{
		Socket: b.socket(), PID: b.pid, Dir: b.dir, UID: uint32(p.uid), StartedAt: b.startedAt,
	})
	if err != nil {
		if errors.Is(err, executor.ErrIncompatible) || ctx.Err() != nil {
			p.untrack(b.id)
			p.untrack(b.name)
			return nil, fmt.Errorf("recover container %s: %w", h.Name, err)
		}
		return gone("%v", err)
	}
	p.log.Info("container re-attached", "session", spec.SessionID, "container", h.Name)
	return p.wrap(inner, b), nil
}
