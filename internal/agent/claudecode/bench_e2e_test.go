package claudecode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// BenchmarkTurnOverhead measures, side by side on the same mock-llm
// script, one turn of `claude -p` run directly against one turn through
// agentd (session created, message posted, query:completed received over
// the WebSocket), each with a fresh Claude config folder, plus a follow-up
// turn in the agentd session (the CLI already running). Run with
//
//	go test ./internal/agent/claudecode -run XXX -bench TurnOverhead -benchtime 8x
//
// It reports medians: claude-p-ms, agentd-ms, overhead-ms (agentd - claude
// -p; target < 30), and agentd-warm-ms.
func BenchmarkTurnOverhead(b *testing.B) {
	bin := agentdtest.AgentBin(b, "claude")
	mock, url := agentdtest.MockLLM(b, `
rules:
  - name: hello
    match: {userContains: "say hello"}
    reply: {text: "Hello from mock-llm."}
`)
	_ = mock
	srv := agentdtest.Start(b, agentd.Config{
		Env:       map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test-key"},
		Sandboxes: map[string]sandbox.Provider{"local": local.New(local.Options{Path: bin + ":/usr/local/bin:/usr/bin:/bin"})},
		DisableUI: true,
	})
	c := srv.Client
	ctx := context.Background()

	// direct runs claude -p and times it to its result line (the CLI
	// exits a little later; agentd's turn also ends at the result line).
	direct := func() time.Duration {
		dir := b.TempDir()
		cmd := exec.Command(filepath.Join(bin, "claude"), "-p", "please say hello", "--output-format", "stream-json", "--verbose")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8",
			"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=test-key", "CLAUDE_CONFIG_DIR=" + filepath.Join(dir, ".agentd", "claude"),
			"DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		var d time.Duration
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if d == 0 && strings.HasPrefix(sc.Text(), `{"type":"result"`) {
				d = time.Since(start)
				if !strings.Contains(sc.Text(), `"result":"Hello from mock-llm."`) {
					b.Fatalf("claude -p: %s", sc.Text())
				}
			}
		}
		if err := cmd.Wait(); err != nil || d == 0 {
			b.Fatalf("claude -p: %v (result line seen: %v)", err, d != 0)
		}
		return d
	}
	turn := func(id string) time.Duration { return timeTurn(b, srv, id, "please say hello") }
	session := func() string {
		s, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code"})
		if err != nil {
			b.Fatal(err)
		}
		return s.SessionID
	}
	// Warm the page cache for both (the first CLI start of a machine is
	// slower than the rest).
	direct()
	turn(session())

	var ds, as, ws, diffs []time.Duration
	b.ResetTimer()
	for i := range b.N {
		id := session()
		var d, a time.Duration
		// Alternate the order: the machine's load drifts.
		if i%2 == 0 {
			d = direct()
			a = turn(id)
		} else {
			a = turn(id)
			d = direct()
		}
		ds, as, diffs = append(ds, d), append(as, a), append(diffs, a-d)
		ws = append(ws, turn(id))
		_ = c.DeleteSession(ctx, id, true)
	}
	b.StopTimer()
	md, ma, mw, mdiff := median(ds), median(as), median(ws), median(diffs)
	b.ReportMetric(ms(md), "claude-p-ms")
	b.ReportMetric(ms(ma), "agentd-ms")
	b.ReportMetric(ms(mdiff), "overhead-ms")
	b.ReportMetric(ms(mw), "agentd-warm-ms")
	if b.N > 1 || os.Getenv("AGENTD_BENCH_VERBOSE") != "" {
		fmt.Fprintf(os.Stderr, "\none turn, median of %d      ms\n", b.N)
		fmt.Fprintf(os.Stderr, "claude -p (direct)        %8.1f\n", ms(md))
		fmt.Fprintf(os.Stderr, "agentd, new session       %8.1f\n", ms(ma))
		fmt.Fprintf(os.Stderr, "overhead (paired median)  %8.1f\n", ms(mdiff))
		fmt.Fprintf(os.Stderr, "agentd, next turn (warm)  %8.1f\n", ms(mw))
		fmt.Fprintf(os.Stderr, "direct %v\nagentd %v\nwarm   %v\n", round(ds), round(as), round(ws))
	}
}

// BenchmarkServerTurnFakeCLI measures what agentd itself adds to a turn,
// with the test's fake CLI (a Go program that answers at once): a new
// session's first turn (environment, profile, CLI start, events, WebSocket)
// and a follow-up turn (POST, stdin, conversion, durable appends, delivery).
func BenchmarkServerTurnFakeCLI(b *testing.B) {
	bin := claudecode.FakeCLIDir(b)
	srv := agentdtest.Start(b, agentd.Config{
		Sandboxes: map[string]sandbox.Provider{"local": local.New(local.Options{Path: bin + ":/usr/local/bin:/usr/bin:/bin"})},
		DisableUI: true,
	})
	c := srv.Client
	ctx := context.Background()
	var first, next []time.Duration
	for range b.N {
		s, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code"})
		if err != nil {
			b.Fatal(err)
		}
		first = append(first, timeTurn(b, srv, s.SessionID, "hello"))
		next = append(next, timeTurn(b, srv, s.SessionID, "hello"))
		_ = c.DeleteSession(ctx, s.SessionID, true)
	}
	b.ReportMetric(ms(median(first)), "first-turn-ms")
	b.ReportMetric(ms(median(next)), "next-turn-ms")
}

// timeTurn times one turn from POST to query:completed over the WebSocket.
func timeTurn(b *testing.B, srv *agentdtest.Server, id, content string) time.Duration {
	c := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := c.Session(ctx, id)
	if err != nil {
		b.Fatal(err)
	}
	stream := c.Stream(ctx, id, st.LastSeq)
	defer stream.Close()
	start := time.Now()
	sent, err := c.Send(ctx, id, content)
	if err != nil {
		b.Fatal(err)
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if ev.Type == conversation.TypeQueryFailed {
			b.Fatalf("turn failed: %s", ev.Payload)
		}
		if ev.Type != conversation.TypeQueryCompleted {
			continue
		}
		var q conversation.QueryCompleted
		_ = json.Unmarshal(ev.Payload, &q)
		if q.QueryID == sent.QueryID {
			return time.Since(start)
		}
	}
}

func round(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
