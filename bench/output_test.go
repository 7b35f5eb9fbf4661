package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// Issue 18: the server's memory for a session is bounded by the output
// limit, not by the outputs. Each benchmark runs a real `agentd serve`
// process (agentdtest.StartProcess) and reads its peak RSS (VmHWM) from
// /proc: so one run per process, whatever b.N (use -benchtime=1x).
//
//	go test ./bench/ -run '^$' -bench OutputMemory -benchtime=1x -timeout=60m -v
//	go test ./bench/ -run '^$' -bench OutputTurns  -benchtime=1x -timeout=60m -v

// statusKB reads a field (VmRSS, VmHWM) of /proc/<pid>/status in KiB.
func statusKB(tb testing.TB, pid int, field string) float64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return n
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// runTurn sends cmd and waits for its turn's end, following the events
// over the Go client's stream.
func runTurn(tb testing.TB, p *agentdtest.Process, id, cmd string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	last, err := p.Client.Session(ctx, id)
	if err != nil {
		tb.Fatal(err)
	}
	sent, err := p.Client.Send(ctx, id, cmd)
	if err != nil {
		tb.Fatal(err)
	}
	s := p.Client.Stream(ctx, id, last.LastSeq)
	defer s.Close()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			tb.Fatalf("turn %s: %v", sent.QueryID, err)
		}
		if ev.Type == conversation.TypeQueryCompleted || ev.Type == conversation.TypeQueryFailed {
			var q struct{ QueryID string }
			_ = json.Unmarshal(ev.Payload, &q)
			if q.QueryID == sent.QueryID {
				if ev.Type == conversation.TypeQueryFailed {
					tb.Fatalf("turn failed: %s", ev.Payload)
				}
				return
			}
		}
	}
}

// getStateBytes GETs the session's state (default page): its size and the
// best time of n reads.
func getStateBytes(tb testing.TB, url, id string, n int) (int, time.Duration) {
	tb.Helper()
	size, best := 0, time.Duration(0)
	for range n {
		start := time.Now()
		resp, err := http.Get(url + "/api/sessions/" + id)
		if err != nil {
			tb.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil || resp.StatusCode != 200 {
			tb.Fatalf("GET state: %d %v", resp.StatusCode, err)
		}
		size = len(body)
		if best == 0 || d < best {
			best = d
		}
	}
	return size, best
}

// logBytes is the size of the session's log (its events' JSON, read back
// page by page).
func logBytes(tb testing.TB, p *agentdtest.Process, id string) int {
	tb.Helper()
	total := 0
	for after := int64(0); ; {
		page, err := p.Client.Events(context.Background(), id, after, 1000)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range page.Events {
			raw, _ := json.Marshal(e)
			total += len(raw)
			after = e.Seq
		}
		if len(page.Events) < 1000 {
			return total
		}
	}
}

// BenchmarkOutputMemory: one shell turn printing 1, 10, 100 and 1,000 MB
// (lines of 56 bytes): the server's peak RSS, the state's size and the
// log's, per output size. With the default 64 KiB limit they stay flat.
func BenchmarkOutputMemory(b *testing.B) {
	for _, mb := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("out=%dMB", mb), func(b *testing.B) {
			for range b.N {
				p := agentdtest.StartProcess(b, nil, "--data-dir", b.TempDir(), "--no-ui")
				ctx := context.Background()
				created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
				if err != nil {
					b.Fatal(err)
				}
				idle := statusKB(b, p.PID(), "VmRSS")
				start := time.Now()
				runTurn(b, p, created.SessionID,
					fmt.Sprintf("yes 'the quick brown fox jumps over the lazy dog 0123456789' | head -c %d", mb*1_000_000))
				took := time.Since(start)
				size, get := getStateBytes(b, p.URL, created.SessionID, 5)
				peak := statusKB(b, p.PID(), "VmHWM")
				b.ReportMetric(idle/1024, "idle-rss-MB")
				b.ReportMetric(peak/1024, "peak-rss-MB")
				b.ReportMetric(float64(size)/1024, "state-KiB")
				b.ReportMetric(float64(get.Microseconds())/1000, "get-ms")
				b.ReportMetric(float64(logBytes(b, p, created.SessionID))/1024, "log-KiB")
				b.ReportMetric(float64(mb)/took.Seconds(), "MB/s")
				b.ReportMetric(load1(), "load1")
				p.Terminate()
			}
		})
	}
}

// BenchmarkOutputTurns is the session: 40 turns of
// `seq 1 100000 | sed …` (4.1 MB each), with the default limit and with
// none (how the server was before: the shell then keeps the first 8 MiB
// of each output, all of these): peak RSS while streaming and serving,
// the state's size and time, and after a restart the peak RSS once the
// session is opened.
func BenchmarkOutputTurns(b *testing.B) {
	for _, limit := range []string{"64KiB", "off"} {
		b.Run("limit="+limit, func(b *testing.B) {
			for range b.N {
				p := agentdtest.StartProcess(b, nil, "--data-dir", b.TempDir(), "--no-ui", "--output-limit", limit)
				ctx := context.Background()
				created, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
				if err != nil {
					b.Fatal(err)
				}
				id := created.SessionID
				for i := range 40 {
					runTurn(b, p, id, fmt.Sprintf("seq 1 100000 | sed 's/$/ turn %02d: the quick brown fox jumps/'", i))
				}
				streamed := statusKB(b, p.PID(), "VmHWM")
				size, get := getStateBytes(b, p.URL, id, 5)
				served := statusKB(b, p.PID(), "VmHWM")
				p.Restart()
				restarted := statusKB(b, p.PID(), "VmRSS")
				_, reget := getStateBytes(b, p.URL, id, 1)
				reopened := statusKB(b, p.PID(), "VmHWM")
				b.ReportMetric(streamed/1024, "stream-peak-rss-MB")
				b.ReportMetric(served/1024, "serve-peak-rss-MB")
				b.ReportMetric(float64(size)/1024, "state-KiB")
				b.ReportMetric(float64(get.Microseconds())/1000, "get-ms")
				b.ReportMetric(restarted/1024, "restart-rss-MB")
				b.ReportMetric(reopened/1024, "reopen-peak-rss-MB")
				b.ReportMetric(float64(reget.Microseconds())/1000, "reopen-get-ms")
				b.ReportMetric(load1(), "load1")
				p.Terminate()
			}
		})
	}
}
