package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
)

// chunkProc is a sandbox.Process that delivers given chunks and exits.
type chunkProc struct{ out chan sandbox.Chunk }

func (c *chunkProc) Tag() string                     { return "t" }
func (c *chunkProc) Output() <-chan sandbox.Chunk    { return c.out }
func (c *chunkProc) Write(p []byte) (int, error)     { return len(p), nil }
func (c *chunkProc) CloseStdin() error               { return nil }
func (c *chunkProc) Signal(os.Signal) error          { return nil }
func (c *chunkProc) Kill() error                     { return nil }
func (c *chunkProc) Resize(sandbox.WindowSize) error { return nil }
func (c *chunkProc) Wait(context.Context) (sandbox.ExitStatus, error) {
	return sandbox.ExitStatus{}, nil
}

// FuzzPipeLines: however the output is cut into chunks (and from whatever
// offset a re-attach starts), the pipe gives the lines of the stream with
// offsets that tile it exactly: each line starts where the last ended and
// spans its bytes and newline.
func FuzzPipeLines(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\nccc"), []byte{1, 3, 2}, uint16(0))
	f.Add([]byte("{\"type\":\"x\"}\n{\"type\":\"y\"}\n"), []byte{0, 5}, uint16(1000))
	f.Add([]byte(""), []byte{}, uint16(7))
	f.Fuzz(func(t *testing.T, data, cuts []byte, from16 uint16) {
		from := int64(from16)
		proc := &chunkProc{out: make(chan sandbox.Chunk, len(data)+1)}
		off, rest := from, data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) && int(cuts[i]) > 0 && int(cuts[i]) < n {
				n = int(cuts[i])
			}
			proc.out <- sandbox.Chunk{Stream: sandbox.Stdout, Data: bytes.Clone(rest[:n]), Offset: off}
			off += int64(n)
			rest = rest[n:]
		}
		proc.out <- sandbox.Chunk{Stream: sandbox.Stderr, Data: []byte("err"), Offset: 0}
		close(proc.out)
		pr := newPipe("cli", proc, from)
		var got []cliLine
		for l := range pr.Lines() {
			got = append(got, l)
		}
		<-pr.Done()
		if pr.Gap() != nil || pr.Stderr() != "err" {
			t.Fatalf("gap %v stderr %q", pr.Gap(), pr.Stderr())
		}
		want := strings.SplitAfter(string(data), "\n")
		if len(want) > 0 && want[len(want)-1] == "" {
			want = want[:len(want)-1]
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines, want %d (%q)", len(got), len(want), want)
		}
		pos := from
		for i, l := range got {
			raw := want[i]
			body := strings.TrimRight(strings.TrimSuffix(raw, "\n"), "\r")
			if !strings.HasSuffix(raw, "\n") {
				body = strings.TrimSuffix(raw, "\n")
			}
			if string(l.Data) != body || l.Start != pos || l.End != pos+int64(len(raw)) {
				t.Fatalf("line %d: %q [%d,%d), want %q [%d,%d)", i, l.Data, l.Start, l.End, body, pos, pos+int64(len(raw)))
			}
			pos = l.End
		}
	})
}

// TestPipeReportsAGap: output that starts after the offset asked for is a
// gap; the pipe kills the process and delivers no line.
func TestPipeReportsAGap(t *testing.T) {
	proc := &chunkProc{out: make(chan sandbox.Chunk, 2)}
	proc.out <- sandbox.Chunk{Stream: sandbox.Stdout, Data: []byte("late\n"), Offset: 100}
	close(proc.out)
	pr := newPipe("cli", proc, 40)
	for l := range pr.Lines() {
		t.Fatalf("line %q after a gap", l.Data)
	}
	if err := pr.ExitError(); err == nil || !strings.Contains(err.Error(), "bytes 40 to 100") {
		t.Fatalf("exit error %v", err)
	}
}

