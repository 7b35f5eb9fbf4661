// Package sandbox defines the execution environment a session's agent runs
// in, as a few small primitives (exec, files, watch, terminate) that every
// backend implements, and the optional abilities a backend may add as
// separate interfaces. It is public so that a program embedding agentd can
// add a backend of its own (agentd.Config.Sandboxes; sandbox/sandboxtest is
// the conformance suite every backend passes). The built-in backends live
// in internal/sandbox/: local/ (a folder and process groups on this host),
// executor/ (a detached executor process over JSON-RPC), bwrap/ (Linux
// namespaces), docker/ and kubernetes/.
//
// Paths given to an Environment are relative to its workspace root and must
// stay inside it; CleanPath is the one place that decides.
package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// ErrNotRegular: a file operation that needs a regular file met a
	// folder, FIFO, socket or device. It is also an ErrInvalidPath.
	ErrNotRegular = fmt.Errorf("%w: not a regular file", ErrInvalidPath)
	// ErrTooLarge: a file over the size a read accepts.
	ErrTooLarge = errors.New("sandbox: file too large")
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
	// Profile is the id of the session's agent profile, for backends that
	// keep environments ready ahead per profile (warm pools).
	Profile string
	// Image is the container image of container backends ("": the
	// backend's default). Other backends ignore it.
	Image string
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

// FileOpener is implemented by environments that can hand out a workspace
// file to stream instead of reading it whole (ReadFile). OpenFile opens only
// regular files (ErrNotRegular otherwise), without blocking (a FIFO or
// device is refused before anything waits on it) and without leaving the
// workspace through a symlink. The file is the caller's to close; it stays
// readable after the environment is terminated.
type FileOpener interface {
	OpenFile(ctx context.Context, path string) (FileReader, error)
}

// FileReader is an open regular workspace file. Info describes it as it
// was when opened (fstat of the open file).
type FileReader interface {
	io.ReadSeekCloser
	Info() FileInfo
}

// ReadFileLimit reads the file at path of env whole, refusing a file over
// limit bytes with ErrTooLarge. With a FileOpener the size is checked on
// the open file before anything is read, and at most limit+1 bytes are
// read (a file growing meanwhile is refused too); otherwise the
// environment's ReadFile bounds what it reads itself.
func ReadFileLimit(ctx context.Context, env Environment, path string, limit int64) ([]byte, error) {
	o, ok := env.(FileOpener)
	if !ok {
		data, err := env.ReadFile(ctx, path)
		if err != nil {
			return nil, err
		}
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("read %s: %w: %d bytes (limit %d)", path, ErrTooLarge, len(data), limit)
		}
		return data, nil
	}
	f, err := o.OpenFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := f.Info().Size
	if size > limit {
		return nil, fmt.Errorf("read %s: %w: %d bytes (limit %d)", path, ErrTooLarge, size, limit)
	}
	var b bytes.Buffer
	b.Grow(int(size) + bytes.MinRead) // one allocation unless it grows meanwhile
	if _, err := b.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(b.Len()) > limit {
		return nil, fmt.Errorf("read %s: %w: it grew beyond %d bytes", path, ErrTooLarge, limit)
	}
	return b.Bytes(), nil
}

// HandleReporter is implemented by environments that can be re-attached
// after a server restart: Handle reports what the server records for
// Recoverer.Recover.
type HandleReporter interface {
	Handle() json.RawMessage
}

// Releaser is implemented by environments that outlive their server
// (a Recoverer's): Release lets go of the environment without stopping
// it, its processes going on, for another server to Recover. A server does
// it when it lost the session's lease to another server. Later calls, and
// Terminate after it, do nothing.
type Releaser interface {
	Release()
}

// WatchSyncer is implemented by environments whose watch can be flushed on
// demand (a turn's end: its file changes must be reported before it is).
type WatchSyncer interface {
	// SyncWatch reports, on every open Watch channel of the environment,
	// every workspace change made before the call (without waiting for
	// the debounce), followed by FileEvent{Op: Sync, Path: id}: a consumer
	// that reads that marker has read everything before it. It returns
	// once the markers are on their way, not when they are read. An
	// environment that cannot (an older executor) returns an error
	// wrapping errors.ErrUnsupported.
	SyncWatch(ctx context.Context, id string) error
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
	// Sync is no change but a marker SyncWatch asked for; Path holds its
	// id. Consumers that did not ask for one skip it.
	Sync Op = "sync"
)

// FileEvent is a workspace change. Size and SHA256 are set for created and
// modified regular files (SHA256 only below a size bound).
type FileEvent struct {
	Op     Op
	Path   string
	Size   int64
	SHA256 string
}
