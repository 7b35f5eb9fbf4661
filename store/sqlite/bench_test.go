package sqlite_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"

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

// BenchmarkCompact measures compacting an event tail of 1,024 rows spread
// over sessions as single-event appends leave them (one row per session in
// turn, 250-byte payloads) into a per-session table that already holds
// earlier compactions, in transactions of about chunk rows. One op is the
// whole tail; ms/transaction is how long each transaction holds the writer
// (the stall appenders see), cpu-µs/row the cost per row moved.
func BenchmarkCompact(b *testing.B) {
	const rows = 1024
	for _, sessions := range []int{1, 50} {
		for _, chunk := range []int{256, sqlite.CompactChunk} {
			b.Run(fmt.Sprintf("sessions=%d/chunk=%d", sessions, chunk), func(b *testing.B) {
				s := openTemp(b, sqlite.WithCompactAt(1<<30))
				defer s.Close()
				for i := range sessions {
					mustCreate(b, s, fmt.Sprint("session-", i))
				}
				seq := make([]int64, sessions)
				fill := func() {
					for r := range rows {
						i := r % sessions
						seq[i]++
						e := ev(fmt.Sprint("session-", i), seq[i])
						e.Payload = payload250
						if err := s.AppendEvents(b.Context(), []conversation.Event{e}); err != nil {
							b.Fatal(err)
						}
					}
				}
				fill()
				sqlite.Compact(b, s) // earlier compactions' rows in place
				var (
					cpu time.Duration
					txs int
				)
				for b.Loop() {
					b.StopTimer()
					fill()
					c0 := processCPU()
					b.StartTimer()
					moved, n := sqlite.CompactChunks(b, s, chunk)
					if moved != rows {
						b.Fatalf("moved %d rows, want %d", moved, rows)
					}
					txs += n
					cpu += processCPU() - c0
				}
				b.ReportMetric(b.Elapsed().Seconds()*1000/float64(txs), "ms/transaction")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*rows), "cpu-µs/row")
			})
		}
	}
}

var payload250 = json.RawMessage(`{"level":"info","message":"` + strings.Repeat("x", 220) + `"}`)
