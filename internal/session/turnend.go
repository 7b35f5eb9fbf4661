package session

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/store"
)

// turnEndRetry bounds how long appendTurnEnd retries.
const turnEndRetry = 2 * time.Minute

// appendTurnEnd appends a turn's terminal event, retrying while the store
// refuses writes (a full disk, a database another process holds locked
// beyond its busy timeout): the session moves on regardless, so a lost end
// would leave the turn running in the log, and in every client's view, for
// good. It gives up when the manager closes (the next server settles the
// turn), the log is closed, the lease gen is another server's (the store
// fences the write), or after turnEndRetry. It runs in the owner
// goroutine, which waits meanwhile: nothing could be recorded anyway.
func (s *Session) appendTurnEnd(ctx context.Context, gen int64, ev conversation.Event) error {
	backoff := 20 * time.Millisecond
	deadline := time.Now().Add(turnEndRetry)
	for {
		_, err := s.appendEvents(ctx, gen, ev)
		if err == nil || errors.Is(err, eventlog.ErrClosed) || errors.Is(err, eventlog.ErrSessionDeleted) ||
			errors.Is(err, store.ErrFenced) || s.m.isClosed() || time.Now().After(deadline) {
			return err
		}
		s.m.log.Warn("record turn end: retrying", "session", s.id, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
