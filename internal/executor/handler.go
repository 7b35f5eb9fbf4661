package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// handler serves one connection's requests on behalf of the executor.
type handler struct{ e *Executor }

// pider is what a sandbox.Process may offer to report its pid.
type pider interface{ PID() int }

func (h *handler) HandleCall(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	e := h.e
	if req.Method == rpc.MethodPing {
		return e.ping(), nil
	}
	if e.isStopping() {
		return nil, rpc.Errorf(rpc.CodeTerminated, "%s: executor is shutting down", req.Method)
	}
	switch req.Method {
	case rpc.MethodConnOptions:
		var p rpc.ConnOptionsParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		// Output already queued stays JSON; frames start after the reply.
		req.AfterReply(func() { c.SetBinaryOutput(p.BinaryOutput) })
		return rpc.ConnOptionsResult(p), nil
	case rpc.MethodExecStart:
		return e.execStart(ctx, c, req)
	case rpc.MethodExecInput:
		return e.execInput(req)
	case rpc.MethodExecSignal:
		return e.execSignal(req)
	case rpc.MethodExecResize:
		return e.execResize(req)
	case rpc.MethodExecAttach:
		return e.execAttach(c, req)
	case rpc.MethodExecDetach:
		return e.execDetach(c, req)
	case rpc.MethodExecList:
		return e.execList(), nil
	case rpc.MethodExecRelease:
		return e.execRelease(c, req)
	case rpc.MethodFSRead:
		var p rpc.PathParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		// The size is checked on the open file before anything is read:
		// a file that cannot fit one message is never read into memory.
		data, err := sandbox.ReadFileLimit(ctx, e.cfg.Env, p.Path, maxFileBytes(c.MaxLine()))
		if err != nil {
			return nil, errorFor(err)
		}
		return rpc.FSReadResult{Data: data}, nil
	case rpc.MethodFSWrite:
		var p rpc.FSFile
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		if err := e.cfg.Env.WriteFile(ctx, p.Path, p.Data, p.Mode); err != nil {
			return nil, errorFor(err)
		}
		return rpc.OKResult{OK: true}, nil
	case rpc.MethodFSWriteMany:
		var p rpc.FSWriteManyParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		files := make([]sandbox.File, len(p.Files))
		for i, f := range p.Files {
			files[i] = sandbox.File{Path: f.Path, Content: f.Data, Mode: f.Mode}
		}
		if err := e.cfg.Env.WriteFiles(ctx, files); err != nil {
			return nil, errorFor(err)
		}
		return rpc.OKResult{OK: true}, nil
	case rpc.MethodFSList:
		var p rpc.FSListParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		entries, err := e.cfg.Env.List(ctx, p.Dir, p.Recursive)
		if err != nil {
			return nil, errorFor(err)
		}
		if entries == nil {
			entries = []sandbox.FileInfo{}
		}
		return rpc.FSListResult{Entries: entries}, nil
	case rpc.MethodFSRemove:
		var p rpc.PathParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		if err := e.cfg.Env.Remove(ctx, p.Path); err != nil {
			return nil, errorFor(err)
		}
		return rpc.OKResult{OK: true}, nil
	case rpc.MethodFSWatch:
		var p rpc.FSWatchParams
		if len(req.Params) > 0 {
			if err := req.Decode(&p); err != nil {
				return nil, err
			}
		}
		return e.watch(c, p.WatchID, req)
	case rpc.MethodFSUnwatch:
		var p rpc.WatchParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		return e.unwatch(c, p.WatchID)
	case rpc.MethodFSSync:
		var p rpc.FSSyncParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		return e.sync(ctx, p.Marker)
	case rpc.MethodShutdown:
		e.log.Info("executor: shutdown requested")
		e.mu.Lock()
		e.stopping = true
		e.mu.Unlock()
		tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.terminate(tctx); err != nil {
			e.log.Error("executor: terminate environment", "err", err)
		}
		req.AfterReply(e.requestStop)
		return rpc.OKResult{OK: true}, nil
	}
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %q", req.Method)
}

