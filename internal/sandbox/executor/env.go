package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/executor/cgroup"
	"github.com/agentd/agentd/sandbox"
)

// Environment is one session's environment, served by its executor over
// one connection. Methods are safe for concurrent use. When the connection
// is lost (the executor died), running processes end with an error
// wrapping sandbox.ErrGone and Running reports false; Recover makes a new
// Environment if the executor is still there.
type Environment struct {
	p      *Provider
	spec   sandbox.Spec
	log    *slog.Logger
	handle Handle
	ping   rpc.PingResult
	client *rpc.Client
	reaped chan struct{} // closed when our child executor was reaped; nil after Recover
	// cred is the environment's user (nil: the server's); ws its
	// workspace, taken back from that user at Terminate.
	cred  *credential
	ws    string
	group *cgroup.Group // the environment's control group, if any
	// transport, when set, reaches an executor that is not a process of
	// this host (ConnectTransport): no socket to dial, no pid to watch.
	transport Transport
	token     string // the model proxy's token for this environment
	// connEnded is closed once watchConn has failed what depended on the
	// connection.
	connEnded chan struct{}

	termOnce sync.Once
	termErr  error
	releases sync.WaitGroup // exec.release calls in flight

	mu          sync.Mutex
	procs       map[string]*process   // by tag, while the connection lives
	live        map[*process]struct{} // every process still delivering
	watches     map[string]*watchSub
	terminated  bool
	terminating bool  // Terminate started: a closing connection is expected
	lost        error // why the connection ended, once it did
}

var (
	_ sandbox.Releaser       = (*Environment)(nil)
	_ sandbox.Environment    = (*Environment)(nil)
	_ sandbox.HandleReporter = (*Environment)(nil)
	_ sandbox.Attacher       = (*Environment)(nil)
	_ sandbox.WatchSyncer    = (*Environment)(nil)
	_ sandbox.FileOpener     = (*Environment)(nil)
)

func newEnvironment(p *Provider, spec sandbox.Spec, h Handle) *Environment {
	return &Environment{
		p: p, spec: spec, handle: h,
		log:       p.log.With("session", spec.SessionID, "executor", h.PID),
		procs:     map[string]*process{},
		live:      map[*process]struct{}{},
		watches:   map[string]*watchSub{},
		connEnded: make(chan struct{}),
	}
}

// closeConn closes the connection and waits until everything depending on
// it was told.
func (e *Environment) closeConn() {
	e.client.Close()
	e.client.Wait()
	<-e.connEnded
}

func (e *Environment) addLive(p *process) {
	e.mu.Lock()
	e.live[p] = struct{}{}
	e.mu.Unlock()
}

func (e *Environment) forgetLive(p *process) {
	e.mu.Lock()
	delete(e.live, p)
	e.mu.Unlock()
}

// connect dials the executor and checks it with ping. verify, when set,
// checks the peer credentials of the socket before anything is sent. On a
// ping failure the client stays set for the caller to close.
func (e *Environment) connect(ctx context.Context, verify func(pid, uid int) error) error {
	opts := rpc.ConnOptions{Logger: e.log, AcceptBinary: true}
	if f := e.p.opts.OnCall; f != nil {
		sid := e.spec.SessionID
		opts.OnCall = func(method string, n int, err error, d time.Duration) { f(sid, method, n, err, d) }
	}
	var nc io.ReadWriteCloser
	var err error
	if e.transport != nil {
		nc, err = e.transport.Dial(ctx)
	} else {
		var d net.Dialer
		nc, err = d.DialContext(ctx, "unix", e.handle.Socket)
	}
	if err != nil {
		return fmt.Errorf("dial executor: %w", err)
	}
	if uc, ok := nc.(net.Conn); ok && verify != nil {
		pid, uid, err := rpc.PeerCred(uc)
		if err == nil {
			err = verify(pid, uid)
		}
		if err != nil {
			nc.Close()
			return err
		}
	}
	c := rpc.NewClient(rpc.NewConn(nc, (*connHandler)(e), opts))
	e.client = c
	ping, err := c.Ping(ctx)
	if err != nil {
		c.Close()
		c.Wait()
		return fmt.Errorf("ping: %w", err)
	}
	if ping.ProtocolVersion != rpc.ProtocolVersion {
		c.Close()
		c.Wait()
		return fmt.Errorf("%w: executor speaks %d, we speak %d", ErrIncompatible, ping.ProtocolVersion, rpc.ProtocolVersion)
	}
	// Output as binary frames: no base64 on either side.
	if _, err := c.SetOptions(ctx, rpc.ConnOptionsParams{BinaryOutput: true}); err != nil {
		c.Close()
		c.Wait()
		return fmt.Errorf("conn.options: %w", err)
	}
	e.ping = ping
	go e.watchConn(c)
	return nil
}

