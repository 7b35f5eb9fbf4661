package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/bus/natstest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store/postgres/pgtest"
)

// Fleet benchmarks (issue 12): real `agentd serve` processes sharing one
// PostgreSQL database (pgtest: $AGENTD_TEST_POSTGRES or a private server)
// and one NATS server ($AGENTD_TEST_NATS or a private nats-server).

// fleetNodes starts n nodes of one fleet with args added, and a client of
// each on its own HTTP transport. AGENTD_BENCH_SYNC_COMMIT=off has the
// nodes' store connections commit with synchronous_commit=off (no WAL
// flush waited for: a database crash may lose the last commits), a
// measurement of the path without the flush, never a target's figure.
func fleetNodes(tb testing.TB, n int, args ...string) ([]*agentdtest.Process, []*client.Client) {
	tb.Helper()
	storeURL := pgtest.Schema(tb)
	if v := os.Getenv("AGENTD_BENCH_SYNC_COMMIT"); v != "" {
		u, err := pgtest.WithParam(storeURL, "synchronous_commit", v)
		if err != nil {
			tb.Fatal(err)
		}
		storeURL = u
	}
	natsURL := natstest.URL(tb)
	prefix := natstest.Prefix(tb)
	var ps []*agentdtest.Process
	var cs []*client.Client
	for i := range n {
		a := append([]string{"--data-dir", tb.TempDir(), "--store", storeURL, "--nats", natsURL, "--nats-prefix", prefix, "--no-ui"}, args...)
		if i == 0 && os.Getenv(nodeProfileEnv) != "" {
			a = append(a, "--pprof-addr", freeLoopbackAddr(tb))
		}
		p := agentdtest.StartProcess(tb, nil, a...)
		c, err := client.New(p.URL, client.WithHTTPClient(newHTTPClient(tb)))
		if err != nil {
			tb.Fatal(err)
		}
		ps, cs = append(ps, p), append(cs, c)
	}
	return ps, cs
}

// BenchmarkFleetLatency: the time from a shell command writing a line on
// node A to a WebSocket client holding it, the client connected to node B
// (clients=othernode: the event crosses NATS) or to A (clients=samenode),
// or one client of each session on each node (clients=both: the p50-ms…
// figures are B's, the pair-… ones A's, and added-… the difference of the
// two arrivals of each line: what crossing the nodes adds to it),
// with 50 sessions streaming at once as in BenchmarkShellLatency
// (cmd=stamper: 200 timestamped lines 10 ms apart per session, all 50
// starting together; the 50 clients in a process of their own). The nodes
// are agentd serve processes on PostgreSQL. payload=events publishes each
// commit's events on NATS; payload=notice only its seq range, which B then
// reads from PostgreSQL.
//
// Target (issue 12): cross-node p99 < 10 ms.
func BenchmarkFleetLatency(b *testing.B) {
	command := roundCommand(b, "stamper")
	for _, payload := range []string{"events", "notice"} {
		for _, where := range []string{"othernode", "samenode", "both"} {
			b.Run("payload="+payload+"/clients="+where, func(b *testing.B) {
				nodes, cs := fleetNodes(b, 2, "--nats-payload", payload)
				fs := latencySetup(b, cs[0], latencySessions)
				streamURL, pairURL := nodes[1].URL, ""
				switch where {
				case "samenode":
					streamURL = nodes[0].URL
				case "both":
					pairURL = nodes[0].URL
				}
				p := startClientProcPair(b, streamURL, nodes[0].URL, pairURL, fs)
				hc := newHTTPClient(b)
				a0, b0 := readNode(b, hc, nodes[0]), readNode(b, hc, nodes[1])
				var all lineLatencies
				stopProfile := profileNode(b, nodes[0], payload+"-"+where)
				for b.Loop() {
					lat, _, err := p.round(command(), latencyLines)
					if err != nil {
						b.Fatal(err)
					}
					all.merge(lat)
				}
				stopProfile()
				reportLatency(b, all)
				if where == "both" {
					reportAdded(b, all)
				}
				reportNodes(b, a0, readNode(b, hc, nodes[0]), b0, readNode(b, hc, nodes[1]), len(all.all))
			})
		}
	}
}

// nodeStats is a fleet node's CPU time and Prometheus series (name with
// labels → value) at one instant.
type nodeStats struct {
	cpu     time.Duration
	metrics map[string]float64
}

// readNode reads a node's /metrics and its process's CPU time.
func readNode(tb testing.TB, hc *http.Client, p *agentdtest.Process) nodeStats {
	tb.Helper()
	st := nodeStats{metrics: map[string]float64{}}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID())); err == nil {
		// utime and stime, fields 14 and 15, after the parenthesised name.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			st.cpu = time.Duration(u+s) * 10 * time.Millisecond // USER_HZ 100
		}
	}
	resp, err := hc.Get(p.URL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "agentd_event") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			st.metrics[line[:i]] = v
		}
	}
	return st
}