func (h *handler) HandleNotify(c *rpc.Conn, method string, params json.RawMessage) {
	if method != rpc.MethodExecAck {
		h.e.log.Debug("executor: notification ignored", "method", method)
		return
	}
	var p rpc.ExecAckParams
	if json.Unmarshal(params, &p) != nil {
		return
	}
	h.e.mu.Lock()
	x := h.e.execs[p.Tag]
	h.e.mu.Unlock()
	if x == nil {
		return
	}
	x.mu.Lock()
	sub := x.sub
	x.mu.Unlock()
	if sub != nil && sub.c == c {
		sub.ack(p.Offsets)
	}
}

// lookup returns the process with tag, or an rpc.CodeNotFound error.
func (e *Executor) lookup(tag string) (*execState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	x := e.execs[tag]
	if x == nil || x.proc == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no process with tag %q", tag)
	}
	return x, nil
}

// lookupParams decodes req's TagParams and returns the process they name.
func (e *Executor) lookupParams(req *rpc.Request) (*execState, error) {
	var p rpc.TagParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	return e.lookup(p.Tag)
}

// takeSub removes x's subscription and returns it; nil when there is
// none, or when only is not nil and the subscription is another
// connection's (which then stays).
func (x *execState) takeSub(only *rpc.Conn) *subscription {
	x.mu.Lock()
	defer x.mu.Unlock()
	sub := x.sub
	if sub == nil || (only != nil && sub.c != only) {
		return nil
	}
	x.sub = nil
	return sub
}

func (e *Executor) execStart(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	var p rpc.ExecStartParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.start: argv is empty")
	}
	if p.PTY != nil && (p.PTY.Rows == 0 || p.PTY.Cols == 0) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.start: pty size %dx%d", p.PTY.Rows, p.PTY.Cols)
	}
	if p.Window < 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.start: negative window")
	}
	// Reserve the tag so concurrent starts cannot both take it.
	x := &execState{argv: p.Argv, stdin: p.Stdin, pty: p.PTY != nil, done: make(chan struct{}), room: make(chan struct{}, 1)}
	e.mu.Lock()
	if p.Tag == "" {
		e.seq++
		p.Tag = "x" + strconv.Itoa(e.seq)
	}
	x.tag = p.Tag
	var stale *execState
	if old, ok := e.execs[p.Tag]; ok {
		if old.proc == nil || old.exitStatus() == nil {
			e.mu.Unlock()
			return nil, rpc.Errorf(rpc.CodeExists, "exec.start: tag %q in use", p.Tag)
		}
		stale = old // exited: reusing its tag releases it
	}
	e.execs[p.Tag] = x
	e.mu.Unlock()
	if stale != nil {
		e.forget(stale, c)
	}
	started := false
	defer func() {
		if !started {
			e.mu.Lock()
			delete(e.execs, p.Tag)
			e.mu.Unlock()
			x.releaseSpools()
		}
	}()

	env := maps.Clone(p.Env)
	if len(p.SecretEnv) > 0 && env == nil {
		env = map[string]string{}
	}
	for _, name := range slices.Sorted(maps.Keys(p.SecretEnv)) {
		var r rpc.SecretsGetResult
		if err := e.callServer(ctx, c, rpc.MethodSecretsGet, rpc.SecretsGetParams{Name: p.SecretEnv[name]}, &r); err != nil {
			return nil, rpc.Errorf(rpc.CodeSecretDenied, "exec.start: secret %q for %s: %v", p.SecretEnv[name], name, err)
		}
		env[name] = r.Value
	}
	for i := range x.streams {
		s, err := newSpool(e.cfg.SpoolDir, e.cfg.SpoolBytes)
		if err != nil {
			return nil, rpc.Errorf(rpc.CodeIO, "exec.start: %v", err)
		}
		x.streams[i] = s
	}
	cmd := sandbox.Cmd{Argv: p.Argv, Dir: p.Cwd, Env: env, Stdin: p.Stdin, Tag: p.Tag}
	if p.PTY != nil {
		cmd.PTY = &sandbox.WindowSize{Rows: p.PTY.Rows, Cols: p.PTY.Cols}
	}
	proc, err := e.cfg.Env.Exec(ctx, cmd)
	if err != nil {
		pe := errorFor(err)
		if errors.Is(err, exec.ErrNotFound) {
			pe = &rpc.Error{Code: rpc.CodeNoProgram, Message: fmt.Sprintf("exec.start: %v", err)}
		} else if pe.Code == rpc.CodeIO || pe.Code == rpc.CodeNotFound {
			pe = &rpc.Error{Code: rpc.CodeExecFailed, Message: fmt.Sprintf("exec.start %q: %v", p.Argv[0], err)}
		}
		return nil, pe
	}
	started = true
	x.proc, x.startedAt = proc, time.Now()
	if pp, ok := proc.(pider); ok {
		x.pid = pp.PID()
	}
	e.log.Info("executor: process started", "tag", p.Tag, "argv0", p.Argv[0], "pid", x.pid)
	start := e.subscribe(x, c, sandbox.Offsets{}, p.Window)
	e.bg.Add(1)
	go e.pump(x)
	req.AfterReply(start)
	return rpc.ExecStartResult{Tag: p.Tag, PID: x.pid}, nil
}

