// Command convert measures `agentd convert --format claude-transcript` as
// a whole process on generated transcripts of several sizes (renumbered
// copies of the largest shared transcript, see internal/convert/synth):
// wall time, user and system CPU time and peak RSS of the child process
// (getrusage), with GOMAXPROCS=1, events and blocks, so the figures show
// whether time and memory grow linearly with the input. With -compare it
// runs a second binary on the same inputs, alternating, and checks that
// both write the same bytes. With -instructions it runs each conversion
// under valgrind's callgrind instead and reports the instructions it
// executed: a count that does not depend on the machine's load, for A/B
// comparisons on a shared machine (slow: about a second per MB).
//
//	go build -o /tmp/agentd ./cmd/agentd
//	go run ./bench/convert -bin /tmp/agentd -sizes 5,25,50,100 -runs 3
//	go run ./bench/convert -bin /tmp/agentd -compare /tmp/agentd-old -sizes 5 -instructions
//
// The inputs go to a temporary folder (-dir to keep them elsewhere) and are
// removed at the end.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/convert/synth"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/convert:", err)
		os.Exit(1)
	}
}

type config struct {
	bins       []string
	sizes      []int64
	runs       int
	modes      []string
	gomaxprocs string
	dir        string
	callgrind  bool
}

func run() error {
	var (
		bin     = flag.String("bin", "bin/agentd", "the agentd binary to measure")
		compare = flag.String("compare", "", "a second agentd binary, run alternately with -bin on the same inputs; outputs must be identical")
		sizes   = flag.String("sizes", "5,25,50,100", "input sizes in MB (10^6 bytes), comma-separated")
		runs    = flag.Int("runs", 3, "runs per binary, size and mode")
		modes   = flag.String("modes", "events,blocks", "what to measure: events, blocks (--blocks)")
		procs   = flag.String("gomaxprocs", "1", "GOMAXPROCS of the measured process (empty: leave unset)")
		dir     = flag.String("dir", "", "where to write the inputs (default: a temporary folder, removed after)")
		instr   = flag.Bool("instructions", false, "count instructions with valgrind --tool=callgrind instead of timing (one run each)")
	)
	flag.Parse()
	cfg := config{bins: []string{*bin}, runs: *runs, gomaxprocs: *procs, dir: *dir, callgrind: *instr}
	if cfg.callgrind {
		cfg.runs = 1
	}
	if *compare != "" {
		cfg.bins = append(cfg.bins, *compare)
	}
	for _, s := range strings.Split(*sizes, ",") {
		mb, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || mb <= 0 {
			return fmt.Errorf("bad size %q", s)
		}
		cfg.sizes = append(cfg.sizes, int64(mb*1e6))
	}
	for _, m := range strings.Split(*modes, ",") {
		if m != "events" && m != "blocks" {
			return fmt.Errorf("bad mode %q (events, blocks)", m)
		}
		cfg.modes = append(cfg.modes, m)
	}
	if cfg.runs < 1 {
		return errors.New("-runs must be at least 1")
	}
	seed, err := synth.ReadClaudeSeed()
	if err != nil {
		return fmt.Errorf("read the seed transcript (set AGENTD_TESTDATA): %w", err)
	}
	if cfg.dir == "" {
		d, err := os.MkdirTemp("", "agentd-bench-convert-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		cfg.dir = d
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("# %s; GOMAXPROCS=%s; %d runs each; load average at start: %s\n",
		time.Now().Format(time.RFC3339), cfg.gomaxprocs, cfg.runs, strings.Join(strings.Fields(string(load))[:3], " "))
	if cfg.callgrind {
		fmt.Printf("%-8s %-7s %-24s %14s %10s\n", "size", "mode", "binary", "instructions", "instr/byte")
	} else {
		fmt.Printf("# medians over the runs; cpu = user+sys; MB/s = input MB / cpu s; rss = peak RSS (max over the runs)\n")
		fmt.Printf("%-8s %-7s %-24s %8s %8s %8s %8s %9s %9s %8s  %s\n",
			"size", "mode", "binary", "wall-s", "user-s", "sys-s", "cpu-s", "MB/s(cpu)", "MB/s(wall)", "rss-MB", "sha256")
	}
	for _, size := range cfg.sizes {
		in := filepath.Join(cfg.dir, fmt.Sprintf("claude-%dMB.jsonl", size/1e6))
		n, err := synth.WriteClaudeTranscriptFile(in, seed, size)
		if err != nil {
			return err
		}
		for _, mode := range cfg.modes {
			if cfg.callgrind {
				for _, b := range cfg.bins {
					ir, err := instructions(b, in, mode, cfg.gomaxprocs)
					if err != nil {
						return err
					}
					fmt.Printf("%-8s %-7s %-24s %14d %10.1f\n", fmt.Sprintf("%.1fMB", float64(n)/1e6), mode,
						shortName(b), ir, float64(ir)/float64(n))
				}
				continue
			}
			results := make([][]result, len(cfg.bins))
			for range cfg.runs {
				for i, b := range cfg.bins {
					r, err := measure(b, in, mode, cfg.gomaxprocs)
					if err != nil {
						return err
					}
					results[i] = append(results[i], r)
				}
			}
			for i, b := range cfg.bins {
				printRow(n, mode, b, results[i])
			}
			if len(cfg.bins) > 1 && results[0][0].sum != results[1][0].sum {
				return fmt.Errorf("%s %s: the two binaries' outputs differ", in, mode)
			}
		}
		os.Remove(in)
	}
	return nil
}

type result struct {
	wall, user, sys time.Duration
	maxRSS          int64 // bytes
	sum             string
}

// measure runs one conversion, its output hashed through a pipe.
func measure(bin, in, mode, gomaxprocs string) (result, error) {
	args := []string{"convert", "--format", "claude-transcript"}
	if mode == "blocks" {
		args = append(args, "--blocks")
	}
	cmd := exec.Command(bin, append(args, in)...)
	cmd.Env = os.Environ()
	if gomaxprocs != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+gomaxprocs)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	h := sha256.New()
	_, copyErr := io.Copy(h, out)
	err = cmd.Wait()
	wall := time.Since(start)
	if err != nil {
		return result{}, fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	if copyErr != nil {
		return result{}, copyErr
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return result{
		wall:   wall,
		user:   time.Duration(ru.Utime.Nano()),
		sys:    time.Duration(ru.Stime.Nano()),
		maxRSS: ru.Maxrss << 10, // Linux reports KiB
		sum:    hex.EncodeToString(h.Sum(nil)),
	}, nil
}

// instructions runs one conversion under callgrind and returns the
// instructions executed. Go's asynchronous preemption signals upset
// callgrind, so they are off for the run.
func instructions(bin, in, mode, gomaxprocs string) (int64, error) {
	args := []string{"--tool=callgrind", "--callgrind-out-file=/dev/null", bin, "convert", "--format", "claude-transcript"}
	if mode == "blocks" {
		args = append(args, "--blocks")
	}
	cmd := exec.Command("valgrind", append(args, in)...)
	cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
	if gomaxprocs != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+gomaxprocs)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("valgrind %s: %w: %s", bin, err, lastLine(stderr.String()))
	}
	// "==pid== Collected : 123456"
	for _, line := range strings.Split(stderr.String(), "\n") {
		if _, after, ok := strings.Cut(line, "Collected :"); ok {
			return strconv.ParseInt(strings.TrimSpace(after), 10, 64)
		}
	}
	return 0, fmt.Errorf("valgrind %s: no instruction count in its output", bin)
}

func shortName(bin string) string {
	if len(bin) > 24 {
		return "…" + bin[len(bin)-23:]
	}
	return bin
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func printRow(size int64, mode, bin string, rs []result) {
	med := func(f func(result) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	wall := med(func(r result) time.Duration { return r.wall })
	user := med(func(r result) time.Duration { return r.user })
	sys := med(func(r result) time.Duration { return r.sys })
	cpu := med(func(r result) time.Duration { return r.user + r.sys })
	var rss int64
	for _, r := range rs {
		rss = max(rss, r.maxRSS)
	}
	mb := float64(size) / 1e6
	name := shortName(bin)
	fmt.Printf("%-8s %-7s %-24s %8.3f %8.3f %8.3f %8.3f %9.1f %9.1f %8.1f  %s\n",
		fmt.Sprintf("%.1fMB", mb), mode, name, wall.Seconds(), user.Seconds(), sys.Seconds(), cpu.Seconds(),
		mb/cpu.Seconds(), mb/wall.Seconds(), float64(rss)/(1<<20), rs[0].sum[:12])
}