// histQuantile is the q quantile of a Prometheus histogram's observations
// between two readings, interpolated within its bucket as Prometheus does.
func histQuantile(before, after nodeStats, name string, q float64) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	prefix := name + `_bucket{le="`
	for k, v := range after.metrics {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(k[len(prefix):], `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le, v - before.metrics[k]})
	}
	if len(bs) == 0 {
		return math.NaN()
	}
	slices.SortFunc(bs, func(x, y bucket) int { return cmp.Compare(x.le, y.le) })
	total := bs[len(bs)-1].n
	if total == 0 {
		return math.NaN()
	}
	rank, lo, below := q*total, 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return lo
			}
			return lo + (b.le-lo)*(rank-below)/(b.n-below)
		}
		lo, below = b.le, b.n
	}
	return lo
}

// reportNodes reports where a fleet latency run's time went, from node A
// (runs the sessions, commits, publishes) and node B (the othernode
// clients' server): each node's CPU per line, A's commit (one store
// transaction) and append (Append to stored and published) times, and the
// peer messages and store reads (gap fills: every notice) of B.
func reportNodes(b *testing.B, a0, a1, b0, b1 nodeStats, lines int) {
	ms := func(s float64) float64 { return s * 1000 }
	d := func(before, after nodeStats, k string) float64 { return after.metrics[k] - before.metrics[k] }
	commits := d(a0, a1, "agentd_event_commit_seconds_count")
	b.ReportMetric(float64((a1.cpu-a0.cpu).Microseconds())/float64(lines), "A-cpu-µs/line")
	b.ReportMetric(float64((b1.cpu-b0.cpu).Microseconds())/float64(lines), "B-cpu-µs/line")
	b.ReportMetric(commits/float64(lines), "commits/line")
	b.ReportMetric(ms(histQuantile(a0, a1, "agentd_event_commit_seconds", 0.5)), "commit-p50-ms")
	b.ReportMetric(ms(histQuantile(a0, a1, "agentd_event_commit_seconds", 0.99)), "commit-p99-ms")
	b.ReportMetric(ms(histQuantile(a0, a1, "agentd_event_append_latency_seconds", 0.5)), "append-p50-ms")
	b.ReportMetric(ms(histQuantile(a0, a1, "agentd_event_append_latency_seconds", 0.99)), "append-p99-ms")
	b.ReportMetric(d(b0, b1, "agentd_event_peer_messages_total")/float64(lines), "B-peer-msgs/line")
	b.ReportMetric(d(b0, b1, "agentd_event_peer_gap_fills_total")/float64(lines), "B-store-reads/line")
	b.ReportMetric(d(a0, a1, "agentd_event_slow_consumers_total")+d(b0, b1, "agentd_event_slow_consumers_total"), "slow-cutoffs")
}

// reportAdded reports clients=both's figures: the latency through node A
// (pair-…) and the cross-node added latency, B's arrival of each line
// minus A's (added-…; negative when B's client got it first).
func reportAdded(b *testing.B, l lineLatencies) {
	p, a := Summarize(l.pair), Summarize(l.added)
	reportSummary(b, "pair-", p)
	reportSummary(b, "added-", a)
	b.Logf("through A: %s; added by the cross to B, per line: %s", p, a)
}

// TestFleetLatencySmoke: a small cross-node round (2 sessions, 20 lines).
func TestFleetLatencySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	nodes, cs := fleetNodes(t, 2)
	fs := latencySetup(t, cs[0], 2)
	p := startClientProcSend(t, nodes[1].URL, nodes[0].URL, fs)
	lat, _, err := p.round(stamperCommand(t, 20, 5*time.Millisecond), 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat.all) != 40 {
		t.Fatalf("%d lines", len(lat.all))
	}
	// clients=both: each line through B and through A, and their
	// difference.
	fs = latencySetup(t, cs[0], 2)
	p = startClientProcPair(t, nodes[1].URL, nodes[0].URL, nodes[0].URL, fs)
	lat, _, err = p.round(stamperCommand(t, 20, 5*time.Millisecond), 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(lat.all) != 40 || len(lat.pair) != 40 || len(lat.added) != 40 {
		t.Fatalf("%d lines, %d through the pair, %d differences", len(lat.all), len(lat.pair), len(lat.added))
	}
	for i, d := range lat.added {
		if d < -time.Minute || d > time.Minute {
			t.Fatalf("line %d: implausible added latency %v", i, d)
		}
	}
}

// takeoverTTL is the lease ttl of BenchmarkTakeover:
// AGENTD_BENCH_LEASE_TTL, default the server's (15s).
func takeoverTTL(tb testing.TB) time.Duration {
	v := os.Getenv("AGENTD_BENCH_LEASE_TTL")
	if v == "" {
		return 15 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		tb.Fatalf("AGENTD_BENCH_LEASE_TTL=%q: want a duration", v)
	}
	return d
}

// BenchmarkTakeover: the time from kill -9 of the node running a turn to
// another node having taken the session over (the turn's query:failed
// SERVER_LOST written by it, as a client on that node receives it). One op
// is one kill and take-over; the killed node is started again between ops,
// untimed. The lease ttl is AGENTD_BENCH_LEASE_TTL (default 15s, the
// server's default): a node's lease expires between 2/3 of a ttl and one
// ttl after its last renewal, and the others sweep for expired leases
// every quarter of a ttl.
//
// Target (issue 12): < 2 × the lease ttl.
func BenchmarkTakeover(b *testing.B) {
	ttl := takeoverTTL(b)
	nodes, cs := fleetNodes(b, 2, "--lease-ttl", ttl.String())
	ctx := context.Background()
	var times []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		a := nodes[0]
		created, err := cs[0].CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
		if err != nil {
			b.Fatal(err)
		}
		sent, err := cs[0].Send(ctx, created.SessionID, "echo started; sleep 60")
		if err != nil {
			b.Fatal(err)
		}
		stream := cs[1].Stream(ctx, created.SessionID, 0)
		if err := waitOutput(ctx, stream, "started"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		a.Kill()
		if err := waitTakeover(ctx, stream, sent.QueryID); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		b.StopTimer()
		times = append(times, d)
		stream.Close()
		a.Restart()
		if cs[0], err = client.New(a.URL, client.WithHTTPClient(newHTTPClient(b))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	s := Summarize(times)
	b.ReportMetric(s.P50.Seconds(), "takeover-p50-s")
	b.ReportMetric(s.Max.Seconds(), "takeover-max-s")
	b.ReportMetric(s.Max.Seconds()/ttl.Seconds(), "max/ttl")
	b.ReportMetric(ttl.Seconds(), "ttl-s")
	b.ReportMetric(load1(), "load1")
	b.Logf("take-over after kill -9 (ttl %v): %s", ttl, s)
}

func waitOutput(ctx context.Context, s *client.Stream, text string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			return err
		}
		if ev.Type == conversation.TypeBlockDelta && strings.Contains(string(ev.Payload), text) {
			return nil
		}
	}
}

func waitTakeover(ctx context.Context, s *client.Stream, query string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			return err
		}
		if ev.Type != conversation.TypeQueryFailed && ev.Type != conversation.TypeQueryCompleted {
			continue
		}
		var p conversation.QueryFailed
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if p.QueryID != query {
			continue
		}
		if ev.Type != conversation.TypeQueryFailed || p.Code != "SERVER_LOST" {
			return fmt.Errorf("the turn ended %s %s", ev.Type, ev.Payload)
		}
		return nil
	}
}

// nodeProfileEnv names a file prefix: with it, node A of the fleet
// benchmarks serves its profiles (agentd serve --pprof-addr) and a CPU
// profile of it over the measured rounds is written to PREFIX-NAME.pprof.
const nodeProfileEnv = "AGENTD_BENCH_NODE_CPUPROFILE"

func freeLoopbackAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// profileNode profiles p's CPU (p runs with --pprof-addr) from now until
// stop, when nodeProfileEnv is set: back-to-back 2-second profiles,
// PREFIX-NAME-001.pprof and on, which `go tool pprof` reads together.
// stop waits for the profile in progress to end.
func profileNode(tb testing.TB, p *agentdtest.Process, name string) (stop func()) {
	tb.Helper()
	prefix := os.Getenv(nodeProfileEnv)
	if prefix == "" {
		return func() {}
	}
	i := slices.Index(p.Args, "--pprof-addr")
	if i < 0 {
		tb.Fatal("profileNode: the node has no --pprof-addr")
	}
	url := "http://" + p.Args[i+1] + "/debug/pprof/profile?seconds=2"
	if os.Getenv("AGENTD_BENCH_NODE_TRACE") != "" {
		url = "http://" + p.Args[i+1] + "/debug/pprof/trace?seconds=2"
	}
	quit := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for n := 1; ; n++ {
			select {
			case <-quit:
				done <- nil
				return
			default:
			}
			if err := fetchTo(url, fmt.Sprintf("%s-%s-%03d.pprof", prefix, name, n)); err != nil {
				done <- err
				return
			}
		}
	}()
	return func() {
		close(quit)
		if err := <-done; err != nil {
			tb.Errorf("profile of node A: %v", err)
		}
	}
}

func fetchTo(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