func (e *Executor) execInput(req *rpc.Request) (any, error) {
	var p rpc.ExecInputParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	x, err := e.lookup(p.Tag)
	if err != nil {
		return nil, err
	}
	if !x.stdin && !x.pty {
		return nil, rpc.Errorf(rpc.CodeUnsupported, "exec.input: process %q has no stdin", p.Tag)
	}
	data := p.Data
	if p.Text != nil {
		if len(p.Data) > 0 {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.input: both data and text")
		}
		data = []byte(*p.Text)
	}
	if len(data) > 0 {
		if _, err := x.proc.Write(data); err != nil {
			return nil, errorFor(err)
		}
	}
	if p.EOF {
		if err := x.proc.CloseStdin(); err != nil {
			return nil, errorFor(err)
		}
	}
	return rpc.OKResult{OK: true}, nil
}

// parseSignal accepts "SIGTERM", "TERM", "sigterm" or a number.
func parseSignal(s string) (syscall.Signal, bool) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, false
		}
		return syscall.Signal(n), true
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	return sig, sig != 0
}

func (e *Executor) execSignal(req *rpc.Request) (any, error) {
	var p rpc.ExecSignalParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	sig, ok := parseSignal(p.Signal)
	if !ok {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.signal: unknown signal %q", p.Signal)
	}
	x, err := e.lookup(p.Tag)
	if err != nil {
		return nil, err
	}
	if x.exitStatus() != nil {
		return rpc.OKResult{OK: true}, nil // already exited: nothing to signal
	}
	if sig == syscall.SIGKILL {
		err = x.proc.Kill()
	} else {
		err = x.proc.Signal(sig)
	}
	if err != nil && x.exitStatus() == nil {
		return nil, errorFor(err)
	}
	return rpc.OKResult{OK: true}, nil
}

func (e *Executor) execResize(req *rpc.Request) (any, error) {
	var p rpc.ExecResizeParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	if p.Rows == 0 || p.Cols == 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.resize: size %dx%d", p.Rows, p.Cols)
	}
	x, err := e.lookup(p.Tag)
	if err != nil {
		return nil, err
	}
	if !x.pty {
		return nil, rpc.Errorf(rpc.CodeUnsupported, "exec.resize: process %q has no pty", p.Tag)
	}
	if err := x.proc.Resize(sandbox.WindowSize{Rows: p.Rows, Cols: p.Cols}); err != nil {
		return nil, errorFor(err)
	}
	return rpc.OKResult{OK: true}, nil
}

func (e *Executor) execAttach(c *rpc.Conn, req *rpc.Request) (any, error) {
	var p rpc.ExecAttachParams
	if err := req.Decode(&p); err != nil {
		return nil, err
	}
	if p.Window < 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.attach: negative window")
	}
	x, err := e.lookup(p.Tag)
	if err != nil {
		return nil, err
	}
	first, end := x.offsets()
	from := p.FromOffset
	if from.Stdout < 0 || from.Stderr < 0 || from.Stdout > end.Stdout || from.Stderr > end.Stderr {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "exec.attach: fromOffset %+v outside 0..%+v", from, end)
	}
	from.Stdout, from.Stderr = max(from.Stdout, first.Stdout), max(from.Stderr, first.Stderr)
	st := x.exitStatus()
	start := e.subscribe(x, c, from, p.Window)
	req.AfterReply(start)
	return rpc.ExecAttachResult{Tag: p.Tag, Running: st == nil, Exit: st, First: first, End: end}, nil
}

