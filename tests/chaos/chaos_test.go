//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The harness's HTTP transports idle their connections until closed.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// config is what one run does; see docs/chaos.md.
type config struct {
	seed     uint64
	rounds   int           // at most this many rounds
	duration time.Duration // no round starts after this long
	claude   bool          // a Claude Code session (against mock-llm) takes part too
}

func loadConfig(t *testing.T) config {
	t.Helper()
	c := config{rounds: 12, duration: 2 * time.Minute, seed: uint64(time.Now().UnixNano())}
	if v := os.Getenv("AGENTD_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("AGENTD_CHAOS_SEED=%q: %v", v, err)
		}
		c.seed = n
	}
	if v := os.Getenv("AGENTD_CHAOS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("AGENTD_CHAOS_ROUNDS=%q: want a positive integer", v)
		}
		c.rounds = n
	}
	c.claude = os.Getenv("AGENTD_CHAOS_CLAUDE") == "1"
	if v := os.Getenv("AGENTD_CHAOS_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("AGENTD_CHAOS_DURATION=%q: want a positive Go duration", v)
		}
		c.duration = d
	}
	return c
}

// TestChaos runs rounds of turns under random faults and checks the
// invariants after each; see the package doc and docs/chaos.md.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and executors for minutes")
	}
	cfg := loadConfig(t)
	h := newHarness(t, cfg)
	t.Logf("chaos: seed %d (replay: AGENTD_CHAOS_SEED=%d go test ./tests/chaos -run TestChaos -v), up to %d rounds or %v",
		cfg.seed, cfg.seed, cfg.rounds, cfg.duration)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("chaos: FAILED with seed %d; replay the same schedule with AGENTD_CHAOS_SEED=%d (timing differs from run to run)", cfg.seed, cfg.seed)
		}
	})
	begin := time.Now()
	for r := 1; r <= cfg.rounds && time.Since(begin) < cfg.duration; r++ {
		if !h.round(r) {
			break
		}
	}
	h.finish()
	// What the faults did to the store, as the server logged it.
	h.stats.appendFailures = strings.Count(h.p.Logs(), `msg="event append failed"`)
	t.Logf("chaos: %s in %v", h.stats.String(), time.Since(begin).Round(time.Second))
}

// harness is one chaos run: the server, its data, what was sent and what
// the faults did. Its fields are used by the test goroutine only, except
// where noted.
type harness struct {
	t     *testing.T
	cfg   config
	rng   *rand.Rand
	p     *agentdtest.Process
	url   string // the server's base URL, read by the clients' goroutines
	c     *client.Client
	tr    *http.Transport
	hc    *http.Client
	data  string // the data folder (a tmpfs when mounted)
	run   string // XDG_RUNTIME_DIR: the executors' sockets and spools
	tmpfs bool   // data is a tmpfs of our own: disk-full faults possible
	db    string
	// modelPort is mock-llm's port (Claude rounds): the server's model
	// proxy keeps idle connections to it, which are not leaks.
	modelPort int

	sessions []*session
	// cgroups holds every executor cgroup folder seen, checked gone once
	// its executor is.
	cgroups map[string]bool
	// base is the server's descriptors and goroutines at its first quiet
	// point, per process.
	base struct {
		pid        int
		fds        []string
		goroutines int
	}
	stats   stats
	roundNo int
	// violations, when set, collects what failf reports instead of
	// failing the test (the checks' own tests).
	violations *[]string
}

// session is one session of the run and the turns it was sent.
type session struct {
	id     string
	claude bool // a Claude Code session, else shell
	turns  []*turn
	// mirror is the session's log as read from the store so far.
	mirror []storedEvent
}

// turn is one command sent: it prints lines "<mark> l1" … "<mark> l<lines>".
type turn struct {
	queryID string
	mark    string
	lines   int
	round   int
	// end is the query's terminal event type ("" while running) and code.
	end, code string
}

