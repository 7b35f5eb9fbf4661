// Package rpc is the wire protocol between the agentd server and its
// executors (see docs/executor.md): JSON-RPC 2.0 over a Unix socket (or a
// loopback TCP port inside a Kubernetes pod), one JSON object per line,
// requests flowing both ways on the same connection, with an exec.output
// fast path and opt-in binary output frames.
//
// It holds the message types, method names and error codes (this file),
// the codec and the symmetric connection (Conn), the server's typed client
// (Client) and the peer credentials of a Unix socket (PeerCred). Both ends
// import it: the executor program (package executor, which serves it) and
// the sandbox backends that start executors and talk to them.
package rpc

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os/exec"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// ProtocolVersion is the executor protocol's version; ping reports it and
// the server refuses an executor with another one.
const ProtocolVersion = 1

// TunnelHeader is what the executor writes on a tunnel (see the executor's
// TunnelPool) when it hands it a connection to relay: the server dials the
// model proxy on reading it.
const TunnelHeader = "\x01"

// Methods the server calls on the executor.
const (
	MethodPing         = "ping"
	MethodConnOptions  = "conn.options"
	MethodExecStart    = "exec.start"
	MethodExecInput    = "exec.input"
	MethodExecSignal   = "exec.signal"
	MethodExecResize   = "exec.resize"
	MethodExecAttach   = "exec.attach"
	MethodExecDetach   = "exec.detach"
	MethodExecAck      = "exec.ack" // notification
	MethodExecList     = "exec.list"
	MethodExecRelease  = "exec.release"
	MethodFSRead       = "fs.read"
	MethodFSWrite      = "fs.write"
	MethodFSWriteMany  = "fs.writeMany"
	MethodFSList       = "fs.list"
	MethodFSRemove     = "fs.remove"
	MethodFSWatch      = "fs.watch"
	MethodFSUnwatch    = "fs.unwatch"
	MethodFSSync       = "fs.sync"
	MethodShutdown     = "shutdown"
	MethodExecOutput   = "exec.output" // notification, executor → server
	MethodExecExit     = "exec.exit"   // notification, executor → server
	MethodFSEvent      = "fs.event"    // notification, executor → server
	MethodSecretsGet   = "secrets.get" // request, executor → server
	MethodPermissionRq = "permission.request"
)

// JSON-RPC 2.0 error codes, and the executor's domain codes from -32000 down.
const (
	CodeParseError     = -32700 // the line is not JSON
	CodeInvalidRequest = -32600 // JSON, but not a JSON-RPC 2.0 request
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603

	CodeNotFound     = -32000 // no such file, tag or watch
	CodeTerminated   = -32001 // the executor is shutting down
	CodeInvalidPath  = -32002 // path absolute, escaping the workspace, …
	CodeExists       = -32003 // exec tag already in use
	CodeRunning      = -32004 // exec.release of a process still running
	CodeExecFailed   = -32005 // the process could not be started
	CodeDenied       = -32006 // peer uid refused
	CodeUnsupported  = -32007 // e.g. resize without a PTY, input without stdin
	CodeIO           = -32008 // another file system or process error
	CodeTooLarge     = -32009 // a line or a file over the limit
	CodeUnavailable  = -32010 // no server connected to answer a callback
	CodeSecretDenied = -32011 // secrets.get refused by the server
	CodeNoProgram    = -32012 // exec.start: the program is not in PATH or not executable
	CodeNotRegular   = -32013 // fs.read of a folder, FIFO, socket or device
)

// Error is a JSON-RPC error object. It is what Conn.Call returns when the
// peer answered with an error, and what handlers return to answer with a
// specific code. errors.Is maps the domain codes to the sentinels of
// package sandbox, fs and exec (see Is).
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("executor: %s (code %d)", e.Message, e.Code) }

// Is maps domain codes to sentinel errors: CodeNotFound to
// sandbox.ErrNotFound and fs.ErrNotExist, CodeTerminated to
// sandbox.ErrTerminated, CodeInvalidPath to sandbox.ErrInvalidPath,
// CodeNotRegular to sandbox.ErrNotRegular and sandbox.ErrInvalidPath,
// CodeTooLarge to sandbox.ErrTooLarge, CodeExists to fs.ErrExist and
// CodeNoProgram to exec.ErrNotFound.
func (e *Error) Is(target error) bool {
	switch e.Code {
	case CodeNotFound:
		return target == sandbox.ErrNotFound || target == fs.ErrNotExist
	case CodeTerminated:
		return target == sandbox.ErrTerminated
	case CodeInvalidPath:
		return target == sandbox.ErrInvalidPath
	case CodeNotRegular:
		return target == sandbox.ErrNotRegular || target == sandbox.ErrInvalidPath
	case CodeTooLarge:
		return target == sandbox.ErrTooLarge
	case CodeExists:
		return target == fs.ErrExist
	case CodeNoProgram:
		return target == exec.ErrNotFound
	}
	return false
}

