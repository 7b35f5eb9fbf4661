package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
)

// The fan-out latency benchmark's subscribers run in a process of their
// own (this test binary again, see TestMain): the load generator must not
// share the server's scheduler. They read raw WebSocket frames and decode
// only what they measure, so the client side costs as little as it can.
const (
	fanoutURLEnv     = "AGENTD_BENCH_FANOUT_URL"
	fanoutSessionEnv = "AGENTD_BENCH_FANOUT_SESSION"
	fanoutSubsEnv    = "AGENTD_BENCH_FANOUT_SUBS"
)

// fanoutResult is the subscriber process's answer to one round.
type fanoutResult struct {
	Summary Summary       `json:"summary"`
	Lines   int           `json:"lines"` // lines received, all subscribers
	CPU     time.Duration `json:"cpu"`
	Err     string        `json:"err,omitempty"`
}

// fanSub is one subscriber: a WebSocket joined to the session.
type fanSub struct {
	c    *websocket.Conn
	last int64
}

// runFanoutProc is the subscriber process's main: it joins the session
// with its subscribers, says "ready", then for every command read from
// stdin sends it as a message and has every subscriber read until the
// turn ends, measuring each timestamped line's latency; it answers with a
// line of JSON.
func runFanoutProc(in io.Reader, out io.Writer) int {
	url, id := os.Getenv(fanoutURLEnv), os.Getenv(fanoutSessionEnv)
	n, _ := strconv.Atoi(os.Getenv(fanoutSubsEnv))
	ctx := context.Background()
	c, err := client.New(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		return 2
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	subs := make([]*fanSub, n)
	for i := range subs {
		st, err := c.Session(ctx, id)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fanout:", err)
			return 1
		}
		ws, err := wsJoin(ctx, hc, url, id, st.LastSeq)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fanout:", err)
			return 1
		}
		subs[i] = &fanSub{c: ws, last: st.LastSeq}
	}
	fmt.Fprintln(out, "ready")
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var r clientRound
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return 2
		}
		cpu0 := processCPU()
		sent, err := c.Send(ctx, id, r.Command)
		if err != nil {
			_ = enc.Encode(fanoutResult{Err: err.Error()})
			continue
		}
		var mu sync.Mutex
		var all []time.Duration
		var errs []error
		var wg sync.WaitGroup
		for _, s := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lat, err := s.untilEnd(ctx, sent.QueryID)
				if err == nil && len(lat) != r.Want {
					err = fmt.Errorf("%d timestamped lines, want %d", len(lat), r.Want)
				}
				mu.Lock()
				all = append(all, lat...)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}()
		}
		wg.Wait()
		res := fanoutResult{Summary: Summarize(all), Lines: len(all), CPU: processCPU() - cpu0}
		if err := errors.Join(errs...); err != nil {
			res.Err = err.Error()
		}
		if err := enc.Encode(res); err != nil {
			return 1
		}
	}
	return 0
}

var (
	deltaType = []byte(`"type":"block:delta"`)
	deltaKey  = []byte(`"delta":"`)
	queryEnd  = [][]byte{[]byte(`"type":"query:completed"`), []byte(`"type":"query:failed"`)}
)

// untilEnd reads frames until query's end, returning the latency of every
// timestamped line.
func (s *fanSub) untilEnd(ctx context.Context, query string) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var p StampLines
	var lat []time.Duration
	wantQuery := []byte(`"queryId":"` + query + `"`)
	for {
		_, data, err := s.c.Read(ctx)
		if err != nil {
			return lat, err
		}
		now := time.Now()
		seq, ok := FrameSeq(data)
		if !ok {
			continue // ack, pong
		}
		if seq != s.last+1 {
			return lat, fmt.Errorf("seq %d after %d", seq, s.last)
		}
		s.last = seq
		if bytes.Contains(data, deltaType) {
			i := bytes.Index(data, deltaKey)
			if i < 0 {
				return lat, fmt.Errorf("a delta without text: %s", data)
			}
			rest := data[i+len(deltaKey):]
			j := bytes.IndexByte(rest, '"')
			if j < 0 {
				return lat, fmt.Errorf("a delta without its end: %s", data)
			}
			text := strings.ReplaceAll(string(rest[:j]), `\n`, "\n")
			if lat, err = p.Feed(text, now, lat); err != nil {
				return lat, err
			}
			continue
		}
		for _, e := range queryEnd {
			if bytes.Contains(data, e) && bytes.Contains(data, wantQuery) {
				return lat, nil
			}
		}
	}
}

