package agentproc_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/sandbox"
)

// scripted is a sandbox.Process whose output is fed by the test: what a
// re-attached executor process delivers, overlaps and gaps included.
type scripted struct {
	out    chan sandbox.Chunk
	mu     sync.Mutex
	killed bool
	once   sync.Once
}

func newScripted() *scripted { return &scripted{out: make(chan sandbox.Chunk)} }

func (s *scripted) Tag() string                     { return "t1" }
func (s *scripted) Output() <-chan sandbox.Chunk    { return s.out }
func (s *scripted) Write(p []byte) (int, error)     { return len(p), nil }
func (s *scripted) CloseStdin() error               { return nil }
func (s *scripted) Signal(os.Signal) error          { return nil }
func (s *scripted) Resize(sandbox.WindowSize) error { return nil }
func (s *scripted) Wait(context.Context) (sandbox.ExitStatus, error) {
	return sandbox.ExitStatus{}, nil
}
func (s *scripted) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killed = true
	return nil
}
func (s *scripted) wasKilled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killed
}
func (s *scripted) send(off int64, data string) {
	s.out <- sandbox.Chunk{Stream: sandbox.Stdout, Offset: off, Data: []byte(data)}
}
func (s *scripted) end() { s.once.Do(func() { close(s.out) }) }

func collect(t *testing.T, pr *agentproc.Proc) []agentproc.Line {
	t.Helper()
	var got []agentproc.Line
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-pr.Lines():
			if !ok {
				return got
			}
			got = append(got, l)
		case <-timeout:
			t.Fatal("lines never closed")
		}
	}
}

type span struct {
	data       string
	start, end int64
}

func spans(ls []agentproc.Line) []span {
	var out []span
	for _, l := range ls {
		out = append(out, span{string(l.Data), l.Start, l.End})
	}
	return out
}

// A re-attach from byte 4 gets a chunk starting at 0 (an overlap the
// backend did not trim): the bytes before 4 are skipped and the offsets
// of the lines are those of the stream.
func TestExactSkipsOverlapAndReportsOffsets(t *testing.T) {
	s := newScripted()
	pr := agentproc.New("cli", s, 4)
	go func() {
		s.send(0, "old\nab")
		s.send(6, "c\nlast")
		s.end()
	}()
	got := spans(collect(t, pr))
	want := []span{{"abc", 4, 8}, {"last", 8, 12}}
	if !slices.Equal(got, want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	<-pr.Done()
	if pr.Gap() != nil || s.wasKilled() {
		t.Fatalf("gap %v killed %v", pr.Gap(), s.wasKilled())
	}
}

// Output that starts after the expected byte is a gap: the process is
// killed, Gap wraps ErrOutputGap, and nothing after the gap is delivered
// (not even an unterminated tail).
func TestExactGapStopsDelivery(t *testing.T) {
	s := newScripted()
	pr := agentproc.New("cli", s, 0)
	go func() {
		s.send(0, "one\n")
		s.send(10, "after gap\ntail")
		s.end()
	}()
	got := spans(collect(t, pr))
	if want := []span{{"one", 0, 4}}; !slices.Equal(got, want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	<-pr.Done()
	if !errors.Is(pr.Gap(), agentproc.ErrOutputGap) || !s.wasKilled() {
		t.Fatalf("gap %v killed %v", pr.Gap(), s.wasKilled())
	}
}

// Abandon stops delivery without closing Lines; Done closes once the
// sandbox stops delivering this view (its output drained, no Wait).
func TestAbandonDrainsWithoutClosingLines(t *testing.T) {
	s := newScripted()
	pr := agentproc.New("cli", s, 0)
	s.send(0, "first\n")
	if l := <-pr.Lines(); string(l.Data) != "first" {
		t.Fatalf("line %q", l.Data)
	}
	pr.Abandon()
	pr.Abandon() // idempotent
	// The sandbox keeps delivering; the pump drains it.
	s.send(6, "second\nthird\n")
	select {
	case <-pr.Done():
		t.Fatal("done before the sandbox stopped delivering")
	case <-time.After(20 * time.Millisecond):
	}
	s.end()
	select {
	case <-pr.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done after the output ended")
	}
	select {
	case l, ok := <-pr.Lines():
		t.Fatalf("abandoned proc delivered %q (open %v)", l.Data, ok)
	default:
	}
	if s.wasKilled() {
		t.Fatal("abandon killed the process")
	}
}

// Start (not exact) takes offsets as they come: a jump is no gap.
func TestStartNotExactIgnoresOffsets(t *testing.T) {
	e := env(t)
	pr, err := agentproc.Start(context.Background(), e, "sh", sandbox.Cmd{Argv: []string{"sh", "-c", "echo a; echo bb"}})
	if err != nil {
		t.Fatal(err)
	}
	got := spans(collect(t, pr))
	if want := []span{{"a", 0, 2}, {"bb", 2, 5}}; !slices.Equal(got, want) {
		t.Fatalf("lines %+v, want %+v", got, want)
	}
	if st, err := pr.Exit(); err != nil || st.Code != 0 || pr.Gap() != nil {
		t.Fatalf("exit %+v %v gap %v", st, err, pr.Gap())
	}
}
