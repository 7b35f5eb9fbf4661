package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/container"
	"github.com/agentd/agentd/internal/sandbox/docker"
	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// These tests run real containers on a real Docker daemon (DOCKER_HOST):
// see agentdtest.Docker. Each test labels its containers with a node of its
// own, so tests of other packages on the same daemon are not touched.

func TestMain(m *testing.M) {
	if os.Getenv("AGENTD_TEST_LOG") == "" {
		slog.SetDefault(slog.New(slog.DiscardHandler))
	}
	goleak.VerifyTestMain(m)
}

type fixture struct {
	t     testing.TB
	cli   *client.Client
	opts  docker.Options
	dir   string // short temp folder: run dir, workspaces
	proxy *sandboxtest.FakeProxy
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	if testing.Short() {
		t.Skip("starts containers")
	}
	cli := agentdtest.Docker(t)
	dir := sandboxtest.ShortTempDir(t, "dk")
	var rnd [4]byte
	rand.Read(rnd[:])
	f := &fixture{t: t, cli: cli, dir: dir, proxy: &sandboxtest.FakeProxy{}}
	t.Cleanup(f.proxy.Close)
	f.opts = docker.Options{
		Options: container.Options{
			Image: agentdtest.SandboxImage(), RunDir: filepath.Join(dir, "run"),
			Node: "test-" + hex.EncodeToString(rnd[:]), ModelProxy: f.proxy,
			Limits: sandbox.Limits{MemoryBytes: 512 << 20, Pids: 128},
		},
		Client: cli, Executor: agentdtest.Binary(t), WarmDir: filepath.Join(dir, "warm"),
	}
	t.Cleanup(func() {
		// Nothing of this test may be left.
		if left := agentdtest.DockerContainers(t, cli, f.opts.Node); len(left) > 0 {
			t.Errorf("containers left: %v", left)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, c := range left {
				cli.ContainerRemove(ctx, c, client.ContainerRemoveOptions{Force: true})
			}
		}
	})
	return f
}

func (f *fixture) provider(mod func(*docker.Options)) *docker.Provider {
	f.t.Helper()
	return sandboxtest.NewProvider(f.t, f.opts, mod, docker.New)
}

// restarted is the provider of a restarted server.
func (f *fixture) restarted() sandboxtest.ContainerProvider { return f.provider(nil) }

func (f *fixture) spec(id string) sandbox.Spec {
	return sandbox.Spec{SessionID: id, Workspace: filepath.Join(f.dir, "ws", id), Env: map[string]string{"FROM_SPEC": "yes"}, Profile: "default"}
}

func (f *fixture) exists(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := f.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		f.t.Fatal(err)
	}
	return err == nil
}

func TestCreateExecTerminate(t *testing.T) {
	f := newFixture(t)
	p := f.provider(nil)
	spec := f.spec("s1")
	env, err := p.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	e := env.(*docker.Environment)
	if env.WorkDir() != "/workspace" {
		t.Fatalf("workdir %q", env.WorkDir())
	}
	var h docker.Handle
	if err := json.Unmarshal(e.Handle(), &h); err != nil || h.Container != e.Container() || !strings.HasPrefix(h.Name, "agentd-") {
		t.Fatalf("handle %s: %v", e.Handle(), err)
	}
	out, errOut, st := sandboxtest.Shell(t, env, `id -u; pwd; echo $HOME $FROM_SPEC; echo hello > made.txt; ls /sys/class/net; touch /etc/x 2>&1 || echo ro-root; touch /tmp/x && echo tmp-ok
curl -s -H "x-api-key: $ANTHROPIC_API_KEY" $ANTHROPIC_BASE_URL/v1/messages; echo`)
	if !st.Success() {
		t.Fatalf("exit %+v: %s %s", st, out, errOut)
	}
	want := []string{"10001\n/workspace\n/workspace yes\nlo\n", "ro-root\ntmp-ok\n", "proxy for s1: GET /v1/messages key=tok-s1\n"}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Fatalf("output %q lacks %q (stderr %q)", out, w, errOut)
		}
	}
	// The file is in the session's folder on this host, and read back
	// through the executor.
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "made.txt")); err != nil || string(b) != "hello\n" {
		t.Fatalf("host file %q %v", b, err)
	}
	if b, err := env.ReadFile(context.Background(), "made.txt"); err != nil || string(b) != "hello\n" {
		t.Fatalf("ReadFile %q %v", b, err)
	}
	sandboxtest.Terminate(t, env)
	if f.exists(e.Container()) {
		t.Fatal("container left after Terminate")
	}
	if ents, _ := os.ReadDir(p.RunDir()); len(ents) != 0 {
		t.Fatalf("run folder left: %v", ents)
	}
	// The workspace stays, taken back from the sandbox's uid.
	fi, err := os.Stat(spec.Workspace)
	if err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o700 {
		t.Fatalf("workspace after Terminate: %v %v", fi, err)
	}
	sandboxtest.Terminated(t, env)
}