// watchConn fails what depends on the connection once it ends.
func (e *Environment) watchConn(c *rpc.Client) {
	defer close(e.connEnded)
	<-c.Done()
	err := c.Err()
	e.mu.Lock()
	terminated := e.terminated
	expected := e.terminating
	e.lost = fmt.Errorf("%w: connection to executor lost: %v", sandbox.ErrGone, err)
	if terminated {
		e.lost = sandbox.ErrTerminated
	}
	procs := make([]*process, 0, len(e.live))
	for p := range e.live {
		procs = append(procs, p)
	}
	clear(e.procs)
	watches := make([]*watchSub, 0, len(e.watches))
	for _, w := range e.watches {
		watches = append(watches, w)
	}
	clear(e.watches)
	lost := e.lost
	e.mu.Unlock()
	if !expected {
		e.log.Warn("executor connection lost", "err", err)
	}
	for _, p := range procs {
		if terminated {
			p.drop(lost)
		} else {
			p.fail(lost)
		}
	}
	for _, w := range watches {
		w.end()
	}
}

// Handle returns the environment's Handle as JSON: what Recover reads.
func (e *Environment) Handle() json.RawMessage {
	b, _ := json.Marshal(e.handle)
	return b
}

// WorkDir is the workspace as the executor's processes see it.
func (e *Environment) WorkDir() string { return e.ping.Workspace }

// Running reports whether the executor is connected and not terminated.
func (e *Environment) Running() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.terminated && e.lost == nil
}

// usable returns why calls cannot be made, or nil.
func (e *Environment) usable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.terminated {
		return sandbox.ErrTerminated
	}
	return e.lost
}

