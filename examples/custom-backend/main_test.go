package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the client's transport.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// A session of the program's architecture, in the program's sandbox,
// through agentd's HTTP API.
func TestSessionOverHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dataDir := t.TempDir()
	srv, err := agentd.New(ctx, config("127.0.0.1:0", dataDir))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.ListenAndServe(serveCtx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	c, err := client.New("http://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	sbs, err := c.Sandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed bool
	for _, sb := range sbs {
		listed = listed || (sb.Name == "hostdir" && sb.Default)
	}
	if !listed {
		t.Fatalf("hostdir is not the default sandbox: %+v", sbs)
	}
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "upper"})
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Stream(ctx, created.SessionID, 0)
	defer stream.Close()
	sent, err := c.Send(ctx, created.SessionID, "hello from a custom backend")
	if err != nil {
		t.Fatal(err)
	}
	for end := false; !end; {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case conversation.TypeQueryCompleted:
			var p conversation.QueryCompleted
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			end = p.QueryID == sent.QueryID
		case conversation.TypeQueryFailed:
			t.Fatalf("turn failed: %s", ev.Payload)
		}
	}
	state, err := c.Session(ctx, created.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	var answer string
	for _, b := range state.Blocks {
		if b.Type == conversation.BlockAssistantText {
			answer = b.Content
		}
	}
	if answer != "HELLO FROM A CUSTOM BACKEND" {
		t.Fatalf("answer %q; blocks %+v", answer, state.Blocks)
	}
	// A file made in the workspace reaches the log through the backend's
	// watcher, and the API reads it through the backend.
	ws := filepath.Join(dataDir, "workspaces", created.SessionID)
	if err := os.WriteFile(filepath.Join(ws, "note.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.TypeFileCreated {
			var f conversation.FileChange
			if err := json.Unmarshal(ev.Payload, &f); err != nil {
				t.Fatal(err)
			}
			if f.Path == "note.txt" {
				break
			}
		}
	}
	b, err := c.File(ctx, created.SessionID, "note.txt")
	if err != nil || string(b) != "kept" {
		t.Fatalf("read back %q, %v", b, err)
	}
}
