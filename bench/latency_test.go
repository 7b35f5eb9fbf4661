package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store/sqlite"
)

// stampCommand prints lines each carrying the Unix time in nanoseconds at
// which it was made, sleep seconds apart. It forks date and sleep for every
// line (the command of issue 2).
func stampCommand(lines int, sleep string) string {
	return fmt.Sprintf("for i in $(seq 1 %d); do echo $(date +%%s%%N); sleep %s; done", lines, sleep)
}

// The stamper is this test binary run as a plain program (see TestMain):
// one process that writes lines of time.Now().UnixNano(), each taken just
// before its own write(2), every AGENTD_BENCH_STAMP_EVERY. Without a fork
// per line, 50 sessions of it do not saturate a small machine, so what is
// measured is agentd's own latency.
//
// With AGENTD_BENCH_STAMP_AT (Unix nanoseconds) the stamper writes its
// first line at that instant: the 50 stampers of a round then start
// streaming together once all of them have started, so the measurement
// covers 50 sessions streaming at once and not 50 Go programs starting at
// once on two cores (which alone puts the direct path's p99 at 9–20 ms).
const (
	stampLinesEnv = "AGENTD_BENCH_STAMP_LINES"
	stampEveryEnv = "AGENTD_BENCH_STAMP_EVERY"
	stampAtEnv    = "AGENTD_BENCH_STAMP_AT"
)

// stamperCommand is the shell command running the stamper.
func stamperCommand(tb testing.TB, lines int, every time.Duration) string {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	return fmt.Sprintf("%s=%d %s=%s exec %s", stampLinesEnv, lines, stampEveryEnv, every, shellQuote(exe))
}

// stamperAt is stamper (a stamperCommand) writing its first line at at.
func stamperAt(stamper string, at time.Time) string {
	return fmt.Sprintf("%s=%d %s", stampAtEnv, at.UnixNano(), stamper)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runStamper is the stamper's main; it returns the exit code.
func runStamper(w io.Writer) int {
	lines, err := strconv.Atoi(os.Getenv(stampLinesEnv))
	if err != nil || lines < 0 {
		fmt.Fprintf(os.Stderr, "stamper: bad %s: %q\n", stampLinesEnv, os.Getenv(stampLinesEnv))
		return 2
	}
	every, err := time.ParseDuration(os.Getenv(stampEveryEnv))
	if err != nil || every < 0 {
		fmt.Fprintf(os.Stderr, "stamper: bad %s: %q\n", stampEveryEnv, os.Getenv(stampEveryEnv))
		return 2
	}
	if at := os.Getenv(stampAtEnv); at != "" {
		ns, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "stamper: bad %s: %q\n", stampAtEnv, at)
			return 2
		}
		time.Sleep(time.Until(time.Unix(0, ns)))
	}
	buf := make([]byte, 0, 32)
	for range lines {
		buf = strconv.AppendInt(buf[:0], time.Now().UnixNano(), 10)
		buf = append(buf, '\n')
		if _, err := w.Write(buf); err != nil {
			return 1
		}
		time.Sleep(every)
	}
	return 0
}

// startServer runs agentd.New (the embedding API cmd/agentd uses) on a
// loopback port, with a client on its own HTTP transport.
func startServer(tb testing.TB, cfg agentd.Config) (*agentdtest.Server, *client.Client) {
	tb.Helper()
	cfg.Logger = quietLogger()
	srv := agentdtest.Start(tb, cfg)
	c, err := client.New(srv.URL, client.WithHTTPClient(newHTTPClient(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	return srv, c
}

// startTimedServer is startServer with its own SQLite store whose event
// appends (the log's group commits) are timed.
func startTimedServer(tb testing.TB, cfg agentd.Config) (*agentdtest.Server, *client.Client, *commitTimer) {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), tb.TempDir()+"/agentd.db", sqlite.WithLogger(quietLogger()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() }) // after the server stops: cleanups run last-in first-out
	ts := &timedServerStore{Store: st}
	cfg.Store = ts
	srv, c := startServer(tb, cfg)
	return srv, c, &ts.commitTimer
}

// follower follows one session over the WebSocket (the Go client's
// Stream, one connection per session, as a UI would).
type follower struct {
	id     string
	stream *client.Stream
}

// untilTurnEnd reads events until the query ends, calling on for each.
func (f *follower) untilTurnEnd(ctx context.Context, query string, on func(conversation.Event, time.Time) error) error {
	for {
		ev, err := f.stream.Next(ctx)
		if err != nil {
			return fmt.Errorf("session %s: %w", f.id, err)
		}
		now := time.Now()
		if on != nil {
			if err := on(ev, now); err != nil {
				return err
			}
		}
		switch ev.Type {
		case conversation.TypeQueryCompleted, conversation.TypeQueryFailed:
			var p conversation.QueryFailed // QueryCompleted's fields are a subset
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				return err
			}
			if p.QueryID != query {
				continue
			}
			if ev.Type == conversation.TypeQueryFailed {
				return fmt.Errorf("session %s: %s failed: %s", f.id, query, p.Error)
			}
			return nil
		}
	}
}

