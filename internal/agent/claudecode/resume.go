package claudecode

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
)

// Turns that survive a server restart (environments that are a
// sandbox.Attacher, i.e. the executor sandbox).
//
// The CLI runs under a stable tag (cliTag). Before a turn's message is sent
// the runner records in its agent state where the turn's output starts: the
// stdout offset just after the previous turn's result line, and the
// converter's carried state at that point (turnMark, claudeconv.Seed). A later runner
// re-attaches to the CLI from that offset (the executor spools stdout) and
// converts the turn's output again with a fresh converter seeded from the
// mark: the same lines give the same events in the same order (the "turn
// sequence"; the subagent transcript events the poller adds are apart, see
// below). The runner then has to emit exactly the part of that sequence the
// log does not hold. It learns which part from the session's reduced state:
//
//   - Every event of the sequence is classified as it is produced, by a
//     blockTracker that knows each block's status and text length so far in
//     the turn: an event is evident when its effect is visible in the
//     reduced state (it creates a block, advances its status from pending,
//     or lengthens its text); logs, metadata, errors and subagent events are
//     not.
//   - A batch the runner stores never ends with events that are not
//     evident: those wait for the next evident event (they are rare and
//     small: logs, usage). So the log's last stored batch of the turn ends
//     with an evident event, and the log holds the sequence exactly up to
//     the last evident event whose effect the reduced state shows.
//   - Where waiting is not possible (the turn's end: the result's usage and
//     cost; the CLI's exit; or events that waited deferLimit) the batch ends
//     with a checkpoint instead: an upsert of the turn's user_message block
//     with metadata {"claudeCode":{"events":N}}, N counting the turn
//     sequence's events up to there. It is stored atomically with the
//     events before it, so the reduced state says exactly that the first N
//     are in the log.
//
// Subagent blocks that the transcript poller emits while a subagent runs
// come at times that depend on the clock, so they are outside the turn
// sequence; each is checked against the reduced state by its own block
// (every one of them is a block that the state either shows or not).
//
// Permission requests: an answer sent to the CLI (or a request the CLI
// withdrew) is recorded in the turn mark first, so after a restart the
// answer is sent again (the CLI ignores an answer to a request it no longer
// waits for) rather than asked again. A request with no recorded answer is
// asked again through the host (re-opening the same request id when the log
// shows it still pending).

// cliTag is the sandbox tag of a session's Claude Code process.
func cliTag(sessionID string) string { return "claude-" + sessionID }

// turnMark is where a turn's output starts, saved with the agent state
// before the turn's message is sent.
type turnMark struct {
	QueryID string `json:"queryId"`
	// Tag is the CLI process's sandbox tag.
	Tag string `json:"tag"`
	// Offset is the stdout byte at which the turn's output starts.
	Offset int64           `json:"stdoutOffset"`
	Seed   claudeconv.Seed `json:"seed"`
	// Sent: the message was written to the CLI (recorded after the write;
	// when false the write may or may not have happened).
	Sent bool `json:"sent,omitempty"`
	// Perms are the answers sent to the CLI's permission requests of this
	// turn, by request id.
	Perms map[string]permAnswer `json:"perms,omitempty"`
}

// turnStart is where the next turn of a process starts.
type turnStart struct {
	offset int64
	seed   claudeconv.Seed
}

// checkpointKey is the user_message metadata key of a turn's checkpoint.
const checkpointKey = "claudeCode"

// checkpoint is the event that says the first n events of the turn's
// sequence are stored.
func checkpoint(queryID string, n int) conversation.Event {
	return conversation.Upsert(conversation.Block{ID: userBlockID(queryID), Type: conversation.BlockUserMessage,
		Metadata: map[string]any{checkpointKey: map[string]any{"events": n}}})
}

// userBlockID is the id of the user_message block the session writes for
// a turn.
func userBlockID(queryID string) string { return queryID + "-user" }

// --- block facts ---

type blockKey struct{ conv, id string }

// blockFacts is what the reduced state shows of a block that the resume
// check compares.
type blockFacts struct {
	typ     conversation.BlockType
	rank    int8 // 0 pending or unset, 1 complete or error
	content int  // bytes of Content
	output  int  // bytes of Output
}