// fanoutProc is the parent's handle on the subscriber process.
type fanoutProc struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

func startFanoutProc(tb testing.TB, url, session string, subs int) *fanoutProc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fanoutURLEnv+"="+url, fanoutSessionEnv+"="+session, fanoutSubsEnv+"="+strconv.Itoa(subs))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &fanoutProc{in: in, out: bufio.NewScanner(outPipe)}
	p.out.Buffer(make([]byte, 1<<20), 16<<20)
	tb.Cleanup(func() {
		in.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	if !p.out.Scan() || p.out.Text() != "ready" {
		tb.Fatalf("subscriber process: %q %v", p.out.Text(), p.out.Err())
	}
	return p
}

func (p *fanoutProc) round(command string, want int) (fanoutResult, error) {
	b, _ := json.Marshal(clientRound{Command: command, Want: want})
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return fanoutResult{}, err
	}
	if !p.out.Scan() {
		return fanoutResult{}, fmt.Errorf("subscriber process ended: %v", p.out.Err())
	}
	var r fanoutResult
	if err := json.Unmarshal(p.out.Bytes(), &r); err != nil {
		return r, err
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

const (
	fanoutLatSubs  = 200
	fanoutLatLines = 5000 // 5 s at 1,000 lines/s
)

// BenchmarkFanoutLatency: one shell session printing 1,000 timestamped
// lines a second (the stamper, a line every millisecond, 5,000 lines),
// followed by 200 WebSocket subscribers in a process of their own; the
// time from each line's write to each subscriber holding it (1,000,000
// samples a round). The server is agentd.New in this process (SQLite,
// local sandbox). cpu-µs/delivery is the server's CPU per line per
// subscriber; client-cpu-µs/delivery the subscribers'.
//
// Target (issue 12): p99 < 5 ms.
func BenchmarkFanoutLatency(b *testing.B) {
	srv, c := startServer(b, agentd.Config{})
	fs := latencySetup(b, c, 1)
	p := startFanoutProc(b, srv.URL, fs[0].id, fanoutLatSubs)
	command := stamperCommand(b, fanoutLatLines, time.Millisecond)
	var sums []Summary
	var lines int
	var clientCPU time.Duration
	cpu0, wait0, t0 := processCPU(), runqueueWait(), time.Now()
	for b.Loop() {
		r, err := p.round(stamperAt(command, time.Now().Add(500*time.Millisecond)), fanoutLatLines)
		if err != nil {
			b.Fatal(err)
		}
		sums = append(sums, r.Summary)
		lines += r.Lines
		clientCPU += r.CPU
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// Per-round summaries: the worst round's percentiles are reported.
	var worst Summary
	for _, s := range sums {
		if s.P99 > worst.P99 {
			worst = s
		}
	}
	b.ReportMetric(ms(worst.P50), "p50-ms")
	b.ReportMetric(ms(worst.P95), "p95-ms")
	b.ReportMetric(ms(worst.P99), "p99-ms")
	b.ReportMetric(ms(worst.Max), "max-ms")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(lines), "cpu-µs/delivery")
	b.ReportMetric(float64(clientCPU.Microseconds())/float64(lines), "client-cpu-µs/delivery")
	b.ReportMetric(float64((runqueueWait()-wait0).Milliseconds())/time.Since(t0).Seconds(), "runq-wait-ms/s")
	b.ReportMetric(load1(), "load1")
	for i, s := range sums {
		b.Logf("round %d: %s", i+1, s)
	}
}

// TestFanoutLatencySmoke: 5 subscribers, 100 lines.
func TestFanoutLatencySmoke(t *testing.T) {
	srv, c := startServer(t, agentd.Config{})
	fs := latencySetup(t, c, 1)
	p := startFanoutProc(t, srv.URL, fs[0].id, 5)
	r, err := p.round(stamperCommand(t, 100, time.Millisecond), 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Lines != 500 {
		t.Fatalf("%d lines received", r.Lines)
	}
}
