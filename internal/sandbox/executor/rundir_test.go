package executor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// TestRunDirRefusesOthers: a run folder the server did not make is
// refused. The default /tmp/agentd-<uid> is predictable: a local user who
// made it first (with users/<uid>.lock a symlink to a root file) used to
// have the server open that file read-write and hand it to an agent.
func TestRunDirRefusesOthers(t *testing.T) {
	needRoot(t)
	const other = testUIDBase + 5
	dir := sandboxtest.ShortTempDir(t, "sr")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	plant := func(t *testing.T, run string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(run, "users"), 0o777); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{run, filepath.Join(run, "users")} {
			os.Chmod(d, 0o777)
			if err := os.Chown(d, other, other); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(secret, filepath.Join(run, "users", strconv.Itoa(testUIDBase)+".lock")); err != nil {
			t.Fatal(err)
		}
	}
	try := func(t *testing.T, run string, want string) {
		t.Helper()
		for _, pool := range []bool{false, true} {
			opts := testOptions(run)
			if pool {
				opts.UserPool = []string{strconv.Itoa(testUIDBase)}
			}
			p, err := New(opts)
			if err == nil {
				// What the old code did next: take a user.
				if p.pool != nil {
					if _, f, err := p.pool.acquire(); err == nil {
						f.Close()
					}
				}
				t.Fatalf("run folder %s accepted (pool %v)", run, pool)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("pool %v: error %q does not say %q", pool, err, want)
			}
		}
	}

	t.Run("owned by another user", func(t *testing.T) {
		run := filepath.Join(dir, "a")
		plant(t, run)
		try(t, run, "belongs to uid "+strconv.Itoa(other))
	})
	t.Run("default folder made by another user", func(t *testing.T) {
		tmp := filepath.Join(dir, "tmp")
		os.Mkdir(tmp, 0o777)
		os.Chmod(tmp, 0o777|os.ModeSticky) // like /tmp
		t.Setenv("XDG_RUNTIME_DIR", "")
		t.Setenv("TMPDIR", tmp)
		run := filepath.Join(tmp, "agentd-"+strconv.Itoa(os.Getuid()))
		plant(t, run)
		opts := testOptions("")
		if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "belongs to uid") {
			t.Fatalf("default run folder %s of another user: %v", run, err)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		target := filepath.Join(dir, "target")
		os.Mkdir(target, 0o700)
		run := filepath.Join(dir, "link")
		os.Symlink(target, run)
		try(t, run, "symlink")
	})
	t.Run("writable by others", func(t *testing.T) {
		run := filepath.Join(dir, "open")
		os.Mkdir(run, 0o777)
		os.Chmod(run, 0o777)
		try(t, run, "others may write it")
	})
	t.Run("parent of another user", func(t *testing.T) {
		parent := filepath.Join(dir, "parent")
		os.Mkdir(parent, 0o755)
		os.Chown(parent, other, other)
		try(t, filepath.Join(parent, "run"), "belongs to uid "+strconv.Itoa(other))
	})
	if b, err := os.ReadFile(secret); err != nil || string(b) != "root only" {
		t.Fatalf("secret: %q %v", b, err)
	}

	t.Run("an older server's folder is taken over", func(t *testing.T) {
		run := filepath.Join(dir, "mine")
		os.Mkdir(run, 0o755)
		os.Chmod(run, 0o755)
		if _, err := New(testOptions(run)); err != nil {
			t.Fatal(err)
		}
		if _, mode := owner(t, run); mode != 0o711 {
			t.Fatalf("run folder mode %o, want 0711 (not listable; passable as it was)", mode)
		}
		fresh := filepath.Join(dir, "fresh")
		if _, err := New(testOptions(fresh)); err != nil {
			t.Fatal(err)
		}
		if _, mode := owner(t, fresh); mode != 0o700 {
			t.Fatalf("new run folder mode %o, want 0700 (no users)", mode)
		}
	})
}

