package bench

import (
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
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
