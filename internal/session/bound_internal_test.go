package session

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
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
	// The interval doubles with each progress upsert, up to boundNoteMax.
	big := strings.Repeat("d", boundNoteBytes)
	now = now.Add(-9 * boundNoteEvery) // 1s after the last upsert: 2s needed now
	if out := emit(conversation.Delta("r", big)); len(out) != 0 {
		t.Fatal("a second progress upsert after 1s")
	}
	now = now.Add(boundNoteEvery)
	if out := emit(conversation.Delta("r", big)); len(out) != 1 {
		t.Fatal("no second progress upsert after 2s")
	}
	for range 10 {
		now = now.Add(boundNoteMax)
		if out := emit(conversation.Delta("r", big)); len(out) != 1 {
			t.Fatalf("no progress upsert after %s", boundNoteMax)
		}
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

// FuzzBounder: whatever the deltas and upserts (texts cut anywhere between
// runes, replaced, completed), the log's form of a block is its full text
// when within the limit, and otherwise the text's head, its tail, its
// length and an artifact holding all of it; no event of the log carries
// more than the limit's worth of text.
func FuzzBounder(f *testing.F) {
	f.Add([]byte{0, 200, 0, 200, 0, 200, 3}, uint16(64))
	f.Add([]byte{1, 250, 0, 3, 2, 0, 9, 3}, uint16(32))
	f.Add([]byte{0, 5, 1, 4, 0, 100, 0, 100, 1, 3, 3}, uint16(16))
	alphabet := []string{"a", "b", "\n", "é", "€", "😀"}
	f.Fuzz(func(t *testing.T, ops []byte, limit uint16) {
		lim := int(limit%512) + 8
		arts := memstore.New()
		bd := newBounder(lim, t.TempDir(), "s", arts, slog.Default())
		r := conversation.NewReducer()
		bd.lookup = func(_ context.Context, conv, id string) (conversation.Block, bool) { return r.Block(conv, id) }
		if err := arts.CreateSession(context.Background(), store.Session{ID: "s"}); err != nil {
			t.Fatal(err)
		}
		apply := func(evs ...conversation.Event) {
			bd.mu.Lock()
			out := bd.boundLocked(context.Background(), evs)
			bd.mu.Unlock()
			for _, e := range out {
				if len(e.Payload) > 4*lim+1024 {
					t.Fatalf("an event of %d bytes (limit %d)", len(e.Payload), lim)
				}
				if err := r.Apply(e); err != nil {
					t.Fatal(err)
				}
			}
		}
		text := func(n byte, seed int) string {
			var b strings.Builder
			for i := range int(n) {
				b.WriteString(alphabet[(seed+i*7+int(n))%len(alphabet)])
			}
			return b.String()
		}
		res := conversation.BlockToolResult
		apply(conversation.Upsert(conversation.Block{ID: "r", Type: res, Status: conversation.StatusPending}))
		// shortHead: a short text replaced a truncated one, whose field
		// then holds all of it, and stays the head as deltas follow.
		full, everTruncated, shortHead := "", false, false
		for i := 0; i+1 < len(ops); i += 2 {
			s := text(ops[i+1], i)
			switch ops[i] % 4 {
			case 0:
				if s == "" {
					continue
				}
				apply(conversation.Delta("r", s))
				full += s
			case 1:
				if s == "" {
					continue
				}
				apply(conversation.Upsert(conversation.Block{ID: "r", Type: res, Output: s}))
				full = s
				shortHead = everTruncated && len(s) <= lim
			case 2:
				apply(conversation.Upsert(conversation.Block{ID: "r", Type: res, DurationMs: int64(ops[i+1]) + 1}))
			case 3: // completed, then opened again: its text goes on
				apply(conversation.Upsert(conversation.Block{ID: "r", Type: res, Status: conversation.StatusComplete}))
				apply(conversation.Upsert(conversation.Block{ID: "r", Type: res, Status: conversation.StatusPending}))
			}
			everTruncated = everTruncated || len(full) > lim
		}
		apply(conversation.Upsert(conversation.Block{ID: "r", Type: res, Status: conversation.StatusComplete}))
		b, _ := r.Block("", "r")
		if !everTruncated {
			if b.Output != full || b.Truncated != nil {
				t.Fatalf("within the limit: output %q truncated %+v, want %q", b.Output, b.Truncated, full)
			}
			return
		}
		tr := b.Truncated
		if tr == nil || tr.TotalBytes != int64(len(full)) || !strings.HasPrefix(full, b.Output) ||
			!strings.HasSuffix(full, tr.Tail) || len(b.Output) > max(lim/2, len(full)) || len(tr.Tail) > lim/2 ||
			len(b.Output)+len(tr.Tail) > len(full) || tr.Artifact == nil {
			t.Fatalf("truncated: output %q, %+v; full %d bytes %q", b.Output, tr, len(full), full)
		}
		if len(full) > lim && ((!shortHead && len(b.Output) < lim/2-3) || len(tr.Tail) < min(lim/2-3, len(full)-len(b.Output))) {
			t.Fatalf("head %d / tail %d bytes of %d (limit %d)", len(b.Output), len(tr.Tail), len(full), lim)
		}
		rc, err := arts.OpenArtifact(context.Background(), "s", tr.Artifact.SHA256, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if string(got) != full {
			t.Fatalf("artifact %q, want %q", got, full)
		}
	})
}
