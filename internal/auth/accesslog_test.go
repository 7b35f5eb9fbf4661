package auth

import (
	"context"
	"testing"
	"time"

	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// slowAccessStore holds every access append until gate is closed (a
// store under load).
type slowAccessStore struct {
	*memstore.Store
	gate chan struct{}
}

func (s slowAccessStore) AppendAccess(ctx context.Context, records []store.AccessRecord) error {
	<-s.gate
	return s.Store.AppendAccess(ctx, records)
}

// TestAccessLogReadsItsWrites: records are stored in the background, yet
// an admin reading the access log sees every record made before the read
// (the read waits for them), not a log that lags behind.
func TestAccessLogReadsItsWrites(t *testing.T) {
	st := slowAccessStore{Store: memstore.New(), gate: make(chan struct{})}
	s, err := New(Config{Identity: st, BootstrapKey: "root-key"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	admin, err := s.Authenticate(ctx, "root-key")
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := range n {
		s.Record(store.AccessRecord{Kind: store.AccessRateLimited, Actor: "alice", Detail: string(rune('a' + i%26))})
	}
	got := make(chan []store.AccessRecord, 1)
	go func() {
		recs, err := s.AccessLog(ctx, admin, 0, 0)
		if err != nil {
			t.Error(err)
		}
		got <- recs
	}()
	select {
	case recs := <-got:
		t.Fatalf("the access log was read before its records were stored: %d records", len(recs))
	case <-time.After(200 * time.Millisecond):
	}
	close(st.gate)
	select {
	case recs := <-got:
		limited := 0
		for _, r := range recs {
			if r.Kind == store.AccessRateLimited {
				limited++
			}
		}
		if limited != n {
			t.Fatalf("read %d of the %d records made before the read", limited, n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the access log read did not return once the records were stored")
	}

	// A read whose context ends while it waits fails with the context's
	// error, and loses nothing.
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.AccessLog(ctx2, admin, 0, 0); err == nil {
		t.Fatal("a cancelled read succeeded")
	}
}
