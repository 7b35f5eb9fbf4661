package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/sandbox"
)

// Connect returns the Environment of an executor this provider did not
// start itself, such as one that is a container's main process with its
// socket in a folder mounted from this host. It returns once the executor
// answered ping.
//
// h.Socket is the socket's path here and h.PID the host pid whose end
// means the executor's (a container's init); h.StartedAt, when set, must
// match the executor's ping (else sandbox.ErrGone: another executor
// answers), and is otherwise taken from it, as is h.InnerPID. With h.UID
// the environment's user is that uid: the workspace (spec.Workspace) is
// taken back from it at Terminate, and the model proxy's socket is given
// to it. With h.Dir (a folder of RunDir) the environment gets a model
// proxy socket in h.Dir + ".mp", and Terminate removes both folders and
// the socket. Terminate shuts the executor down and waits for h.PID to
// end; stopping what is around it (the container) is the caller's.
func (p *Provider) Connect(ctx context.Context, spec sandbox.Spec, h Handle) (*Environment, error) {
	if h.Socket == "" || h.PID <= 0 {
		return nil, errors.New("connect executor: no socket or pid")
	}
	h.ProtocolVersion = rpc.ProtocolVersion
	e := newEnvironment(p, spec, h)
	cctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	// The socket's folder is shared with what runs beside the executor
	// (a container's agents may run as the executor's uid): the peer must
	// be h.UID's and, once its inner pid is known (re-attach), that very
	// process.
	verify := func(pid, uid int) error {
		if h.UID != 0 && uid != int(h.UID) {
			return fmt.Errorf("%w: its uid is %d, not %d", errImpostor, uid, h.UID)
		}
		if h.InnerPID != 0 && !executorPID(h, pid) {
			return fmt.Errorf("%w: it is pid %d, not the executor (pid %d, inner pid %d)", errImpostor, pid, h.PID, h.InnerPID)
		}
		return nil
	}
	if err := e.connect(cctx, verify); err != nil {
		return nil, fmt.Errorf("connect executor: %w", err)
	}
	if !h.StartedAt.IsZero() && !e.ping.StartedAt.Equal(h.StartedAt) {
		e.closeConn()
		return nil, fmt.Errorf("connect executor: %w: socket answered by an executor started %s, not %s",
			sandbox.ErrGone, e.ping.StartedAt, h.StartedAt)
	}
	e.handle.StartedAt = e.ping.StartedAt
	if e.ping.PID != h.PID {
		e.handle.InnerPID = e.ping.PID
	}
	if err := e.adopt(cctx); err != nil {
		e.closeConn()
		return nil, fmt.Errorf("connect executor: %w", err)
	}
	return e, nil
}

// ChownTree gives the folder at root and everything in it to uid/gid the
// way this backend gives a workspace to its user (symlinks are not
// followed, the walk cannot be led out of root, the folder is closed while
// it runs), for other backends whose environments run as another uid.
func ChownTree(root string, uid, gid int) error { return chownTree(root, uid, gid) }

// RevokeWorkspace takes a workspace back from its user (owner: this
// process's user, mode 0700), as Terminate does for this backend's
// environments; a missing folder is not an error.
func RevokeWorkspace(ws string) error { return revokeWorkspace(ws) }

// Transport reaches an executor whose process and socket this host cannot
// see, such as one in a Kubernetes pod reached through the API server's
// port-forward: Dial opens a connection to it (each a new stream), and
// WaitGone tells when it has ended. Implementations must be safe for
// concurrent use.
type Transport interface {
	// Dial opens a new connection to the executor.
	Dial(ctx context.Context) (io.ReadWriteCloser, error)
	// WaitGone waits until the executor has ended (after shutdown); false
	// when ctx ended first.
	WaitGone(ctx context.Context) bool
}

// ConnectTransport returns the Environment of an executor reached through
// t. It returns once the executor answered ping. h.PID and h.Socket are
// not used (there is no process or socket here to check or signal): the
// connection is trusted as the transport's, and the executor checks its
// peer itself. h.StartedAt, when set, must match the executor's ping
// (else sandbox.ErrGone). With h.Dir (a folder of RunDir) the environment
// gets a model proxy socket in h.Dir + ".mp", which the caller relays to
// the executor (see TunnelPool in internal/executor), and Terminate
// removes both folders. Terminate shuts the executor down and waits for
// t.WaitGone; removing what is around it (the pod) is the caller's.
func (p *Provider) ConnectTransport(ctx context.Context, spec sandbox.Spec, h Handle, t Transport) (*Environment, error) {
	if t == nil {
		return nil, errors.New("connect executor: no transport")
	}
	h.ProtocolVersion = rpc.ProtocolVersion
	h.Socket, h.PID, h.UID, h.Cgroup, h.OwnSocket = "", 0, 0, "", false
	e := newEnvironment(p, spec, h)
	e.transport = t
	cctx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	if err := e.connect(cctx, nil); err != nil {
		return nil, fmt.Errorf("connect executor: %w", err)
	}
	if !h.StartedAt.IsZero() && !e.ping.StartedAt.Equal(h.StartedAt) {
		e.closeConn()
		return nil, fmt.Errorf("connect executor: %w: answered by an executor started %s, not %s",
			sandbox.ErrGone, e.ping.StartedAt, h.StartedAt)
	}
	e.handle.StartedAt = e.ping.StartedAt
	e.handle.InnerPID = e.ping.PID
	if err := e.adopt(cctx); err != nil {
		e.closeConn()
		return nil, fmt.Errorf("connect executor: %w", err)
	}
	return e, nil
}

// ProxySocket is the path of the model proxy's socket of an environment
// whose handle has Dir (empty without a model proxy): what a Transport's
// caller relays the executor's tunnels to.
func (p *Provider) ProxySocket(dir string) string {
	if p.opts.ModelProxy == nil || dir == "" {
		return ""
	}
	return filepath.Join(proxyDir(dir), modelSocketName)
}