// turnStartLines is how many first lines of each command count as the
// start of its turn: the 50 turns start together, and their session
// writes (lease, record, status) queue with the event log's commits on
// SQLite's one writer connection, so the first lines wait behind them.
const turnStartLines = 10

// lineLatencies collects line latencies over all lines and over the lines
// after each command's first turnStartLines (the steady stream).
type lineLatencies struct {
	all, steady []time.Duration
	// With a pair stream of each session (latencyRound): every line's
	// latency through it, and each line's arrival through the main
	// stream minus its arrival through the pair.
	pair, added []time.Duration
}

// add takes one command's latencies, in line order.
func (l *lineLatencies) add(lat []time.Duration) {
	l.all = append(l.all, lat...)
	if len(lat) > turnStartLines {
		l.steady = append(l.steady, lat[turnStartLines:]...)
	}
}

func (l *lineLatencies) merge(o lineLatencies) {
	l.all = append(l.all, o.all...)
	l.steady = append(l.steady, o.steady...)
	l.pair = append(l.pair, o.pair...)
	l.added = append(l.added, o.added...)
}

// latencySetup creates n shell sessions, brings each environment up with
// a first turn and leaves a stream open on each.
func latencySetup(tb testing.TB, c *client.Client, n int) []*follower {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fs := make([]*follower, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell", Name: fmt.Sprintf("latency-%d", i)})
			if err != nil {
				errs <- err
				return
			}
			f := &follower{id: created.SessionID, stream: c.Stream(context.Background(), created.SessionID, 0)}
			fs[i] = f
			sent, err := c.Send(ctx, f.id, "true")
			if err != nil {
				errs <- err
				return
			}
			errs <- f.untilTurnEnd(ctx, sent.QueryID, nil)
		}()
	}
	wg.Wait()
	tb.Cleanup(func() {
		for _, f := range fs {
			if f != nil {
				f.stream.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		if err != nil {
			tb.Fatalf("latency setup: %v", err)
		}
	}
	return fs
}

// latencyRound runs command in every session at once and returns, for
// every output line, the time from the line's own timestamp to its
// arrival at the WebSocket client.
func latencyRound(c *client.Client, fs, pairs []*follower, command string, want int) (lineLatencies, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var all lineLatencies
	errs := make(chan error, len(fs))
	for i, f := range fs {
		go func() {
			sent, err := c.Send(ctx, f.id, command)
			if err != nil {
				errs <- err
				return
			}
			var pair *follower
			if pairs != nil {
				pair = pairs[i]
			}
			// The pair stream is read at the same time, by a goroutine of
			// its own: each arrival is timed when it happens.
			type pairResult struct {
				lat []time.Duration
				err error
			}
			pairDone := make(chan pairResult, 1)
			if pair != nil {
				go func() {
					lat, err := stampedLines(ctx, pair, sent.QueryID, want)
					pairDone <- pairResult{lat, err}
				}()
			}
			lat, err := stampedLines(ctx, f, sent.QueryID, want)
			var pr pairResult
			if pair != nil {
				pr = <-pairDone
				err = errors.Join(err, pr.err)
			}
			mu.Lock()
			all.add(lat)
			if pair != nil && err == nil {
				all.pair = append(all.pair, pr.lat...)
				for k := range lat {
					// The same line (each stream carries every delta in seq
					// order); its stamp cancels out.
					all.added = append(all.added, lat[k]-pr.lat[k])
				}
			}
			mu.Unlock()
			errs <- err
		}()
	}
	var errList []error
	for range fs {
		errList = append(errList, <-errs)
	}
	return all, errors.Join(errList...)
}

// stampedLines reads f's stream until query ends and returns the latency
// of each timestamped line (StampLines) it carried, want of them.
func stampedLines(ctx context.Context, f *follower, query string, want int) ([]time.Duration, error) {
	var p StampLines
	var lat []time.Duration
	err := f.untilTurnEnd(ctx, query, func(ev conversation.Event, recv time.Time) error {
		if ev.Type != conversation.TypeBlockDelta {
			return nil
		}
		var d conversation.BlockDelta
		if err := json.Unmarshal(ev.Payload, &d); err != nil {
			return err
		}
		var err error
		lat, err = p.Feed(d.Delta, recv, lat)
		return err
	})
	if err == nil && len(lat) != want {
		err = fmt.Errorf("session %s: %d timestamped lines, want %d", f.id, len(lat), want)
	}
	return lat, err
}

// directRound runs command n times at once with os/exec, reading stdout
// straight from the pipe: the floor set by sh, date, the pipe and the
// scheduler on this machine, with no agentd in the path.
func directRound(n int, command string, want int) (lineLatencies, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var all lineLatencies
	errs := make(chan error, n)
	for range n {
		go func() {
			cmd := exec.CommandContext(ctx, "sh", "-c", command)
			out, err := cmd.StdoutPipe()
			if err != nil {
				errs <- err
				return
			}
			if err := cmd.Start(); err != nil {
				errs <- err
				return
			}
			var p StampLines
			var lat []time.Duration
			r := bufio.NewReaderSize(out, 64<<10)
			buf := make([]byte, 64<<10)
			var ferr error
			for {
				k, rerr := r.Read(buf)
				if k > 0 && ferr == nil {
					lat, ferr = p.Feed(string(buf[:k]), time.Now(), lat)
				}
				if rerr == io.EOF {
					break
				}
				if rerr != nil {
					ferr = errors.Join(ferr, rerr)
					break
				}
			}
			werr := cmd.Wait()
			if ferr == nil && werr == nil && len(lat) != want {
				ferr = fmt.Errorf("direct: %d timestamped lines, want %d", len(lat), want)
			}
			mu.Lock()
			all.add(lat)
			mu.Unlock()
			errs <- errors.Join(ferr, werr)
		}()
	}
	var errList []error
	for range n {
		errList = append(errList, <-errs)
	}
	return all, errors.Join(errList...)
}

func reportLatency(b *testing.B, l lineLatencies) {
	s, st := Summarize(l.all), Summarize(l.steady)
	reportSummary(b, "", s)
	b.ReportMetric(ms(st.P99), "steady-p99-ms")
	b.ReportMetric(float64(s.N), "lines")
	b.ReportMetric(load1(), "load1")
	b.Logf("all lines: %s; after the first %d of each command: %s", s, turnStartLines, st)
}

// reportSummary reports s's p50, p95, p99 and max in milliseconds, their
// names prefixed.
func reportSummary(b *testing.B, prefix string, s Summary) {
	b.ReportMetric(ms(s.P50), prefix+"p50-ms")
	b.ReportMetric(ms(s.P95), prefix+"p95-ms")
	b.ReportMetric(ms(s.P99), prefix+"p99-ms")
	b.ReportMetric(ms(s.Max), prefix+"max-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

const (
	latencySessions = 50
	latencyLines    = 200
)

// stampStartDelay is how long after a round is sent its stampers write
// their first line (see stampAtEnv): long enough for 50 sessions to start
// their commands on a loaded two-core machine. AGENTD_BENCH_STAMP_DELAY
// sets another; 0 lets each stamper start at once, so the first lines
// meet the start-up of the others.
func stampStartDelay(tb testing.TB) time.Duration {
	v := os.Getenv("AGENTD_BENCH_STAMP_DELAY")
	if v == "" {
		return time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		tb.Fatalf("AGENTD_BENCH_STAMP_DELAY=%q: want a duration", v)
	}
	return d
}

// roundCommand returns the command of one round: the date loop, or
// the stamper starting at a common instant.
func roundCommand(tb testing.TB, cmd string) func() string {
	if cmd == "date" {
		c := stampCommand(latencyLines, "0.01")
		return func() string { return c }
	}
	c := stamperCommand(tb, latencyLines, 10*time.Millisecond)
	delay := stampStartDelay(tb)
	if delay == 0 {
		return func() string { return c }
	}
	return func() string { return stamperAt(c, time.Now().Add(delay)) }
}

// BenchmarkShellLatency: the time from a shell command writing a stdout
// line to a WebSocket client holding it, with 50 sessions streaming at
// once, 200 lines each, 10 ms apart; every line carries its own timestamp.
// One op is one round of all 50 commands.
//
// path=agentd goes through the whole server (local sandbox, shell runner,
// event log with SQLite, WebSocket, Go client, one connection per session).
// clients=process runs the 50 clients in a process of their own, as an
// application's would be (cpu-µs/line is then the server's alone, and
// client-cpu-µs/line theirs); clients=inproc runs them in the server's
// process. path=direct runs the same 50 commands with os/exec and reads
// their pipes: the floor set by the command and the scheduler on this
// machine, with no agentd in the path.
//
// cmd=date is the command of issue 2 (`for i in $(seq 1 200); do echo
// $(date +%s%N); sleep 0.01; done`): it forks date and sleep for every line,
// 10,000 processes a second for 50 sessions, which alone saturates a
// 2-core machine. cmd=stamper is one process per session writing
// time.Now().UnixNano() lines (this test binary; see stamperCommand), all
// 50 starting their first line at one instant once all have started (see
// stampAtEnv), so the latency measured is agentd's, not the fork storm's
// or the start-up's.
//
// Target (issue 2): p99 < 5 ms added.
func BenchmarkShellLatency(b *testing.B) {
	for _, cmd := range []string{"stamper", "date"} {
		command := roundCommand(b, cmd)
		for _, clients := range []string{"process", "inproc"} {
			b.Run("cmd="+cmd+"/path=agentd/clients="+clients, func(b *testing.B) {
				srv, c, commits := startTimedServer(b, agentd.Config{})
				fs := latencySetup(b, c, latencySessions)
				round := func(command string) (lineLatencies, time.Duration, error) {
					lat, err := latencyRound(c, fs, nil, command, latencyLines)
					return lat, 0, err
				}
				if clients == "process" {
					p := startClientProc(b, srv.URL, fs)
					round = func(command string) (lineLatencies, time.Duration, error) {
						return p.round(command, latencyLines)
					}
				}
				commits.reset()
				var all lineLatencies
				var clientCPU time.Duration
				cpu0, wait0, t0 := processCPU(), runqueueWait(), time.Now()
				for b.Loop() {
					lat, ccpu, err := round(command())
					if err != nil {
						b.Fatal(err)
					}
					all.merge(lat)
					clientCPU += ccpu
				}
				// runq-wait is how long this process's threads waited for a
				// CPU per second of the run.
				b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(len(all.all)), "cpu-µs/line")
				if clients == "process" {
					b.ReportMetric(float64(clientCPU.Microseconds())/float64(len(all.all)), "client-cpu-µs/line")
				}
				b.ReportMetric(float64((runqueueWait()-wait0).Milliseconds())/time.Since(t0).Seconds(), "runq-wait-ms/s")
				reportLatency(b, all)
				// The event log's group commits during the rounds: a slow
				// commit delays every session's lines at once.
				times, _, _ := commits.take()
				cs := Summarize(times)
				b.ReportMetric(float64(cs.P99)/float64(time.Millisecond), "commit-p99-ms")
				b.ReportMetric(float64(cs.Max)/float64(time.Millisecond), "commit-max-ms")
				b.ReportMetric(float64(len(times))/float64(len(all.all)), "commits/line")
			})
		}
		b.Run("cmd="+cmd+"/path=direct", func(b *testing.B) {
			var all lineLatencies
			for b.Loop() {
				lat, err := directRound(latencySessions, command(), latencyLines)
				if err != nil {
					b.Fatal(err)
				}
				all.merge(lat)
			}
			reportLatency(b, all)
		})
	}
}

func TestShellLatencySmoke(t *testing.T) {
	srv, c := startServer(t, agentd.Config{})
	fs := latencySetup(t, c, 3)
	lines := turnStartLines + 5
	command := stampCommand(lines, "0")
	lat, err := latencyRound(c, fs, nil, command, lines)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(lat.all)
	if s.N != 3*lines || len(lat.steady) != 3*5 || s.P50 <= 0 || s.Max > time.Minute {
		t.Fatalf("implausible latencies: %s, %d steady", s, len(lat.steady))
	}
	direct, err := directRound(2, command, lines)
	if err != nil || len(direct.all) != 2*lines || len(direct.steady) != 2*5 {
		t.Fatalf("direct: %d lines (%d steady), %v", len(direct.all), len(direct.steady), err)
	}
	stamper := stamperCommand(t, 5, time.Millisecond)
	lat, err = latencyRound(c, fs, nil, stamper, 5)
	if err != nil || len(lat.all) != 15 || len(lat.steady) != 0 {
		t.Fatalf("stamper through agentd: %d lines (%d steady), %v", len(lat.all), len(lat.steady), err)
	}
	if direct, err := directRound(2, stamper, 5); err != nil || len(direct.all) != 10 {
		t.Fatalf("stamper direct: %d lines, %v", len(direct.all), err)
	}
	// A command that prints fewer lines than expected is an error.
	if _, err := latencyRound(c, fs[:1], nil, stampCommand(2, "0"), 3); err == nil {
		t.Fatal("2 lines counted as 3")
	}
	// A command whose output is not timestamps is reported, not counted.
	if _, err := latencyRound(c, fs[:1], nil, "echo not-a-stamp", 1); !errors.Is(err, ErrBadStamp) {
		t.Fatalf("garbage output: err = %v, want ErrBadStamp", err)
	}
	// The clients in a process of their own, the stampers starting together
	// (the followers' streams close: the process follows the sessions).
	p := startClientProc(t, srv.URL, fs)
	lat, cpu, err := p.round(stamperAt(stamper, time.Now().Add(300*time.Millisecond)), 5)
	if err != nil || len(lat.all) != 15 || cpu <= 0 {
		t.Fatalf("client process: %d lines, cpu %v, %v", len(lat.all), cpu, err)
	}
	if _, _, err := p.round(stampCommand(2, "0"), 3); err == nil {
		t.Fatal("client process: 2 lines counted as 3")
	}
	// A round it cannot read ends the client process, and the next round
	// says so instead of waiting (a write to the gone process, or its end).
	if _, err := p.in.Write([]byte("not json\n")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.round(stamper, 5); err == nil || !strings.Contains(err.Error(), "client process") {
		t.Fatalf("round after a bad one: %v", err)
	}
}

func TestStamper(t *testing.T) {
	t.Setenv(stampLinesEnv, "3")
	t.Setenv(stampEveryEnv, "0s")
	var out strings.Builder
	before := time.Now()
	if code := runStamper(&out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	var p StampLines
	lat, err := p.Feed(out.String(), time.Now(), nil)
	if err != nil || len(lat) != 3 || p.Pending() {
		t.Fatalf("stamper wrote %q: %d stamps, %v", out.String(), len(lat), err)
	}
	for _, d := range lat {
		if d < 0 || d > time.Since(before) {
			t.Fatalf("stamp %v outside the run", d)
		}
	}
	// With a start time it writes nothing before it.
	at := time.Now().Add(50 * time.Millisecond)
	t.Setenv(stampAtEnv, fmt.Sprint(at.UnixNano()))
	out.Reset()
	if code := runStamper(&out); code != 0 || time.Now().Before(at) {
		t.Fatalf("exit %d, done %v before its start time", code, time.Until(at))
	}
	var p2 StampLines
	if lat, err := p2.Feed(out.String(), at, nil); err != nil || len(lat) != 3 || lat[0] > 0 {
		t.Fatalf("stamps %v (%v): the first must not be before the start time", lat, err)
	}
	t.Setenv(stampAtEnv, "later")
	if code := runStamper(io.Discard); code != 2 {
		t.Errorf("bad start time: exit %d, want 2", code)
	}
	t.Setenv(stampAtEnv, "")
	for _, bad := range [][2]string{{"x", "1ms"}, {"-1", "1ms"}, {"3", "soon"}, {"3", "-1s"}} {
		t.Setenv(stampLinesEnv, bad[0])
		t.Setenv(stampEveryEnv, bad[1])
		if code := runStamper(io.Discard); code != 2 {
			t.Errorf("lines %q every %q: exit %d, want 2", bad[0], bad[1], code)
		}
	}
}
