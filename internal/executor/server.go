package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"strconv"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// errShutdown: the executor is stopping.
var errShutdown = errors.New("executor: shutting down")

// Config configures an executor.
type Config struct {
	// SocketPath is where the executor listens, created with mode 0600
	// (0660 with Group). Ignored when Listener is set.
	SocketPath string
	// Group, when set (a name or a numeric gid), owns the socket, mode 0660.
	Group string
	// Listener is an inherited listening socket (e.g. from --listen-fd).
	Listener net.Listener
	// Env runs the processes and holds the files. Required. The executor
	// terminates it when it stops.
	Env sandbox.Environment
	// Workspace is the workspace folder, reported by ping.
	Workspace string
	// PeerUID is the only uid allowed to connect (checked with
	// SO_PEERCRED, or in the socket table for a loopback TCP listener).
	// Main defaults it to the executor's own uid.
	PeerUID int
	// SpoolDir holds the output spools (files unlinked at creation).
	// Default os.TempDir().
	SpoolDir string
	// SpoolBytes is the spool size per process and stream. When it is
	// full, the process waits while a connection receives its output
	// (back-pressure); with none attached the oldest output is dropped.
	// Default DefaultSpoolBytes.
	SpoolBytes int64
	// MaxLine bounds one incoming message. Default rpc.DefaultMaxLine.
	MaxLine int
	// OrphanTimeout, when > 0, makes the executor shut down (killing its
	// processes) once no server has been connected for that long.
	OrphanTimeout time.Duration
	// ModelProxyAddr is the address of the executor's model-proxy
	// forwarder, reported by ping ("" if none).
	ModelProxyAddr string
	Logger         *slog.Logger
}

// Executor serves one session's processes and files to the connections of
// the API server. Safe for concurrent use.
type Executor struct {
	cfg       Config
	log       *slog.Logger
	ln        net.Listener
	ownSocket bool // the socket file is ours to remove
	startedAt time.Time

	stopReq  chan struct{} // closed by shutdown
	stopOnce sync.Once
	stopped  chan struct{} // closed once everything has stopped
	termOnce sync.Once
	termErr  error
	bg       sync.WaitGroup // pumps, senders, watchers, connections

	mu       sync.Mutex
	stopping bool
	execs    map[string]*execState
	conns    map[*rpc.Conn]*connState
	lastConn *rpc.Conn
	seq      int // tags and watch ids
	idleTick chan struct{}
}

// connState is what the executor keeps per connection.
type connState struct {
	watches map[string]*watch
}

// New validates cfg and starts listening; Serve then accepts connections.
func New(cfg Config) (*Executor, error) {
	if cfg.Env == nil {
		return nil, errors.New("executor: Config.Env is required")
	}
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = os.TempDir()
	}
	if cfg.SpoolBytes <= 0 {
		cfg.SpoolBytes = DefaultSpoolBytes
	}
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = rpc.DefaultMaxLine
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	e := &Executor{
		cfg: cfg, log: log, startedAt: time.Now(),
		stopReq:  make(chan struct{}),
		stopped:  make(chan struct{}),
		execs:    map[string]*execState{},
		conns:    map[*rpc.Conn]*connState{},
		idleTick: make(chan struct{}, 1),
	}
	if cfg.Listener != nil {
		e.ln = cfg.Listener
		return e, nil
	}
	if cfg.SocketPath == "" {
		return nil, errors.New("executor: a socket path or a listener is required")
	}
	ln, err := listenSocket(cfg.SocketPath, cfg.Group)
	if err != nil {
		return nil, err
	}
	e.ln, e.ownSocket = ln, true
	return e, nil
}

// listenSocket listens on path with mode 0600, or 0660 owned by group.
// A stale socket file (nobody listening) is replaced.
func listenSocket(path, group string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another process is listening", path)
		}
		_ = os.Remove(path)
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", path, err)
		}
		gid = g
	}
	// The mode is set right after creation; a peer slipping in between
	// still meets the uid check.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Chown(path, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen %s: chown: %w", path, err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: chmod: %w", path, err)
	}
	return ln, nil
}

