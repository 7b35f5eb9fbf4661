package bench

import (
	"io"
	"log/slog"
	"os"
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
