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
// flush waits for what is queued, so a reader sees what came before it.
type accessLog struct {
	st   store.AccessAuditStore // nil: structured log only
	log  *slog.Logger
	in   chan accessItem
	done chan struct{}

	mu     sync.RWMutex // guards closed against sends on in
	closed bool
}

// accessItem is a record to store, or a flush: flushed is closed once
// everything queued before it is stored.
type accessItem struct {
	r       store.AccessRecord
	flushed chan struct{}
}

func newAccessLog(st store.IdentityStore, log *slog.Logger) *accessLog {
	a := &accessLog{log: log, in: make(chan accessItem, 1024), done: make(chan struct{})}
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
	case a.in <- accessItem{r: r}:
	default:
		a.log.Warn("access log queue full: record kept in the log only", "kind", r.Kind)
	}
}

func (a *accessLog) run() {
	defer close(a.done)
	for it := range a.in {
		var batch []store.AccessRecord
		var flushed []chan struct{}
		add := func(it accessItem) {
			if it.flushed != nil {
				flushed = append(flushed, it.flushed)
				return
			}
			batch = append(batch, it.r)
		}
		add(it)
	drain:
		for len(batch) < 256 {
			select {
			case it, ok := <-a.in:
				if !ok {
					break drain
				}
				add(it)
			default:
				break drain
			}
		}
		if len(batch) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := a.st.AppendAccess(ctx, batch); err != nil {
				a.log.Error("store access records", "count", len(batch), "err", err)
			}
			cancel()
		}
		for _, c := range flushed {
			close(c)
		}
	}
}

// flush waits until the records queued before it are stored (or their
// store failed, which is logged), or ctx ends.
func (a *accessLog) flush(ctx context.Context) error {
	if a.st == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c := make(chan struct{})
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return nil // close stores the rest
	}
	select {
	case a.in <- accessItem{flushed: c}:
	case <-ctx.Done():
		a.mu.RUnlock()
		return ctx.Err()
	}
	a.mu.RUnlock()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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
