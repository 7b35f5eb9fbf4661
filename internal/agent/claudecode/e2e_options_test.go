package claudecode_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/restapi"
)

// PATCH …/options reaches the running CLI: the next model request of the
// same Claude Code process uses the new model (set_model), and a CLI
// started later starts with it (--model).
func TestE2EOptionsReachTheRunningCLI(t *testing.T) {
	e := newE2E(t, "", nil)
	ctx := context.Background()
	s, err := e.c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code", AgentProfileRef: "auto",
		SessionOptions: json.RawMessage(`{"model":"claude-sonnet-4-5"}`)})
	if err != nil {
		t.Fatal(err)
	}
	lastModel := func() string {
		main := e.mock.ModelRequests(mockllm.KindMain)
		if len(main) == 0 {
			t.Fatal("no model request")
		}
		return main[len(main)-1].Model
	}
	starts := func(evs []conversation.Event) int {
		n := 0
		for _, ev := range evs {
			if ev.Type == conversation.TypeLog && strings.Contains(string(ev.Payload), "starting Claude Code") {
				n++
			}
		}
		return n
	}
	end, evs := e.turn(s.SessionID, "please say hello", nil)
	mustComplete(t, end, evs)
	if m := lastModel(); m != "claude-sonnet-4-5" {
		t.Fatalf("first turn's model %q", m)
	}
	if _, err := e.c.UpdateOptions(ctx, s.SessionID, json.RawMessage(`{"model":"claude-haiku-4-5"}`)); err != nil {
		t.Fatal(err)
	}
	end, evs = e.turn(s.SessionID, "please say hello", nil)
	mustComplete(t, end, evs)
	if n := starts(evs); n != 0 {
		t.Fatalf("the CLI was started again (%d times): not a live change", n)
	}
	if m := lastModel(); m != "claude-haiku-4-5" {
		t.Fatalf("model after the change %q (events: %s)", m, types(evs))
	}
	// A new environment starts the CLI with the new model.
	if _, err := e.c.TerminateEnvironment(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	end, evs = e.turn(s.SessionID, "please say hello", nil)
	mustComplete(t, end, evs)
	if starts(evs) != 1 || lastModel() != "claude-haiku-4-5" {
		t.Fatalf("after a restart: %d starts, model %q", starts(evs), lastModel())
	}
}
