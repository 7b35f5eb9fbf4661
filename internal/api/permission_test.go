package api_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
)

// askArch's turns ask for one permission (tool "Bash") and end with the
// answer's behavior as their result.
type askArch struct{}

func (askArch) Name() string { return "ask" }
func (askArch) Start(_ context.Context, h agent.Host) (agent.Runner, error) {
	return askRunner{h}, nil
}

type askRunner struct{ h agent.Host }

func (r askRunner) Turn(ctx context.Context, _ agent.Turn) (agent.TurnResult, error) {
	d, err := r.h.RequestPermission(ctx, agent.PermissionRequest{ToolName: "Bash", Input: json.RawMessage(`{"command":"ls"}`)})
	if err != nil {
		return agent.TurnResult{}, err
	}
	return agent.TurnResult{Result: string(d.Behavior)}, nil
}
func (askRunner) Interrupt(context.Context) error { return nil }
func (askRunner) Close(context.Context) error     { return nil }

// An answer to a permission request that was answered already is 409
// PERMISSION_ALREADY_RESOLVED (the client lost a race, nothing is wrong
// with the id); an id the session never issued is 404 PERMISSION_NOT_FOUND.
func TestPermissionAnsweredTwiceOrUnknown(t *testing.T) {
	e := newEnvWith(t, eventlog.Options{QueueSize: 64}, func(c *api.Config) { c.Architectures.Register(askArch{}) })
	code, out := e.do("POST", "/api/sessions", `{"architecture":"ask"}`)
	if code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["sessionId"].(string)
	if code, out := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"may I?"}`); code != 202 {
		t.Fatalf("send: %d %v", code, out)
	}
	var req conversation.PermissionRequested
	for deadline := time.Now().Add(20 * time.Second); req.RequestID == ""; time.Sleep(10 * time.Millisecond) {
		for _, ev := range e.events(id, 0) {
			if ev.Type == conversation.TypePermissionRequest {
				if err := json.Unmarshal(ev.Payload, &req); err != nil {
					t.Fatal(err)
				}
			}
		}
		if req.RequestID == "" && time.Now().After(deadline) {
			t.Fatal("no permission:requested")
		}
	}
	path := "/api/sessions/" + id + "/permissions/"
	expectCode(t, e.request("POST", path+"perm-never", `{"behavior":"allow"}`), 404, "PERMISSION_NOT_FOUND")
	if code, out := e.do("POST", path+req.RequestID, `{"behavior":"allow"}`); code != 200 {
		t.Fatalf("the answer: %d %v", code, out)
	}
	expectCode(t, e.request("POST", path+req.RequestID, `{"behavior":"deny"}`), 409, "PERMISSION_ALREADY_RESOLVED")
	// The turn ended with the first answer.
	evs := e.waitTurn(id, "q1")
	var done conversation.QueryCompleted
	for _, ev := range evs {
		if ev.Type == conversation.TypeQueryCompleted {
			json.Unmarshal(ev.Payload, &done)
		}
	}
	if done.Result != string(conversation.Allow) {
		t.Fatalf("the turn ended with %+v, want the first answer (allow)", done)
	}
	// Still 409 after the turn, and 404 for an id of no session of ours.
	expectCode(t, e.request("POST", path+req.RequestID, `{"behavior":"allow"}`), 409, "PERMISSION_ALREADY_RESOLVED")
	expectCode(t, e.request("POST", path+req.RequestID+"x", `{"behavior":"allow"}`), 404, "PERMISSION_NOT_FOUND")
}
