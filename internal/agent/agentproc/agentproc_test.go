package agentproc_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(t *testing.T) sandbox.Environment {
	t.Helper()
	e, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{SessionID: "t", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Terminate(context.Background()) })
	return e
}

func TestLinesStdinAndExit(t *testing.T) {
	ctx := context.Background()
	p, err := agentproc.Start(ctx, env(t), "cat", sandbox.Cmd{Argv: []string{"sh", "-c", "printf 'a\\r\\nb'; cat; echo oops >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteJSON(map[string]int{"x": 1}); err != nil {
		t.Fatal(err)
	}
	p.CloseStdin()
	var got []string
	for l := range p.Lines() {
		got = append(got, string(l.Data))
	}
	if strings.Join(got, "|") != `a|b{"x":1}` {
		t.Fatalf("lines %q", got)
	}
	err = p.ExitError()
	if agent.CodeOf(err) != agent.CodeAgentExited || !strings.Contains(err.Error(), "code 3") || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("exit error %v", err)
	}
}

func TestMissingBinary(t *testing.T) {
	_, err := agentproc.Start(context.Background(), env(t), "nope", sandbox.Cmd{Argv: []string{"no-such-agent-cli"}})
	if agent.CodeOf(err) != agent.CodeAgentNotFound {
		t.Fatalf("got %v", err)
	}
	var f *agent.Failure
	if !errors.As(err, &f) {
		t.Fatal("not a failure")
	}
}

func TestStopEscalates(t *testing.T) {
	ctx := context.Background()
	p, err := agentproc.Start(ctx, env(t), "stubborn", sandbox.Cmd{Argv: []string{"sh", "-c", "trap '' INT; echo ready; sleep 30"}})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Lines()
	start := time.Now()
	p.Stop(ctx, 200*time.Millisecond)
	<-p.Done()
	if time.Since(start) > 5*time.Second {
		t.Fatal("stop took too long")
	}
	if st, _ := p.Exit(); st.Signal == "" {
		t.Fatalf("expected a signal exit, got %+v", st)
	}
}

func TestLongLineTruncated(t *testing.T) {
	ctx := context.Background()
	p, err := agentproc.Start(ctx, env(t), "big", sandbox.Cmd{Argv: []string{"sh", "-c", "head -c 70000000 /dev/zero | tr '\\0' x; echo; echo after"}})
	if err != nil {
		t.Fatal(err)
	}
	l := <-p.Lines()
	if !l.Truncated || len(l.Data) != agentproc.MaxLine {
		t.Fatalf("truncated=%v len=%d", l.Truncated, len(l.Data))
	}
	if l2 := <-p.Lines(); string(l2.Data) != "after" {
		t.Fatalf("next line %q", l2.Data)
	}
	for range p.Lines() {
	}
}
