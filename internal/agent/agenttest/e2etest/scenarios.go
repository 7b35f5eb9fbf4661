package e2etest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/mockllm"
	"github.com/agentd/agentd/restapi"
)

// The scenarios every architecture's e2e test plays the same way. The
// mock-llm script of each package answers "say hello" with streamed text,
// "please write the proof" with a shell command writing proof.txt, "stream
// the ticks" with a command printing "tick 1" … "tick 4" slowly, "write
// the forbidden file" with a command writing forbidden.txt, "count slowly"
// with a slow answer ending in "twelve" and "what did I ask first" with
// "You asked me to say hello.".

// commonRules answer what the shared scenarios need once the
// architecture's own rules did not match: a tool result, the recall and
// the slow answer; anything else is greeted.
const commonRules = `  - name: after-tool
    match: {toolResult: {}}
    reply: {text: "The command said: {{toolResult}}"}
  - name: recall
    match: {userContains: "what did I ask first"}
    reply: {text: "You asked me to say hello."}
  - name: describe-images
    match: {userContains: "describe the images"}
    reply: {text: "I see {{images}}"}
  - name: slow
    match: {userContains: "count slowly"}
    reply: {text: "one two three four five six seven eight nine ten eleven twelve", chunkSize: 4, delayMs: 400}
default: {text: "Hello from mock-llm: {{lastUserText}}"}
`

// Script is a mock-llm script: the architecture's own rules (YAML list
// items, matched first), then the rules the shared scenarios rely on.
func Script(rules string) string {
	return "rules:\n" + strings.TrimPrefix(rules, "\n") + commonRules
}