// A process keeps running while no server is attached; a new provider
// (a restarted server) re-attaches and reads its output from where the
// first stopped, every line once.
func TestRecoverAttach(t *testing.T) {
	f := newFixture(t)
	env, recovered := sandboxtest.RecoverAttach(t, f.provider(nil), f.spec("s2"), f.restarted)
	sandboxtest.Terminate(t, recovered)
	// The first view of it ends with the container.
	sandboxtest.Terminate(t, env)
}

// A server that lost the session releases its container: the process in
// it goes on, and another provider re-attaches to it.
func TestReleaseRecover(t *testing.T) {
	f := newFixture(t)
	env := sandboxtest.ReleaseRecover(t, f.provider(nil), f.spec("s4"), f.restarted)
	sandboxtest.ModelProxy(t, env, "s4", "/again")
	sandboxtest.Terminate(t, env)
	if id := env.(*docker.Environment).Container(); f.exists(id) {
		t.Fatal("container left after Terminate")
	}
}

// A killed container is gone for the restarted server, which removes it.
func TestRecoverGone(t *testing.T) {
	f := newFixture(t)
	id := func(env sandbox.Environment) string { return env.(*docker.Environment).Container() }
	sandboxtest.RecoverGone(t, f.provider(nil), f.spec("s3"), f.restarted, func(env sandbox.Environment) {
		if _, err := f.cli.ContainerKill(context.Background(), id(env), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
	}, func(env sandbox.Environment) {
		if f.exists(id(env)) {
			t.Fatal("the dead container was not removed")
		}
	}, `{"container":`)
}

// Collect removes the containers no handle names (sessions deleted while
// the server was down) and their folders, keeps the others, and leaves
// other nodes' alone.
func TestCollect(t *testing.T) {
	f := newFixture(t)
	p1 := f.provider(nil)
	other := f.provider(func(o *docker.Options) { o.Node += "-other" }) // same run folder, another node
	sandboxtest.CollectLeftovers(t, p1, other, f.spec, f.restarted, func(l sandboxtest.Leftovers) {
		dropped, kept, foreign := l.Dropped.(*docker.Environment), l.Kept.(*docker.Environment), l.Foreign.(*docker.Environment)
		if f.exists(dropped.Container()) {
			t.Fatal("a container of no session survived Collect")
		}
		if !f.exists(kept.Container()) || !f.exists(foreign.Container()) {
			t.Fatal("Collect removed a kept or foreign container")
		}
		if _, err := os.Stat(filepath.Join(p1.RunDir(), dropped.ContainerName())); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the dropped container's folder: %v", err)
		}
		if _, err := os.Stat(filepath.Join(other.RunDir(), foreign.ContainerName())); err != nil {
			t.Fatalf("the other node's folder: %v", err)
		}
	})
}

