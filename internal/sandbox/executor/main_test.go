package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/sandbox/sandboxtest"
	"github.com/agentd/agentd/sandbox"
)

// The test binary doubles as the agentd binary (an executor) and, with
// AGENTD_TEST_SERVER set, plays a server that starts a session and dies
// (see TestRecoverAfterServerExit).
func TestMain(m *testing.M) { sandboxtest.Main(m, "AGENTD_TEST_SERVER", playServer) }

func testOptions(runDir string) Options {
	return Options{
		Binary:       os.Args[0],
		RunDir:       runDir,
		ExecutorEnv:  []string{"AGENTD_TEST_EXECUTOR=1"},
		StartTimeout: 20 * time.Second,
		CgroupParent: sandboxtest.CgroupParent(),
	}
}

func newTestProvider(t testing.TB, mod func(*Options)) (*Provider, string) {
	t.Helper()
	dir := sandboxtest.ShortTempDir(t, "sx")
	opts := testOptions(filepath.Join(dir, "run"))
	if mod != nil {
		mod(&opts)
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p, dir
}

func createEnv(t testing.TB, p *Provider, dir string) (*Environment, sandbox.Spec) {
	t.Helper()
	spec := sandbox.Spec{SessionID: "sess-1", Workspace: filepath.Join(dir, "ws"), Env: map[string]string{"FROM_SPEC": "yes"}}
	env, err := p.Create(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	e := env.(*Environment)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := e.Terminate(ctx); err != nil {
			t.Errorf("terminate: %v", err)
		}
	})
	return e, spec
}

// serverReport is what playServer prints before dying.
type serverReport struct {
	Handle   json.RawMessage `json:"handle"`
	Spec     sandbox.Spec    `json:"spec"`
	Tag      string          `json:"tag"`
	Consumed string          `json:"consumed"`
	Offsets  sandbox.Offsets `json:"offsets"`
}

// playServer is a short-lived "server": it creates an environment, starts a
// command printing a numbered line every 100 ms for 3 s, consumes output
// for about 1 s (whole lines only, as a server persisting them would),
// prints what it saw and exits without terminating anything.
func playServer(dir string) int {
	p, err := New(testOptions(filepath.Join(dir, "run")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	spec := sandbox.Spec{SessionID: "restart", Workspace: filepath.Join(dir, "ws")}
	ctx := context.Background()
	env, err := p.Create(ctx, spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	proc, err := env.Exec(ctx, sandbox.Cmd{Tag: "count", Argv: []string{"sh", "-c", countScript}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var consumed []byte
	var partial []byte
	deadline := time.After(time.Second)
loop:
	for {
		select {
		case c := <-proc.Output():
			if c.Stream != sandbox.Stdout {
				continue
			}
			partial = append(partial, c.Data...)
			if i := lastNewline(partial); i >= 0 {
				consumed = append(consumed, partial[:i+1]...)
				partial = partial[i+1:]
			}
		case <-deadline:
			break loop
		}
	}
	out, _ := json.Marshal(serverReport{
		Handle: env.(sandbox.HandleReporter).Handle(), Spec: spec, Tag: "count",
		Consumed: string(consumed), Offsets: sandbox.Offsets{Stdout: int64(len(consumed))},
	})
	fmt.Println(string(out))
	// Die like a crashed server: no Terminate, no cleanup.
	os.Exit(0)
	return 0
}

const countScript = `i=1; while [ $i -le 30 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done`

func lastNewline(b []byte) int {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			return i
		}
	}
	return -1
}