// TestLockFileNoFollow: a symlink where a pool user's lock file goes is
// refused, not followed.
func TestLockFileNoFollow(t *testing.T) {
	needRoot(t)
	dir := sandboxtest.ShortTempDir(t, "sl")
	p := poolProvider(t, dir, 1, nil)
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("root only"), 0o600)
	lock := filepath.Join(dir, "run", "users", strconv.Itoa(testUIDBase)+".lock")
	os.Remove(lock)
	if err := os.Symlink(secret, lock); err != nil {
		t.Fatal(err)
	}
	env, err := p.Create(bg, sandbox.Spec{SessionID: "lock", Workspace: filepath.Join(dir, "ws")})
	if err == nil {
		env.Terminate(bg)
		t.Fatal("an environment was created with the lock file a symlink")
	}
	if !strings.Contains(err.Error(), "lock file") {
		t.Fatalf("error %q does not name the lock file", err)
	}
	os.Remove(lock)
	// Without the planted link the user is handed out again.
	sandboxtest.Create(t, p, sandbox.Spec{SessionID: "lock", Workspace: filepath.Join(dir, "ws")})
}

// impostor serves an executor's socket path in this process, answering
// ping as the executor of handle h would: what a process that took over
// the path could do.
func impostor(t *testing.T, h Handle) *sync.WaitGroup {
	t.Helper()
	if err := os.Remove(h.Socket); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", h.Socket)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []*rpc.Conn
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			c := rpc.NewConn(nc, fakeExecutor{h}, rpc.ConnOptions{})
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
			c.Wait()
		}
	})
	return &wg
}

type fakeExecutor struct{ h Handle }

func (f fakeExecutor) HandleCall(ctx context.Context, c *rpc.Conn, req *rpc.Request) (any, error) {
	pid := f.h.PID
	if f.h.InnerPID > 0 {
		pid = f.h.InnerPID
	}
	switch req.Method {
	case rpc.MethodPing:
		return rpc.PingResult{ProtocolVersion: rpc.ProtocolVersion, PID: pid, StartedAt: f.h.StartedAt, UID: int(f.h.UID)}, nil
	case rpc.MethodConnOptions:
		return rpc.ConnOptionsResult{}, nil
	}
	return rpc.OKResult{OK: true}, nil
}

func (fakeExecutor) HandleNotify(*rpc.Conn, string, json.RawMessage) {}

// TestRecoverChecksPeer: Recover checks who serves the socket it dials
// (SO_PEERCRED) before it sends anything: a process that answers ping
// exactly as the recorded executor would, but is not it, is refused.
func TestRecoverChecksPeer(t *testing.T) {
	t.Run("executor", func(t *testing.T) {
		p, dir := newTestProvider(t, nil)
		e, spec := createEnv(t, p, dir)
		checkRecoverRefusesImpostor(t, p, spec, e)
	})
	t.Run("pool user", func(t *testing.T) {
		needRoot(t)
		dir := sandboxtest.ShortTempDir(t, "sp")
		p := poolProvider(t, dir, 1, nil)
		spec := sandbox.Spec{SessionID: "peer", Workspace: filepath.Join(dir, "ws")}
		e := createSpec(t, p, spec)
		checkRecoverRefusesImpostor(t, p, spec, e)
	})
}

func checkRecoverRefusesImpostor(t *testing.T, p *Provider, spec sandbox.Spec, e *Environment) {
	t.Helper()
	var h Handle
	if err := json.Unmarshal(e.Handle(), &h); err != nil {
		t.Fatal(err)
	}
	if !h.OwnSocket {
		t.Fatal("a new handle does not record that the executor listens itself")
	}
	// The real executor is recovered (its peer is itself).
	env2, err := p.Recover(bg, spec, e.Handle())
	if err != nil {
		t.Fatalf("recover the real executor: %v", err)
	}
	env2.(*Environment).closeConn()

	impostor(t, h)
	if env, err := p.Recover(bg, spec, e.Handle()); err == nil {
		env.(*Environment).closeConn()
		t.Fatal("Recover accepted a socket served by another process")
	} else if !errors.Is(err, sandbox.ErrGone) || !strings.Contains(err.Error(), "not served by the recorded executor") {
		t.Fatalf("impostor: %v", err)
	}
	// An older handle (its executor did not listen itself: the socket's
	// credentials are the server's) accepts the server's uid, nothing
	// else: with a user, this impostor (the server's uid) passes that
	// weaker check, which is why new handles are checked strictly.
	h.OwnSocket = false
	old, _ := json.Marshal(h)
	if env, err := p.Recover(bg, spec, old); err != nil {
		t.Fatalf("an older handle's socket served with the server's uid: %v", err)
	} else {
		env.(*Environment).closeConn()
	}
}
