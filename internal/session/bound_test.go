package session_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

const testLimit = 1 << 10

// bigText is n bytes of numbered lines, with a multi-byte rune now and
// then so cuts must respect rune boundaries.
func bigText(tag string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s line %d é€\n", tag, i)
	}
	s := b.String()[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// emitArch's runner plays the script its turn's content names.
type emitArch struct{}

func (emitArch) Name() string { return "emit" }
func (emitArch) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &emitRunner{h: h}, nil
}

type emitRunner struct{ h agent.Host }

func (r *emitRunner) Interrupt(context.Context) error { return nil }
func (r *emitRunner) Close(context.Context) error     { return nil }

// The texts the scripts emit, as the artifacts must hold them.
var (
	wholeText = bigText("whole", 50_000)   // one complete upsert
	subText   = bigText("sub", 20_000)     // deltas in a subagent's conversation
	openText  = strings.Repeat("€", 3_000) // deltas never completed: the turn's end completes it
	shrunk    = "replaced"                 // an upsert replacing a truncated text with a short one
	// writeInput is a Write tool's input with a 1 MB content.
	writeInput = mustJSON(map[string]string{"file_path": "/w/big.txt", "content": bigText("write", 1<<20)})
)

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (r *emitRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	res := conversation.BlockToolResult
	switch t.Content {
	case "whole":
		return agent.TurnResult{}, r.h.Emit(ctx, conversation.Upsert(conversation.Block{
			ID: "w-result", Type: res, ToolUseID: "w", Output: wholeText, Status: conversation.StatusComplete}))
	case "sub":
		if err := r.h.Emit(ctx, conversation.Upsert(conversation.Block{ID: "s-0", Type: conversation.BlockAssistantText,
			Status: conversation.StatusPending}).In("toolu_S")); err != nil {
			return agent.TurnResult{}, err
		}
		for rest := subText; rest != ""; {
			n := min(700, len(rest))
			for n < len(rest) && !utf8.RuneStart(rest[n]) {
				n++
			}
			if err := r.h.Emit(ctx, conversation.Delta("s-0", rest[:n]).In("toolu_S")); err != nil {
				return agent.TurnResult{}, err
			}
			rest = rest[n:]
		}
		return agent.TurnResult{}, r.h.Emit(ctx, conversation.Upsert(conversation.Block{ID: "s-0",
			Type: conversation.BlockAssistantText, Status: conversation.StatusComplete}).In("toolu_S"))
	case "open":
		if err := r.h.Emit(ctx, conversation.Upsert(conversation.Block{ID: "o-result", Type: res, ToolUseID: "o",
			Status: conversation.StatusPending})); err != nil {
			return agent.TurnResult{}, err
		}
		for i := 0; i < len(openText); i += 300 { // 300: whole runes of 3 bytes
			if err := r.h.Emit(ctx, conversation.Delta("o-result", openText[i:i+300])); err != nil {
				return agent.TurnResult{}, err
			}
		}
		return agent.TurnResult{}, nil
	case "write": // a tool call with a large input, streamed then complete
		use := conversation.Block{ID: "toolu_W", Type: conversation.BlockToolUse, ToolName: "Write", ToolUseID: "toolu_W",
			Status: conversation.StatusPending}
		if err := r.h.Emit(ctx, conversation.Upsert(use)); err != nil {
			return agent.TurnResult{}, err
		}
		use.Input, use.Status = writeInput, conversation.StatusComplete
		return agent.TurnResult{}, r.h.Emit(ctx, conversation.Upsert(use))
	case "perm": // its permission request, unanswered
		_, err := r.h.RequestPermission(ctx, agent.PermissionRequest{ToolName: "Write", Input: writeInput,
			ToolUseID: "toolu_P", Timeout: time.Millisecond})
		return agent.TurnResult{}, err
	case "shrink":
		return agent.TurnResult{}, r.h.Emit(ctx,
			conversation.Upsert(conversation.Block{ID: "x-result", Type: res, ToolUseID: "x", Status: conversation.StatusPending}),
			conversation.Delta("x-result", bigText("x", 5000)),
			conversation.Upsert(conversation.Block{ID: "x-result", Type: res, Output: shrunk, Status: conversation.StatusComplete}))
	}
	return agent.TurnResult{}, fmt.Errorf("unknown script %q", t.Content)
}

