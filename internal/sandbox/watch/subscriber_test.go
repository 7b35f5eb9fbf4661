package watch

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ev(op sandbox.Op, p string, size int64) sandbox.FileEvent {
	return sandbox.FileEvent{Op: op, Path: p, Size: size}
}

// A consumer that doesn't read: the channel buffer fills, then events
// coalesce per path in order of first arrival, and nothing is lost.
func TestSubscriberCoalescesWhenFull(t *testing.T) {
	s := newSubscriber(2)
	defer s.close()
	s.push(ev(sandbox.Created, "a", 1)) // into the buffer
	s.push(ev(sandbox.Created, "b", 1)) // into the buffer
	// The forwarder may hold one queued event in flight; everything after
	// the buffer is merged per path.
	for i := int64(2); i <= 100; i++ {
		s.push(ev(sandbox.Modified, "c", i))
	}
	s.push(ev(sandbox.Created, "d", 1))
	s.push(ev(sandbox.Deleted, "d", 0)) // created+deleted: nothing to say
	s.push(ev(sandbox.Created, "e", 5))
	s.push(ev(sandbox.Modified, "e", 6)) // created+modified: created
	s.push(ev(sandbox.Deleted, "f", 0))
	s.push(ev(sandbox.Created, "f", 7)) // deleted+created: modified

	// Only the first queued event (a "c") can be in flight, so "c" may
	// arrive in two parts depending on scheduling; the last must be the
	// latest.
	var got []sandbox.FileEvent
	for len(got) == 0 || got[len(got)-1].Path != "f" {
		got = append(got, <-s.out)
	}
	var cs []sandbox.FileEvent
	var rest []sandbox.FileEvent
	for _, e := range got {
		if e.Path == "c" {
			cs = append(cs, e)
		} else {
			rest = append(rest, e)
		}
	}
	if len(cs) == 0 || len(cs) > 2 || cs[len(cs)-1] != ev(sandbox.Modified, "c", 100) {
		t.Fatalf("c events = %+v", cs)
	}
	want := []sandbox.FileEvent{
		ev(sandbox.Created, "a", 1),
		ev(sandbox.Created, "b", 1),
		ev(sandbox.Created, "e", 6),
		ev(sandbox.Modified, "f", 7),
	}
	if len(rest) != len(want) {
		t.Fatalf("events = %+v, want %+v", rest, want)
	}
	for i := range want {
		if rest[i] != want[i] {
			t.Fatalf("event %d = %+v, want %+v", i, rest[i], want[i])
		}
	}
	if got[2].Path != "c" {
		t.Fatalf("order lost: %+v", got)
	}
	select {
	case e := <-s.out:
		t.Fatalf("unexpected extra event %+v", e)
	default:
	}
}

func TestMerge(t *testing.T) {
	cases := []struct {
		prev, next sandbox.Op
		want       sandbox.Op
		keep       bool
	}{
		{sandbox.Created, sandbox.Modified, sandbox.Created, true},
		{sandbox.Created, sandbox.Deleted, "", false},
		{sandbox.Modified, sandbox.Modified, sandbox.Modified, true},
		{sandbox.Modified, sandbox.Deleted, sandbox.Deleted, true},
		{sandbox.Modified, sandbox.Created, sandbox.Modified, true},
		{sandbox.Deleted, sandbox.Created, sandbox.Modified, true},
		{sandbox.Deleted, sandbox.Deleted, sandbox.Deleted, true},
	}
	for _, c := range cases {
		got, keep := merge(ev(c.prev, "p", 1), ev(c.next, "p", 2))
		if keep != c.keep || (keep && got.Op != c.want) {
			t.Errorf("merge(%s,%s) = %s,%v; want %s,%v", c.prev, c.next, got.Op, keep, c.want, c.keep)
		}
	}
}

func TestSubscriberCloseDiscards(t *testing.T) {
	s := newSubscriber(1)
	s.push(ev(sandbox.Created, "a", 1))
	s.push(ev(sandbox.Created, "b", 1))
	s.close()
	s.push(ev(sandbox.Created, "c", 1)) // after close: ignored, no panic
	n := 0
	for range s.out {
		n++
	}
	if n > 2 {
		t.Fatalf("got %d events after close", n)
	}
}

// A Sync marker keeps its place in a backed-up queue, and no later change
// is merged into an entry before it: what follows the marker stays after.
func TestSubscriberMarkerIsAFence(t *testing.T) {
	s := newSubscriber(1)
	defer s.close()
	s.push(ev(sandbox.Created, "a", 1)) // into the buffer
	s.push(ev(sandbox.Created, "b", 1)) // queued
	s.push(ev(sandbox.Modified, "a", 2))
	s.push(sandbox.FileEvent{Op: sandbox.Sync, Path: "m"})
	s.push(ev(sandbox.Deleted, "b", 0))  // after the marker: not merged into b's created
	s.push(ev(sandbox.Modified, "a", 3)) // after the marker
	s.push(sandbox.FileEvent{Op: sandbox.Sync, Path: "n"})
	var got []string
	for len(got) == 0 || got[len(got)-1] != "sync n" {
		e := <-s.out
		got = append(got, string(e.Op)+" "+e.Path)
	}
	want := []string{"created a", "created b", "modified a", "sync m", "deleted b", "modified a", "sync n"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}