// TestReplayFilterDecidesPendingEvents: the filter's rules on synthetic
// batches: events up to the checkpoint are dropped; events that are not
// evident wait for the next evident one and go with it; at the end they
// are new.
func TestReplayFilterDecidesPendingEvents(t *testing.T) {
	st := conversation.State{Blocks: []conversation.Block{
		{ID: "q1-user", Type: conversation.BlockUserMessage, Metadata: map[string]any{checkpointKey: map[string]any{"events": float64(2)}}},
		{ID: "a", Type: conversation.BlockAssistantText, Status: conversation.StatusPending, Content: "Hel"},
	}}
	k := func(id string) blockKey { return blockKey{conversation.MainConversation, id} }
	ev := func(seq int, evident bool, id string, content int, rank int8) outEvent {
		return outEvent{seq: seq, evident: evident, isBlock: id != "", key: k(id), after: blockFacts{content: content, rank: rank}}
	}
	f := newReplayFilter(st, "q1")
	if f.stored != 2 {
		t.Fatalf("checkpoint %d", f.stored)
	}
	batch := []outEvent{
		ev(1, false, "", 0, 0), // stored (checkpoint)
		ev(2, true, "a", 0, 0), // stored (checkpoint)
		ev(3, false, "", 0, 0), // pending, then stored: the next is in the log
		ev(4, true, "a", 3, 0), // in the log ("Hel")
		ev(5, false, "", 0, 0), // pending, then new
		ev(6, true, "a", 5, 0), // not in the log ("Hello")
		ev(7, false, "", 0, 0), // live
		{poll: true, isBlock: true, key: k("a"), after: blockFacts{content: 2}}, // covered
		{poll: true, isBlock: true, key: k("b")},                                // new block
	}
	out := f.pass(batch, false)
	var seqs []int
	polls := 0
	for _, o := range out {
		if o.poll {
			polls++
			continue
		}
		seqs = append(seqs, o.seq)
	}
	if !f.live || len(seqs) != 3 || seqs[0] != 5 || seqs[1] != 6 || seqs[2] != 7 || polls != 1 {
		t.Fatalf("passed %v (%d polled), live %v", seqs, polls, f.live)
	}
	// Events still undecided at the turn's end were never stored.
	f = newReplayFilter(st, "q1")
	out = f.pass([]outEvent{ev(3, false, "", 0, 0), ev(4, false, "", 0, 0)}, true)
	if len(out) != 2 || !f.live {
		t.Fatalf("final pass %+v", out)
	}
}

// TestPermAnswerLines: an answer recorded in the turn mark gives back the
// control response that was sent, with the request's input unless a client
// changed it, and survives the agent state's JSON.
func TestPermAnswerLines(t *testing.T) {
	in := json.RawMessage(`{"command":"ls"}`)
	for _, c := range []struct {
		a    permAnswer
		want string
	}{
		{permAnswer{Behavior: "allow"}, `{"behavior":"allow","updatedInput":{"command":"ls"}}`},
		{permAnswer{Behavior: "allow", UpdatedInput: json.RawMessage(`{"command":"pwd"}`)}, `{"behavior":"allow","updatedInput":{"command":"pwd"}}`},
		{permAnswer{Behavior: "deny", Message: "no"}, `{"behavior":"deny","message":"no"}`},
		{permAnswer{Error: "broken"}, `"error":"broken"`},
	} {
		raw, _ := json.Marshal(map[string]permAnswer{"r": c.a})
		var back map[string]permAnswer
		if err := json.Unmarshal(raw, &back); err != nil || back["r"].withdrawn() {
			t.Fatalf("%+v: %s %v", c.a, raw, err)
		}
		line, err := back["r"].line("req-1", in)
		if err != nil || !strings.Contains(string(line), c.want) || !strings.Contains(string(line), `"request_id":"req-1"`) || !json.Valid(bytes.TrimSpace(line)) {
			t.Errorf("%+v: line %s %v, want %s", c.a, line, err, c.want)
		}
	}
	if !(permAnswer{}).withdrawn() {
		t.Error("the zero answer is a withdrawal")
	}
}