func newHarness(t *testing.T, cfg config) *harness {
	h := &harness{t: t, cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15)), cgroups: map[string]bool{}}
	root := t.TempDir()
	h.data = filepath.Join(root, "data")
	h.run = filepath.Join(root, "run")
	for _, d := range []string{h.data, h.run} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.tmpfs = mountTmpfs(t, h.data, 128<<20)
	h.db = filepath.Join(h.data, "agentd.db")
	// Executors the server leaves behind (it is killed, not stopped) are
	// killed at the end, before the tmpfs is unmounted (cleanups run last
	// registered first).
	t.Cleanup(func() { killOurs(t, h.data, h.run) })
	env := []string{"XDG_RUNTIME_DIR=" + h.run}
	args := []string{"--data-dir", h.data, "--no-ui", "--sandbox", "executor", "--idle-timeout", "1s"}
	if cfg.claude {
		e, a, port := claudeSetup(t)
		env, args = append(env, e...), append(args, a...)
		h.modelPort = port
	}
	h.p = agentdtest.StartProcess(t, env, args...)
	h.tr = &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 5 * time.Second}
	h.hc = &http.Client{Transport: h.tr, Timeout: 30 * time.Second}
	t.Cleanup(h.tr.CloseIdleConnections)
	var err error
	h.url = h.p.URL // the same across restarts (same port); p.URL is rewritten by each
	h.c, err = client.New(h.url, client.WithHTTPClient(h.hc))
	if err != nil {
		t.Fatal(err)
	}
	if !h.tmpfs {
		t.Logf("chaos: no tmpfs for the data folder (not root?): disk-full faults are off")
	}
	return h
}

// failf records an invariant violation of the current round.
func (h *harness) failf(format string, args ...any) {
	msg := fmt.Sprintf("seed %d round %d: %s", h.cfg.seed, h.roundNo, fmt.Sprintf(format, args...))
	if h.violations != nil {
		*h.violations = append(*h.violations, msg) // the checks' own tests
		return
	}
	h.t.Helper()
	h.t.Errorf("%s", msg)
}

// round runs one round and checks the invariants; false stops the run.
func (h *harness) round(n int) bool {
	h.roundNo = n
	h.stats.rounds++
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Two to four shell sessions take part: the older ones carry their
	// history (and the restarts it went through) into this round. With
	// AGENTD_CHAOS_CLAUDE=1 a Claude Code session too.
	var shells, claudes []*session
	for _, s := range h.sessions {
		if s.claude {
			claudes = append(claudes, s)
		} else {
			shells = append(shells, s)
		}
	}
	for len(shells) < 2+h.rng.IntN(3) {
		s := h.newSession(ctx, "shell")
		if s == nil {
			return false
		}
		shells = append(shells, s)
	}
	if len(shells) > 4 {
		shells = pick(h.rng, shells, 4)
	}
	if h.cfg.claude && len(claudes) == 0 {
		s := h.newSession(ctx, "claude-code")
		if s == nil {
			return false
		}
		claudes = append(claudes, s)
	}
	active := append(shells, claudes...)
	for _, s := range h.sessions {
		if !h.refresh(ctx, s) {
			return false
		}
	}

	// Clients start before the turns: followers from where the store
	// is (or a random earlier point), slow ones, and later a storm.
	cl := newClients(h, active)
	defer cl.stop()

	// The turns: paced commands, long enough for faults to land inside.
	var longest time.Duration
	for _, s := range active {
		tn := &turn{mark: fmt.Sprintf("r%ds%d", n, len(s.turns)), lines: 30 + h.rng.IntN(50), round: n}
		pace := []string{"0.02", "0.04", "0.06"}[h.rng.IntN(3)]
		cmd := fmt.Sprintf("for i in $(seq 1 %d); do echo %s l$i; sleep %s; done", tn.lines, tn.mark, pace)
		if s.claude {
			// The scripted model runs a fixed Bash command (claudeScript).
			tn.lines, pace, cmd = claudeLines, "0.1", claudePrompt
		}
		sent, err := h.c.Send(ctx, s.id, cmd)
		if err != nil {
			h.failf("send to %s: %v", s.id, err)
			return false
		}
		tn.queryID = sent.QueryID
		s.turns = append(s.turns, tn)
		pf, _ := time.ParseDuration(pace + "s")
		longest = max(longest, time.Duration(tn.lines)*pf)
		h.stats.turns++
	}

	// Faults at random points of the turns.
	f := h.planFaults(longest)
	h.inject(ctx, f, cl)

	if !h.awaitTurns(ctx, active) {
		return false
	}
	if !cl.catchUp(ctx) {
		return false
	}
	cl.stop()
	ok := h.check(ctx, cl)
	if ok && h.rng.IntN(3) == 0 && len(h.sessions) > 2 {
		ok = h.deleteOne(ctx)
	}
	return ok && !h.t.Failed()
}

