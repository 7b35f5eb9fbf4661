package convkit

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
)

// blockState is what a converter remembers about a block it emitted, so
// later updates become deltas or upserts of just the changed fields.
type blockState struct {
	conv string
	text string             // Content, or Output for tool_result and subagent blocks
	last conversation.Block // the other fields as last upserted
}

// Blocks tracks emitted blocks by id. Not safe for concurrent use.
type Blocks struct {
	m     map[string]*blockState
	taken map[string]string // source key → block id
	used  map[string]bool   // block ids handed out by Claim
}

// NewBlocks returns an empty tracker.
func NewBlocks() Blocks {
	return Blocks{m: map[string]*blockState{}, taken: map[string]string{}, used: map[string]bool{}}
}

// Claim returns the block id for the source object key, preferring want. A
// want already given to another key gets a "~n" suffix, so a CLI that
// reuses an id (a scripted model's "call_1" in every turn) never merges two
// blocks. The id's tool_result sibling (conversation.ToolResultID) is
// reserved with it. Deterministic: it depends only on the order of the
// input.
func (bs *Blocks) Claim(key, want string) string {
	if id, ok := bs.taken[key]; ok {
		return id
	}
	id := want
	for n := 2; bs.used[id] || bs.used[conversation.ToolResultID(id)]; n++ {
		id = want + "~" + strconv.Itoa(n)
	}
	bs.used[id] = true
	bs.used[conversation.ToolResultID(id)] = true
	bs.taken[key] = id
	return id
}

// Claimed returns the id claimed for key, if one was.
func (bs *Blocks) Claimed(key string) (string, bool) {
	id, ok := bs.taken[key]
	return id, ok
}

// Lookup returns the id claimed for key, or want when none was.
func (bs *Blocks) Lookup(key, want string) string {
	if id, ok := bs.taken[key]; ok {
		return id
	}
	return want
}

// Bind makes key another name of the claimed id: Lookup and Claim of key
// then return id.
func (bs *Blocks) Bind(key, id string) { bs.taken[key] = id }

// Has reports whether block id was emitted.
func (bs *Blocks) Has(id string) bool { return bs.m[id] != nil }

func textOf(b *conversation.Block) *string {
	if b.Type == conversation.BlockToolResult || b.Type == conversation.BlockSubagent {
		return &b.Output
	}
	return &b.Content
}

// changed returns the fields of b that are set and differ from last, as a
// block carrying only those (plus id and type), and last with them applied.
// Zero fields of b mean "unchanged": an upsert cannot clear a field.
func changed(last, b conversation.Block) (diff, merged conversation.Block, any bool) {
	diff = conversation.Block{ID: b.ID, Type: b.Type}
	merged = last
	merged.Type = b.Type
	set := func(cond bool, apply func()) {
		if cond {
			apply()
			any = true
		}
	}
	set(b.Type != last.Type, func() {})
	set(b.Status != "" && b.Status != last.Status, func() { diff.Status, merged.Status = b.Status, b.Status })
	set(b.Metadata != nil && !bytes.Equal(MustJSON(b.Metadata), MustJSON(last.Metadata)), func() { diff.Metadata, merged.Metadata = b.Metadata, b.Metadata })
	set(b.Model != "" && b.Model != last.Model, func() { diff.Model, merged.Model = b.Model, b.Model })
	set(b.Summary != "" && b.Summary != last.Summary, func() { diff.Summary, merged.Summary = b.Summary, b.Summary })
	set(b.ToolName != "" && b.ToolName != last.ToolName, func() { diff.ToolName, merged.ToolName = b.ToolName, b.ToolName })
	set(b.ToolUseID != "" && b.ToolUseID != last.ToolUseID, func() { diff.ToolUseID, merged.ToolUseID = b.ToolUseID, b.ToolUseID })
	set(len(b.Input) > 0 && !bytes.Equal(b.Input, last.Input), func() { diff.Input, merged.Input = b.Input, b.Input })
	set(b.DisplayName != "" && b.DisplayName != last.DisplayName, func() { diff.DisplayName, merged.DisplayName = b.DisplayName, b.DisplayName })
	set(b.Description != "" && b.Description != last.Description, func() { diff.Description, merged.Description = b.Description, b.Description })
	set(b.IsError && !last.IsError, func() { diff.IsError, merged.IsError = true, true })
	set(b.DurationMs != 0 && b.DurationMs != last.DurationMs, func() { diff.DurationMs, merged.DurationMs = b.DurationMs, b.DurationMs })
	set(b.Subtype != "" && b.Subtype != last.Subtype, func() { diff.Subtype, merged.Subtype = b.Subtype, b.Subtype })
	set(b.Message != "" && b.Message != last.Message, func() { diff.Message, merged.Message = b.Message, b.Message })
	set(b.Code != "" && b.Code != last.Code, func() { diff.Code, merged.Code = b.Code, b.Code })
	set(b.SubagentID != "" && b.SubagentID != last.SubagentID, func() { diff.SubagentID, merged.SubagentID = b.SubagentID, b.SubagentID })
	set(b.Name != "" && b.Name != last.Name, func() { diff.Name, merged.Name = b.Name, b.Name })
	set(b.SkillName != "" && b.SkillName != last.SkillName, func() { diff.SkillName, merged.SkillName = b.SkillName, b.SkillName })
	return diff, merged, any
}

