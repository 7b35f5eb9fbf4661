// Command embedded shows agentd embedded in a Go program with an
// application-supplied store: countingStore wraps the in-memory store and
// counts the events it persists (an application would write to its own
// database here). It starts the server on a free port, runs one shell turn
// through the Go client and prints the reduced conversation.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// countingStore is a custom store.Store: the in-memory store plus a counter
// on the event path. Its conformance test is in store_test.go.
type countingStore struct {
	*memstore.Store
	events atomic.Int64
}

func (s *countingStore) AppendEvents(ctx context.Context, events []conversation.Event, fence ...store.Fence) error {
	if err := s.Store.AppendEvents(ctx, events, fence...); err != nil {
		return err
	}
	s.events.Add(int64(len(events)))
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embedded:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "agentd-embedded-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	st := &countingStore{Store: memstore.New()}
	srv, err := agentd.New(ctx, agentd.Config{
		Addr: "127.0.0.1:0", DataDir: dir, Store: st, DisableUI: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(serveCtx) }()
	defer func() { stop(); <-done }()

	c, err := client.New("http://" + srv.Addr())
	if err != nil {
		return err
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		return err
	}
	stream := c.Stream(ctx, created.SessionID, 0)
	defer stream.Close()
	sent, err := c.Send(ctx, created.SessionID, "echo hello from an embedded agentd")
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			return err
		}
		if ev.Type == conversation.TypeQueryCompleted {
			var p conversation.QueryCompleted
			json.Unmarshal(ev.Payload, &p)
			if p.QueryID == sent.QueryID {
				break
			}
		}
	}
	state, err := c.Session(ctx, created.SessionID)
	if err != nil {
		return err
	}
	for _, b := range state.Blocks {
		fmt.Printf("%-12s %s%s\n", b.Type, b.Content, b.Output)
	}
	fmt.Printf("the custom store persisted %d events\n", st.events.Load())
	return nil
}