// UserImage sends a message with a PNG (a content part) and checks the
// model received it: the scripted answer describes the images of the
// request (mock-llm's images function), and the user block holds the
// image as an attachment.
func UserImage(t testing.TB, c *client.Client, id string, png []byte) {
	t.Helper()
	ctx := context.Background()
	page, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := c.SendMessage(ctx, id, restapi.MessageRequest{Parts: []restapi.ContentPart{
		{Type: "image", Source: &restapi.ContentSource{Type: "base64", MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(png)}},
		{Type: "text", Text: "please describe the images"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	seen, end := Turn(t, c, id, page.LastSeq, sent.QueryID, nil)
	Completed(t, end, seen)
	sum := sha256.Sum256(png)
	want := fmt.Sprintf("I see image image/png %d bytes sha256:%s", len(png), hex.EncodeToString(sum[:]))
	st := State(t, c, id)
	var user, answer *conversation.Block
	for i := range st.Blocks {
		switch b := &st.Blocks[i]; b.Type {
		case conversation.BlockUserMessage:
			user = b
		case conversation.BlockAssistantText:
			answer = b
		}
	}
	if answer == nil || !strings.Contains(answer.Content, want) {
		t.Fatalf("the model did not get the image: answer %+v, want %q%s", answer, want, Dump(seen))
	}
	if user == nil || len(user.Attachments) != 1 || user.Attachments[0].SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("user block %+v", user)
	}
}

// Listed checks that the server lists the architecture name as available
// in version.
func Listed(t testing.TB, c *client.Client, name, version string) {
	t.Helper()
	archs, err := c.Architectures(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range archs {
		if a.Name == name {
			found = true
			if !a.Available || a.Version != version {
				t.Fatalf("%s architecture %+v, want available %s", name, a, version)
			}
		}
	}
	if !found {
		t.Fatalf("%s not listed: %+v", name, archs)
	}
}

// StreamedText plays "say hello": the turn completes with at least
// minDeltas deltas and a usage update. It returns the session's state
// after the turn for the architecture's own checks.
func StreamedText(t testing.TB, c *client.Client, id string, minDeltas int) restapi.SessionState {
	t.Helper()
	q, after := Send(t, c, id, "say hello")
	seen, end := Turn(t, c, id, after, q, nil)
	Completed(t, end, seen)
	deltas, usage := 0, false
	for _, e := range seen {
		switch e.Type {
		case conversation.TypeBlockDelta:
			deltas++
		case conversation.TypeMetadataUpdate:
			if Payload[conversation.MetadataUpdate](e).Usage != nil {
				usage = true
			}
		}
	}
	if deltas < minDeltas || !usage {
		t.Fatalf("want streamed deltas and usage; got %d deltas, usage %v:%s", deltas, usage, Dump(seen))
	}
	st := State(t, c, id)
	return st
}

// ProofWritten waits for the file:created event of proof.txt after seq
// after and checks the file holds want.
func ProofWritten(t testing.TB, c *client.Client, id string, after int64, want string) {
	t.Helper()
	WaitEvent(t, c, id, after, func(e conversation.Event) bool {
		return e.Type == conversation.TypeFileCreated && Payload[conversation.FileChange](e).Path == "proof.txt"
	})
	data, err := c.File(context.Background(), id, "proof.txt")
	if err != nil || string(data) != want {
		t.Fatalf("proof.txt = %q, %v", data, err)
	}
}

// ShellAfterApproval plays "please write the proof" where the shell tool
// (tool) asks first: the request is allowed, proof.txt holds proof+"\n",
// and the tool use, its successful result (mentioning proof) and the
// thinking before are blocks. It returns the turn's events.
func ShellAfterApproval(t testing.TB, c *client.Client, id, tool, proof string) []conversation.Event {
	t.Helper()
	q, after := Send(t, c, id, "please write the proof")
	var req conversation.PermissionRequested
	seen, end := Turn(t, c, id, after, q, func(e conversation.Event) {
		if e.Type == conversation.TypePermissionRequest {
			req = Payload[conversation.PermissionRequested](e)
			Answer(t, c, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Allow})
		}
	})
	Completed(t, end, seen)
	if req.ToolName != tool || !strings.Contains(string(req.Input), "proof.txt") || req.ToolUseID == "" {
		t.Fatalf("permission request %+v", req)
	}
	ProofWritten(t, c, id, after, proof+"\n")
	st := State(t, c, id)
	var use, result, thinking *conversation.Block
	for i := range st.Blocks {
		b := &st.Blocks[i]
		switch {
		case b.ID == req.ToolUseID && b.Type == conversation.BlockToolUse:
			use = b
		case b.Type == conversation.BlockToolResult && b.ToolUseID == req.ToolUseID:
			result = b
		case b.Type == conversation.BlockThinking && strings.Contains(b.Content, "proof.txt"):
			thinking = b
		}
	}
	if use == nil || use.ToolName != tool || result == nil || !strings.Contains(result.Output, proof) || result.IsError || thinking == nil {
		t.Fatalf("tool_use %+v result %+v thinking %+v; blocks %+v", use, result, thinking, st.Blocks)
	}
	return seen
}

// ToolOutputStreams plays "stream the ticks" (allowed): the command's
// output arrives in at least two deltas before its result completes, and
// the result holds all four ticks.
func ToolOutputStreams(t testing.TB, c *client.Client, id string) {
	t.Helper()
	q, after := Send(t, c, id, "stream the ticks")
	var resultID string
	deltasBeforeEnd := 0
	done := false
	seen, end := Turn(t, c, id, after, q, func(e conversation.Event) {
		switch e.Type {
		case conversation.TypePermissionRequest:
			req := Payload[conversation.PermissionRequested](e)
			resultID = conversation.ToolResultID(req.ToolUseID)
			Answer(t, c, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Allow})
		case conversation.TypeBlockDelta:
			if p := Payload[conversation.BlockDelta](e); p.BlockID == resultID && !done {
				deltasBeforeEnd++
			}
		case conversation.TypeBlockUpsert:
			if b := Payload[conversation.BlockUpsert](e).Block; b.ID == resultID && b.Status == conversation.StatusComplete {
				done = true
			}
		}
	})
	Completed(t, end, seen)
	if resultID == "" || deltasBeforeEnd < 2 {
		t.Fatalf("tool output not streamed (%d deltas before the result completed):%s", deltasBeforeEnd, Dump(seen))
	}
	st := State(t, c, id)
	for _, b := range st.Blocks {
		if b.ID == resultID && !strings.Contains(b.Output, "tick 1\ntick 2\ntick 3\ntick 4") {
			t.Fatalf("result %+v", b)
		}
	}
}

// ApprovalDenied plays "now write the forbidden file", denying the
// request: the denial is resolved by the user, nothing is written and the
// tool result is an error. The turn must complete, or with mayFail may
// also fail.
func ApprovalDenied(t testing.TB, c *client.Client, id string, mayFail bool) {
	t.Helper()
	ctx := context.Background()
	q, after := Send(t, c, id, "now write the forbidden file")
	var req conversation.PermissionRequested
	seen, end := Turn(t, c, id, after, q, func(e conversation.Event) {
		if e.Type == conversation.TypePermissionRequest {
			req = Payload[conversation.PermissionRequested](e)
			Answer(t, c, id, req.RequestID, restapi.PermissionAnswer{Behavior: conversation.Deny, Message: "not that"})
		}
	})
	if !mayFail {
		Completed(t, end, seen)
	} else if end.Type != conversation.TypeQueryCompleted && end.Type != conversation.TypeQueryFailed {
		t.Fatalf("turn end %s", end.Payload)
	}
	resolved := false
	for _, e := range seen {
		if e.Type == conversation.TypePermissionResolved {
			r := Payload[conversation.PermissionResolved](e)
			resolved = r.RequestID == req.RequestID && r.Behavior == conversation.Deny && r.By == conversation.ByUser
		}
	}
	if !resolved {
		t.Fatalf("no deny resolution for %+v:%s", req, Dump(seen))
	}
	if _, err := c.File(ctx, id, "forbidden.txt"); !client.IsCode(err, "FILE_NOT_FOUND") {
		t.Fatalf("a denied command ran: %v", err)
	}
	st := State(t, c, id)
	for _, b := range st.Blocks {
		if b.Type == conversation.BlockToolResult && b.ToolUseID == req.ToolUseID && !b.IsError {
			t.Fatalf("denied command's result is not an error: %+v", b)
		}
	}
}

// Interrupt plays "count slowly", interrupting at the first delta: the
// turn completes as interrupted before the answer's end. It returns the
// session's state after the turn.
func Interrupt(t testing.TB, c *client.Client, id string) restapi.SessionState {
	t.Helper()
	ctx := context.Background()
	q, after := Send(t, c, id, "count slowly")
	interrupted := false
	seen, end := Turn(t, c, id, after, q, func(e conversation.Event) {
		if e.Type == conversation.TypeBlockDelta && !interrupted {
			interrupted = true
			if err := c.Interrupt(ctx, id); err != nil {
				t.Errorf("interrupt: %v", err)
			}
		}
	})
	if q := Completed(t, end, seen); !q.Interrupted {
		t.Fatalf("turn end %s", end.Payload)
	}
	st := State(t, c, id)
	for _, b := range st.Blocks {
		if strings.Contains(b.Content, "twelve") {
			t.Fatalf("the interrupted answer ran to the end: %+v", b)
		}
	}
	return st
}

// Recall is what RecallAfterRestart saw: the session before the restart
// and after the turn, and the turn's events.
type Recall struct {
	Before, After restapi.SessionState
	Seen          []conversation.Event
}

// RecallAfterRestart restarts the server (mock-llm keeps running and
// numbering its ids on, as a real model API would) and plays "what did I
// ask first?": the agent resumes its own session, so the one model
// request of the turn carries each of wants, and the answer is the
// recall.
func RecallAfterRestart(t testing.TB, srv *agentdtest.Server, mock *mockllm.Server, id string, wants ...string) Recall {
	t.Helper()
	before := State(t, srv.Client, id)
	srv.Restart()
	c := srv.Client
	n := len(mock.ModelRequests(mockllm.KindMain))
	q, after := Send(t, c, id, "what did I ask first?")
	seen, end := Turn(t, c, id, after, q, nil)
	Completed(t, end, seen)
	oneRequest(t, mock, n, wants)
	after2 := State(t, c, id)
	if after2.Runtime.AgentSessionID != before.Runtime.AgentSessionID {
		t.Fatalf("agent session changed across restart: %s -> %s", before.Runtime.AgentSessionID, after2.Runtime.AgentSessionID)
	}
	if last := after2.Blocks[len(after2.Blocks)-1]; last.Content != "You asked me to say hello." {
		t.Fatalf("last block %+v", last)
	}
	return Recall{Before: before, After: after2, Seen: seen}
}

// ResumeInAFreshWorkspace restarts the server and removes the agent's own
// folder (agentDir, in the workspace) as a workspace restored elsewhere
// lacks it: the runner writes the transcript it saved with the session
// back, so "what did I ask first? (again)" reaches the model (one request)
// with each of wants, and nothing says the earlier turns were lost.
func ResumeInAFreshWorkspace(t testing.TB, srv *agentdtest.Server, mock *mockllm.Server, id, agentDir string, wants ...string) {
	t.Helper()
	srv.Restart()
	c := srv.Client
	if err := os.RemoveAll(filepath.Join(srv.Config.DataDir, "workspaces", id, agentDir)); err != nil {
		t.Fatal(err)
	}
	n := len(mock.ModelRequests(mockllm.KindMain))
	q, after := Send(t, c, id, "what did I ask first? (again)")
	seen, end := Turn(t, c, id, after, q, nil)
	Completed(t, end, seen)
	for _, e := range seen {
		if e.Type == conversation.TypeLog && strings.Contains(string(e.Payload), "without the earlier turns") {
			t.Fatalf("the conversation was lost: %s", e.Payload)
		}
	}
	oneRequest(t, mock, n, wants)
}

// Missing starts a server whose PATH has no agent CLIs: arch is listed as
// unavailable with a problem, and creating a session of it fails at once
// with AGENT_NOT_FOUND naming mention (not at the first message).
func Missing(t *testing.T, arch, mention string) {
	t.Setenv("PATH", "/usr/bin:/bin")
	srv := agentdtest.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	ctx := context.Background()
	archs, _ := c.Architectures(ctx)
	for _, a := range archs {
		if a.Name == arch && (a.Available || a.Problem == "") {
			t.Fatalf("missing %s reported %+v", arch, a)
		}
	}
	_, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: arch})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != 400 || ce.Code != "AGENT_NOT_FOUND" || !strings.Contains(ce.Message, mention) {
		t.Fatalf("create: %v", err)
	}
	if list, _ := c.Sessions(ctx); len(list) != 0 {
		t.Fatalf("a session was created: %+v", list)
	}
}

