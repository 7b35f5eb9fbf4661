package hostdir_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"example.com/custom-backend/hostdir"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/sandbox/sandboxtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The backend passes the conformance suite agentd's own pass.
func TestConformance(t *testing.T) {
	sandboxtest.Run(t, sandboxtest.Suite{NewProvider: func(testing.TB) sandbox.Provider {
		return hostdir.New(hostdir.Options{Allow: []string{"sh", "true"}})
	}})
}

func TestAllowList(t *testing.T) {
	p := hostdir.New(hostdir.Options{Allow: []string{"sh"}})
	env, err := p.Create(t.Context(), sandbox.Spec{SessionID: "s", Workspace: filepath.Join(t.TempDir(), "ws")})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Terminate(context.Background())
	for _, argv := range [][]string{{"cat", "/etc/passwd"}, {"/bin/sh"}, {"../sh"}, {"./sh"}} {
		if _, err := env.Exec(t.Context(), sandbox.Cmd{Argv: argv}); !errors.Is(err, hostdir.ErrNotAllowed) {
			t.Errorf("%q: %v, want ErrNotAllowed", argv, err)
		}
	}
	proc, err := env.Exec(t.Context(), sandbox.Cmd{Argv: []string{"sh", "-c", "exit 0"}})
	if err != nil {
		t.Fatal(err)
	}
	for range proc.Output() {
	}
	if st, err := proc.Wait(t.Context()); err != nil || !st.Success() {
		t.Fatalf("sh: %+v %v", st, err)
	}
}
