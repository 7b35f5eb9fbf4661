package rpc

import (
	"context"
	"fmt"
	"net"

	"github.com/agentd/agentd/sandbox"
)

// Client is the server's typed view of an executor connection. Methods are
// safe for concurrent use; what the executor sends unasked (output, exits,
// file events, secrets.get, permission.request) goes to the Handler given
// to Dial (or to NewConn).
type Client struct {
	*Conn
}

// Dial connects to the executor listening at socketPath.
func Dial(ctx context.Context, socketPath string, h Handler, opts ConnOptions) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("dial executor: %w", err)
	}
	return &Client{Conn: NewConn(nc, h, opts)}, nil
}

// NewClient wraps an established connection.
func NewClient(c *Conn) *Client { return &Client{Conn: c} }

// Ping checks the executor and returns what it reports about itself.
func (c *Client) Ping(ctx context.Context) (PingResult, error) {
	var r PingResult
	err := c.Call(ctx, MethodPing, nil, &r)
	return r, err
}

// SetOptions sets options of this connection (conn.options). Binary
// output needs ConnOptions.AcceptBinary on this side.
func (c *Client) SetOptions(ctx context.Context, p ConnOptionsParams) (ConnOptionsResult, error) {
	var r ConnOptionsResult
	err := c.Call(ctx, MethodConnOptions, p, &r)
	return r, err
}

// ExecStart starts a process.
func (c *Client) ExecStart(ctx context.Context, p ExecStartParams) (ExecStartResult, error) {
	var r ExecStartResult
	err := c.Call(ctx, MethodExecStart, p, &r)
	return r, err
}

// ExecInput writes to a process's stdin (and closes it with eof).
func (c *Client) ExecInput(ctx context.Context, tag string, data []byte, eof bool) error {
	return c.Call(ctx, MethodExecInput, ExecInputParams{Tag: tag, Data: data, EOF: eof}, nil)
}

// ExecSignal signals a process's group.
func (c *Client) ExecSignal(ctx context.Context, tag, signal string) error {
	return c.Call(ctx, MethodExecSignal, ExecSignalParams{Tag: tag, Signal: signal}, nil)
}

// ExecResize resizes a process's PTY.
func (c *Client) ExecResize(ctx context.Context, tag string, size sandbox.WindowSize) error {
	return c.Call(ctx, MethodExecResize, ExecResizeParams{Tag: tag, Rows: size.Rows, Cols: size.Cols}, nil)
}

// ExecAttach makes this connection the receiver of a process's output from
// the given offsets on.
func (c *Client) ExecAttach(ctx context.Context, p ExecAttachParams) (ExecAttachResult, error) {
	var r ExecAttachResult
	err := c.Call(ctx, MethodExecAttach, p, &r)
	return r, err
}

// ExecDetach stops sending a process's output to this connection; nothing
// of it arrives after ExecDetach returns.
func (c *Client) ExecDetach(ctx context.Context, tag string) error {
	return c.Call(ctx, MethodExecDetach, TagParams{Tag: tag}, nil)
}

// ExecAck acknowledges consumed output (flow control).
func (c *Client) ExecAck(tag string, o sandbox.Offsets) error {
	return c.Notify(MethodExecAck, ExecAckParams{Tag: tag, Offsets: o})
}

// ExecList lists the executor's processes.
func (c *Client) ExecList(ctx context.Context) ([]ExecInfo, error) {
	var r ExecListResult
	err := c.Call(ctx, MethodExecList, nil, &r)
	return r.Execs, err
}

// ExecRelease lets the executor forget an exited process.
func (c *Client) ExecRelease(ctx context.Context, tag string) error {
	return c.Call(ctx, MethodExecRelease, TagParams{Tag: tag}, nil)
}

// ReadFile reads a workspace file.
func (c *Client) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var r FSReadResult
	err := c.Call(ctx, MethodFSRead, PathParams{Path: path}, &r)
	return r.Data, err
}

// WriteFile writes a workspace file.
func (c *Client) WriteFile(ctx context.Context, f FSFile) error {
	return c.Call(ctx, MethodFSWrite, f, nil)
}

// WriteFiles writes several workspace files.
func (c *Client) WriteFiles(ctx context.Context, files []FSFile) error {
	return c.Call(ctx, MethodFSWriteMany, FSWriteManyParams{Files: files}, nil)
}

// List lists a workspace folder.
func (c *Client) List(ctx context.Context, dir string, recursive bool) ([]sandbox.FileInfo, error) {
	var r FSListResult
	err := c.Call(ctx, MethodFSList, FSListParams{Dir: dir, Recursive: recursive}, &r)
	return r.Entries, err
}

// Remove removes a workspace file or folder.
func (c *Client) Remove(ctx context.Context, path string) error {
	return c.Call(ctx, MethodFSRemove, PathParams{Path: path}, nil)
}

// Watch starts a watch; events arrive as fs.event notifications.
func (c *Client) Watch(ctx context.Context) (string, error) {
	var r FSWatchResult
	err := c.Call(ctx, MethodFSWatch, nil, &r)
	return r.WatchID, err
}

// Unwatch ends a watch; no event of it arrives after Unwatch returns.
func (c *Client) Unwatch(ctx context.Context, id string) error {
	return c.Call(ctx, MethodFSUnwatch, WatchParams{WatchID: id}, nil)
}

// Shutdown makes the executor kill its processes and exit.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.Call(ctx, MethodShutdown, nil, nil)
}
