package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/agentd/agentd/internal/auth"
)

// errCredentialGone is the cause a stream is cancelled with when its
// credential stopped being valid.
var errCredentialGone = errors.New("credential no longer valid")

// CloseUnauthorized is the WebSocket close code of a connection whose
// credential stopped being valid (revoked or expired token, disabled
// user).
const CloseUnauthorized = 4001

// liveConns are the open long-lived connections (WebSocket, SSE,
// Socket.IO, terminal) with the credential each authenticated with. Their
// credentials are checked again every recheck interval and at once when
// this server revokes a token or disables a user; a connection whose
// credential fails is closed. (Another server of a fleet revoking one is
// seen at the next check.) The checking goroutine runs only while
// connections are open.
type liveConns struct {
	s     *Server
	every time.Duration
	kick  chan struct{}

	mu      sync.Mutex // guards conns, running
	conns   map[*liveConn]struct{}
	running bool
}

type liveConn struct {
	cred  string // guarded by liveConns.mu (renew changes it)
	close func()
}

func (l *liveConns) init(s *Server) {
	l.s, l.conns, l.kick = s, map[*liveConn]struct{}{}, make(chan struct{}, 1)
	l.every = s.cfg.AuthRecheck
	if l.every <= 0 {
		l.every = 10 * time.Second
	}
	s.cfg.Auth.OnRevoke(func() {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	})
}

// track registers a connection made by the request of ctx; closeConn ends
// it (it must not block). Call the returned function when it ends.
func (l *liveConns) track(ctx context.Context, closeConn func()) func() {
	_, untrack := l.trackConn(ctx, closeConn)
	return untrack
}

// trackConn is track, also returning the connection (nil when auth is
// off) for renew.
func (l *liveConns) trackConn(ctx context.Context, closeConn func()) (*liveConn, func()) {
	if !l.s.cfg.Auth.Required() {
		return nil, func() {}
	}
	c := &liveConn{cred: credentialOf(ctx), close: closeConn}
	l.mu.Lock()
	l.conns[c] = struct{}{}
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
	return c, func() {
		l.mu.Lock()
		delete(l.conns, c)
		l.mu.Unlock()
	}
}

// renew has c checked with cred from now on (a client that refreshed its
// token over the open connection; the caller checked cred).
func (l *liveConns) renew(c *liveConn, cred string) {
	if c == nil {
		return
	}
	l.mu.Lock()
	c.cred = cred
	l.mu.Unlock()
}

func (l *liveConns) run() {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		select {
		case <-l.s.closeCtx.Done():
			l.mu.Lock()
			l.running = false
			l.mu.Unlock()
			return
		case <-t.C:
		case <-l.kick:
		}
		l.check()
		l.mu.Lock()
		if len(l.conns) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
	}
}

// check authenticates every open connection's credential again and
// closes those that fail.
func (l *liveConns) check() {
	l.mu.Lock()
	byCred := map[string][]*liveConn{}
	for c := range l.conns {
		byCred[c.cred] = append(byCred[c.cred], c)
	}
	l.mu.Unlock()
	for cred, cs := range byCred {
		ctx, cancel := context.WithTimeout(l.s.closeCtx, 10*time.Second)
		_, err := l.s.cfg.Auth.Authenticate(ctx, cred)
		cancel()
		if err == nil || !(errors.Is(err, auth.ErrUnauthenticated) || errors.Is(err, auth.ErrForbidden)) {
			continue // valid, or the store is unreachable: keep them
		}
		var gone []*liveConn
		l.mu.Lock()
		for _, c := range cs {
			if c.cred != cred {
				continue // renewed since the snapshot: checked next time
			}
			if _, open := l.conns[c]; open {
				delete(l.conns, c)
				gone = append(gone, c)
			}
		}
		l.mu.Unlock()
		if len(gone) == 0 {
			continue
		}
		l.s.log.Info("closing connections whose credential is no longer valid", "count", len(gone), "err", err)
		for _, c := range gone {
			c.close()
		}
	}
}
