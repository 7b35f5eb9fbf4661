package auth

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/agentd/agentd/store"
)

// accessLog writes access records to the store in the background, in
// batches, and to the structured log. A full queue drops records (they
// stay in the structured log): a flood of refusals must not slow requests.
type accessLog struct {
	st   store.AccessAuditStore // nil: structured log only
	log  *slog.Logger
	in   chan store.AccessRecord
	done chan struct{}

	mu     sync.RWMutex // guards closed against sends on in
	closed bool
}

func newAccessLog(st store.IdentityStore, log *slog.Logger) *accessLog {
	a := &accessLog{log: log, in: make(chan store.AccessRecord, 1024), done: make(chan struct{})}
	if st != nil {
		a.st = st
		go a.run()
	} else {
		close(a.done)
	}
	return a
}

func (a *accessLog) record(r store.AccessRecord) {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	r.Time = r.Time.UTC()
	a.log.Info("access", "kind", r.Kind, "actor", r.Actor, "token", r.TokenID, "subject", r.Subject, "detail", r.Detail)
	if a.st == nil {
		return
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return
	}
	select {
	case a.in <- r:
	default:
		a.log.Warn("access log queue full: record kept in the log only", "kind", r.Kind)
	}
}

func (a *accessLog) run() {
	defer close(a.done)
	for r := range a.in {
		batch := []store.AccessRecord{r}
	drain:
		for len(batch) < 256 {
			select {
			case r, ok := <-a.in:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := a.st.AppendAccess(ctx, batch); err != nil {
			a.log.Error("store access records", "count", len(batch), "err", err)
		}
		cancel()
	}
}

// close stores what is queued and stops.
func (a *accessLog) close(ctx context.Context) error {
	a.mu.Lock()
	if !a.closed && a.st != nil {
		close(a.in)
	}
	a.closed = true
	a.mu.Unlock()
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
