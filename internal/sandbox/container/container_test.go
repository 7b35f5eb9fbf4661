package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestShape(t *testing.T) {
	def := NewShape("img", sandbox.Limits{MemoryBytes: 100, Pids: 10, CPUPercent: 50}, []string{"node_modules"})
	if def.IgnoreList()[0] != "node_modules" || len(def.IgnoreList()) != 1 {
		t.Fatalf("default ignore list %q", def.IgnoreList())
	}
	if s := def.For(sandbox.Spec{}); s.Image != "img" || s.Limits != def.Limits || s.IgnoreList() != nil {
		t.Fatalf("a spec setting nothing: %+v", s)
	}
	s := def.For(sandbox.Spec{Image: "other", Limits: sandbox.Limits{Pids: 20}, Ignore: []string{"a", "b"}})
	if want := (sandbox.Limits{MemoryBytes: 100, Pids: 20, CPUPercent: 50}); s.Image != "other" || s.Limits != want {
		t.Fatalf("the spec's image and limits over the defaults: %+v", s)
	}
	if !slices.Equal(s.IgnoreList(), []string{"a", "b"}) {
		t.Fatalf("the spec's ignore list: %q", s.IgnoreList())
	}
	if s.String() != "other mem=100 pids=20 cpu=50%" {
		t.Fatalf("String %q", s.String())
	}
	if s == def.For(sandbox.Spec{Image: "other", Limits: sandbox.Limits{Pids: 20}}) {
		t.Fatal("shapes with other ignore lists are the same key")
	}
	want := []string{"--nice", "5", "--spool-bytes", "1024", "--ignore", "a", "--ignore", "b", "--reserve-threads", "16"}
	if got := s.ExecutorArgs(5, 1024); !slices.Equal(got, want) {
		t.Fatalf("ExecutorArgs %q, want %q", got, want)
	}
	if got := NewShape("img", sandbox.Limits{}, nil).ExecutorArgs(0, 0); len(got) != 0 {
		t.Fatalf("ExecutorArgs of nothing: %q", got)
	}
}

func TestNodeRunDir(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", xdg)
	a, err := NodeRunDir("", "agentd-x", "node-a")
	if err != nil || filepath.Dir(a) != filepath.Join(xdg, "agentd-x") {
		t.Fatalf("default: %q %v", a, err)
	}
	if b, _ := NodeRunDir("", "agentd-x", "node-b"); b == a || filepath.Dir(b) != filepath.Dir(a) {
		t.Fatalf("another node's %q beside %q", b, a)
	}
	if again, _ := NodeRunDir("", "agentd-x", "node-a"); again != a {
		t.Fatalf("the same node's folder moved: %q, %q", again, a)
	}
	t.Chdir(xdg)
	if rel, err := NodeRunDir("run", "agentd-x", "node-a"); err != nil || !filepath.IsAbs(rel) || !strings.HasPrefix(rel, filepath.Join(xdg, "run")) {
		t.Fatalf("relative: %q %v", rel, err)
	}
	if _, err := NodeRunDir("/tmp/"+strings.Repeat("x", 80), "agentd-x", "n"); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Fatalf("a folder too long for socket paths: %v", err)
	}
}