// call makes a call, mapping a lost connection to ErrGone.
func (e *Environment) call(ctx context.Context, method string, params, result any) error {
	if err := e.usable(); err != nil {
		return err
	}
	err := e.client.Call(ctx, method, params, result)
	if errors.Is(err, rpc.ErrClosed) {
		if uerr := e.usable(); uerr != nil {
			return fmt.Errorf("%s: %w", method, uerr)
		}
		return fmt.Errorf("%s: %w: %v", method, sandbox.ErrGone, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// Exec starts a process in the executor.
func (e *Environment) Exec(ctx context.Context, cmd sandbox.Cmd) (sandbox.Process, error) {
	if len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
		return nil, errors.New("exec: empty command")
	}
	tag := cmd.Tag
	if tag == "" {
		tag = newTag()
	}
	env := maps.Clone(e.spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, cmd.Env)
	var secretEnv map[string]string
	if len(e.p.opts.SecretEnv) > 0 {
		secretEnv = maps.Clone(e.p.opts.SecretEnv)
		for k := range secretEnv {
			delete(env, k)
		}
	}
	if e.p.opts.ModelProxy != nil {
		// The proxy holds the real keys: whatever the caller passed,
		// the environment gets the relay and its token.
		for _, k := range modelKeyVars {
			delete(secretEnv, k)
		}
		if addr := e.ping.ModelProxyAddr; addr != "" {
			env = withModelEnv(env, "http://"+addr, e.token)
		} else {
			for _, k := range modelKeyVars {
				delete(env, k)
			}
		}
	}
	params := rpc.ExecStartParams{
		Tag: tag, Argv: cmd.Argv, Cwd: cmd.Dir, Env: env, SecretEnv: secretEnv,
		Stdin: cmd.Stdin, Window: e.p.opts.Window,
	}
	if cmd.PTY != nil {
		params.PTY = &rpc.WindowSize{Rows: cmd.PTY.Rows, Cols: cmd.PTY.Cols}
	}
	// Registered before the call: output may arrive before the reply.
	p := newProcess(e, tag, sandbox.Offsets{})
	if err := e.register(p, false); err != nil {
		p.drop(err)
		return nil, fmt.Errorf("exec %q: %w", cmd.Argv[0], err)
	}
	if err := e.call(ctx, rpc.MethodExecStart, params, nil); err != nil {
		e.unregister(p)
		p.drop(err)
		return nil, fmt.Errorf("exec %q: %w", cmd.Argv[0], err)
	}
	return p, nil
}

// Attach re-attaches the process started with tag, replaying its output
// from the given offsets (or from the first byte still spooled, when the
// spool dropped older output: the first chunk's Offset then shows the
// gap). A process of this environment already attached to tag ends with
// an error.
func (e *Environment) Attach(ctx context.Context, tag string, from sandbox.Offsets) (sandbox.Process, error) {
	p := newProcess(e, tag, from)
	if err := e.register(p, true); err != nil {
		p.drop(err)
		return nil, fmt.Errorf("attach %q: %w", tag, err)
	}
	var r rpc.ExecAttachResult
	err := e.call(ctx, rpc.MethodExecAttach, rpc.ExecAttachParams{Tag: tag, FromOffset: from, Window: e.p.opts.Window}, &r)
	if err != nil {
		e.unregister(p)
		p.drop(err)
		return nil, fmt.Errorf("attach %q: %w", tag, err)
	}
	if r.First.Stdout > from.Stdout || r.First.Stderr > from.Stderr {
		e.log.Warn("output dropped by the executor's spool before re-attach",
			"tag", tag, "from", from, "first", r.First)
	}
	return p, nil
}

func (e *Environment) register(p *process, replace bool) error {
	e.mu.Lock()
	if e.terminated {
		e.mu.Unlock()
		return sandbox.ErrTerminated
	}
	if e.lost != nil {
		err := e.lost
		e.mu.Unlock()
		return err
	}
	old := e.procs[p.tag]
	if old != nil && !replace {
		e.mu.Unlock()
		return fmt.Errorf("%w: tag %q in use", fs.ErrExist, p.tag)
	}
	e.procs[p.tag] = p
	e.mu.Unlock()
	if old != nil {
		old.fail(errors.New("executor: process re-attached elsewhere"))
	}
	return nil
}

func (e *Environment) unregister(p *process) {
	e.mu.Lock()
	if e.procs[p.tag] == p {
		delete(e.procs, p.tag)
	}
	e.mu.Unlock()
}

func (e *Environment) lookup(tag string) *process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.procs[tag]
}

// ReadFile reads a workspace file. Files larger than about 12 MiB do not
// fit one message and fail with CodeTooLarge.
func (e *Environment) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var r rpc.FSReadResult
	if err := e.call(ctx, rpc.MethodFSRead, rpc.PathParams{Path: path}, &r); err != nil {
		return nil, err
	}
	if r.Data == nil {
		r.Data = []byte{}
	}
	return r.Data, nil
}

// OpenFile opens a workspace file to stream (sandbox.FileOpener). The
// workspace is a folder of this host: the server opens it itself, as the
// local backend does (regular files only, non-blocking, symlinks followed
// inside the workspace only), instead of moving it through the executor
// in one message (ReadFile, about 12 MiB at most).
//
// An environment reached through a Transport has no workspace on this
// host: the file is read through the executor (fs.read: regular files
// only, at most one message, sandbox.ErrTooLarge beyond).
func (e *Environment) OpenFile(ctx context.Context, path string) (sandbox.FileReader, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if e.transport != nil {
		data, err := e.ReadFile(ctx, path)
		if err != nil {
			return nil, err
		}
		return &readFile{Reader: bytes.NewReader(data), info: sandbox.FileInfo{Path: path, Size: int64(len(data)), Mode: 0o644}}, nil
	}
	view, err := e.p.files.Create(ctx, sandbox.Spec{SessionID: e.spec.SessionID, Workspace: e.spec.Workspace})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer view.Terminate(context.Background())
	return view.(sandbox.FileOpener).OpenFile(ctx, path)
}