// Crash puts a CLI named cli that is the shell script script first on the
// PATH and starts a server: a turn of arch fails with AGENT_EXITED and an
// error mentioning each of wants. It returns the server and the session.
func Crash(t *testing.T, arch, cli, script string, wants ...string) (*agentdtest.Server, string) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, cli), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	agentdtest.WithPath(t, bin)
	srv := agentdtest.Start(t, agentd.Config{Env: map[string]string{}})
	c := srv.Client
	created, err := c.CreateSession(context.Background(), restapi.CreateSessionRequest{Architecture: arch})
	if err != nil {
		t.Fatal(err)
	}
	q, after := Send(t, c, created.SessionID, "hello")
	_, end := Turn(t, c, created.SessionID, after, q, nil)
	f := Payload[conversation.QueryFailed](end)
	ok := end.Type == conversation.TypeQueryFailed && f.Code == "AGENT_EXITED"
	for _, w := range wants {
		ok = ok && strings.Contains(f.Error, w)
	}
	if !ok {
		t.Fatalf("turn end %s %s", end.Type, end.Payload)
	}
	return srv, created.SessionID
}

// oneRequest checks that mock had one model request after the first n, and
// that it carries each of wants.
func oneRequest(t testing.TB, mock *mockllm.Server, n int, wants []string) {
	t.Helper()
	reqs := mock.ModelRequests(mockllm.KindMain)
	if len(reqs) != n+1 {
		t.Fatalf("%d model requests for the resumed turn, want 1", len(reqs)-n)
	}
	body := string(reqs[n].Body)
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Fatalf("the resumed session's request lacks %q: %s", want, body)
		}
	}
}

// PNG is a w×h PNG of one colour, for the image scenarios.
func PNG(t testing.TB, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: 30, G: 90, B: 200, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