func (e *Executor) execDetach(c *rpc.Conn, req *rpc.Request) (any, error) {
	x, err := e.lookupParams(req)
	if err != nil {
		return nil, err
	}
	if sub := x.takeSub(c); sub != nil {
		<-sub.stop() // nothing of it is sent after the reply
	}
	return rpc.OKResult{OK: true}, nil
}

func (e *Executor) execList() rpc.ExecListResult {
	e.mu.Lock()
	xs := make([]*execState, 0, len(e.execs))
	for _, x := range e.execs {
		if x.proc != nil {
			xs = append(xs, x)
		}
	}
	e.mu.Unlock()
	slices.SortFunc(xs, func(a, b *execState) int { return strings.Compare(a.tag, b.tag) })
	r := rpc.ExecListResult{Execs: make([]rpc.ExecInfo, 0, len(xs))}
	for _, x := range xs {
		first, end := x.offsets()
		x.mu.Lock()
		attached := x.sub != nil && !x.sub.stopped() && !isClosed(x.sub.c.Context().Done())
		exit := x.exit
		x.mu.Unlock()
		r.Execs = append(r.Execs, rpc.ExecInfo{
			Tag: x.tag, Argv: x.argv, PID: x.pid, Running: exit == nil, Exit: exit,
			StartedAt: x.startedAt, First: first, End: end, Attached: attached,
		})
	}
	return r
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (e *Executor) execRelease(c *rpc.Conn, req *rpc.Request) (any, error) {
	x, err := e.lookupParams(req)
	if err != nil {
		return nil, err
	}
	if x.exitStatus() == nil {
		return nil, rpc.Errorf(rpc.CodeRunning, "exec.release: process %q is still running", x.tag)
	}
	e.mu.Lock()
	if e.execs[x.tag] != x {
		e.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodeNotFound, "no process with tag %q", x.tag)
	}
	delete(e.execs, x.tag)
	e.mu.Unlock()
	e.forget(x, c)
	return rpc.OKResult{OK: true}, nil
}

// forget stops an exited process's subscription and frees its spools. It
// is no longer in e.execs. c is the connection asking.
func (e *Executor) forget(x *execState, c *rpc.Conn) {
	if sub := x.takeSub(nil); sub != nil {
		exited := sub.stop()
		if sub.c == c {
			<-exited // nothing of it follows the reply
		}
	}
	x.releaseSpools()
}

// maxFileBytes is the largest file fs.read answers with a connection whose
// messages may be maxLine bytes long: its data travels base64-encoded
// (4 bytes per 3) in a JSON-RPC result.
func maxFileBytes(maxLine int) int64 {
	const envelope = 1024 // {"jsonrpc":"2.0","id":…,"result":{"data":"…"}}
	if maxLine <= envelope {
		return 0
	}
	return int64(maxLine-envelope) / 4 * 3
}

// errorFor maps an error from the sandbox or the OS to a protocol error.
func errorFor(err error) *rpc.Error {
	var pe *rpc.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return pe
	case errors.Is(err, sandbox.ErrNotRegular):
		return &rpc.Error{Code: rpc.CodeNotRegular, Message: err.Error()}
	case errors.Is(err, sandbox.ErrInvalidPath):
		return &rpc.Error{Code: rpc.CodeInvalidPath, Message: err.Error()}
	case errors.Is(err, sandbox.ErrTooLarge):
		return &rpc.Error{Code: rpc.CodeTooLarge, Message: err.Error()}
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return &rpc.Error{Code: rpc.CodeNotFound, Message: err.Error()}
	case errors.Is(err, sandbox.ErrTerminated), errors.Is(err, errShutdown):
		return &rpc.Error{Code: rpc.CodeTerminated, Message: err.Error()}
	case errors.Is(err, fs.ErrExist):
		return &rpc.Error{Code: rpc.CodeExists, Message: err.Error()}
	default:
		return &rpc.Error{Code: rpc.CodeIO, Message: err.Error()}
	}
}
