package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
)

// FakeProxy is a model proxy (executor.ModelProxy) serving HTTP on each
// session's socket; it answers "proxy for <session>: <method> <path>
// key=<x-api-key>" and returns "tok-<session>" as the token. It is safe
// for concurrent use; Close stops every server and waits for them.
type FakeProxy struct {
	mu      sync.Mutex
	servers map[string]*http.Server
	calls   int
	wg      sync.WaitGroup
}

// ServeSession serves session id on the unix socket path, replacing an
// earlier server of id.
func (f *FakeProxy) ServeSession(_ context.Context, id, path string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if old := f.servers[id]; old != nil {
		old.Close()
	}
	_ = os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return "", err
	}
	// The old server may close its listener late (Serve closes it once it
	// runs): that must not unlink the path the new one listens on.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "proxy for %s: %s %s key=%s", id, r.Method, r.URL.Path, r.Header.Get("x-api-key"))
	})}
	if f.servers == nil {
		f.servers = map[string]*http.Server{}
	}
	f.servers[id] = srv
	f.wg.Add(1)
	go func() { defer f.wg.Done(); srv.Serve(ln) }()
	return "tok-" + id, nil
}

// StopSession stops session id's server.
func (f *FakeProxy) StopSession(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.servers[id]; s != nil {
		s.Close()
		delete(f.servers, id)
	}
}

// Calls is how many times ServeSession was called.
func (f *FakeProxy) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// Serving is how many sessions it serves now.
func (f *FakeProxy) Serving() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.servers)
}

// Close stops every server and waits for them.
func (f *FakeProxy) Close() {
	f.mu.Lock()
	for _, s := range f.servers {
		s.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