func statusRank(s conversation.BlockStatus) int8 {
	if s == conversation.StatusComplete || s == conversation.StatusError {
		return 1
	}
	return 0
}

// covers reports whether st (the reduced state's block) shows everything
// f (a block as some event left it) has.
func (st blockFacts) covers(f blockFacts) bool {
	return st.rank >= f.rank && st.content >= f.content && st.output >= f.output
}

// blockTracker follows the blocks of one turn sequence. Owned by the
// process's reader goroutine.
type blockTracker struct {
	m  map[blockKey]blockFacts
	rd claudeconv.PayloadReader
}

func newBlockTracker() *blockTracker { return &blockTracker{m: make(map[blockKey]blockFacts)} }

// apply records e and returns the block it addresses, the block's facts
// after it, and whether e is evident (its effect shows in a reduced state).
// ok is false for events that address no block.
func (t *blockTracker) apply(e conversation.Event) (key blockKey, after blockFacts, evident, ok bool) {
	conv := e.Context.ConversationID
	if conv == "" {
		conv = conversation.MainConversation
	}
	switch e.Type {
	case conversation.TypeBlockUpsert:
		f, good := t.rd.Upsert(e.Payload)
		if !good {
			return key, after, false, false
		}
		key = blockKey{conv, f.ID}
		before, existed := t.m[key]
		after = before
		if f.Type != "" {
			after.typ = conversation.BlockType(f.Type)
		}
		if f.HasStatus {
			after.rank = statusRank(conversation.BlockStatus(f.Status))
		}
		if f.HasContent {
			after.content = f.Content
		}
		if f.HasOutput {
			after.output = f.Output
		}
		t.m[key] = after
		evident = !existed || after.rank > before.rank || after.content > before.content || after.output > before.output
		return key, after, evident, true
	case conversation.TypeBlockDelta:
		id, n, good := t.rd.Delta(e.Payload)
		if !good {
			return key, after, false, false
		}
		key = blockKey{conv, id}
		before, existed := t.m[key]
		if !existed {
			return key, before, false, false // the reducer refuses it
		}
		after = before
		if after.typ == conversation.BlockToolResult || after.typ == conversation.BlockSubagent {
			after.output += n
		} else {
			after.content += n
		}
		t.m[key] = after
		return key, after, n > 0, true
	}
	return key, after, false, false
}

// outEvent is an event waiting in the process's output batch.
type outEvent struct {
	ev conversation.Event
	// poll: from the subagent transcript poller, outside the turn sequence.
	poll bool
	// seq is the event's position in the turn sequence (1-based; 0 for
	// poll events).
	seq     int
	evident bool
	key     blockKey
	after   blockFacts
	isBlock bool
}

// --- replay filter ---

// replayFilter drops, from a resumed turn's re-converted output, what the
// log already holds. It is used by the process's reader goroutine only.
type replayFilter struct {
	blocks map[blockKey]blockFacts // the reduced state's blocks
	// stored: events of the turn sequence up to this one are in the log
	// (the turn's checkpoint).
	stored int
	live   bool // past the log's end: everything from here on is new
}

// newReplayFilter indexes the reduced state st for the turn queryID.
func newReplayFilter(st conversation.State, queryID string) *replayFilter {
	f := &replayFilter{blocks: make(map[blockKey]blockFacts)}
	add := func(conv string, bs []conversation.Block) {
		for _, b := range bs {
			f.blocks[blockKey{conv, b.ID}] = blockFacts{typ: b.Type, rank: statusRank(b.Status), content: len(b.Content), output: len(b.Output)}
		}
	}
	add(conversation.MainConversation, st.Blocks)
	for _, sa := range st.Subagents {
		add(sa.ID, sa.Blocks)
	}
	for _, b := range st.Blocks {
		if b.ID != userBlockID(queryID) {
			continue
		}
		if m, ok := b.Metadata[checkpointKey].(map[string]any); ok {
			if n, ok := m["events"].(float64); ok && n > 0 {
				f.stored = int(n)
			}
		}
	}
	return f
}

// inLog reports whether the reduced state shows e's effect on its block.
func (f *replayFilter) inLog(e *outEvent) bool {
	st, ok := f.blocks[e.key]
	return ok && e.isBlock && st.covers(e.after)
}

