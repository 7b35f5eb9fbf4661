package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// The scenarios every container backend (internal/sandbox/docker,
// internal/sandbox/kubernetes) runs against its real engine, and the
// helpers they share. What only an engine can tell (is a container
// there, how to kill one) the backend's test passes in.

// ContainerProvider is a container backend's provider as the scenarios
// use it.
type ContainerProvider interface {
	sandbox.Provider
	sandbox.Recoverer
	sandbox.Collector
	sandbox.Describer
}

// Closer is a provider that Close drains.
type Closer interface {
	Close(ctx context.Context) error
}

// NewProvider makes a provider with newp from opts, changed by mod when
// set (within 30 s), and closes it at the test's end (within a minute;
// an error fails the test).
func NewProvider[O any, P Closer](t testing.TB, opts O, mod func(*O), newp func(context.Context, O) (P, error)) P {
	t.Helper()
	if mod != nil {
		mod(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := newp(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return p
}

// NewRejects checks that newp refuses opts changed by each function of
// bad, named for what it makes wrong.
func NewRejects[O any, P Closer](t *testing.T, opts O, bad map[string]func(*O), newp func(context.Context, O) (P, error)) {
	t.Helper()
	ctx := context.Background()
	for name, mod := range bad {
		o := opts
		mod(&o)
		if p, err := newp(ctx, o); err == nil {
			p.Close(ctx)
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// Shell runs script with sh -c in env and returns its stdout, stderr and
// exit status; it fails the test unless the script ends within a minute.
func Shell(t testing.TB, env sandbox.Environment, script string) (string, string, sandbox.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	out, errOut := Collect(t, p)
	st, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("wait %q: %v", script, err)
	}
	return out, errOut, st
}

// Terminate terminates env within a minute; an error fails the test.
func Terminate(t testing.TB, env sandbox.Environment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := env.Terminate(ctx); err != nil {
		t.Fatalf("terminate: %v", err)
	}
}

// Terminated checks an environment Terminate ended: terminated again, it
// reports no error, and it runs nothing more.
func Terminated(t testing.TB, env sandbox.Environment) {
	t.Helper()
	if err := env.Terminate(context.Background()); err != nil {
		t.Fatalf("second Terminate: %v", err)
	}
	if _, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Fatalf("exec after Terminate: %v", err)
	}
}

// ModelProxy checks that a process of session's environment env reaches
// its model proxy (a FakeProxy) with its token, through the relay the
// environment's variables name: GET path.
func ModelProxy(t testing.TB, env sandbox.Environment, session, path string) {
	t.Helper()
	out, errOut, _ := Shell(t, env, `curl -s -H "x-api-key: $ANTHROPIC_API_KEY" $ANTHROPIC_BASE_URL`+path)
	if want := fmt.Sprintf("proxy for %s: GET %s key=tok-%s", session, path, session); out != want {
		t.Fatalf("model proxy: %q (stderr %q), want %q", out, errOut, want)
	}
}

// WaitPool waits (two minutes at most) until one of d's warm pools is as
// ok wants, and returns it.
func WaitPool(t testing.TB, d sandbox.Describer, ok func(sandbox.PoolInfo) bool) sandbox.PoolInfo {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info := d.Describe()
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

// RecoverAttach: a process keeps running while no server is attached; a
// restarted server (restart makes its provider) re-attaches to the
// environment of spec p made and reads the process's output from where
// the first stopped, every line once. It returns both views of the
// environment, for the caller to check more and terminate.
func RecoverAttach(t *testing.T, p sandbox.Provider, spec sandbox.Spec, restart func() ContainerProvider) (env, recovered sandbox.Environment) {
	t.Helper()
	return recoverAttach(t, p, spec, restart, nil)
}

// ReleaseRecover: a server that lost the session (to another server)
// releases its environment (sandbox.Releaser) while a process runs in
// it: the process goes on, Terminate of the released environment does
// nothing, and another server (restart) re-attaches to it and reads the
// process's output from where the first stopped, every line once. It
// returns the re-attached environment, for the caller to check more and
// terminate.
func ReleaseRecover(t *testing.T, p sandbox.Provider, spec sandbox.Spec, restart func() ContainerProvider) sandbox.Environment {
	t.Helper()
	_, recovered := recoverAttach(t, p, spec, restart, func(env sandbox.Environment) {
		rel, ok := env.(sandbox.Releaser)
		if !ok {
			t.Fatalf("%T is not a sandbox.Releaser", env)
		}
		rel.Release()
		rel.Release()
		Terminate(t, env) // released: it stops nothing
		if _, err := env.Exec(context.Background(), sandbox.Cmd{Argv: []string{"true"}}); err == nil {
			t.Fatal("a released environment still runs commands")
		}
	})
	return recovered
}

// recoverAttach is RecoverAttach, with between (when set) done with the
// first view of the environment before the restarted server re-attaches.
func recoverAttach(t *testing.T, p sandbox.Provider, spec sandbox.Spec, restart func() ContainerProvider, between func(sandbox.Environment)) (env, recovered sandbox.Environment) {
	t.Helper()
	ctx := context.Background()
	env, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
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
	if between != nil {
		between(env)
	}
	recovered, err = restart().Recover(ctx, spec, env.(sandbox.HandleReporter).Handle())
	if err != nil {
		t.Fatal(err)
	}
	proc2, err := recovered.(sandbox.Attacher).Attach(ctx, "t1", sandbox.Offsets{Stdout: off})
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
	return env, recovered
}

// RecoverGone: the container of the environment of spec p made goes
// (kill) while no server is attached; a restarted server's Recover
// reports sandbox.ErrGone, and then removed (when set) checks that what
// was left of it is removed. The first view of it still terminates
// cleanly. A bad handle (badHandle) is an error, not sandbox.ErrGone.
func RecoverGone(t *testing.T, p sandbox.Provider, spec sandbox.Spec, restart func() ContainerProvider,
	kill, removed func(sandbox.Environment), badHandle string) {
	t.Helper()
	ctx := context.Background()
	env, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	handle := env.(sandbox.HandleReporter).Handle()
	kill(env)
	p2 := restart()
	if _, err := p2.Recover(ctx, spec, handle); !errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("recover of a gone environment: %v", err)
	}
	if removed != nil {
		removed(env)
	}
	// Its view in the first provider still terminates cleanly.
	Terminate(t, env)
	if _, err := p2.Recover(ctx, spec, []byte(badHandle)); err == nil || errors.Is(err, sandbox.ErrGone) {
		t.Fatalf("bad handle: %v", err)
	}
}

// Leftovers are the environments of CollectLeftovers: one whose handle
// the restarted server keeps, one it does not, and one of another node.
type Leftovers struct{ Kept, Dropped, Foreign sandbox.Environment }

// CollectLeftovers: a restarted server (restart) collects with the
// handle of one of two environments p made (and a handle that is not
// one): check says the other's container was removed and the kept one's
// and other's (another node's) were left alone. The kept one is
// re-attached and works; the rest terminate cleanly (the one removed
// too).
func CollectLeftovers(t *testing.T, p, other sandbox.Provider, spec func(id string) sandbox.Spec,
	restart func() ContainerProvider, check func(Leftovers)) {
	t.Helper()
	ctx := context.Background()
	var l Leftovers
	var err error
	if l.Kept, err = p.Create(ctx, spec("keep")); err != nil {
		t.Fatal(err)
	}
	if l.Dropped, err = p.Create(ctx, spec("drop")); err != nil {
		t.Fatal(err)
	}
	if l.Foreign, err = other.Create(ctx, spec("foreign")); err != nil {
		t.Fatal(err)
	}
	defer Terminate(t, l.Foreign)
	p2 := restart()
	kept := l.Kept.(sandbox.HandleReporter).Handle()
	if err := p2.Collect(ctx, []json.RawMessage{kept, []byte(`"not a handle"`)}); err != nil {
		t.Fatal(err)
	}
	check(l)
	env, err := p2.Recover(ctx, spec("keep"), kept)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := Shell(t, env, "echo still"); out != "still\n" {
		t.Fatalf("kept environment: %q", out)
	}
	Terminate(t, env)
	Terminate(t, l.Kept)
	Terminate(t, l.Dropped) // gone already: not an error
}

// ClaimWarm: p, with warm pools of size, fills its default pool (image,
// limits) once Collect ran; the session of spec (profile "default")
// claims an environment from it, without a miss. It returns the claimed
// environment.
func ClaimWarm(t *testing.T, p ContainerProvider, size int, image string, limits sandbox.Limits, spec sandbox.Spec) sandbox.Environment {
	t.Helper()
	ctx := context.Background()
	if err := p.Collect(ctx, nil); err != nil {
		t.Fatal(err)
	}
	pool := WaitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Ready == size })
	if pool.Size != size || pool.Image != image || pool.Limits != limits {
		t.Fatalf("pool %+v", pool)
	}
	t0 := time.Now()
	env, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("create from the warm pool: %v", time.Since(t0))
	pool = WaitPool(t, p, func(pi sandbox.PoolInfo) bool { return pi.Claims == 1 })
	if pool.Misses != 0 || !slices.Equal(pool.Profiles, []string{"default"}) {
		t.Fatalf("pool after the claim %+v", pool)
	}
	return env
}