// checkTruncated requires b to hold text as the bounder keeps it: head,
// tail, size, and an artifact holding all of it (ranges included).
func checkTruncated(t *testing.T, st store.ArtifactStore, sid string, b conversation.Block, field, text string) {
	t.Helper()
	tr := b.Truncated
	if tr == nil {
		t.Fatalf("block %s is not truncated (%d bytes of text)", b.ID, len(text))
	}
	head := b.Output
	if field == "content" {
		head = b.Content
	}
	if tr.Field != field || tr.TotalBytes != int64(len(text)) {
		t.Fatalf("block %s: truncated %s/%d, want %s/%d", b.ID, tr.Field, tr.TotalBytes, field, len(text))
	}
	if len(head) > testLimit/2 || len(head) < testLimit/2-3 || !strings.HasPrefix(text, head) {
		t.Fatalf("block %s: head of %d bytes is not the text's first %d", b.ID, len(head), testLimit/2)
	}
	if len(tr.Tail) > testLimit/2 || len(tr.Tail) < min(testLimit/2-3, len(text)-len(head)) || !strings.HasSuffix(text, tr.Tail) {
		t.Fatalf("block %s: tail of %d bytes is not the text's last %d", b.ID, len(tr.Tail), testLimit/2)
	}
	if tr.ArtifactError != "" || tr.Artifact == nil {
		t.Fatalf("block %s: no artifact: %q", b.ID, tr.ArtifactError)
	}
	sum := sha256.Sum256([]byte(text))
	if tr.Artifact.SHA256 != hex.EncodeToString(sum[:]) || tr.Artifact.Size != int64(len(text)) ||
		tr.Artifact.ContentType != "text/plain; charset=utf-8" {
		t.Fatalf("block %s: artifact %+v", b.ID, tr.Artifact)
	}
	for _, r := range [][2]int64{{0, -1}, {int64(len(text)) / 3, 1000}, {int64(len(text)) - 10, -1}} {
		rc, err := st.OpenArtifact(context.Background(), sid, tr.Artifact.SHA256, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		want := text[r[0]:]
		if r[1] >= 0 {
			want = want[:r[1]]
		}
		if err != nil || string(got) != want {
			t.Fatalf("block %s: artifact range %v: %d bytes, want %d (%v)", b.ID, r, len(got), len(want), err)
		}
	}
}

// maxPayload is the largest event payload of the session's log.
func maxPayload(t *testing.T, lg *eventlog.Log, id string) int {
	t.Helper()
	evs, err := lg.Read(context.Background(), id, 0, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	m := 0
	for _, e := range evs {
		m = max(m, len(e.Payload))
	}
	return m
}

// TestBoundedTexts: block texts beyond the output limit are kept in the
// log as head + tail with their size, and stored whole as artifacts, for
// every way a text arrives: a shell command's streamed output, one
// complete upsert, deltas in a subagent's conversation, a text the turn's
// end leaves open, a truncated text replaced by a short one; texts within
// the limit pass unchanged.
func TestBoundedTexts(t *testing.T) {
	st := memstore.New()
	dataDir := t.TempDir()
	m, lg := startManager(t, session.Config{Store: st, DataDir: dataDir, OutputLimit: testLimit}, shell.Architecture{MaxOutput: -1}, emitArch{})
	ctx := context.Background()

	sh, err := m.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	turn(t, m, lg, sh.ID, "seq 1 30000")
	turn(t, m, lg, sh.ID, "echo small")
	_, state, err := m.State(ctx, sh.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seq bytes.Buffer
	for i := 1; i <= 30000; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	var results []conversation.Block
	for _, b := range state.Blocks {
		if b.Type == conversation.BlockToolResult {
			results = append(results, b)
		}
	}
	if len(results) != 2 {
		t.Fatalf("%d tool results", len(results))
	}
	checkTruncated(t, st, sh.ID, results[0], "output", seq.String())
	if results[1].Output != "small\n" || results[1].Truncated != nil {
		t.Fatalf("a small output changed: %+v", results[1])
	}
	if p := maxPayload(t, lg, sh.ID); p > 2*testLimit {
		t.Fatalf("an event of %d bytes in the log: the limit is %d", p, testLimit)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "spool", sh.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the spool is left after the turn: %v", err)
	}

	em, err := m.Create(ctx, session.CreateRequest{Architecture: "emit"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, script := range []string{"whole", "sub", "open", "shrink"} {
		turn(t, m, lg, em.ID, script)
	}
	_, state, err = m.State(ctx, em.ID)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]conversation.Block{}
	for _, b := range state.Blocks {
		byID[b.ID] = b
	}
	checkTruncated(t, st, em.ID, byID["w-result"], "output", wholeText)
	checkTruncated(t, st, em.ID, byID["o-result"], "output", openText)
	if len(state.Subagents) != 1 || len(state.Subagents[0].Blocks) != 1 {
		t.Fatalf("subagents %+v", state.Subagents)
	}
	checkTruncated(t, st, em.ID, state.Subagents[0].Blocks[0], "content", subText)
	// The short text replaced the truncated one: the block says so (its
	// whole text in the field, nothing more in the tail).
	x := byID["x-result"]
	if x.Output != shrunk || x.Truncated == nil || x.Truncated.TotalBytes != int64(len(shrunk)) || x.Truncated.Tail != "" {
		t.Fatalf("replaced text: output %q, truncated %+v", x.Output, x.Truncated)
	}
	if p := maxPayload(t, lg, em.ID); p > 2*testLimit {
		t.Fatalf("an event of %d bytes in the log: the limit is %d", p, testLimit)
	}
}

// failingArtifacts is a store whose artifact puts fail.
type failingArtifacts struct{ *memstore.Store }

func (failingArtifacts) PutArtifact(context.Context, string, conversation.ArtifactRef, io.Reader) (conversation.ArtifactRef, error) {
	return conversation.ArtifactRef{}, errors.New("disk on fire")
}

// TestBoundedTextArtifactFails: a text whose artifact cannot be stored is
// still bounded, the block says why it has no artifact, and the turn goes
// on as usual.
func TestBoundedTextArtifactFails(t *testing.T) {
	st := failingArtifacts{memstore.New()}
	m, lg := startManager(t, session.Config{Store: st, OutputLimit: testLimit}, emitArch{})
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "emit"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	turn(t, m, lg, rec.ID, "whole")
	_, state, err := m.State(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := state.Blocks[len(state.Blocks)-1]
	if b.Truncated == nil || b.Truncated.Artifact != nil || !strings.Contains(b.Truncated.ArtifactError, "disk on fire") ||
		b.Truncated.TotalBytes != int64(len(wholeText)) || len(b.Output) > testLimit/2 {
		t.Fatalf("block %+v", b)
	}
	if state.Turns[0].Status != conversation.TurnCompleted {
		t.Fatalf("turn %+v", state.Turns[0])
	}
}

// TestBoundedToolInput: a tool_use block's input longer than the limit is
// kept in the log and the state bounded (same keys, long strings cut), its
// exact JSON stored as an artifact; a permission request carries the input
// whole (a client may answer with an updatedInput derived from it).
func TestBoundedToolInput(t *testing.T) {
	st := memstore.New()
	m, lg := startManager(t, session.Config{Store: st, OutputLimit: testLimit}, emitArch{})
	ctx := context.Background()
	rec, err := m.Create(ctx, session.CreateRequest{Architecture: "emit"}, "alice")
	if err != nil {
		t.Fatal(err)
	}
	turn(t, m, lg, rec.ID, "write")
	if p := maxPayload(t, lg, rec.ID); p > testLimit+512 {
		t.Fatalf("an event of %d bytes in the log: the limit is %d", p, testLimit)
	}
	_, state, err := m.State(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var b conversation.Block
	for _, x := range state.Blocks {
		if x.ID == "toolu_W" {
			b = x
		}
	}
	var in map[string]string
	if len(b.Input) > testLimit || json.Unmarshal(b.Input, &in) != nil || len(in) != 2 || in["file_path"] != "/w/big.txt" ||
		!strings.Contains(in["content"], " bytes omitted] …\n") || b.Status != conversation.StatusComplete {
		t.Fatalf("bounded input (%d bytes): %.300s", len(b.Input), b.Input)
	}
	tr := b.Truncated
	if tr == nil || tr.Field != "input" || tr.TotalBytes != int64(len(writeInput)) || tr.Tail != "" || tr.Artifact == nil ||
		tr.Artifact.ContentType != "application/json" || tr.Artifact.Size != int64(len(writeInput)) {
		t.Fatalf("truncated %+v", tr)
	}
	rc, err := st.OpenArtifact(ctx, rec.ID, tr.Artifact.SHA256, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, writeInput) {
		t.Fatalf("artifact of %d bytes differs from the input's %d", len(got), len(writeInput))
	}
	if raw, _ := json.Marshal(state); len(raw) > 4*testLimit {
		t.Fatalf("a state of %d bytes", len(raw))
	}

	turn(t, m, lg, rec.ID, "perm")
	evs, err := lg.Read(ctx, rec.ID, 0, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	var req conversation.PermissionRequested
	for _, e := range evs {
		if e.Type == conversation.TypePermissionRequest {
			if err := json.Unmarshal(e.Payload, &req); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bytes.Equal(req.Input, writeInput) {
		t.Fatalf("the permission request's input: %d bytes, want the %d of the tool's", len(req.Input), len(writeInput))
	}
}
