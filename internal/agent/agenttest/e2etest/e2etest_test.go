package e2etest

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/mockllm"
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

func TestScript(t *testing.T) {
	s := Script(`
  - name: mine
    match: {userContains: "mine"}
    reply: {text: "first"}
`)
	parsed, err := mockllm.Parse([]byte(s))
	if err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	var names []string
	for _, r := range parsed.Rules {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "mine,after-tool,recall,describe-images,slow" {
		t.Fatalf("rules %v", names)
	}
	if parsed.Default == nil {
		t.Fatal("no default answer")
	}
	if _, err := mockllm.Parse([]byte(Script("  - name: [broken\n"))); err == nil {
		t.Fatal("a broken rule parsed")
	}
}