// newSession creates a session of the architecture ("shell" or
// "claude-code").
func (h *harness) newSession(ctx context.Context, arch string) *session {
	req := restapi.CreateSessionRequest{Architecture: arch}
	if arch == "claude-code" {
		req.AgentProfileRef = claudeProfile.ID
	}
	created, err := h.c.CreateSession(ctx, req)
	if err != nil {
		h.failf("create %s session: %v", arch, err)
		return nil
	}
	s := &session{id: created.SessionID, claude: arch == "claude-code"}
	h.sessions = append(h.sessions, s)
	h.stats.sessions++
	return s
}

// pick returns n distinct elements of v in random order.
func pick[T any](rng *rand.Rand, v []T, n int) []T {
	out := append([]T(nil), v...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:n]
}

// deleteOne deletes (purges) a random session of the run: its executor,
// cgroup and history must go.
func (h *harness) deleteOne(ctx context.Context) bool {
	i := h.rng.IntN(len(h.sessions))
	s := h.sessions[i]
	if s.claude {
		return true // kept: its CLI's first start is slow
	}
	if err := h.c.DeleteSession(ctx, s.id, true); err != nil {
		h.failf("delete session %s: %v", s.id, err)
		return false
	}
	h.sessions = append(h.sessions[:i], h.sessions[i+1:]...)
	h.stats.deleted++
	if _, err := h.c.Session(ctx, s.id); !client.IsCode(err, "SESSION_NOT_FOUND") {
		h.failf("session %s after a purge: %v, want SESSION_NOT_FOUND", s.id, err)
		return false
	}
	return h.quiet(ctx)
}

// finish checks, once every session is deleted, that nothing of the run is
// left and the server still serves.
func (h *harness) finish() {
	if h.t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for len(h.sessions) > 0 {
		s := h.sessions[0]
		if err := h.c.DeleteSession(ctx, s.id, true); err != nil {
			h.failf("delete session %s: %v", s.id, err)
			return
		}
		h.sessions = h.sessions[1:]
		h.stats.deleted++
	}
	h.quiet(ctx)
}

// stats counts what a run did, for its log line and docs/chaos.md.
type stats struct {
	mu                                      sync.Mutex // guards the client counts
	rounds, sessions, deleted, turns        int
	completed, failed                       int
	failedBy                                map[string]int
	serverKills, executorKills              int
	busy, busyOverTimeout, diskFull, storms int
	connections, slowCuts, eventsCompared   int
	probes, appendFailures                  int
}

func (s *stats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var codes []string
	for k, v := range s.failedBy {
		codes = append(codes, fmt.Sprintf("%s×%d", k, v))
	}
	return fmt.Sprintf("%d rounds, %d sessions (%d deleted), %d turns (%d completed, %d failed: %s), "+
		"%d server kills, %d executor kills, %d SQLite locks (%d beyond busy_timeout), %d disk-full, "+
		"%d reconnect storms, %d client connections (%d cut off as slow) checking %d events against the store, %d probes, "+
		"%d failed appends logged by the server",
		s.rounds, s.sessions, s.deleted, s.turns, s.completed, s.failed, strings.Join(codes, " "),
		s.serverKills, s.executorKills, s.busy, s.busyOverTimeout, s.diskFull,
		s.storms, s.connections, s.slowCuts, s.eventsCompared, s.probes, s.appendFailures)
}
