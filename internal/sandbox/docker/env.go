package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Environment is a session's container: the executor backend's
// environment (everything but Terminate, Release and Handle) plus the
// container around it. Safe for concurrent use.
type Environment struct {
	*container.Environment
	p   *Provider
	box box
}

var (
	_ sandbox.Environment    = (*Environment)(nil)
	_ sandbox.HandleReporter = (*Environment)(nil)
	_ sandbox.Attacher       = (*Environment)(nil)
	_ sandbox.Releaser       = (*Environment)(nil)
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
	e := &Environment{p: p, box: *b}
	e.Environment = container.NewEnvironment(inner, e.remove, e.release, p.log.With("container", b.name), "container removed")
	return e
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

// remove is Terminate's end, once the executor has shut down (killing
// every process) and the container's init ended: the container and the
// environment's folders are removed. The workspace stays (taken back from
// the sandbox's uid).
func (e *Environment) remove(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	var err error
	if _, rmErr := e.p.cli.ContainerRemove(rctx, e.box.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); rmErr != nil && !cerrdefs.IsNotFound(rmErr) {
		err = fmt.Errorf("remove container %s: %w", e.box.name, rmErr)
	} else {
		e.p.live.Remove(e.box.id, e.box.name)
	}
	container.RemoveDirs(e.p.opts.RunDir, e.box.name)
	return err
}

// release is Release's end: the container, left running, is another
// server's.
func (e *Environment) release() { e.p.live.Remove(e.box.id, e.box.name) }

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
	p.live.Add(b.id, b.name)
	e, err := p.bind(ctx, spec, b)
	if err != nil {
		if !container.Gone(ctx, err) {
			p.live.Remove(b.id, b.name)
			return nil, fmt.Errorf("recover container %s: %w", h.Name, err)
		}
		return gone("%v", err)
	}
	p.log.Info("container re-attached", "session", spec.SessionID, "container", h.Name)
	return e, nil
}
