package sqlite_test

import (
	"fmt"
	"testing"

	"github.com/agentd/agentd/store/sqlite"
	"github.com/agentd/agentd/store/storetest"
)

// BenchmarkAppendEvents measures AppendEvents per batch size and
// synchronous level. One op is one batch; events/s is the wall-clock
// throughput and cpu-µs/event the process CPU spent per event (stable when
// other processes load the machine).
func BenchmarkAppendEvents(b *testing.B) {
	for _, sync := range []sqlite.Synchronous{sqlite.SyncNormal, sqlite.SyncFull} {
		for _, n := range []int{1, 16, 128, 1024} {
			b.Run(fmt.Sprintf("sync=%s/batch=%d", sync, n), func(b *testing.B) {
				s := openTemp(b, sqlite.WithSynchronous(sync))
				defer s.Close()
				cpu := processCPU()
				storetest.BenchAppend(b, s, n)
				reportCPU(b, cpu, b.N*n)
			})
		}
	}
}

// BenchmarkReadEvents measures reading a whole 10,000-event log.
func BenchmarkReadEvents(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	cpu := processCPU()
	storetest.BenchRead(b, s, 10000)
	reportCPU(b, cpu, b.N*10000)
}

// reportCPU reports the process CPU used since start per event (b.N holds
// the iteration count once b.Loop is done).
func reportCPU(b *testing.B, start interface{ Microseconds() int64 }, events int) {
	used := processCPU().Microseconds() - start.Microseconds()
	if used > 0 && events > 0 {
		b.ReportMetric(float64(used)/float64(events), "cpu-µs/event")
	}
}
