package kubernetes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/executor"
)

// forwarder is one port-forward connection to a pod through the API
// server: each Dial is a new stream to a loopback port of the pod, which
// the node's runtime connects inside the pod's network namespace. Streams
// have their own flow control; the connection sends pings, so an idle one
// is not cut. Safe for concurrent use.
type forwarder struct {
	pod    string
	conn   httpstream.Connection
	nextID atomic.Int64
	once   sync.Once
}

// dialPod opens a port-forward connection to the pod: WebSocket (SPDY
// tunnelled) first, SPDY when the API server does not upgrade to it.
func (p *Provider) dialPod(ctx context.Context, name string) (*forwarder, error) {
	u := p.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.opts.Namespace).
		Name(name).SubResource("portforward").URL()
	tunneling, err := portforward.NewSPDYOverWebsocketDialer(u, p.cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward %s: %w", name, err)
	}
	rt, upgrader, err := spdy.RoundTripperFor(p.cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward %s: %w", name, err)
	}
	plain := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	dialer := portforward.NewFallbackDialer(tunneling, plain, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	type result struct {
		conn  httpstream.Connection
		proto string
		err   error
	}
	// Dial takes no context: it runs aside, and a connection made after
	// ctx ended is closed.
	ch := make(chan result, 1)
	go func() {
		c, proto, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- result{c, proto, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward %s: %w", name, r.err)
		}
		if r.proto != portforward.PortForwardProtocolV1Name {
			r.conn.Close()
			return nil, fmt.Errorf("port-forward %s: protocol %q negotiated", name, r.proto)
		}
		return &forwarder{pod: name, conn: r.conn}, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("port-forward %s: %w", name, ctx.Err())
	}
}

// Close closes the connection and every stream on it.
func (f *forwarder) Close() {
	f.once.Do(func() { f.conn.Close() })
}

// closed reports whether the connection has ended.
func (f *forwarder) closed() bool {
	select {
	case <-f.conn.CloseChan():
		return true
	default:
		return false
	}
}

// Dial opens a stream to the executor's port.
func (f *forwarder) Dial(ctx context.Context) (io.ReadWriteCloser, error) {
	return f.stream(ctx, executorPort)
}

// streamTimeout bounds the creation of a stream: the other end answers
// at once, or never.
const streamTimeout = 10 * time.Second

// stream opens a stream pair (data and error) to port.
func (f *forwarder) stream(ctx context.Context, port int) (*pfStream, error) {
	if f.closed() {
		return nil, fmt.Errorf("port-forward %s: connection closed", f.pod)
	}
	ctx, cancel := context.WithTimeout(ctx, streamTimeout)
	defer cancel()
	id := f.nextID.Add(1)
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, strconv.FormatInt(id, 10))
	type result struct {
		s   httpstream.Stream
		err error
	}
	create := func() (httpstream.Stream, error) {
		// CreateStream waits for the other end's reply, without a
		// context: it runs aside.
		ch := make(chan result, 1)
		go func() {
			s, err := f.conn.CreateStream(h.Clone())
			ch <- result{s, err}
		}()
		select {
		case r := <-ch:
			return r.s, r.err
		case <-ctx.Done():
			go func() {
				if r := <-ch; r.s != nil {
					_ = r.s.Reset()
				}
			}()
			return nil, ctx.Err()
		}
	}
	errs, err := create()
	if err != nil {
		return nil, fmt.Errorf("port-forward %s: error stream: %w", f.pod, err)
	}
	_ = errs.Close() // nothing is written to it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := create()
	if err != nil {
		_ = errs.Reset()
		f.conn.RemoveStreams(errs)
		return nil, fmt.Errorf("port-forward %s: data stream: %w", f.pod, err)
	}
	s := &pfStream{f: f, data: data, errs: errs, errDone: make(chan struct{})}
	go s.readErrors()
	return s, nil
}

// pfStream is one forwarded connection: reads and writes go to the data
// stream; what the node reports (the port refused the connection, say)
// arrives on the error stream and is returned by Read at the data's end.
type pfStream struct {
	f       *forwarder
	data    httpstream.Stream
	errs    httpstream.Stream
	errDone chan struct{}
	remote  error // set before errDone is closed
	once    sync.Once
}

func (s *pfStream) readErrors() {
	defer close(s.errDone)
	msg, err := io.ReadAll(io.LimitReader(s.errs, 64<<10))
	switch {
	case len(msg) > 0:
		s.remote = fmt.Errorf("port-forward %s: %s", s.f.pod, msg)
		_ = s.data.Reset()
	case err != nil:
		s.remote = fmt.Errorf("port-forward %s: error stream: %w", s.f.pod, err)
	}
}

func (s *pfStream) Read(b []byte) (int, error) {
	n, err := s.data.Read(b)
	if err != nil && n == 0 {
		select {
		case <-s.errDone:
			if s.remote != nil {
				return 0, s.remote
			}
		default:
		}
	}
	return n, err
}