func lookupGroup(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil {
		return n, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// Serve runs an executor until ctx ends, a shutdown request, the orphan
// timeout or a listener failure; then it kills every process and returns.
func Serve(ctx context.Context, cfg Config) error {
	e, err := New(cfg)
	if err != nil {
		return err
	}
	return e.Serve(ctx)
}

// Addr is the address the executor listens on.
func (e *Executor) Addr() net.Addr { return e.ln.Addr() }

// Serve accepts connections until ctx ends, shutdown is requested or the
// orphan timeout passes; then it kills every process, closes every
// connection and returns. Call it once.
func (e *Executor) Serve(ctx context.Context) error {
	acceptDone := make(chan error, 1)
	go func() { acceptDone <- e.acceptLoop() }()

	var orphan <-chan time.Time
	var orphanTimer *time.Timer
	if e.cfg.OrphanTimeout > 0 {
		orphanTimer = time.NewTimer(e.cfg.OrphanTimeout)
		defer orphanTimer.Stop()
		orphan = orphanTimer.C
	}
	var serveErr error
	acceptEnded := false
loop:
	for {
		select {
		case <-ctx.Done():
			e.log.Info("executor stopping", "reason", "context done")
			break loop
		case <-e.stopReq:
			e.log.Info("executor stopping", "reason", "shutdown request")
			break loop
		case err := <-acceptDone:
			acceptEnded = true
			serveErr = fmt.Errorf("accept: %w", err)
			e.log.Error("executor stopping", "reason", "listener failed", "err", err)
			break loop
		case <-e.idleTick:
			if orphanTimer == nil {
				continue
			}
			orphanTimer.Stop()
			if e.connCount() == 0 {
				orphanTimer.Reset(e.cfg.OrphanTimeout)
			}
		case <-orphan:
			if e.connCount() > 0 {
				continue
			}
			e.log.Warn("executor stopping", "reason", "no server connected", "for", e.cfg.OrphanTimeout)
			break loop
		}
	}

	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.ln.Close()
	if !acceptEnded {
		<-acceptDone
	}
	tctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := e.terminate(tctx); err != nil {
		e.log.Error("executor: terminate environment", "err", err)
	}
	cancel()
	e.mu.Lock()
	conns := make([]*rpc.Conn, 0, len(e.conns))
	for c := range e.conns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	for _, c := range conns {
		c.Wait()
	}
	e.bg.Wait()
	e.mu.Lock()
	for tag, x := range e.execs {
		x.releaseSpools()
		delete(e.execs, tag)
	}
	e.mu.Unlock()
	if e.ownSocket {
		_ = os.Remove(e.cfg.SocketPath)
	}
	close(e.stopped)
	return serveErr
}

// terminate kills every process (once).
func (e *Executor) terminate(ctx context.Context) error {
	e.termOnce.Do(func() { e.termErr = e.cfg.Env.Terminate(ctx) })
	return e.termErr
}

func (e *Executor) requestStop() { e.stopOnce.Do(func() { close(e.stopReq) }) }

func (e *Executor) connCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

func (e *Executor) poke() {
	select {
	case e.idleTick <- struct{}{}:
	default:
	}
}

func (e *Executor) acceptLoop() error {
	for {
		nc, err := e.ln.Accept()
		if err != nil {
			e.mu.Lock()
			stopping := e.stopping
			e.mu.Unlock()
			if stopping || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if err := checkPeer(nc, e.cfg.PeerUID); err != nil {
			e.log.Warn("executor: connection refused", "err", err)
			refuse(nc, err)
			continue
		}
		e.addConn(nc)
	}
}

func (e *Executor) addConn(nc net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		nc.Close()
		return
	}
	c := rpc.NewConn(nc, &handler{e: e}, rpc.ConnOptions{MaxLine: e.cfg.MaxLine, Logger: e.log})
	e.conns[c] = &connState{watches: map[string]*watch{}}
	e.lastConn = c
	e.log.Info("executor: server connected", "conns", len(e.conns))
	e.poke()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		<-c.Done()
		e.dropConn(c)
		c.Wait()
	}()
}

// dropConn forgets a closed connection and stops what it owned.
func (e *Executor) dropConn(c *rpc.Conn) {
	e.mu.Lock()
	cs := e.conns[c]
	delete(e.conns, c)
	if e.lastConn == c {
		e.lastConn = nil
		for other := range e.conns {
			e.lastConn = other
		}
	}
	n := len(e.conns)
	var watches []*watch
	if cs != nil {
		for _, w := range cs.watches {
			watches = append(watches, w)
		}
		clear(cs.watches)
	}
	e.mu.Unlock()
	for _, w := range watches {
		w.stop()
	}
	e.log.Info("executor: server disconnected", "conns", n, "err", c.Err())
	e.poke()
}

// callServer sends a request to the connected server: c, or the most
// recently connected one when c is nil.
func (e *Executor) callServer(ctx context.Context, c *rpc.Conn, method string, params, result any) error {
	if c == nil {
		e.mu.Lock()
		c = e.lastConn
		e.mu.Unlock()
	}
	if c == nil {
		return rpc.Errorf(rpc.CodeUnavailable, "%s: no server connected", method)
	}
	return c.Call(ctx, method, params, result)
}

// RequestSecret asks the connected server for a secret (secrets.get).
func (e *Executor) RequestSecret(ctx context.Context, name string) (string, error) {
	var r rpc.SecretsGetResult
	if err := e.callServer(ctx, nil, rpc.MethodSecretsGet, rpc.SecretsGetParams{Name: name}, &r); err != nil {
		return "", fmt.Errorf("secrets.get %q: %w", name, err)
	}
	return r.Value, nil
}

// RequestPermission asks the connected server whether a tool may run
// (permission.request). It waits as long as the server does (or ctx).
func (e *Executor) RequestPermission(ctx context.Context, p rpc.PermissionParams) (rpc.PermissionResult, error) {
	var r rpc.PermissionResult
	if err := e.callServer(ctx, nil, rpc.MethodPermissionRq, p, &r); err != nil {
		return r, fmt.Errorf("permission.request: %w", err)
	}
	if r.Behavior != "allow" && r.Behavior != "deny" {
		return r, fmt.Errorf("permission.request: bad behavior %q", r.Behavior)
	}
	return r, nil
}

func (e *Executor) ping() rpc.PingResult {
	return rpc.PingResult{
		ProtocolVersion: rpc.ProtocolVersion,
		PID:             os.Getpid(),
		StartedAt:       e.startedAt,
		UID:             os.Getuid(),
		GID:             os.Getgid(),
		Workspace:       e.cfg.Workspace,
		ModelProxyAddr:  e.cfg.ModelProxyAddr,
	}
}

func (e *Executor) isStopping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}