// Errorf builds an *Error.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// PingResult answers ping.
type PingResult struct {
	ProtocolVersion int       `json:"protocolVersion"`
	PID             int       `json:"pid"`
	StartedAt       time.Time `json:"startedAt"`
	UID             int       `json:"uid"`
	GID             int       `json:"gid"`
	Workspace       string    `json:"workspace"`
	// ModelProxyAddr is the TCP address (inside the sandbox) relaying to
	// the model proxy, when the executor runs a forwarder.
	ModelProxyAddr string `json:"modelProxyAddr,omitempty"`
}

// ConnOptionsParams sets options of the calling connection
// (conn.options). BinaryOutput asks for exec.output as binary frames: a
// header line `{"jsonrpc":"2.0","method":"exec.output","params":{"tag":…,
// "stream":…,"offset":N,"size":M}}` followed by M raw bytes.
type ConnOptionsParams struct {
	BinaryOutput bool `json:"binaryOutput"`
}

// ConnOptionsResult reports the options in effect.
type ConnOptionsResult struct {
	BinaryOutput bool `json:"binaryOutput"`
}

// ExecStartParams starts a process (exec.start). Output comes back as
// exec.output notifications and one exec.exit, on the connection that
// started it until another connection attaches the tag.
type ExecStartParams struct {
	Tag  string   `json:"tag"`
	Argv []string `json:"argv"`
	// Cwd is relative to the workspace root.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// SecretEnv maps environment variable names to secret names the
	// executor fetches with secrets.get just before starting the process.
	SecretEnv map[string]string `json:"secretEnv,omitempty"`
	Stdin     bool              `json:"stdin,omitempty"`
	PTY       *WindowSize       `json:"pty,omitempty"`
	// Window is the flow-control window in bytes (see exec.ack); 0 = none.
	Window int64 `json:"window,omitempty"`
}

// WindowSize is a terminal size.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// ExecStartResult answers exec.start.
type ExecStartResult struct {
	Tag string `json:"tag"`
	PID int    `json:"pid,omitempty"`
}

// ExecInputParams writes to a process's stdin (exec.input): Data (bytes,
// base64 in JSON) or Text, then closes stdin if EOF.
type ExecInputParams struct {
	Tag  string  `json:"tag"`
	Data []byte  `json:"data,omitempty"`
	Text *string `json:"text,omitempty"`
	EOF  bool    `json:"eof,omitempty"`
}

// ExecSignalParams signals a process group (exec.signal). Signal is a name
// ("SIGTERM", "TERM", "KILL", …) or a number as a string.
type ExecSignalParams struct {
	Tag    string `json:"tag"`
	Signal string `json:"signal"`
}