func TestDirs(t *testing.T) {
	run := t.TempDir()
	for _, d := range []string{"agentd-aa", "agentd-aa.mp", "agentd-bb", "agentd-bb.mp", "agentd-cc", "other"} {
		if err := os.Mkdir(filepath.Join(run, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if n := NewName(); !strings.HasPrefix(n, "agentd-") || len(n) != len("agentd-0123456789ab") || n == NewName() {
		t.Fatalf("NewName %q", n)
	}
	RemoveDirs(run, "agentd-cc")
	RemoveDirs(run, "../"+filepath.Base(run)) // not a name: nothing
	RemoveStaleDirs(run, func(name string) bool { return name == "agentd-bb" })
	var left []string
	ents, _ := os.ReadDir(run)
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if !slices.Equal(left, []string{"agentd-bb", "agentd-bb.mp", "other"}) {
		t.Fatalf("left %q", left)
	}
	RemoveStaleDirs(filepath.Join(run, "missing"), func(string) bool { return false })
}

func TestKept(t *testing.T) {
	type handle struct{ ID, Name string }
	keep := []json.RawMessage{[]byte(`{"ID":"1","Name":"one"}`), []byte(`"not a handle"`), []byte(`{"Name":"no id"}`), []byte(`{`)}
	kept := Kept(keep, func(h handle) []string {
		if h.ID == "" {
			return nil
		}
		return []string{h.ID, h.Name, ""}
	})
	if len(kept) != 2 || !kept["1"] || !kept["one"] {
		t.Fatalf("kept %v", kept)
	}
}

func TestGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if !Gone(ctx, errors.New("connection refused")) {
		t.Fatal("an executor that does not answer is not gone")
	}
	if Gone(ctx, fmt.Errorf("connect: %w", executor.ErrIncompatible)) {
		t.Fatal("an executor of another version is gone")
	}
	cancel()
	if Gone(ctx, errors.New("connection refused")) {
		t.Fatal("gone when the caller gave up")
	}
}

func TestLive(t *testing.T) {
	var l Live
	if l.Has("a") {
		t.Fatal("the zero set holds a")
	}
	l.Add("a", "b")
	l.Remove("a", "c")
	if l.Has("a") || !l.Has("b") {
		t.Fatalf("after add and remove: a %v, b %v", l.Has("a"), l.Has("b"))
	}
}

// pinger answers ping with version.
type pinger struct{ version int }

func (p pinger) HandleCall(_ context.Context, _ *rpc.Conn, req *rpc.Request) (any, error) {
	if req.Method != rpc.MethodPing {
		return nil, rpc.Errorf(rpc.CodeMethodNotFound, "no %s", req.Method)
	}
	return rpc.PingResult{ProtocolVersion: p.version, PID: 7}, nil
}
func (pinger) HandleNotify(*rpc.Conn, string, json.RawMessage) {}

func TestPing(t *testing.T) {
	ping := func(version int) (rpc.PingResult, error) {
		a, b := net.Pipe()
		srv := rpc.NewConn(b, pinger{version}, rpc.ConnOptions{})
		defer func() { srv.Close(); srv.Wait() }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return Ping(ctx, a, "rebuild it")
	}
	if r, err := ping(rpc.ProtocolVersion); err != nil || r.PID != 7 {
		t.Fatalf("ping: %+v %v", r, err)
	}
	if _, err := ping(rpc.ProtocolVersion + 1); !errors.Is(err, executor.ErrIncompatible) || !strings.Contains(err.Error(), "(rebuild it)") {
		t.Fatalf("ping of another version: %v", err)
	}
}

// item is a container started ahead, for the pools' tests.
type item struct{ name string }

func (i *item) Name() string { return i.name }

// fakeEnv is an environment claimed from a pool.
type fakeEnv struct {
	sandbox.Environment
	from *item
}

func TestPools(t *testing.T) {
	var mu sync.Mutex
	started, stopped := 0, []string{}
	o := &Options{Image: "img", Limits: sandbox.Limits{Pids: 5}}
	if err := o.Complete(t.Name(), time.Second); err != nil {
		t.Fatal(err)
	}
	if p, err := NewPools(o, PoolOptions[*item]{}); p != nil || err != nil {
		t.Fatalf("pools of a backend without: %v %v", p, err)
	}
	o.WarmPool = 2
	p, err := NewPools(o, PoolOptions[*item]{
		Start: func(_ context.Context, s Shape) (*item, error) {
			mu.Lock()
			defer mu.Unlock()
			started++
			return &item{name: fmt.Sprintf("%s #%d", s.Image, started)}, nil
		},
		Stop: func(_ context.Context, _ Shape, i *item) {
			mu.Lock()
			defer mu.Unlock()
			stopped = append(stopped, i.name)
		},
		Log: o.Logger, Noun: "thing",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	def := o.DefaultShape()
	p.Fill()
	wait := func(image string, ok func(sandbox.PoolInfo) bool) sandbox.PoolInfo {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			for _, pi := range p.Infos() {
				if pi.Image == image && ok(pi) {
					return pi
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("pools %+v", p.Infos())
			}
		}
	}
	wait("img", func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 })

	// A container claim fails with is stopped, the next one claimed.
	tries := 0
	env, err := p.Claim(ctx, def, "b", nil, func(i *item) (sandbox.Environment, error) {
		if tries++; tries == 1 {
			return nil, errors.New("unusable")
		}
		return &fakeEnv{from: i}, nil
	})
	if err != nil || env == nil || tries != 2 {
		t.Fatalf("claim: %v %v after %d tries", env, err, tries)
	}
	mu.Lock()
	if len(stopped) != 1 || stopped[0] == env.(*fakeEnv).from.name {
		t.Fatalf("stopped %q, claimed %q", stopped, env.(*fakeEnv).from.name)
	}
	mu.Unlock()
	// While more says no, nothing is taken.
	if env, err := p.Claim(ctx, def, "a", func() bool { return false }, nil); env != nil || err != nil {
		t.Fatalf("claim with no more: %v %v", env, err)
	}
	pi := wait("img", func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 })
	if pi.Claims != 2 || pi.Misses != 0 || pi.Size != 2 || pi.Limits != o.Limits || !slices.Equal(pi.Profiles, []string{"a", "b"}) || pi.Key != def.String() {
		t.Fatalf("pool %+v", pi)
	}
	// A caller that gave up gets its error, the container it failed
	// with stopped.
	cctx, cancel := context.WithCancel(ctx)
	env, err = p.Claim(cctx, def, "", nil, func(*item) (sandbox.Environment, error) {
		cancel()
		return nil, errors.New("cancelled")
	})
	if env != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("claim given up: %v %v", env, err)
	}
	// Another shape's pool starts empty: a miss, nothing claimed.
	other := def.For(sandbox.Spec{Image: "img2"})
	if env, err := p.Claim(ctx, other, "c", nil, nil); env != nil || err != nil {
		t.Fatalf("claim from an empty pool: %v %v", env, err)
	}
	img2 := wait("img2", func(pi sandbox.PoolInfo) bool { return pi.Ready == 2 })
	if img2.Misses != 1 || !slices.Equal(img2.Profiles, []string{"c"}) {
		t.Fatalf("the other shape's pool %+v", img2)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stopped) != started-1 { // all but the one claimed
		t.Fatalf("started %d, stopped %d: %q", started, len(stopped), stopped)
	}
}

func TestNilPools(t *testing.T) {
	var p *Pools[*item]
	p.Fill()
	if env, err := p.Claim(context.Background(), Shape{}, "x", nil, nil); env != nil || err != nil {
		t.Fatalf("claim: %v %v", env, err)
	}
	if p.Infos() != nil || p.Close(context.Background()) != nil {
		t.Fatal("a backend without pools lists or fails something")
	}
}

func TestOptionsComplete(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var o Options
	if err := o.Complete("agentd-x", time.Minute); err != nil {
		t.Fatal(err)
	}
	if o.Image != DefaultImage || o.Node != DefaultNode || o.StartTimeout != time.Minute || o.StopTimeout != DefaultStopTimeout || o.Logger == nil || !filepath.IsAbs(o.RunDir) {
		t.Fatalf("completed %+v", o)
	}
	if d := o.DefaultShape(); d.Image != DefaultImage {
		t.Fatalf("default shape %+v", d)
	}
	bad := Options{WarmPool: -1}
	if err := bad.Complete("agentd-x", time.Minute); err == nil {
		t.Fatal("a negative warm pool accepted")
	}
}
