package sqlite_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// Commits leave the data in the WAL; the background checkpointer copies it
// into the database file without anyone asking.
func TestBackgroundCheckpoint(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	if err := s.CreateSession(ctx, store.Session{ID: "s", CreatedAt: time.Now(), LastActivity: time.Now()}); err != nil {
		t.Fatal(err)
	}
	size := func() int64 {
		fi, err := os.Stat(s.Path())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	var evs []conversation.Event
	for i := 1; i <= 2000; i++ {
		e := conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo, Message: fmt.Sprintf("event %d with some text to take room", i)})
		e.Seq = int64(i)
		e.Context.SessionID = "s"
		e.Context.Timestamp = time.Now()
		evs = append(evs, e)
	}
	if err := s.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for size() < before+100<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("database file still %d bytes (was %d): no checkpoint ran", size(), before)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
