package container

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Defaults for Options fields left empty (the start timeout's is the
// backend's).
const (
	DefaultImage       = "agentd-sandbox:latest"
	DefaultNode        = "default"
	DefaultStopTimeout = 10 * time.Second
)

// Options are what every container backend is configured with; each
// backend's Options embed them and add what its engine needs.
type Options struct {
	// Image is the default image (default agentd-sandbox:latest; built by
	// scripts/sandbox-image.sh). Spec.Image overrides it.
	Image string
	// RunDir holds, in a sub-folder per Node, each environment's folder
	// and model proxy socket on this host. Default: $XDG_RUNTIME_DIR/<b>,
	// else <temp>/<b>-<uid>, where b is the backend's (agentd-docker,
	// agentd-k8s). Keep it short: socket paths are limited to 107 bytes.
	RunDir string
	// Node labels this server's containers; Collect removes only those
	// (default "default").
	Node string
	// Limits are every environment's limits (how they are enforced is the
	// engine's); the non-zero fields of Spec.Limits override them. Zero
	// fields: unlimited.
	Limits sandbox.Limits
	// Ignore is the workspace watcher's ignore list of environments
	// started ahead (sessions' Spec.Ignore is expected to be the same).
	Ignore []string
	// WarmPool is how many environments of each kind (image and limits)
	// are kept started ahead (0: none); MaxPools bounds the kinds (default
	// 4).
	WarmPool int
	MaxPools int
	// ModelProxy, when set, is the environments' only way to the model
	// APIs (see executor.ModelProxy).
	ModelProxy executor.ModelProxy
	// Nice is added to the niceness of the processes the executor starts.
	Nice int
	// SpoolBytes is the executor's spool per process and stream (0: its
	// default).
	SpoolBytes int64
	// StartTimeout bounds a container's start until its executor answers
	// (default: the backend's); StopTimeout how long Terminate waits for
	// the executor to end (default 10 s).
	StartTimeout, StopTimeout time.Duration
	// OnCall is called after every call to an executor (audit).
	OnCall func(sessionID, method string, paramsSize int, err error, dur time.Duration)
	Logger *slog.Logger
}

// Complete fills the fields left empty — the run folder (NodeRunDir, its
// default named base), the start timeout with start — and checks them.
func (o *Options) Complete(base string, start time.Duration) error {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Node == "" {
		o.Node = DefaultNode
	}
	if o.WarmPool < 0 {
		return fmt.Errorf("warm pool size %d", o.WarmPool)
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = start
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var err error
	o.RunDir, err = NodeRunDir(o.RunDir, base, o.Node)
	return err
}

// DefaultShape is the shape of a session that sets nothing of its own.
func (o *Options) DefaultShape() Shape {
	return NewShape(o.Image, o.Limits, o.Ignore)
}

// NewExecutor makes the run folder (and the folder of every node's,
// passable: 0711) and returns the executor backend's provider the
// environments' executors are connected through (Connect,
// ConnectTransport); limits are the engine's, not its.
func (o *Options) NewExecutor() (*executor.Provider, error) {
	if err := os.MkdirAll(o.RunDir, 0o711); err != nil {
		return nil, err
	}
	return executor.New(executor.Options{
		RunDir: o.RunDir, LimitMode: executor.LimitsOff, ModelProxy: o.ModelProxy,
		StartTimeout: o.StartTimeout, StopTimeout: o.StopTimeout, OnCall: o.OnCall, Logger: o.Logger,
	})
}
