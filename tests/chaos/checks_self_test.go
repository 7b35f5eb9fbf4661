//go:build linux

package chaos

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
)

// The checks must be able to fail: these feed them logs and client
// records with the faults they look for.

func checkHarness(t *testing.T) (*harness, *[]string) {
	var got []string
	return &harness{t: t, violations: &got}, &got
}

// turnLog is the stored log of one shell turn printing lines from...to of
// mark (then the runner's note, if any) and ending with end.
func turnLog(queryID, mark string, lines []int, note string, end conversation.EventType) []storedEvent {
	result := conversation.ToolResultID(shell.ToolUseID(queryID))
	evs := []storedEvent{
		conversation.Upsert(conversation.Block{ID: queryID + "-user", Type: conversation.BlockUserMessage, Content: "command"}),
		conversation.NewEvent(conversation.QueryStarted{QueryID: queryID}),
	}
	for _, l := range lines {
		evs = append(evs, conversation.Delta(result, mark+" l"+strconv.Itoa(l)+"\n"))
	}
	if note != "" {
		evs = append(evs, conversation.Delta(result, note))
	}
	if end == conversation.TypeQueryCompleted {
		evs = append(evs, conversation.NewEvent(conversation.QueryCompleted{QueryID: queryID}))
	} else {
		evs = append(evs, conversation.NewEvent(conversation.QueryFailed{QueryID: queryID, Code: "SANDBOX_ERROR"}))
	}
	for i := range evs {
		evs[i].Seq = int64(i + 1)
	}
	return evs
}

func TestCheckLog(t *testing.T) {
	cases := []struct {
		name  string
		lines []int
		note  string
		end   conversation.EventType
		want  string // a violation containing this, or "" for none
	}{
		{"complete", []int{1, 2, 3}, "", conversation.TypeQueryCompleted, ""},
		{"failed with a prefix and a note", []int{1, 2}, "wait q1: environment gone", conversation.TypeQueryFailed, ""},
		{"a line repeated (re-attach replayed it)", []int{1, 2, 2, 3}, "", conversation.TypeQueryCompleted, "goes on with"},
		{"a line lost", []int{1, 3}, "", conversation.TypeQueryCompleted, "goes on with"},
		{"completed short", []int{1, 2}, "", conversation.TypeQueryCompleted, "completed with 2 of its 3 lines"},
		{"repeat after a failure", []int{1, 2, 1}, "", conversation.TypeQueryFailed, "goes on with"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, got := checkHarness(t)
			tn := &turn{queryID: "q1", mark: "r1s0", lines: 3, round: 1, end: string(c.end)}
			h.checkLog(&session{id: "s", turns: []*turn{tn}, mirror: turnLog("q1", "r1s0", c.lines, c.note, c.end)})
			assertViolation(t, *got, c.want)
		})
	}
}

func TestCheckLogTurnEvents(t *testing.T) {
	h, got := checkHarness(t)
	evs := turnLog("q1", "m", []int{1}, "", conversation.TypeQueryCompleted)
	// A second terminal event, and output after the first.
	evs = append(evs, conversation.Delta(conversation.ToolResultID(shell.ToolUseID("q1")), "late"),
		conversation.NewEvent(conversation.QueryFailed{QueryID: "q1"}))
	for i := range evs {
		evs[i].Seq = int64(i + 1)
	}
	tn := &turn{queryID: "q1", mark: "m", lines: 1, end: string(conversation.TypeQueryCompleted)}
	h.checkLog(&session{id: "s", turns: []*turn{tn}, mirror: evs})
	assertViolation(t, *got, "1 query:started and 2 terminal events")
	assertViolation(t, *got, "after the turn ended")
}

func TestCheckClients(t *testing.T) {
	store := turnLog("q1", "m", []int{1, 2, 3}, "", conversation.TypeQueryCompleted)
	changed := store[3]
	changed.Payload = []byte(`{"blockId":"x","delta":"other"}`)
	cases := []struct {
		name   string
		after  int64
		events []storedEvent
		want   string
	}{
		{"all", 0, store, ""},
		{"from a cursor", 2, store[2:], ""},
		{"gap", 0, []storedEvent{store[0], store[2]}, "a gap or a repeat"},
		{"repeat", 1, []storedEvent{store[1], store[1]}, "a gap or a repeat"},
		{"not from the cursor", 3, store[1:], "a gap or a repeat"},
		{"beyond the store", 0, append(append([]storedEvent(nil), store...), storedEvent{Seq: int64(len(store) + 1)}), "does not hold"},
		{"differs", 3, []storedEvent{changed}, "differs from the store"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, got := checkHarness(t)
			h.sessions = []*session{{id: "s", mirror: store}}
			h.checkClients(&clients{conns: []*conn{{kind: "ws", role: "storm", session: "s", after: c.after, events: c.events}}})
			assertViolation(t, *got, c.want)
		})
	}
}

func assertViolation(t *testing.T, got []string, want string) {
	t.Helper()
	if want == "" {
		if len(got) > 0 {
			t.Fatalf("violations %q, want none", got)
		}
		return
	}
	for _, g := range got {
		if strings.Contains(g, want) {
			return
		}
	}
	t.Fatalf("violations %q, want one saying %q", got, want)
}

func TestCheckClaudeTurn(t *testing.T) {
	var lines strings.Builder
	for i := 1; i <= claudeLines; i++ {
		lines.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	text := conversation.Upsert(conversation.Block{ID: "t1", Type: conversation.BlockAssistantText})
	result := func(out string) storedEvent {
		return conversation.Upsert(conversation.Block{ID: "r1", Type: conversation.BlockToolResult, Output: out})
	}
	answer := conversation.Upsert(conversation.Block{ID: "t2", Type: conversation.BlockAssistantText, Content: claudeAnswer})
	cases := []struct {
		name string
		evs  []storedEvent
		want string
	}{
		{"complete", []storedEvent{text, conversation.Delta("t1", "Counting "), conversation.Delta("t1", "now."), result(lines.String()), answer}, ""},
		{"a delta resent", []storedEvent{text, conversation.Delta("t1", "Counting "), conversation.Delta("t1", "Counting "), conversation.Delta("t1", "now."), result(lines.String()), answer}, "holds \"Counting Counting now.\""},
		{"an upsert stored twice", []storedEvent{text, result(lines.String()), result(lines.String()), answer}, "stored twice"},
		{"output repeated", []storedEvent{result("line 1\nline 2\nline 2\n"), answer}, "Bash output after 2 good lines"},
		{"no answer", []storedEvent{result(lines.String())}, "answered false"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, got := checkHarness(t)
			h.checkClaudeTurn("turn", c.evs, true)
			assertViolation(t, *got, c.want)
		})
	}
}

// TestServerFDsSkipsModelConnections: a pooled connection to the model
// endpoint is left out of the descriptors compared, and only it.
func TestServerFDsSkipsModelConnections(t *testing.T) {
	model, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	before := serverFDs(os.Getpid(), model.Addr().(*net.TCPAddr).Port)
	c1, err := net.Dial("tcp", model.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if got := serverFDs(os.Getpid(), model.Addr().(*net.TCPAddr).Port); len(got) != len(before) {
		t.Fatalf("a connection to the model port counted: %d descriptors, then %d", len(got), len(before))
	}
	c2, err := net.Dial("tcp", other.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got := serverFDs(os.Getpid(), model.Addr().(*net.TCPAddr).Port); len(got) != len(before)+1 {
		t.Fatalf("a connection elsewhere: %d descriptors, want %d", len(got), len(before)+1)
	}
}
