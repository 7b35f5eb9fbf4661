package session

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

// TestBounderProgress: past the limit, deltas leave the log; a progress
// upsert comes once at least boundNoteBytes more text came and
// boundNoteEvery passed, never more often; its tail is the text's last
// bytes.
func TestBounderProgress(t *testing.T) {
	now := time.Unix(0, 0)
	bd := newBounder(1024, t.TempDir(), "s", nil, slog.Default())
	bd.now = func() time.Time { return now }
	bd.lookup = func(context.Context, string, string) (conversation.Block, bool) { return conversation.Block{}, false }
	ctx := context.Background()
	emit := func(evs ...conversation.Event) []conversation.Event {
		t.Helper()
		bd.mu.Lock()
		defer bd.mu.Unlock()
		return bd.boundLocked(ctx, evs)
	}
	open := conversation.Upsert(conversation.Block{ID: "r", Type: conversation.BlockToolResult, Status: conversation.StatusPending})
	if out := emit(open); len(out) != 1 || string(out[0].Payload) != string(open.Payload) {
		t.Fatalf("an upsert within the limit changed: %s", out[0].Payload)
	}
	small := conversation.Delta("r", strings.Repeat("a", 1000))
	if out := emit(small); len(out) != 1 || string(out[0].Payload) != string(small.Payload) {
		t.Fatal("a delta within the limit changed")
	}
	// Crossing: an upsert with the head and the truncation.
	out := emit(conversation.Delta("r", strings.Repeat("b", 100)))
	var p struct{ Block conversation.Block }
	if len(out) != 1 || out[0].Type != conversation.TypeBlockUpsert || json.Unmarshal(out[0].Payload, &p) != nil ||
		p.Block.Output != strings.Repeat("a", 512) || p.Block.Truncated.TotalBytes != 1100 ||
		p.Block.Truncated.Tail != strings.Repeat("a", 412)+strings.Repeat("b", 100) {
		t.Fatalf("crossing: %s", out[0].Payload)
	}
	chunk := strings.Repeat("c", 16<<10)
	for range 4 { // 64 KiB more, but no time passed
		if out := emit(conversation.Delta("r", chunk)); len(out) != 0 {
			t.Fatalf("a delta past the limit reached the log: %s", out[0].Payload)
		}
	}
	now = now.Add(boundNoteEvery)
	p.Block = conversation.Block{}
	out = emit(conversation.Delta("r", "the end"))
	if len(out) != 1 || json.Unmarshal(out[0].Payload, &p) != nil || p.Block.Output != "" ||
		p.Block.Truncated.TotalBytes != 1100+4*16<<10+7 || !strings.HasSuffix(p.Block.Truncated.Tail, "cthe end") ||
		len(p.Block.Truncated.Tail) != 512 {
		t.Fatalf("progress: %d events, %s", len(out), out[0].Payload)
	}
	now = now.Add(10 * boundNoteEvery)
	if out := emit(conversation.Delta("r", "x")); len(out) != 0 {
		t.Fatal("a progress upsert for 1 byte more")
	}
	// No artifact store: the completing upsert says so.
	out = emit(conversation.Upsert(conversation.Block{ID: "r", Type: conversation.BlockToolResult, Status: conversation.StatusComplete}))
	if len(out) != 1 || json.Unmarshal(out[0].Payload, &p) != nil || p.Block.Truncated == nil ||
		p.Block.Truncated.ArtifactError != "the store keeps no artifacts" || p.Block.Status != conversation.StatusComplete {
		t.Fatalf("completion: %s", out[0].Payload)
	}
	if len(bd.open) != 0 {
		t.Fatalf("still following %d blocks", len(bd.open))
	}
}