// pass returns the events of batch that the log does not hold, in order.
// final says nothing of the turn sequence follows the batch (the turn or
// the process ended): events still undecided then were never stored.
// Without final, the batch ends with an evident event of the sequence, or
// has none of it (the reader defers the rest).
func (f *replayFilter) pass(batch []outEvent, final bool) []outEvent {
	out := batch[:0:0]
	var pending []outEvent
	for _, e := range batch {
		switch {
		case e.poll:
			if !f.inLog(&e) {
				out = append(out, e)
			}
		case f.live:
			out = append(out, e)
		case e.seq <= f.stored:
		case !e.evident:
			pending = append(pending, e)
		case f.inLog(&e):
			pending = pending[:0]
		default:
			f.live = true
			out = append(out, pending...)
			out = append(out, e)
			pending = nil
		}
	}
	if final && len(pending) > 0 {
		f.live = true
		out = append(out, pending...)
	}
	return out
}

// --- agent state ---

// saveState applies mut to the runner's agent state and stores it when mut
// reports a change. Saves are ordered: one never overwrites a newer one.
// saveMu serialises the store writes only (no other lock is held across
// them).
func (r *runner) saveState(ctx context.Context, mut func(*agentState) bool) {
	r.mu.Lock()
	if !mut(&r.state) {
		r.mu.Unlock()
		return
	}
	r.stateVer++
	v := r.stateVer
	raw, err := json.Marshal(r.state)
	r.mu.Unlock()
	if err != nil {
		r.host.Logger().Warn("encode Claude Code state", "err", err)
		return
	}
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	if v <= r.savedVer {
		return
	}
	if err := r.host.SaveAgentState(context.WithoutCancel(ctx), raw); err != nil {
		r.host.Logger().Warn("save Claude Code state", "err", err)
		return
	}
	r.savedVer = v
}

// markTurn records where turn m's output starts (before its message is
// sent).
func (r *runner) markTurn(ctx context.Context, m turnMark) {
	r.saveState(ctx, func(st *agentState) bool {
		st.Turn = &m
		return true
	})
}

// markSent records that the turn's message was written to the CLI.
func (r *runner) markSent(ctx context.Context, queryID string) {
	r.saveState(ctx, func(st *agentState) bool {
		if st.Turn == nil || st.Turn.QueryID != queryID || st.Turn.Sent {
			return false
		}
		m := *st.Turn
		m.Sent = true
		st.Turn = &m
		return true
	})
}

// recordPerm records how a permission request of the turn was answered
// (the zero permAnswer: the CLI withdrew it).
func (r *runner) recordPerm(ctx context.Context, queryID, requestID string, a permAnswer) {
	r.saveState(ctx, func(st *agentState) bool {
		if st.Turn == nil || st.Turn.QueryID != queryID {
			return false
		}
		m := *st.Turn
		m.Perms = maps.Clone(m.Perms)
		if m.Perms == nil {
			m.Perms = map[string]permAnswer{}
		}
		m.Perms[requestID] = a
		st.Turn = &m
		return true
	})
}

// permAnswer is how a permission request of the CLI was answered, as the
// turn mark keeps it: enough to send the same answer again. The tool's
// input is not kept (the request carries it), only a client's change of
// it.
type permAnswer struct {
	Behavior string `json:"behavior,omitempty"` // allow or deny
	Message  string `json:"message,omitempty"`
	// UpdatedInput is the input a client allowed instead of the request's.
	UpdatedInput json.RawMessage `json:"updatedInput,omitempty"`
	// Error: the request was answered with this error.
	Error string `json:"error,omitempty"`
}

// withdrawn reports the zero answer: the CLI withdrew the request.
func (a permAnswer) withdrawn() bool {
	return a.Behavior == "" && a.Error == ""
}

// line is the control response for request id whose tool input is input.
func (a permAnswer) line(id string, input json.RawMessage) ([]byte, error) {
	switch a.Behavior {
	case "allow":
		upd := input
		if len(a.UpdatedInput) > 0 {
			upd = a.UpdatedInput
		}
		return controlSuccessLine(id, permissionAllow{Behavior: "allow", UpdatedInput: upd})
	case "deny":
		return controlSuccessLine(id, permissionDeny{Behavior: "deny", Message: a.Message})
	}
	return controlErrorLine(id, orElse(a.Error, "withdrawn"))
}