// ExecResizeParams resizes a PTY (exec.resize).
type ExecResizeParams struct {
	Tag  string `json:"tag"`
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// TagParams names a process (exec.release, exec.detach).
type TagParams struct {
	Tag string `json:"tag"`
}

// ExecAttachParams re-attaches a process (exec.attach): output is sent
// again from FromOffset per stream (or from the first spooled byte if the
// spool dropped it), then exec.exit once it has exited.
type ExecAttachParams struct {
	Tag        string          `json:"tag"`
	FromOffset sandbox.Offsets `json:"fromOffset"`
	Window     int64           `json:"window,omitempty"`
}

// ExecAttachResult answers exec.attach: First is the first offset still
// spooled per stream (> FromOffset means output was dropped), End the
// offset after the last byte produced so far.
type ExecAttachResult struct {
	Tag     string              `json:"tag"`
	Running bool                `json:"running"`
	Exit    *sandbox.ExitStatus `json:"exit,omitempty"`
	First   sandbox.Offsets     `json:"first"`
	End     sandbox.Offsets     `json:"end"`
}

// ExecAckParams tells the executor how far the server consumed a process's
// output (exec.ack, a notification): with a window, the executor sends at
// most Window bytes beyond these offsets.
type ExecAckParams struct {
	Tag     string          `json:"tag"`
	Offsets sandbox.Offsets `json:"offsets"`
}

// ExecInfo describes one process in exec.list.
type ExecInfo struct {
	Tag       string              `json:"tag"`
	Argv      []string            `json:"argv"`
	PID       int                 `json:"pid,omitempty"`
	Running   bool                `json:"running"`
	Exit      *sandbox.ExitStatus `json:"exit,omitempty"`
	StartedAt time.Time           `json:"startedAt"`
	First     sandbox.Offsets     `json:"first"`
	End       sandbox.Offsets     `json:"end"`
	// Attached reports whether a connection currently receives its output.
	Attached bool `json:"attached"`
}

// ExecListResult answers exec.list, sorted by tag.
type ExecListResult struct {
	Execs []ExecInfo `json:"execs"`
}

// ExecOutputParams is the exec.output notification. Offset is the byte
// offset of Data[0] within Stream.
type ExecOutputParams struct {
	Tag    string         `json:"tag"`
	Stream sandbox.Stream `json:"stream"`
	Offset int64          `json:"offset"`
	Data   []byte         `json:"data"`
}

// ExecExitParams is the exec.exit notification, sent after all output.
// End holds the final stream lengths.
type ExecExitParams struct {
	Tag    string          `json:"tag"`
	Code   int             `json:"code"`
	Signal string          `json:"signal,omitempty"`
	End    sandbox.Offsets `json:"end"`
}

// PathParams names a workspace path (fs.read, fs.remove).
type PathParams struct {
	Path string `json:"path"`
}

// FSReadResult answers fs.read.
type FSReadResult struct {
	Data []byte `json:"data"`
}

// FSFile is a file to write (fs.write, fs.writeMany). Mode 0 means 0644.
type FSFile struct {
	Path string      `json:"path"`
	Data []byte      `json:"data"`
	Mode fs.FileMode `json:"mode,omitempty"`
}

// FSWriteManyParams writes several files (fs.writeMany).
type FSWriteManyParams struct {
	Files []FSFile `json:"files"`
}

// FSListParams lists a folder (fs.list).
type FSListParams struct {
	Dir       string `json:"dir"`
	Recursive bool   `json:"recursive,omitempty"`
}

// FSListResult answers fs.list.
type FSListResult struct {
	Entries []sandbox.FileInfo `json:"entries"`
}

// FSWatchParams starts a watch (fs.watch). WatchID, when given, names the
// watch (unique per connection) so the caller can expect its events before
// the reply arrives; otherwise the executor picks one.
type FSWatchParams struct {
	WatchID string `json:"watchId,omitempty"`
}

// FSWatchResult answers fs.watch: events come as fs.event notifications
// carrying WatchID until fs.unwatch or the connection closes.
type FSWatchResult struct {
	WatchID string `json:"watchId"`
}

// WatchParams names a watch (fs.unwatch).
type WatchParams struct {
	WatchID string `json:"watchId"`
}

// FSSyncParams asks for a marker on every watch (fs.sync): each watch's
// fs.event notifications carry every change made before the call, then
// {op:"sync", path: Marker}. Executors older than the call answer
// CodeMethodNotFound.
type FSSyncParams struct {
	Marker string `json:"marker"`
}

// FSEventParams is the fs.event notification.
type FSEventParams struct {
	WatchID string     `json:"watchId"`
	Op      sandbox.Op `json:"op"`
	Path    string     `json:"path"`
	Size    int64      `json:"size,omitempty"`
	SHA256  string     `json:"sha256,omitempty"`
}

// SecretsGetParams asks the server for a secret (secrets.get, executor →
// server).
type SecretsGetParams struct {
	Name string `json:"name"`
}

// SecretsGetResult answers secrets.get.
type SecretsGetResult struct {
	Value string `json:"value"`
}

// PermissionParams asks the server whether a tool may run
// (permission.request, executor → server).
type PermissionParams struct {
	ToolName  string          `json:"toolName"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"toolUseId,omitempty"`
	// TimeoutMs overrides the server's default when > 0.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// PermissionResult answers permission.request. Behavior is "allow" or
// "deny".
type PermissionResult struct {
	Behavior     string          `json:"behavior"`
	Message      string          `json:"message,omitempty"`
	UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
}

// OKResult is the result of methods that return nothing else.
type OKResult struct {
	OK bool `json:"ok"`
}