func (s *pfStream) Write(b []byte) (int, error) { return s.data.Write(b) }

// CloseWrite ends what is sent: the peer reads EOF, and can still send.
func (s *pfStream) CloseWrite() error { return s.data.Close() }

// Close ends the stream both ways.
func (s *pfStream) Close() error {
	s.once.Do(func() {
		_ = s.data.Reset()
		_ = s.errs.Reset()
		s.f.conn.RemoveStreams(s.data, s.errs)
	})
	return nil
}

// podTransport is an environment's executor.Transport.
type podTransport struct {
	p   *Provider
	box *box
}

var _ executor.Transport = podTransport{}

func (t podTransport) Dial(ctx context.Context) (io.ReadWriteCloser, error) {
	return t.box.fwd.Dial(ctx)
}

// WaitGone waits until the executor's container has ended (or the pod is
// gone).
func (t podTransport) WaitGone(ctx context.Context) bool {
	pods := t.p.cs.CoreV1().Pods(t.p.opts.Namespace)
	for {
		pod, err := pods.Get(ctx, t.box.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && (pod.UID != t.box.uid || executorEnded(pod))) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// executorEnded reports whether the pod's executor container has ended
// (or the pod is past running).
func executorEnded(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && (cs.State.Terminated != nil || cs.RestartCount > 0) {
			return true
		}
	}
	return false
}

// tunnels keeps a few streams open to the executor's tunnel port, ahead
// of need: each carries one connection an agent made to the executor's
// model relay (the executor's TunnelPool) to the session's model proxy socket here.
type tunnels struct {
	f      *forwarder
	socket string
	log    *slog.Logger
	want   int
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	open map[*pfStream]struct{}
}

// idleTunnels is how many tunnels wait per environment.
const idleTunnels = 2

func startTunnels(f *forwarder, socket string, log *slog.Logger) *tunnels {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tunnels{f: f, socket: socket, log: log, want: idleTunnels, ctx: ctx, cancel: cancel, open: map[*pfStream]struct{}{}}
	t.wg.Add(1)
	go t.keep()
	return t
}

// keep opens a tunnel whenever fewer than want wait, pausing after
// tunnels that failed before they were used.
func (t *tunnels) keep() {
	defer t.wg.Done()
	refill := make(chan bool, t.want) // true: the tunnel was used
	for range t.want {
		refill <- true
	}
	pause := 50 * time.Millisecond
	for {
		var used bool
		select {
		case <-t.ctx.Done():
			return
		case used = <-refill:
		}
		if used {
			pause = 50 * time.Millisecond
		} else {
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, 5*time.Second)
		}
		s, err := t.f.stream(t.ctx, tunnelPort)
		if err != nil {
			if t.f.closed() || t.ctx.Err() != nil {
				return
			}
			t.log.Debug("tunnel", "err", err)
			refill <- false
			continue
		}
		if !t.track(s) {
			s.Close()
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer t.untrack(s)
			refill <- t.serve(s)
		}()
	}
}

func (t *tunnels) track(s *pfStream) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return false
	}
	t.open[s] = struct{}{}
	return true
}

func (t *tunnels) untrack(s *pfStream) {
	t.mu.Lock()
	delete(t.open, s)
	t.mu.Unlock()
}

// serve waits for the executor to hand the tunnel a connection, then
// relays it to the model proxy. It reports whether the tunnel was used.
func (t *tunnels) serve(s *pfStream) bool {
	defer s.Close()
	var b [len(rpc.TunnelHeader)]byte
	if _, err := io.ReadFull(s, b[:]); err != nil || string(b[:]) != rpc.TunnelHeader {
		return false
	}
	var d net.Dialer
	up, err := d.DialContext(t.ctx, "unix", t.socket)
	if err != nil {
		t.log.Warn("model proxy unreachable", "socket", t.socket, "err", err)
		return true
	}
	defer up.Close()
	relayed := make(chan struct{})
	defer close(relayed)
	t.wg.Add(1)
	go func() { // stop cuts the relay short
		defer t.wg.Done()
		select {
		case <-t.ctx.Done():
			up.Close()
			s.Close()
		case <-relayed:
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, s)
		_ = up.(*net.UnixConn).CloseWrite()
	}()
	_, _ = io.Copy(s, up)
	_ = s.CloseWrite()
	<-done
	return true
}

// stop closes every tunnel and waits for the relays to end.
func (t *tunnels) stop() {
	t.mu.Lock()
	t.cancel()
	open := make([]*pfStream, 0, len(t.open))
	for s := range t.open {
		open = append(open, s)
	}
	t.mu.Unlock()
	for _, s := range open {
		s.Close()
	}
	t.wg.Wait()
}
