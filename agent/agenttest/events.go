// Package agenttest checks agent architectures. Run is the conformance
// suite an architecture passes, built-in or an embedding program's own
// (agentd.Config.Architectures): its runner driven through turns,
// interrupts and Close against FakeHost, a fake agent.Host.
//
// It also holds what the tests of the built-in architectures (codex,
// gemini, opencode, claudecode) share: the event invariants every
// converter keeps, fuzz and benchmark bodies for line converters and the
// set-up of a runner whose CLI is the test binary. It imports no
// architecture and no server, so in-package tests (package codex) may use
// it; the format harness is in internal/agent/agenttest/formattest and the
// server end-to-end helpers in internal/agent/agenttest/e2etest.
package agenttest

import (
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
)

// CheckEvents asserts the invariants every converter keeps: known event
// types, payloads that decode, a block id never reused for a block of
// another type or conversation, no delta before its block, and a log the
// reducer accepts. It returns the reduced state.
func CheckEvents(t testing.TB, events []conversation.Event) conversation.State {
	t.Helper()
	type owner struct {
		typ  conversation.BlockType
		conv string
	}
	owners := map[string]owner{}
	for i, e := range events {
		if !e.Type.Valid() {
			t.Fatalf("event %d: unknown type %q", i, e.Type)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		switch p := p.(type) {
		case *conversation.BlockUpsert:
			b := p.Block
			if b.ID == "" || b.Type == "" {
				t.Fatalf("event %d: block without id or type: %+v", i, b)
			}
			o, ok := owners[b.ID]
			if !ok {
				owners[b.ID] = owner{b.Type, e.Context.ConversationID}
			} else if o.typ != b.Type || o.conv != e.Context.ConversationID {
				t.Fatalf("event %d: block id %q reused: %v in %q, now %v in %q", i, b.ID, o.typ, o.conv, b.Type, e.Context.ConversationID)
			}
		case *conversation.BlockDelta:
			o, ok := owners[p.BlockID]
			if !ok {
				t.Fatalf("event %d: delta to unknown block %q", i, p.BlockID)
			}
			if o.conv != e.Context.ConversationID {
				t.Fatalf("event %d: delta to %q in conversation %q, block is in %q", i, p.BlockID, e.Context.ConversationID, o.conv)
			}
		}
	}
	st, err := conversation.Reduce(events)
	if err != nil {
		t.Fatalf("reduce: %v", err)
	}
	return st
}

// BlocksOf returns the blocks of type typ, in order.
func BlocksOf(bs []conversation.Block, typ conversation.BlockType) []conversation.Block {
	return filter(bs, func(b conversation.Block) bool { return b.Type == typ })
}

// FindBlock returns the block with id, failing the test without one.
func FindBlock(t testing.TB, bs []conversation.Block, id string) conversation.Block {
	t.Helper()
	for _, b := range bs {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("no block %q", id)
	return conversation.Block{}
}

// OfType returns the events of type typ, in order.
func OfType(events []conversation.Event, typ conversation.EventType) []conversation.Event {
	return filter(events, func(e conversation.Event) bool { return e.Type == typ })
}

// CountType counts the events of type typ.
func CountType(events []conversation.Event, typ conversation.EventType) int {
	return len(OfType(events, typ))
}

// NoPending fails the test when a block is still pending (a turn that
// ended, however it ended, settles its blocks).
func NoPending(t testing.TB, bs []conversation.Block) {
	t.Helper()
	for _, b := range bs {
		if b.Status == conversation.StatusPending {
			t.Fatalf("block left pending: %+v", b)
		}
	}
}

// ConvertLines converts lines with c, in order; a line the converter
// refuses fails the test.
func ConvertLines(t testing.TB, c LineConverter, lines ...string) []conversation.Event {
	t.Helper()
	var events []conversation.Event
	for i, l := range lines {
		ev, err := c.Convert([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v\n%s", i+1, err, l)
		}
		events = append(events, ev...)
	}
	return events
}

// BlockKinds lists blocks as their types, with the content after a colon
// for assistant text ("assistant_text:Done.").
func BlockKinds(bs []conversation.Block) []string {
	var kinds []string
	for _, b := range bs {
		k := string(b.Type)
		if b.Type == conversation.BlockAssistantText {
			k += ":" + b.Content
		}
		kinds = append(kinds, k)
	}
	return kinds
}

// filter returns the xs keep accepts, in order (nil for none).
func filter[T any](xs []T, keep func(T) bool) []T {
	var out []T
	for _, x := range xs {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// LateUpdateRace races update (a runner handling one line of its CLI that
// opens a pending block) against endTurn (the runner's end of turn),
// runs times, with the update's head start varied from 0 to 300µs. Each
// run gets a fresh runner from newRunner, whose host must be h. It fails
// the test unless each run's log holds one block and leaves it settled:
// an update converted as the turn ends must be settled either by the
// turn's end or right after it, and never be emitted after the settle.
func LateUpdateRace(t testing.TB, runs int, newRunner func(run int, h *FakeHost) (update, endTurn func())) {
	t.Helper()
	for i := range runs {
		h := &FakeHost{EmitDelay: 200 * time.Microsecond}
		update, endTurn := newRunner(i, h)
		ready, done := make(chan struct{}), make(chan struct{})
		go func() { defer close(done); close(ready); update() }()
		<-ready
		for start := time.Now(); time.Since(start) < time.Duration(i%61)*5*time.Microsecond; {
		}
		endTurn()
		<-done
		st := CheckEvents(t, h.Events())
		if len(st.Blocks) != 1 {
			t.Fatalf("run %d: blocks %+v", i, st.Blocks)
		}
		NoPending(t, st.Blocks)
	}
}