// WriteFile writes a workspace file (atomically, as the local backend does).
func (e *Environment) WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error {
	return e.call(ctx, rpc.MethodFSWrite, rpc.FSFile{Path: path, Data: data, Mode: mode}, nil)
}

// WriteFiles writes several workspace files in one call.
func (e *Environment) WriteFiles(ctx context.Context, files []sandbox.File) error {
	fs := make([]rpc.FSFile, len(files))
	for i, f := range files {
		fs[i] = rpc.FSFile{Path: f.Path, Data: f.Content, Mode: f.Mode}
	}
	return e.call(ctx, rpc.MethodFSWriteMany, rpc.FSWriteManyParams{Files: fs}, nil)
}

// List lists the workspace.
func (e *Environment) List(ctx context.Context, dir string, recursive bool) ([]sandbox.FileInfo, error) {
	var r rpc.FSListResult
	if err := e.call(ctx, rpc.MethodFSList, rpc.FSListParams{Dir: dir, Recursive: recursive}, &r); err != nil {
		return nil, err
	}
	return r.Entries, nil
}

// Remove removes a workspace file or folder.
func (e *Environment) Remove(ctx context.Context, path string) error {
	return e.call(ctx, rpc.MethodFSRemove, rpc.PathParams{Path: path}, nil)
}

// Terminate shuts the executor down (it kills every process), waits for
// it to exit (killing it after Options.StopTimeout), and removes its run
// folder and socket. The workspace stays. An executor that is already gone
// is not an error. Later calls return the first call's result.
func (e *Environment) Terminate(ctx context.Context) error {
	e.termOnce.Do(func() { e.termErr = e.terminate(ctx) })
	return e.termErr
}

// Release implements sandbox.Releaser: the connection to the executor is
// closed and nothing else; the executor and its processes go on (their
// output into its spool) for a server to Recover. The model proxy's socket
// is left as it is: the server re-attaching serves it anew at the same
// path.
func (e *Environment) Release() {
	e.termOnce.Do(func() {
		e.mu.Lock()
		e.terminating, e.terminated = true, true
		e.mu.Unlock()
		e.closeConn()
		e.log.Info("executor released: left running for another server")
	})
}

func (e *Environment) terminate(ctx context.Context) error {
	e.releases.Wait()
	e.mu.Lock()
	alreadyLost := e.lost != nil
	e.terminating = true
	e.mu.Unlock()
	var shutdownErr error
	if !alreadyLost {
		sctx, cancel := context.WithTimeout(ctx, e.p.opts.StopTimeout)
		shutdownErr = e.client.Shutdown(sctx)
		cancel()
	}
	e.mu.Lock()
	e.terminated = true
	e.mu.Unlock()
	e.closeConn()

	wctx, cancel := context.WithTimeout(ctx, e.p.opts.StopTimeout)
	defer cancel()
	exited := false
	if e.transport != nil {
		// Nothing of it runs here: whatever is around it (a pod) is the
		// caller's to remove.
		exited = e.transport.WaitGone(wctx)
		if !exited {
			e.log.Warn("executor did not end after shutdown", "shutdownErr", shutdownErr)
		}
		e.finish()
		e.log.Info("executor terminated", "ended", exited)
		return nil
	}
	if e.reaped != nil {
		select {
		case <-e.reaped:
			exited = true
		case <-wctx.Done():
		}
	} else {
		exited = waitGone(wctx, e.handle.PID)
	}
	if !exited && e.group != nil {
		// Everything the environment runs is in its group.
		kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = e.group.Kill(kctx)
		kcancel()
		if e.reaped != nil {
			select {
			case <-e.reaped:
				exited = true
			case <-time.After(time.Second):
			}
		} else {
			wctx, wcancel := context.WithTimeout(context.Background(), time.Second)
			exited = waitGone(wctx, e.handle.PID)
			wcancel()
		}
	}
	if !exited {
		e.log.Warn("executor did not exit after shutdown; killing it", "shutdownErr", shutdownErr)
		// Its own process group (Setsid); the agents' groups went with
		// shutdown, or die with Pdeathsig when it does.
		_ = syscall.Kill(-e.handle.PID, syscall.SIGKILL)
		_ = syscall.Kill(e.handle.PID, syscall.SIGKILL)
		if e.reaped != nil {
			<-e.reaped
		} else {
			kctx, kcancel := context.WithTimeout(context.Background(), 5*time.Second)
			waitGone(kctx, e.handle.PID)
			kcancel()
		}
	}
	e.finish()
	e.log.Info("executor terminated", "killed", !exited)
	return nil
}

