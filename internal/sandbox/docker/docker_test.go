package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/agentdtest"
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
		Client: cli, Image: agentdtest.SandboxImage(), Executor: agentdtest.Binary(t),
		RunDir: filepath.Join(dir, "run"), WarmDir: filepath.Join(dir, "warm"),
		Node: "test-" + hex.EncodeToString(rnd[:]), ModelProxy: f.proxy,
		Limits: sandbox.Limits{MemoryBytes: 512 << 20, Pids: 128},
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
	opts := f.opts
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := docker.New(ctx, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			f.t.Errorf("close: %v", err)
		}
	})
	return p
}

func (f *fixture) spec(id string) sandbox.Spec {
	return sandbox.Spec{SessionID: id, Workspace: filepath.Join(f.dir, "ws", id), Env: map[string]string{"FROM_SPEC": "yes"}, Profile: "default"}
}

// run runs a shell command in env and returns its stdout, stderr and exit.
func run(t *testing.T, env sandbox.Environment, script string) (string, string, sandbox.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	out, errOut := sandboxtest.Collect(t, p)
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %q: %v", script, err)
	}
	return out, errOut, st
}

func terminate(t *testing.T, env sandbox.Environment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Terminate(ctx); err != nil {
		t.Fatalf("terminate: %v", err)
	}
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
	out, errOut, st := run(t, env, `id -u; pwd; echo $HOME $FROM_SPEC; echo hello > made.txt; ls /sys/class/net; touch /etc/x 2>&1 || echo ro-root; touch /tmp/x && echo tmp-ok
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
	terminate(t, env)
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
	if err := env.Terminate(context.Background()); err != nil {
		t.Fatalf("second Terminate: %v", err)
	}
	if _, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("exec after Terminate: %v", err)
	}
}

// A process keeps running while no server is attached; a new provider
// (a restarted server) re-attaches and reads its output from where the
// first stopped, every line once.
func TestRecoverAttach(t *testing.T) {
	f := newFixture(t)
	p1 := f.provider(nil)
	spec := f.spec("s2")
	env, err := p1.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	proc, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", "for i in $(seq 1 30); do echo line $i; sleep 0.02; done"}, Tag: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	var off int64
	for c := range proc.Output() {
		got.Write(c.Data)
		off = c.Offset + int64(len(c.Data))
		if strings.Contains(got.String(), "line 5\n") {
			break
		}
	}
	p2 := f.provider(nil)
	env2, err := p2.Recover(ctx, spec, env.(sandbox.HandleReporter).Handle())
	if err != nil {
		t.Fatal(err)
	}
	proc2, err := env2.(sandbox.Attacher).Attach(ctx, "t1", sandbox.Offsets{Stdout: off})
	if err != nil {
		t.Fatal(err)
	}
	for c := range proc2.Output() {
		if c.Stream != sandbox.Stdout || c.Offset != off {
			t.Fatalf("chunk %s at %d, want stdout at %d", c.Stream, c.Offset, off)
		}
		got.Write(c.Data)
		off += int64(len(c.Data))
	}
	if st, err := proc2.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("wait %+v %v", st, err)
	}
	var want strings.Builder
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if got.String() != want.String() {
		t.Fatalf("output across the re-attach:\n%q", got.String())
	}
	terminate(t, env2)
	// The first view of it ends with the container.
	terminate(t, env)
}

func TestRecoverGone(t *testing.T) {
	f := newFixture(t)
	p := f.provider(nil)
	spec := f.spec("s3")
	env, err := p.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	id := env.(*docker.Environment).Container()
	handle := env.(sandbox.HandleReporter).Handle()
	ctx := context.Background()
	if _, err := f.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	p2 := f.provider(nil)
	if _, err := p2.Recover(ctx, spec, handle); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover of a killed container: %v", err)
	}
	if f.exists(id) {
		t.Fatal("the dead container was not removed")
	}
	// Its view in the first provider still terminates cleanly.
	terminate(t, env)
	if _, err := p2.Recover(ctx, spec, []byte(`{"container":`)); err == nil || errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("bad handle: %v", err)
	}
}

// Collect removes the containers no handle names (sessions deleted while
// the server was down), keeps the others, and leaves other nodes' alone.
func TestCollect(t *testing.T) {
	f := newFixture(t)
	p1 := f.provider(nil)
	ctx := context.Background()
	kept, err := p1.Create(ctx, f.spec("keep"))
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := p1.Create(ctx, f.spec("drop"))
	if err != nil {
		t.Fatal(err)
	}
	other := f.provider(func(o *docker.Options) { o.Node += "-other" }) // same run folder, another node
	foreign, err := other.Create(ctx, f.spec("foreign"))
	if err != nil {
		t.Fatal(err)
	}
	defer terminate(t, foreign)

	p2 := f.provider(nil) // the restarted server
	if err := p2.Collect(ctx, []json.RawMessage{kept.(sandbox.HandleReporter).Handle(), []byte(`"not a handle"`)}); err != nil {
		t.Fatal(err)
	}
	if f.exists(dropped.(*docker.Environment).Container()) {
		t.Fatal("a container of no session survived Collect")
	}
	if !f.exists(kept.(*docker.Environment).Container()) || !f.exists(foreign.(*docker.Environment).Container()) {
		t.Fatal("Collect removed a kept or foreign container")
	}
	if _, err := os.Stat(filepath.Join(p2.RunDir(), dropped.(*docker.Environment).ContainerName())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dropped container's folder: %v", err)
	}
	if _, err := os.Stat(filepath.Join(other.RunDir(), foreign.(*docker.Environment).ContainerName())); err != nil {
		t.Fatalf("the other node's folder: %v", err)
	}
	env, err := p2.Recover(ctx, f.spec("keep"), kept.(sandbox.HandleReporter).Handle())
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, env, "echo still"); out != "still\n" {
		t.Fatalf("kept container: %q", out)
	}
	terminate(t, env)
	terminate(t, kept)
	terminate(t, dropped) // gone already: not an error
}

func TestWarmPool(t *testing.T) {
	f := newFixture(t)
	p := f.provider(func(o *docker.Options) { o.WarmPool = 2 })
	ctx := context.Background()
	if err := p.Collect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	pool := waitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 })
	if pool.Size != 2 || pool.Image != f.opts.Image || pool.Limits.Pids != 128 {
		t.Fatalf("pool %+v", pool)
	}
	t0 := time.Now()
	spec := f.spec("w1")
	env, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create from the warm pool: %v", time.Since(t0))
	pool = waitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Claims == 1 })
	if pool.Misses != 0 || !slices.Equal(pool.Profiles, []string{"default"}) {
		t.Fatalf("pool after the claim %+v", pool)
	}
	// The claimed container works in the session's folder.
	if out, _, st := run(t, env, "echo warm > w.txt; pwd; echo $FROM_SPEC"); !st.Success() || out != "/workspace\nyes\n" {
		t.Fatalf("warm exec: %q %+v", out, st)
	}
	if b, err := os.ReadFile(filepath.Join(spec.Workspace, "w.txt")); err != nil || string(b) != "warm\n" {
		t.Fatalf("file in the session's workspace: %q %v", b, err)
	}
	if out, _, _ := run(t, env, `curl -s -H "x-api-key: $ANTHROPIC_API_KEY" $ANTHROPIC_BASE_URL/x`); out != "proxy for w1: GET /x key=tok-w1" {
		t.Fatalf("model proxy from a claimed container: %q", out)
	}
	// A workspace with files cannot take a warm one's place: cold start.
	os.MkdirAll(filepath.Join(f.dir, "ws", "w2"), 0o755)
	os.WriteFile(filepath.Join(f.dir, "ws", "w2", "kept.txt"), []byte("kept"), 0o644)
	env2, err := p.Create(ctx, f.spec("w2"))
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := run(t, env2, "cat kept.txt"); out != "kept" {
		t.Fatalf("existing workspace: %q", out)
	}
	terminate(t, env2)
	// An empty one (made by a files request before the first message) can.
	os.MkdirAll(filepath.Join(f.dir, "ws", "w3"), 0o755)
	env3, err := p.Create(ctx, f.spec("w3"))
	if err != nil {
		t.Fatal(err)
	}
	terminate(t, env3)
	waitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 && pi.Claims == 2 })
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
	terminate(t, env)
}

func waitPool(t *testing.T, p *docker.Provider, ok func(sandbox.PoolInfo) bool) sandbox.PoolInfo {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info := p.Describe()
		for _, pi := range info.Pools {
			if ok(pi) {
				return pi
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never ready: %+v", info.Pools)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	ctx := context.Background()
	for name, mod := range map[string]func(*docker.Options){
		"root user":     func(o *docker.Options) { o.User = "0:0" },
		"bad user":      func(o *docker.Options) { o.User = "agent" },
		"missing image": func(o *docker.Options) { o.Image = "agentd-no-such-image:x" },
		"no executor":   func(o *docker.Options) { o.Executor = "/nonexistent/agentd" },
		"warm, no dir":  func(o *docker.Options) { o.WarmPool = 1; o.WarmDir = "" },
		"long run dir":  func(o *docker.Options) { o.RunDir = "/tmp/" + strings.Repeat("x", 100) },
	} {
		opts := f.opts
		mod(&opts)
		if p, err := docker.New(ctx, opts); err == nil {
			p.Close(ctx)
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