// Put brings block b.ID to the state b describes; b's text field holds the
// full text. A new block is upserted whole (stamped with the line's time
// when b has none). For a known block the text becomes a delta when it
// extends what was sent, part of the upsert when it does not, and nothing
// when unchanged or empty; other fields are upserted only when they
// changed. A known block stays in the conversation it was created in.
func (bs *Blocks) Put(o *Out, conv string, b conversation.Block) {
	st := bs.m[b.ID]
	if st != nil && b.Type != "" && b.Type != st.last.Type {
		// Malformed input gave one id to objects of two types: keep them
		// apart rather than turn one block into another.
		b.ID = bs.Claim("retype:"+b.ID+":"+string(b.Type), b.ID+"~"+string(b.Type))
		st = bs.m[b.ID]
	}
	full := *textOf(&b)
	if st == nil {
		if b.Timestamp.IsZero() {
			b.Timestamp = o.TS
		}
		last := b
		last.Timestamp = time.Time{}
		*textOf(&last) = ""
		bs.m[b.ID] = &blockState{conv: conv, text: full, last: last}
		o.Emit(conv, conversation.BlockUpsert{Block: b})
		return
	}
	if b.Type == "" {
		b.Type = st.last.Type
	}
	diff, merged, any := changed(st.last, b)
	st.last = merged
	switch {
	case full == "" || full == st.text:
	case strings.HasPrefix(full, st.text):
		o.Emit(st.conv, conversation.BlockDelta{BlockID: b.ID, Delta: full[len(st.text):]})
		st.text = full
	default:
		*textOf(&diff) = full
		st.text = full
		any = true
	}
	if any {
		o.Emit(st.conv, conversation.BlockUpsert{Block: diff})
	}
}

// AppendText appends delta to a known block's text; it reports false for an
// unknown block.
func (bs *Blocks) AppendText(o *Out, id, delta string) bool {
	st := bs.m[id]
	if st == nil {
		return false
	}
	if delta == "" {
		return true
	}
	st.text += delta
	o.Emit(st.conv, conversation.BlockDelta{BlockID: id, Delta: delta})
	return true
}

// Text returns a block's text as sent so far ("" for an unknown block).
func (bs *Blocks) Text(id string) string {
	if st := bs.m[id]; st != nil {
		return st.text
	}
	return ""
}

// SettlePending closes every block left pending, stamped with ts: an
// interrupted or crashed turn never completes its items, and a block left
// pending would show as still running forever. Text blocks become
// complete, tool blocks error (the tool did not finish). Ids are visited
// in sorted order so the events are deterministic.
func (bs *Blocks) SettlePending(ts time.Time) []conversation.Event {
	ids := make([]string, 0, len(bs.m))
	for id, st := range bs.m {
		if st.last.Status == conversation.StatusPending {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	o := &Out{TS: ts}
	for _, id := range ids {
		st := bs.m[id]
		status := conversation.StatusComplete
		switch st.last.Type {
		case conversation.BlockToolUse, conversation.BlockToolResult, conversation.BlockSubagent:
			status = conversation.StatusError
		}
		bs.Put(o, st.conv, conversation.Block{ID: id, Type: st.last.Type, Status: status})
	}
	return o.Events
}
