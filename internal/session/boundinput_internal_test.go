package session

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// objectKeys returns the keys of a JSON object in their order.
func objectKeys(t *testing.T, raw []byte) []string {
	t.Helper()
	v, err := parseJSON(raw)
	if err != nil || v.kind != 'o' {
		t.Fatalf("not a JSON object (%v): %.200s", err, raw)
	}
	return v.keys
}

// TestBoundJSON: an input too long is cut to the limit keeping its shape
// as far as it can: long strings first (head and tail around a marker
// counting the bytes left out), then an object's values, then the whole.
func TestBoundJSON(t *testing.T) {
	const limit = 4096
	big := strings.Repeat("0123456789abcdef<&>\"é\n", 50_000) // escapes of every kind
	write, _ := json.Marshal(map[string]any{"file_path": "/w/a.txt", "content": big})
	out, err := boundJSON(write, limit)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if len(out) > limit || json.Unmarshal(out, &got) != nil || got["file_path"] != "/w/a.txt" ||
		!slices.Equal(objectKeys(t, out), objectKeys(t, write)) {
		t.Fatalf("bounded Write input (%d bytes): %.300s", len(out), out)
	}
	c := got["content"]
	head, rest, ok := strings.Cut(c, "\n… [")
	n, tail, ok2 := strings.Cut(rest, " bytes omitted] …\n")
	if !ok || !ok2 || !strings.HasPrefix(big, head) || !strings.HasSuffix(big, tail) || len(head) < limit/4 ||
		len(tail) < limit/4 || n != itoa(len(big)-len(head)-len(tail)) {
		t.Fatalf("content %q", c)
	}
	if len(out) < limit-64 {
		t.Fatalf("%d bytes of %d used", len(out), limit)
	}

	// Several strings: the longest are cut to one length, short ones kept.
	many, _ := json.Marshal(map[string]any{"a": strings.Repeat("a", 3000), "b": strings.Repeat("b", 9000),
		"c": []string{strings.Repeat("c", 5000), "short"}})
	out, err = boundJSON(many, limit)
	var m struct {
		A, B string
		C    []string
	}
	if err != nil || len(out) > limit || json.Unmarshal(out, &m) != nil || len(m.C) != 2 || m.C[1] != "short" ||
		!strings.Contains(m.A, "omitted") || !strings.Contains(m.B, "omitted") || !strings.Contains(m.C[0], "omitted") {
		t.Fatalf("several strings: %s", out)
	}
	if d := len(m.B) - len(m.A); d < -8 || d > 8 {
		t.Fatalf("strings cut to %d and %d bytes", len(m.A), len(m.B))
	}

	// Numbers only: the object's large value becomes a string of its JSON.
	nums := make([]int, 20_000)
	for i := range nums {
		nums[i] = i
	}
	numIn, _ := json.Marshal(map[string]any{"path": "x", "numbers": nums})
	out, err = boundJSON(numIn, limit)
	var nm map[string]string
	if err != nil || len(out) > limit || json.Unmarshal(out, &nm) != nil || nm["path"] != "x" ||
		!strings.HasPrefix(nm["numbers"], "[0,1,2,3,") || !strings.HasSuffix(nm["numbers"], ",19998,19999]") ||
		!strings.Contains(nm["numbers"], "bytes omitted") {
		t.Fatalf("numbers: %.300s", out)
	}

	// No shape to keep (an array; too many keys): {"truncatedInput": ...}.
	arr, _ := json.Marshal(nums)
	keys := map[string]int{}
	for i := range 5000 {
		keys["key"+itoa(i)] = i
	}
	manyKeys, _ := json.Marshal(keys)
	for _, in := range [][]byte{arr, manyKeys} {
		out, err = boundJSON(in, limit)
		var fb map[string]string
		if err != nil || len(out) > limit || json.Unmarshal(out, &fb) != nil || len(fb) != 1 ||
			!strings.HasPrefix(fb[fallbackKey], string(in[:100])) || !strings.HasSuffix(fb[fallbackKey], string(in[len(in)-100:])) {
			t.Fatalf("fallback: %.300s", out)
		}
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// FuzzBoundJSON: whatever the JSON, the bounded form is JSON within the
// limit.
func FuzzBoundJSON(f *testing.F) {
	f.Add(`{"a":"`+strings.Repeat("x<é", 300)+`","b":[1,2,3]}`, uint16(200))
	f.Add(`[`+strings.Repeat(`"\u2028",`, 200)+`1]`, uint16(100))
	f.Add(`{"k":{"n":[`+strings.Repeat("12345,", 300)+`0]}}`, uint16(150))
	f.Fuzz(func(t *testing.T, in string, lim uint16) {
		limit := int(lim%2048) + 64
		if !json.Valid([]byte(in)) || len(in) <= limit {
			return
		}
		var compact bytes.Buffer
		_ = json.Compact(&compact, []byte(in))
		out, err := boundJSON(compact.Bytes(), limit)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(out) || len(out) > limit {
			t.Fatalf("%d bytes (limit %d): %s", len(out), limit, out)
		}
	})
}

// TestBounderInput: a tool_use upsert whose input is too long is stored
// bounded with its full input as an artifact; the same input again is not
// stored twice; a new short input says nothing is omitted; a restarted
// bounder takes the bounded input for what it is (not a text truncation,
// not a short input) and does not bound it again.
func TestBounderInput(t *testing.T) {
	const limit = 2048
	ctx := context.Background()
	arts := memstore.New()
	if err := arts.CreateSession(ctx, store.Session{ID: "s"}); err != nil {
		t.Fatal(err)
	}
	r := conversation.NewReducer()
	newBd := func() *bounder {
		bd := newBounder(limit, t.TempDir(), "s", arts, slog.Default())
		bd.lookup = func(_ context.Context, conv, id string) (conversation.Block, bool) { return r.Block(conv, id) }
		bd.scan = func(_ context.Context, f func(string, conversation.Block)) error {
			for conv, b := range r.Blocks() {
				f(conv, b)
			}
			return nil
		}
		return bd
	}
	apply := func(bd *bounder, e conversation.Event) conversation.Event {
		t.Helper()
		bd.mu.Lock()
		out := bd.boundLocked(ctx, []conversation.Event{e})
		bd.mu.Unlock()
		if len(out) != 1 {
			t.Fatalf("%d events", len(out))
		}
		if err := r.Apply(out[0]); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	input, _ := json.Marshal(map[string]string{"file_path": "/w/big", "content": strings.Repeat("line\n", 200_000)})
	use := func(in []byte, st conversation.BlockStatus) conversation.Event {
		return conversation.Upsert(conversation.Block{ID: "toolu_1", Type: conversation.BlockToolUse, ToolName: "Write",
			ToolUseID: "toolu_1", Input: in, Status: st})
	}
	bd := newBd()
	small := use([]byte(`{"file_path":"/w/small"}`), conversation.StatusPending)
	if out := apply(bd, small); !bytes.Equal(out.Payload, small.Payload) {
		t.Fatalf("an input within the limit changed: %s", out.Payload)
	}
	out := apply(bd, use(input, conversation.StatusPending))
	if len(out.Payload) > limit+512 {
		t.Fatalf("an upsert of %d bytes (limit %d)", len(out.Payload), limit)
	}
	b, _ := r.Block("", "toolu_1")
	tr := b.Truncated
	if tr == nil || tr.Field != "input" || tr.TotalBytes != int64(len(input)) || tr.Tail != "" || tr.Artifact == nil ||
		tr.Artifact.ContentType != "application/json" || len(b.Input) > limit || b.Content != "" {
		t.Fatalf("bounded block: %+v", b)
	}
	rc, err := arts.OpenArtifact(ctx, "s", tr.Artifact.SHA256, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, input) {
		t.Fatalf("artifact of %d bytes, want the input's %d", len(got), len(input))
	}
	bounded := append([]byte(nil), b.Input...)

	// The same input again (the complete line after the stream's): the
	// same artifact, not stored again.
	bd.arts = nil
	apply(bd, use(input, conversation.StatusComplete))
	if b, _ = r.Block("", "toolu_1"); b.Truncated.Artifact == nil || b.Truncated.Artifact.SHA256 != tr.Artifact.SHA256 ||
		!bytes.Equal(b.Input, bounded) {
		t.Fatalf("the same input again: %+v", b.Truncated)
	}
	bd.arts = arts

	// A restarted server: its bounder scans the log. The block's bounded
	// input sent again passes unchanged; taken up again (pending, then
	// complete) it gets no text truncation; the full input again is
	// bounded to the same form with the same artifact.
	bd = newBd()
	apply(bd, use(bounded, conversation.StatusPending))
	apply(bd, conversation.Upsert(conversation.Block{ID: "toolu_1", Type: conversation.BlockToolUse, Status: conversation.StatusComplete}))
	b, _ = r.Block("", "toolu_1")
	if !bytes.Equal(b.Input, bounded) || b.Truncated == nil || *b.Truncated.Artifact != *tr.Artifact ||
		b.Truncated.Field != "input" || b.Truncated.ArtifactError != "" || len(bd.open) != 0 {
		t.Fatalf("after a restart: %+v, %s", b.Truncated, b.Input)
	}
	bd = newBd()
	apply(bd, use(input, conversation.StatusComplete))
	if b, _ = r.Block("", "toolu_1"); !bytes.Equal(b.Input, bounded) || *b.Truncated.Artifact != *tr.Artifact {
		t.Fatalf("bounded again after a restart: %+v", b.Truncated)
	}

	// A short input replacing the bounded one: nothing omitted any more.
	apply(bd, small)
	if b, _ = r.Block("", "toolu_1"); string(b.Input) != `{"file_path":"/w/small"}` || b.Truncated == nil ||
		b.Truncated.Artifact != nil || b.Truncated.TotalBytes != int64(len(b.Input)) {
		t.Fatalf("replaced by a short input: %+v", b.Truncated)
	}

	// Without an artifact store: bounded all the same, and it says why.
	bd = newBd()
	bd.arts = nil
	apply(bd, conversation.Upsert(conversation.Block{ID: "toolu_2", Type: conversation.BlockToolUse, Input: input}))
	if b, _ = r.Block("", "toolu_2"); b.Truncated == nil || b.Truncated.ArtifactError != "the store keeps no artifacts" ||
		len(b.Input) > limit {
		t.Fatalf("no artifact store: %+v", b.Truncated)
	}

	// Permission requests are no block upserts: their input is kept whole.
	perm := conversation.NewEvent(conversation.PermissionRequested{RequestID: "p", ToolName: "Write", Input: input})
	bd.mu.Lock()
	pout := bd.boundLocked(ctx, []conversation.Event{perm})
	bd.mu.Unlock()
	if len(pout) != 1 || !bytes.Equal(pout[0].Payload, perm.Payload) {
		t.Fatal("a permission request's input changed")
	}
}

// BenchmarkBoundJSON: a Write tool's input with a 5 MB content, bounded to
// the default limit.
func BenchmarkBoundJSON(b *testing.B) {
	in, _ := json.Marshal(map[string]string{"file_path": "/w/big.txt", "content": strings.Repeat("some line of a file <é>\n", 5<<20/24)})
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := boundJSON(in, DefaultOutputLimit); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEncodedLen: the length computed is the encoding's.
func TestEncodedLen(t *testing.T) {
	for _, in := range []string{`{"a":"x<>&\u2028\"\\\n\t\b\f\u0001é😀","b":[1,2.5e3,true,null,{}],"<k>":[]}`, `"\u00ff"`, `[]`} {
		v, err := parseJSON([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if enc := v.encode(nil); len(enc) != v.encodedLen() {
			t.Fatalf("%s: encoded %d bytes (%s), computed %d", in, len(enc), enc, v.encodedLen())
		}
	}
}
