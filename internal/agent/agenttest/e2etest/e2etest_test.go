package e2etest

import (
	"testing"

	"github.com/agentd/agentd/conversation"
)

func TestDumpAndPayload(t *testing.T) {
	e := conversation.NewEvent(conversation.QueryFailed{QueryID: "q1", Code: "AGENT_EXITED", Error: "boom"})
	if got := Dump([]conversation.Event{e, e}); got != "\n  "+string(e.Type)+" "+string(e.Payload)+"\n  "+string(e.Type)+" "+string(e.Payload) {
		t.Fatalf("dump %q", got)
	}
	if f := Payload[conversation.QueryFailed](e); f.Code != "AGENT_EXITED" || f.Error != "boom" {
		t.Fatalf("payload %+v", f)
	}
	// A payload of another shape decodes to the zero value, not a panic.
	if u := Payload[conversation.MetadataUpdate](conversation.Event{Payload: []byte(`[1]`)}); u.Usage != nil {
		t.Fatalf("payload %+v", u)
	}
}
