// Package sandbox defines the execution environment a session's agent runs
// in, as a few small primitives (exec, files, watch, terminate) that every
// backend implements: local/ (a folder and process groups on this host),
// executor/ (a detached executor process over JSON-RPC), bwrap/ (Linux
// namespaces), and fleet backends later.
//
// Paths given to an Environment are relative to its workspace root and must
// stay inside it; CleanPath is the one place that decides.
package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"time"
)

var (
	// ErrInvalidPath: a path that is absolute, escapes the workspace, or is
	// otherwise unusable.
	ErrInvalidPath = errors.New("sandbox: invalid path")
	// ErrTerminated: the environment has been terminated.
	ErrTerminated = errors.New("sandbox: environment terminated")
	// ErrNotFound: no such file, or no such process tag.
	ErrNotFound = errors.New("sandbox: not found")
	// ErrGone: a recorded environment no longer exists (its process died).
	ErrGone = errors.New("sandbox: environment gone")
)

// Spec describes an environment to create.
type Spec struct {
	SessionID string
	// Workspace is the host folder holding the session's workspace. The
	// backend creates it if missing.
	Workspace string
	// Env is added to every process started in the environment (provider
	// settings, profile variables). Nothing else of the server's
	// environment is passed.
	Env map[string]string
	// Ignore lists path patterns (base names or slash-separated prefixes)
	// the watcher does not report, e.g. ".git", "node_modules".
	Ignore []string
	Limits Limits
	// Record, when set, is called by a provider whose environments outlive
	// the server (Recoverer) with a handle of the environment before it
	// starts anything, so that a server killed while creating it leaves a
	// record: Recover given that handle stops and removes whatever was
	// started and reports ErrGone. Create fails if Record does. The
	// environment's Handle, once it is up, supersedes it.
	Record func(ctx context.Context, handle json.RawMessage) error `json:"-"`
}

// Limits bound the resources of an environment's processes. Zero means the
// backend's default (local enforces none).
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUPercent  int // 100 = one core
}

// Provider creates environments.
type Provider interface {
	// Name is the backend name as given to --sandbox.
	Name() string
	Create(ctx context.Context, spec Spec) (Environment, error)
}

// Recoverer is implemented by providers whose environments outlive the
// server: Recover re-attaches to the environment described by handle (the
// value Handle returned before the restart), or returns ErrGone.
type Recoverer interface {
	Recover(ctx context.Context, spec Spec, handle json.RawMessage) (Environment, error)
}

// Environment is one session's execution environment. Methods are safe for
// concurrent use.
type Environment interface {
	// Exec starts a process. ctx bounds only the start; the process runs
	// until it exits or is signalled.
	Exec(ctx context.Context, cmd Cmd) (Process, error)

	ReadFile(ctx context.Context, path string) ([]byte, error)
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	WriteFiles(ctx context.Context, files []File) error
	// List returns the entries under dir ("" or "." for the root), sorted by
	// path; recursive descends into sub-folders (ignored ones excluded).
	List(ctx context.Context, dir string, recursive bool) ([]FileInfo, error)
	Remove(ctx context.Context, path string) error
	// Watch reports workspace changes until ctx ends, then closes the channel.
	Watch(ctx context.Context) (<-chan FileEvent, error)

	// Running reports whether the environment is up.
	Running() bool
	// Terminate kills every process of the environment and releases it. The
	// workspace contents stay on disk.
	Terminate(ctx context.Context) error
	// WorkDir is the workspace root as processes inside see it.
	WorkDir() string
}

// Handler is implemented by environments that can be re-attached after a
// server restart: Handle is what the server records for Recoverer.Recover.
type Handler interface {
	Handle() json.RawMessage
}

// Attacher is implemented by environments whose processes survive a server
// restart: Attach returns the process started with tag, replaying its output
// from fromOffset (per stream) on.
type Attacher interface {
	Attach(ctx context.Context, tag string, from Offsets) (Process, error)
}

// Offsets are byte offsets per output stream.
type Offsets struct {
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
}

// Cmd is a process to start.
type Cmd struct {
	Argv []string
	// Dir is the working directory relative to the workspace root ("" = root).
	Dir string
	// Env is added to the environment's Spec.Env.
	Env map[string]string
	// Stdin opens a pipe to the process's standard input (else /dev/null).
	Stdin bool
	// PTY runs the process on a pseudo-terminal of that size; output then
	// comes as one stream (Stdout).
	PTY *WindowSize
	// Tag names the process for Attach; the backend assigns one when empty.
	Tag string
}

// WindowSize is a terminal size.
type WindowSize struct {
	Rows, Cols uint16
}

// Stream names an output stream.
type Stream string

const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Chunk is a piece of process output. Offset is the byte offset of Data[0]
// within its stream.
type Chunk struct {
	Stream Stream
	Data   []byte
	Offset int64
}

// Process is a started process.
type Process interface {
	Tag() string
	// Output delivers the process's output in order per stream; it is closed
	// after the last chunk, once both streams reached EOF.
	Output() <-chan Chunk
	// Write writes to standard input (Cmd.Stdin or PTY).
	Write(p []byte) (int, error)
	CloseStdin() error
	// Signal signals the process's whole process group.
	Signal(sig os.Signal) error
	// Kill kills the whole process group.
	Kill() error
	// Resize changes a PTY's window size.
	Resize(size WindowSize) error
	// Wait blocks until the process exited and its output was delivered, or
	// ctx ends.
	Wait(ctx context.Context) (ExitStatus, error)
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	Code int `json:"code"`
	// Signal names the signal that killed the process ("" if it exited).
	Signal string `json:"signal,omitempty"`
}

// Success reports a zero exit without a signal.
func (e ExitStatus) Success() bool { return e.Code == 0 && e.Signal == "" }

// File is a file to write.
type File struct {
	Path    string
	Content []byte
	Mode    fs.FileMode // 0 = 0644
}

// FileInfo describes a workspace entry.
type FileInfo struct {
	Path    string      `json:"path"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	IsDir   bool        `json:"isDir"`
	ModTime time.Time   `json:"modTime"`
}

// Op is a file change kind.
type Op string

const (
	Created  Op = "created"
	Modified Op = "modified"
	Deleted  Op = "deleted"
)

// FileEvent is a workspace change. Size and SHA256 are set for created and
// modified regular files (SHA256 only below a size bound).
type FileEvent struct {
	Op     Op
	Path   string
	Size   int64
	SHA256 string
}
