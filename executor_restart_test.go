package agentd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// TestExecutorTurnSurvivesKill9 is issue 4's proof: with the executor
// sandbox, kill -9 the server in the middle of a turn, start it again, and
// the turn finishes with every line exactly once, in order, seqs contiguous,
// streamed to a client that stayed connected across the restart.
func TestExecutorTurnSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and executors")
	}
	data := t.TempDir()
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + t.TempDir()}, "--data-dir", data, "--no-ui", "--sandbox", "executor")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r := shellTurnAcrossKill9(ctx, t, p, 50, 12)
	events := r.events
	for i, ev := range events {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: gap or duplicate across the restart", i, ev.Seq)
		}
	}
	if r.stream.Reconnects() == 0 {
		t.Fatal("the client never reconnected: the server was not really restarted")
	}
	// The reduced state agrees.
	st, err := p.Client.Session(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	last := st.Blocks[len(st.Blocks)-1]
	if last.Output != r.output || last.IsError {
		t.Fatalf("result block %+v", last)
	}
}

// kill9Turn is what shellTurnAcrossKill9 saw.
type kill9Turn struct {
	id     string               // the session
	events []conversation.Event // every event the client received, in order
	output string               // the turn's streamed output
	stream *client.Stream       // the client's stream, which stayed open across the restart
}

// shellTurnAcrossKill9 creates a shell session on p, sends a turn printing
// "line 1" … "line <lines>" a tenth of a second apart, kills the server
// with SIGKILL and starts it again once "line <killAt>" was streamed, and
// reads the stream until the turn ends. The turn must complete, the server
// must have been killed, and the output must be every line exactly once,
// in order. The session is deleted at the test's end.
func shellTurnAcrossKill9(ctx context.Context, t *testing.T, p *agentdtest.Process, lines, killAt int) kill9Turn {
	t.Helper()
	created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	t.Cleanup(func() {
		// Stop the sandbox too (the server is killed without shutting it down).
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		p.Client.DeleteSession(dctx, id, true)
	})
	stream := p.Client.Stream(ctx, id, 0)
	t.Cleanup(func() { stream.Close() })
	sent, err := p.Client.Send(ctx, id, fmt.Sprintf("for i in $(seq 1 %d); do echo line $i; sleep 0.1; done", lines))
	if err != nil {
		t.Fatal(err)
	}
	var events []conversation.Event
	var output strings.Builder
	killed := false
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("stream after %d events (output so far %q): %v\n%s", len(events), output.String(), err, p.Logs())
		}
		events = append(events, ev)
		if ev.Type == conversation.TypeBlockDelta {
			var d conversation.BlockDelta
			json.Unmarshal(ev.Payload, &d)
			output.WriteString(d.Delta)
			if !killed && strings.Contains(output.String(), fmt.Sprintf("line %d\n", killAt)) {
				killed = true
				p.Restart() // SIGKILL, then a new server on the same data and port
			}
		}
		if ev.Type == conversation.TypeQueryCompleted || ev.Type == conversation.TypeQueryFailed {
			var q struct{ QueryID string }
			json.Unmarshal(ev.Payload, &q)
			if q.QueryID == sent.QueryID {
				if ev.Type == conversation.TypeQueryFailed {
					t.Fatalf("turn failed after the restart: %s\n%s", ev.Payload, p.Logs())
				}
				break
			}
		}
	}
	if !killed {
		t.Fatal("the server was never killed")
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if output.String() != want.String() {
		t.Fatalf("output across the restart:\n%q\nwant\n%q", output.String(), want.String())
	}
	return kill9Turn{id: id, events: events, output: output.String(), stream: stream}
}
