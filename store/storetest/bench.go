package storetest

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// Bench runs the store benchmarks on stores made by open (one store per
// benchmark run, closed afterwards): AppendEvents with batches of 1, 64 and
// 512 events, and ReadEvents of a 10,000-event log. Each reports events/s.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	opened := func(b *testing.B) store.Store {
		s := open(b)
		b.Cleanup(func() {
			if err := s.Close(); err != nil {
				b.Errorf("Close: %v", err)
			}
		})
		return s
	}
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprintf("AppendEvents/batch=%d", n), func(b *testing.B) { BenchAppend(b, opened(b), n) })
	}
	b.Run("ReadEvents/events=10000", func(b *testing.B) { BenchRead(b, opened(b), 10000) })
}

// benchSessions makes session ids unique across benchmark runs that share a
// store.
var benchSessions atomic.Int64

// BenchAppend measures AppendEvents of batches of batchSize events into one
// new session of s. One op is one batch; it reports events/s. The events are
// realistic block:delta envelopes (about 120 bytes of payload).
func BenchAppend(b *testing.B, s store.Store, batchSize int) {
	id := fmt.Sprintf("bench-append-%d", benchSessions.Add(1))
	if err := s.CreateSession(b.Context(), minimalSession(id, time.Now())); err != nil {
		b.Fatalf("CreateSession: %v", err)
	}
	batch := make([]conversation.Event, batchSize)
	for i := range batch {
		batch[i] = benchEvent(id, 0)
	}
	seq := int64(0)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i := range batch {
			seq++
			batch[i].Seq = seq
		}
		if err := s.AppendEvents(b.Context(), batch); err != nil {
			b.Fatalf("AppendEvents: %v", err)
		}
	}
	b.StopTimer()
	if el := b.Elapsed(); el > 0 {
		b.ReportMetric(float64(seq)/el.Seconds(), "events/s")
	}
}

// BenchRead measures reading a session's whole log of n events; one op is
// one ReadEvents call. It reports events/s.
func BenchRead(b *testing.B, s store.Store, n int) {
	id := fmt.Sprintf("bench-read-%d", benchSessions.Add(1))
	if err := s.CreateSession(b.Context(), minimalSession(id, time.Now())); err != nil {
		b.Fatalf("CreateSession: %v", err)
	}
	const chunk = 1000
	for from := 1; from <= n; from += chunk {
		batch := make([]conversation.Event, 0, chunk)
		for seq := from; seq < from+chunk && seq <= n; seq++ {
			batch = append(batch, benchEvent(id, int64(seq)))
		}
		if err := s.AppendEvents(b.Context(), batch); err != nil {
			b.Fatalf("AppendEvents: %v", err)
		}
	}
	reads := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		evs, err := s.ReadEvents(b.Context(), id, 0, 0)
		if err != nil {
			b.Fatalf("ReadEvents: %v", err)
		}
		if len(evs) != n {
			b.Fatalf("ReadEvents returned %d events, want %d", len(evs), n)
		}
		reads++
	}
	b.StopTimer()
	if el := b.Elapsed(); el > 0 {
		b.ReportMetric(float64(reads*n)/el.Seconds(), "events/s")
	}
}

func benchEvent(session string, seq int64) conversation.Event {
	payload, _ := json.Marshal(conversation.BlockDelta{
		BlockID: "msg_01XFDUDYJgAACzvnptvVoYEL-0",
		Delta:   "The quick brown fox jumps over the lazy dog; the lazy dog sleeps on.",
	})
	return conversation.Event{
		Seq:     seq,
		Type:    conversation.TypeBlockDelta,
		Payload: payload,
		Context: conversation.Context{
			SessionID:      session,
			ConversationID: conversation.MainConversation,
			Source:         conversation.SourceRunner,
			Timestamp:      time.Now(),
			Actor:          ptr("local"),
		},
	}
}
