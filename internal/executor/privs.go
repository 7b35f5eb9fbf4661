package executor

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// parseIDs parses a comma-separated list of numeric ids ("" is none).
func parseIDs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad id %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// limitProcs sets RLIMIT_NPROC for this process and so for everything it
// starts. The kernel counts it per real uid (all processes and threads of
// the user, this executor's included) and ignores it for root: it bounds a
// session only when the session has a uid of its own.
func limitProcs(n int64) error {
	lim := unix.Rlimit{Cur: uint64(n), Max: uint64(n)}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
		return fmt.Errorf("RLIMIT_NPROC %d: %w", n, err)
	}
	return nil
}

// reserveThreads makes the runtime create n OS threads now and keep them
// idle for later. A process or thread limit (pids.max, RLIMIT_NPROC)
// counts the executor's threads with its agents': once a fork bomb has
// taken every slot, a runtime that needs a new thread for a blocking call
// dies ("failed to create new OS thread"), and the session with it. Idle
// threads are reused instead of created.
func reserveThreads(n int) {
	if n <= 0 {
		return
	}
	var locked, release sync.WaitGroup
	locked.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			// Locked goroutines each hold a thread of their own: n of
			// them at once means n threads.
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
	done.Wait()
}

// threadCount is the number of threads of this process.
func threadCount() int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return -1
	}
	return len(ents)
}