// finish drops what still waits on the environment and releases what was
// set up around it, once the executor is gone.
func (e *Environment) finish() {
	// Processes failed while the connection was already lost may still
	// wait for a reader: nobody will read now.
	e.mu.Lock()
	procs := make([]*process, 0, len(e.live))
	for p := range e.live {
		procs = append(procs, p)
	}
	e.mu.Unlock()
	for _, p := range procs {
		p.drop(sandbox.ErrTerminated)
	}
	e.release()
	if e.handle.Socket != "" {
		_ = os.Remove(e.handle.Socket)
	}
	if e.handle.Dir != "" {
		_ = os.RemoveAll(e.handle.Dir)
		_ = os.RemoveAll(proxyDir(e.handle.Dir))
	}
}

// release undoes what Create set up around the executor, once it is gone:
// whatever is left in its group is killed and the group removed (a
// process that left its process group, e.g. with setsid, does not outlive
// the environment), the model proxy stops serving it, and the workspace
// is taken back from its user. The user, with a pool, is free again
// already: its lock went with the executor.
func (e *Environment) release() {
	if e.group != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.group.Remove(ctx); err != nil {
			e.log.Error("remove the environment's cgroup", "cgroup", e.group.Name(), "err", err)
		}
		cancel()
	}
	if mp := e.p.opts.ModelProxy; mp != nil {
		mp.StopSession(e.spec.SessionID)
	}
	if e.cred != nil && e.ws != "" {
		if err := revokeWorkspace(e.ws); err != nil {
			e.log.Error("take the workspace back from its user", "workspace", e.ws, "err", err)
		}
	}
}

// adopt sets up, for an environment found again after a restart, what
// Create had: its user, its control group, its model proxy socket.
func (e *Environment) adopt(ctx context.Context) error {
	h := e.handle
	if h.UID != 0 {
		switch {
		case e.p.pool != nil:
			e.cred = e.p.pool.lookup(h.UID)
		case e.p.cred != nil && e.p.cred.uid == h.UID:
			e.cred = e.p.cred
		}
		if e.cred == nil {
			e.cred = uidCredential(h.UID)
		}
	}
	if ws, err := filepath.Abs(e.spec.Workspace); err == nil && e.spec.Workspace != "" {
		e.ws = ws
	}
	if h.Cgroup != "" && e.p.cg != nil {
		e.group = e.p.cg.Open(h.Cgroup)
	}
	if e.p.opts.ModelProxy != nil && h.Dir != "" {
		if err := e.serveModelProxy(ctx, proxyDir(h.Dir)); err != nil {
			return err
		}
	}
	return nil
}

// proxyDir is the folder holding an environment's model proxy socket, next
// to its run folder: the server's (0711), so the environment's user cannot
// swap it for a link.
func proxyDir(runDir string) string { return runDir + ".mp" }

// modelSocketName is the proxy socket's name in proxyDir.
const modelSocketName = "model.sock"

