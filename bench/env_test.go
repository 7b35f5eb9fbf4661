package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func quietLogger() *slog.Logger {
	if os.Getenv("AGENTD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// processCPU is the CPU time (user + system) this process has used: unlike
// wall-clock rates it is not distorted by other load on a shared machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// load1 is the machine's one-minute load average (0 when unknown),
// reported with the figures because the benchmark machine is shared.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// runqueueWait is the time this process's threads have spent runnable but
// waiting for a CPU (the second field of each thread's
// /proc/self/task/*/schedstat; threads that exited are not counted): on a
// shared machine it is the delay that other load adds.
func runqueueWait() time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	var sum int64
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			sum += v
		}
	}
	return time.Duration(sum)
}

// serverCPU returns a function reading the CPU time of the PostgreSQL
// server at dsn, by process: the on-CPU time (/proc/PID/schedstat) of
// every process pg_stat_activity lists (backends, WAL writer,
// checkpointer, ...). The server must run on this machine. cpuSince sums
// the difference of two readings.
func serverCPU(tb testing.TB, dsn string) func() cpuByPID {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(ctx) })
	return func() cpuByPID {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity`)
		if err != nil {
			tb.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			tb.Fatal(err)
		}
		out := make(cpuByPID, len(pids))
		for _, pid := range pids {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
			if err != nil {
				continue
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					out[pid] = time.Duration(v)
				}
			}
		}
		return out
	}
}

// cpuByPID is the CPU time of processes by pid.
type cpuByPID map[int32]time.Duration

// cpuSince is the CPU the processes of c used since before: a process
// that started since counts whole, one that exited is not counted.
func (c cpuByPID) cpuSince(before cpuByPID) time.Duration {
	var d time.Duration
	for pid, v := range c {
		d += v - before[pid]
	}
	return d
}
