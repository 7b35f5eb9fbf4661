// Package e2etest drives agentd end to end for the architecture tests: a
// server (internal/agentdtest) with the real CLI and mock-llm as the model,
// turns followed over the client, and the scenarios the architectures
// share. It imports the server, so only external test packages (package
// codex_test) may use it.
package e2etest

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

// Turn follows a session's events from after until the end of query,
// calling on (when set) for each; it returns the events seen and the end
// event. Two minutes without the end fail the test.
func Turn(t testing.TB, c *client.Client, id string, after int64, query string, on func(conversation.Event)) ([]conversation.Event, conversation.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := c.Stream(ctx, id, after)
	defer s.Close()
	var seen []conversation.Event
	for {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the end of %s: %v (events so far: %s)", query, err, Dump(seen))
		}
		seen = append(seen, ev)
		if on != nil {
			on(ev)
		}
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		var p struct{ QueryID string }
		_ = json.Unmarshal(ev.Payload, &p)
		if p.QueryID == query {
			return seen, ev
		}
	}
}

// Dump lists events, one a line, for failure messages.
func Dump(evs []conversation.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString("\n  " + string(e.Type) + " " + string(e.Payload))
	}
	return b.String()
}

// Send sends content as a new turn and returns its query id and the log's
// last seq before it (where to follow the turn from).
func Send(t testing.TB, c *client.Client, id, content string) (string, int64) {
	t.Helper()
	ctx := context.Background()
	page, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.Send(ctx, id, content)
	if err != nil {
		t.Fatal(err)
	}
	return sent.QueryID, page.LastSeq
}

// Completed fails the test unless end is query:completed, and returns it.
func Completed(t testing.TB, end conversation.Event, seen []conversation.Event) conversation.QueryCompleted {
	t.Helper()
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("turn ended with %s %s; events:%s", end.Type, end.Payload, Dump(seen))
	}
	var q conversation.QueryCompleted
	_ = json.Unmarshal(end.Payload, &q)
	return q
}

// WaitEvent polls the log for an event after seq that pred accepts (file
// events come from the watcher and may trail the turn's end); 15 seconds
// without one fail the test.
func WaitEvent(t testing.TB, c *client.Client, id string, after int64, pred func(conversation.Event) bool) conversation.Event {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		page, err := c.Events(context.Background(), id, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			if pred(e) {
				return e
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	page, _ := c.Events(context.Background(), id, after, 0)
	t.Fatalf("event not seen; events:%s", Dump(page.Events))
	return conversation.Event{}
}

// LogEvents logs a session's whole log when AGENTD_E2E_DUMP is set.
func LogEvents(t testing.TB, c *client.Client, id string) {
	if os.Getenv("AGENTD_E2E_DUMP") == "" {
		return
	}
	page, err := c.Events(context.Background(), id, 0, 0)
	if err != nil {
		t.Logf("events: %v", err)
		return
	}
	for _, e := range page.Events {
		t.Logf("%d %s %s %s %s", e.Seq, e.Context.Timestamp.Format("15:04:05.000"), e.Type, e.Context.ConversationID, e.Payload)
	}
}

// Payload decodes e's payload as T (the zero T when it does not decode).
func Payload[T any](e conversation.Event) T {
	var v T
	_ = json.Unmarshal(e.Payload, &v)
	return v
}

// SubagentTurn sends content, expects the turn to complete, and returns its
// events with the turn's subagent:spawned and subagent:completed payloads
// (zero when absent; the caller checks what its CLI reports).
func SubagentTurn(t testing.TB, c *client.Client, id, content string) ([]conversation.Event, conversation.SubagentSpawned, conversation.SubagentCompleted) {
	t.Helper()
	q, after := Send(t, c, id, content)
	seen, end := Turn(t, c, id, after, q, nil)
	Completed(t, end, seen)
	var spawned conversation.SubagentSpawned
	var finished conversation.SubagentCompleted
	for _, e := range seen {
		switch e.Type {
		case conversation.TypeSubagentSpawned:
			spawned = Payload[conversation.SubagentSpawned](e)
		case conversation.TypeSubagentCompleted:
			finished = Payload[conversation.SubagentCompleted](e)
		}
	}
	return seen, spawned, finished
}

// State returns session id's reduced state; the test fails when it
// cannot be read (an empty state would let later checks pass vacuously).
func State(t testing.TB, c *client.Client, id string) restapi.SessionState {
	t.Helper()
	st, err := c.Session(context.Background(), id)
	if err != nil {
		t.Fatalf("session %s: %v", id, err)
	}
	return st
}

// Answer answers permission request reqID of session id; a refused answer
// fails the test (it may be called from a Turn callback).
func Answer(t testing.TB, c *client.Client, id, reqID string, a restapi.PermissionAnswer) {
	t.Helper()
	if err := c.AnswerPermission(context.Background(), id, reqID, a); err != nil {
		t.Errorf("answer %s (%s): %v", reqID, a.Behavior, err)
	}
}

// SubagentOf returns session id's state and its subagent spawned by
// toolUseID; the test fails when there is none.
func SubagentOf(t testing.TB, c *client.Client, id, toolUseID string) (restapi.SessionState, conversation.Subagent) {
	t.Helper()
	st := State(t, c, id)
	for _, sub := range st.Subagents {
		if sub.ToolUseID == toolUseID {
			return st, sub
		}
	}
	t.Fatalf("no subagent %s in %+v", toolUseID, st.Subagents)
	return st, conversation.Subagent{}
}