func TestWarmPool(t *testing.T) {
	f := newFixture(t)
	p := f.provider(func(o *docker.Options) { o.WarmPool = 2 })
	spec := f.spec("w1")
	env := sandboxtest.ClaimWarm(t, p, 2, f.opts.Image, f.opts.Limits, spec)
	// The claimed container works in the session's folder.
	if out, _, st := sandboxtest.Shell(t, env, "echo warm > w.txt; pwd; echo $FROM_SPEC"); !st.Success() || out != "/workspace\nyes\n" {
		t.Fatalf("warm exec: %q %+v", out, st)
	}
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "w.txt")); err != nil || string(b) != "warm\n" {
		t.Fatalf("file in the session's workspace: %q %v", b, err)
	}
	sandboxtest.ModelProxy(t, env, "w1", "/x")
	// A workspace with files cannot take a warm one's place: cold start.
	os.MkdirAll(filepath.Join(f.dir, "ws", "w2"), 0o755)
	os.WriteFile(filepath.Join(f.dir, "ws", "w2", "kept.txt"), []byte("kept"), 0o644)
	ctx := context.Background()
	env2, err := p.Create(ctx, f.spec("w2"))
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := sandboxtest.Shell(t, env2, "cat kept.txt"); out != "kept" {
		t.Fatalf("existing workspace: %q", out)
	}
	sandboxtest.Terminate(t, env2)
	// An empty one (made by a files request before the first message) can.
	os.MkdirAll(filepath.Join(f.dir, "ws", "w3"), 0o755)
	env3, err := p.Create(ctx, f.spec("w3"))
	if err != nil {
		t.Fatal(err)
	}
	sandboxtest.Terminate(t, env3)
	sandboxtest.WaitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 && pi.Claims == 2 })
	ws, _ := os.ReadDir(f.opts.WarmDir)
	if len(ws) != 2 {
		t.Fatalf("warm workspaces %v", ws)
	}
	// Shutdown drains the pool; the claimed environment stays.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Close(cctx); err != nil {
		t.Fatal(err)
	}
	if left := agentdtest.DockerContainers(t, f.cli, f.opts.Node); len(left) != 1 {
		t.Fatalf("containers after Close: %v", left)
	}
	if ws, _ := os.ReadDir(f.opts.WarmDir); len(ws) != 0 {
		t.Fatalf("warm workspaces after Close: %v", ws)
	}
	sandboxtest.Terminate(t, env)
}

// A container whose executor cannot start fails Create with its log, and
// leaves nothing.
func TestStartFailure(t *testing.T) {
	f := newFixture(t)
	bad := filepath.Join(f.dir, "bad-agentd")
	os.WriteFile(bad, []byte("#!/bin/sh\necho 'executor: cannot start here' >&2\nexit 3\n"), 0o755)
	p := f.provider(func(o *docker.Options) { o.Executor = bad; o.StartTimeout = 20 * time.Second })
	_, err := p.Create(context.Background(), f.spec("bad"))
	if err == nil || !strings.Contains(err.Error(), "cannot start here") {
		t.Fatalf("create with a failing executor: %v", err)
	}
	if left := agentdtest.DockerContainers(t, f.cli, f.opts.Node); len(left) != 0 {
		t.Fatalf("containers left: %v", left)
	}
	if ents, _ := os.ReadDir(p.RunDir()); len(ents) != 0 {
		t.Fatalf("run folder left: %v", ents)
	}
}

func TestNewRejects(t *testing.T) {
	f := newFixture(t)
	sandboxtest.NewRejects(t, f.opts, map[string]func(*docker.Options){
		"root user":     func(o *docker.Options) { o.User = "0:0" },
		"bad user":      func(o *docker.Options) { o.User = "agent" },
		"missing image": func(o *docker.Options) { o.Image = "agentd-no-such-image:x" },
		"no executor":   func(o *docker.Options) { o.Executor = "/nonexistent/agentd" },
		"warm, no dir":  func(o *docker.Options) { o.WarmPool = 1; o.WarmDir = "" },
		"long run dir":  func(o *docker.Options) { o.RunDir = "/tmp/" + strings.Repeat("x", 100) },
	}, docker.New)
}
