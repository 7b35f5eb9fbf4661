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
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
)

// The latency benchmark's WebSocket clients run in a process of their own
// (this test binary again, see TestMain), as an application's would: in
// the server's process they shared its two scheduler threads, and the
// server's CPU figure included their reading and decoding.
const (
	clientURLEnv      = "AGENTD_BENCH_CLIENT_URL"
	clientSessionsEnv = "AGENTD_BENCH_CLIENT_SESSIONS"
	// clientSendURLEnv, when set, is the server the commands are sent to
	// (the fleet benchmark: they run on one node, the clients follow
	// another).
	clientSendURLEnv = "AGENTD_BENCH_CLIENT_SEND_URL"
	// clientPairURLEnv, when set, is a second server whose stream of each
	// session the process follows too (the fleet benchmark's
	// clients=both: the node running the sessions), for the per-line
	// difference between the two arrivals.
	clientPairURLEnv = "AGENTD_BENCH_CLIENT_PAIR_URL"
)

// clientRound is one round asked of the client process.
type clientRound struct {
	Command string `json:"command"`
	Want    int    `json:"want"`
}

// clientResult is its answer: every line's latency in nanoseconds (all
// lines, and those after each command's first turnStartLines), and the
// CPU the client process spent on the round. With a pair server, Pair
// holds every line's latency through it and Added each line's arrival
// through the main server minus its arrival through the pair.
type clientResult struct {
	All    []time.Duration `json:"all"`
	Steady []time.Duration `json:"steady"`
	Pair   []time.Duration `json:"pair,omitempty"`
	Added  []time.Duration `json:"added,omitempty"`
	CPU    time.Duration   `json:"cpu"`
	Err    string          `json:"err,omitempty"`
}

// runClientProc is the client process's main: it follows the sessions
// named in its environment from their current last seq, then runs each
// round read from stdin and writes its result as a line of JSON to
// stdout. It returns the exit code.
func runClientProc(in io.Reader, out io.Writer) int {
	if path := os.Getenv("AGENTD_BENCH_CLIENT_CPUPROFILE"); path != "" {
		// For reading where the clients' CPU goes (go tool pprof).
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	c, err := client.New(os.Getenv(clientURLEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		return 2
	}
	send := c
	if u := os.Getenv(clientSendURLEnv); u != "" {
		if send, err = client.New(u); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			return 2
		}
	}
	var pair *client.Client
	if u := os.Getenv(clientPairURLEnv); u != "" {
		if pair, err = client.New(u); err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			return 2
		}
	}
	ctx := context.Background()
	var fs, pfs []*follower
	for _, id := range strings.Split(os.Getenv(clientSessionsEnv), ",") {
		st, err := c.Session(ctx, id)
		if err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			return 1
		}
		fs = append(fs, &follower{id: id, stream: c.Stream(ctx, id, st.LastSeq)})
		if pair != nil {
			pfs = append(pfs, &follower{id: id, stream: pair.Stream(ctx, id, st.LastSeq)})
		}
	}
	defer func() {
		for _, f := range append(fs, pfs...) {
			f.stream.Close()
		}
	}()
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r clientRound
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			fmt.Fprintln(os.Stderr, "client: bad round:", err)
			return 2
		}
		cpu0 := processCPU()
		lat, err := latencyRound(send, fs, pfs, r.Command, r.Want)
		res := clientResult{All: lat.all, Steady: lat.steady, Pair: lat.pair, Added: lat.added, CPU: processCPU() - cpu0}
		if err != nil {
			res.Err = err.Error()
		}
		if err := enc.Encode(res); err != nil {
			return 1
		}
	}
	return 0
}

// clientProc is the parent's handle on a client process.
type clientProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startClientProc starts a client process following the sessions; it is
// stopped when tb ends.
func startClientProc(tb testing.TB, url string, fs []*follower) *clientProc {
	tb.Helper()
	return startClientProcSend(tb, url, "", fs)
}

// startClientProcSend is startClientProc following the sessions on url
// and sending their commands to sendURL ("": url).
func startClientProcSend(tb testing.TB, url, sendURL string, fs []*follower) *clientProc {
	tb.Helper()
	return startClientProcPair(tb, url, sendURL, "", fs)
}

// startClientProcPair is startClientProcSend following each session on
// pairURL too ("": not).
func startClientProcPair(tb testing.TB, url, sendURL, pairURL string, fs []*follower) *clientProc {
	tb.Helper()
	ids := make([]string, len(fs))
	for i, f := range fs {
		ids[i] = f.id
	}
	env := []string{clientURLEnv + "=" + url, clientSessionsEnv + "=" + strings.Join(ids, ",")}
	if sendURL != "" {
		env = append(env, clientSendURLEnv+"="+sendURL)
	}
	if pairURL != "" {
		env = append(env, clientPairURLEnv+"="+pairURL)
	}
	cmd, in, out := startChild(tb, env, 64<<20)
	p := &clientProc{cmd: cmd, in: in, out: out}
	// The process follows the sessions itself: the setup's streams would
	// be a second subscriber of every session, costing the server (and
	// this process) a delivery per line the measurement does not count.
	closeFollowers(fs)
	return p
}

// closeFollowers closes the followers' streams (latencySetup's), once
// another process follows their sessions.
func closeFollowers(fs []*follower) {
	for _, f := range fs {
		f.stream.Close()
	}
}

// startChild starts this test binary again with env added (its TestMain
// runs the child's part), its stderr ours, killed when we die. It returns
// the child's stdin and a scanner of its stdout taking lines of up to
// maxLine bytes. When tb ends, stdin is closed and the child waited for,
// killed after 10s.
func startChild(tb testing.TB, env []string, maxLine int) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setDeathSignal(cmd.SysProcAttr, syscall.SIGKILL)
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
	out := bufio.NewScanner(outPipe)
	out.Buffer(make([]byte, 1<<20), maxLine)
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
	return cmd, in, out
}

// round runs command in every session through the client process and
// returns the line latencies it saw and the CPU it spent.
func (p *clientProc) round(command string, want int) (lineLatencies, time.Duration, error) {
	b, _ := json.Marshal(clientRound{Command: command, Want: want})
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return lineLatencies{}, 0, fmt.Errorf("client process: %w", err)
	}
	if !p.out.Scan() {
		return lineLatencies{}, 0, fmt.Errorf("client process ended: %v", errors.Join(p.out.Err(), io.ErrUnexpectedEOF))
	}
	var res clientResult
	if err := json.Unmarshal(p.out.Bytes(), &res); err != nil {
		return lineLatencies{}, 0, fmt.Errorf("client process answer: %w", err)
	}
	var err error
	if res.Err != "" {
		err = errors.New(res.Err)
	}
	return lineLatencies{all: res.All, steady: res.Steady, pair: res.Pair, added: res.Added}, res.CPU, err
}