// serveModelProxy has the proxy serve this environment on a socket in dir,
// given to the environment's user.
func (e *Environment) serveModelProxy(ctx context.Context, dir string) error {
	sock := filepath.Join(dir, modelSocketName)
	token, err := e.p.opts.ModelProxy.ServeSession(ctx, e.spec.SessionID, sock)
	if err != nil {
		return fmt.Errorf("model proxy: %w", err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if e.cred != nil {
		uid, gid = int(e.cred.uid), int(e.cred.gid)
	}
	if err := os.Lchown(sock, uid, gid); err != nil {
		e.p.opts.ModelProxy.StopSession(e.spec.SessionID)
		return fmt.Errorf("model proxy socket: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		e.p.opts.ModelProxy.StopSession(e.spec.SessionID)
		return fmt.Errorf("model proxy socket: %w", err)
	}
	e.token = token
	return nil
}

// releaseAsync tells the executor it may forget an exited process,
// without making Wait pay a round trip for it.
func (e *Environment) releaseAsync(tag string) {
	e.releases.Add(1)
	go func() {
		defer e.releases.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.call(ctx, rpc.MethodExecRelease, rpc.TagParams{Tag: tag}, nil); err != nil &&
			!errors.Is(err, sandbox.ErrTerminated) && !errors.Is(err, sandbox.ErrGone) {
			e.log.Warn("exec.release", "tag", tag, "err", err)
		}
	}()
}

func newTag() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// connHandler receives what the executor sends.
type connHandler Environment

func (h *connHandler) HandleCall(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	e := (*Environment)(h)
	switch req.Method {
	case rpc.MethodSecretsGet:
		var p rpc.SecretsGetParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		if e.p.opts.Secrets == nil {
			return nil, rpc.Errorf(rpc.CodeSecretDenied, "no secret source configured")
		}
		v, err := e.p.opts.Secrets.Secret(ctx, e.spec.SessionID, p.Name)
		if err != nil {
			return nil, rpc.Errorf(rpc.CodeSecretDenied, "secret %q: %v", p.Name, err)
		}
		return rpc.SecretsGetResult{Value: v}, nil
	case rpc.MethodPermissionRq:
		var p rpc.PermissionParams
		if err := req.Decode(&p); err != nil {
			return nil, err
		}
		if e.p.opts.Permissions == nil {
			return rpc.PermissionResult{Behavior: "deny", Message: "no permission handler configured"}, nil
		}
		return e.p.opts.Permissions.AskPermission(ctx, e.spec.SessionID, p)
	}
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %q", req.Method)
}

func (h *connHandler) HandleNotify(c *rpc.Conn, method string, params json.RawMessage) {
	e := (*Environment)(h)
	switch method {
	case rpc.MethodExecOutput:
		var p rpc.ExecOutputParams
		if err := json.Unmarshal(params, &p); err != nil {
			e.log.Warn("bad exec.output from executor", "err", err)
			return
		}
		h.HandleOutput(c, p)
	case rpc.MethodExecExit:
		var p rpc.ExecExitParams
		if err := json.Unmarshal(params, &p); err != nil {
			e.log.Warn("bad exec.exit from executor", "err", err)
			return
		}
		if proc := e.lookup(p.Tag); proc != nil {
			proc.setExit(sandbox.ExitStatus{Code: p.Code, Signal: p.Signal}, p.End)
		}
	case rpc.MethodFSEvent:
		var p rpc.FSEventParams
		if err := json.Unmarshal(params, &p); err != nil {
			e.log.Warn("bad fs.event from executor", "err", err)
			return
		}
		e.mu.Lock()
		w := e.watches[p.WatchID]
		e.mu.Unlock()
		if w != nil {
			w.push(sandbox.FileEvent{Op: p.Op, Path: p.Path, Size: p.Size, SHA256: p.SHA256})
		}
	default:
		e.log.Debug("notification from executor ignored", "method", method)
	}
}

func (h *connHandler) HandleOutput(c *rpc.Conn, p rpc.ExecOutputParams) {
	if proc := (*Environment)(h).lookup(p.Tag); proc != nil {
		proc.push(sandbox.Chunk{Stream: p.Stream, Data: p.Data, Offset: p.Offset})
	}
}

// readFile is a workspace file read whole (OpenFile through a Transport).
type readFile struct {
	*bytes.Reader
	info sandbox.FileInfo
}

func (f *readFile) Info() sandbox.FileInfo { return f.info }
func (f *readFile) Close() error           { return nil }
