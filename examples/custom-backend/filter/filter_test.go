package filter_test

import (
	"slices"
	"testing"

	"go.uber.org/goleak"

	"example.com/custom-backend/filter"
	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The architecture passes the conformance suite agentd's own pass.
func TestConformance(t *testing.T) {
	agenttest.Run(t, agenttest.Suite{
		Architecture: filter.Architecture{ArchName: "upper", Command: []string{"tr", "a-z", "A-Z"}},
		Prompt:       "hello",
	})
}

// A filter that works until stopped: the suite's interrupt and
// cancellation checks.
func TestConformanceInterrupt(t *testing.T) {
	agenttest.Run(t, agenttest.Suite{
		Architecture: filter.Architecture{ArchName: "slow", Command: []string{"sh", "-c", `read l; echo "working on $l"; [ "$l" = hello ] || exec sleep 600`}},
		Prompt:       "hello",
		Slow:         "something long",
	})
}

func TestAnswer(t *testing.T) {
	h := &agenttest.FakeHost{}
	agenttest.LocalEnv(t, h)
	r := agenttest.Start[agent.Runner](t, filter.Architecture{ArchName: "upper", Command: []string{"tr", "a-z", "A-Z"}}, h)
	agenttest.CloseAtEnd(t, r)
	res, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hello world"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Result != "HELLO WORLD" || !slices.Equal(h.Texts(), []string{"HELLO WORLD"}) {
		t.Fatalf("result %q, texts %q", res.Result, h.Texts())
	}
}

func TestFailingCommand(t *testing.T) {
	h := &agenttest.FakeHost{}
	agenttest.LocalEnv(t, h)
	r := agenttest.Start[agent.Runner](t, filter.Architecture{ArchName: "fails", Command: []string{"sh", "-c", "exit 7"}}, h)
	agenttest.CloseAtEnd(t, r)
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "x"})
	if agent.CodeOf(err) != agent.CodeAgentExited {
		t.Fatalf("error %v, want %s", err, agent.CodeAgentExited)
	}
	agenttest.NoPending(t, h.Blocks(t))
}
