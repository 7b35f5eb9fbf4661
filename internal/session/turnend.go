package session

import (
	"context"
	"errors"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
)

// turnEndRetry bounds how long appendTurnEnd retries.
const turnEndRetry = 2 * time.Minute

// appendTurnEnd appends a turn's terminal event, retrying while the store
// refuses writes (a full disk, a database another process holds locked
// beyond its busy timeout): the session moves on regardless, so a lost end
// would leave the turn running in the log, and in every client's view, for
// good. It gives up when the manager closes (the next server settles the
// turn), the log is closed, or after turnEndRetry. It runs in the owner
// goroutine, which waits meanwhile: nothing could be recorded anyway.
func (m *Manager) appendTurnEnd(ctx context.Context, id string, ev conversation.Event) error {
	backoff := 20 * time.Millisecond
	deadline := time.Now().Add(turnEndRetry)
	for {
		_, err := m.cfg.Log.Append(ctx, id, ev)
		if err == nil || errors.Is(err, eventlog.ErrClosed) || errors.Is(err, eventlog.ErrSessionDeleted) ||
			m.isClosed() || time.Now().After(deadline) {
			return err
		}
		m.log.Warn("record turn end: retrying", "session", id, "err", err)
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}
