// Package seedproto maps agentd's event log to the per-type Socket.IO
// events of the agent-runtime clients agentd grew from (the "seed"):
// session:block:start|delta|update|complete, session:metadata:update,
// session:subagent:discovered|completed, session:file:created|modified|
// deleted, session:status and error. Events of types the seed had no
// event for go out as the session:event envelope, so nothing is lost.
//
// A Mapper folds the log with agentd's reducer (package conversation) and
// says, for each event, what a client running the seed's reducer must
// receive to hold the same conversation: a block the client has not seen
// comes whole (start, with the fields its type requires), a later upsert
// as the fields it sets (update), or whole again when it completes
// (complete). The seed appended deltas only to the content of
// assistant_text and thinking blocks; text appended to other blocks (a
// tool_result's output) is sent as an update carrying the whole text, at
// most once per Flush, and for a block whose text exceeds LiveTextLimit
// only when the block is next upserted or its turn ends.
package seedproto

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/agentd/agentd/conversation"
)

// Socket.IO event names of the seed's protocol.
const (
	EventBlockStart         = "session:block:start"
	EventBlockDelta         = "session:block:delta"
	EventBlockUpdate        = "session:block:update"
	EventBlockComplete      = "session:block:complete"
	EventMetadataUpdate     = "session:metadata:update"
	EventSubagentDiscovered = "session:subagent:discovered"
	EventSubagentCompleted  = "session:subagent:completed"
	EventFileCreated        = "session:file:created"
	EventFileModified       = "session:file:modified"
	EventFileDeleted        = "session:file:deleted"
	EventStatus             = "session:status"
	EventError              = "error"
	// EventEnvelope carries an event of a type the seed had no event for,
	// as agentd's envelope.
	EventEnvelope = "session:event"
)

// LiveTextLimit bounds the text of a block whose appended text (a delta
// the seed's reducer would ignore) is sent at every Flush: beyond it the
// whole text goes only with the block's next upsert or its turn's end, so
// a long streamed output costs O(n), not O(n²).
const LiveTextLimit = 64 << 10

// Message is one Socket.IO event: its name and its one argument. Data is
// one of the payload types below, or, for EventEnvelope, nil: the event's
// envelope is sent as it is.
type Message struct {
	Event string
	Data  any
	Seq   int64
}

// BlockStart: a block the client has not seen, whole.
type BlockStart struct {
	SessionID      string             `json:"sessionId"`
	ConversationID string             `json:"conversationId"`
	Block          conversation.Block `json:"block"`
	Seq            int64              `json:"seq"`
}

// BlockDelta appends to the content of an assistant_text or thinking block.
type BlockDelta struct {
	SessionID      string `json:"sessionId"`
	ConversationID string `json:"conversationId"`
	BlockID        string `json:"blockId"`
	Delta          string `json:"delta"`
	Seq            int64  `json:"seq"`
}

// BlockUpdate sets fields of a block (a shallow merge).
type BlockUpdate struct {
	SessionID      string          `json:"sessionId"`
	ConversationID string          `json:"conversationId"`
	BlockID        string          `json:"blockId"`
	Updates        json.RawMessage `json:"updates"`
	Seq            int64           `json:"seq"`
}

// BlockComplete replaces a block that completed (or failed), whole.
type BlockComplete struct {
	SessionID      string             `json:"sessionId"`
	ConversationID string             `json:"conversationId"`
	BlockID        string             `json:"blockId"`
	Block          conversation.Block `json:"block"`
	Seq            int64              `json:"seq"`
}

// Usage is the seed's token usage: the session's totals so far.
type Usage struct {
	InputTokens      int64 `json:"inputTokens"`
	OutputTokens     int64 `json:"outputTokens"`
	CacheReadTokens  int64 `json:"cacheReadTokens,omitempty"`
	CacheWriteTokens int64 `json:"cacheWriteTokens,omitempty"`
	TotalTokens      int64 `json:"totalTokens"`
}

// Metadata is the seed's session metadata: totals, not increments.
type Metadata struct {
	Usage   *Usage   `json:"usage,omitempty"`
	CostUSD *float64 `json:"costUSD,omitempty"`
	Model   string   `json:"model,omitempty"`
}

// MetadataUpdate reports the session's usage, cost and model.
type MetadataUpdate struct {
	SessionID      string   `json:"sessionId"`
	ConversationID string   `json:"conversationId"`
	Metadata       Metadata `json:"metadata"`
	Seq            int64    `json:"seq"`
}

// Subagent is a subagent conversation as the seed announced it.
type Subagent struct {
	ID     string               `json:"id"`
	Blocks []conversation.Block `json:"blocks"`
}

// SubagentDiscovered announces a subagent conversation, before its first
// block.
type SubagentDiscovered struct {
	SessionID string   `json:"sessionId"`
	Subagent  Subagent `json:"subagent"`
	Seq       int64    `json:"seq"`
}

// SubagentCompleted says a subagent ended: status "completed" or "failed".
type SubagentCompleted struct {
	SessionID  string `json:"sessionId"`
	SubagentID string `json:"subagentId"`
	Status     string `json:"status"`
	Seq        int64  `json:"seq"`
}

// File is the seed's workspace file. Content is the file's text when the
// transport could read that version of it (see FileEvent).
type File struct {
	Path    string  `json:"path"`
	Content *string `json:"content,omitempty"`
	Size    *int64  `json:"size,omitempty"`
	SHA256  string  `json:"sha256,omitempty"`
}

// FileEvent is session:file:created|modified (File set) or deleted (Path
// set). The mapper leaves File.Content empty: the log holds no contents.
type FileEvent struct {
	SessionID string `json:"sessionId"`
	File      *File  `json:"file,omitempty"`
	Path      string `json:"path,omitempty"`
	Seq       int64  `json:"seq"`
}

// Status is session:status: agentd's status and runtime.
type Status struct {
	SessionID string                     `json:"sessionId"`
	Status    conversation.SessionStatus `json:"status"`
	Runtime   conversation.Runtime       `json:"runtime"`
	Seq       int64                      `json:"seq"`
}

// Error is the error event: {message, code?, sessionId?}.
type Error struct {
	Message   string `json:"message"`
	Code      string `json:"code,omitempty"`
	SessionID string `json:"sessionId,omitempty"`
	Seq       int64  `json:"seq,omitempty"`
}

type blockRef struct{ conv, id string }

// Mapper maps one session's events, in log order. It is not safe for
// concurrent use. It holds the session's reduced conversation.
type Mapper struct {
	session   string
	r         *conversation.Reducer
	announced map[string]bool // subagent conversations the client knows
	dirty     []blockRef      // blocks with text the client has not got
	isDirty   map[blockRef]bool
	usage     conversation.Usage
	cost      float64
	hasCost   bool
	model     string
	last      int64 // seq of the last event mapped
}

// New returns a mapper for session id whose client knows nothing yet.
func New(sessionID string) *Mapper {
	return &Mapper{session: sessionID, r: conversation.NewReducer(), announced: map[string]bool{}, isDirty: map[blockRef]bool{}}
}

// Prime folds events the client already has (it loaded the session's
// state, or received them earlier), without producing messages.
func (m *Mapper) Prime(events ...conversation.Event) {
	for _, e := range events {
		if err := m.r.Apply(e); errors.Is(err, conversation.ErrDuplicate) {
			continue
		}
		m.fold(e)
		m.last = max(m.last, e.Seq)
	}
	// The client's state lists every subagent conversation agentd's does.
	for _, s := range m.r.State().Subagents {
		m.announced[s.ID] = true
	}
}

// LastSeq is the seq of the last event primed or mapped.
func (m *Mapper) LastSeq() int64 { return m.last }

func conv(e conversation.Event) string {
	if c := e.Context.ConversationID; c != "" {
		return c
	}
	return conversation.MainConversation
}

// fold keeps the metadata totals.
func (m *Mapper) fold(e conversation.Event) {
	if e.Type != conversation.TypeMetadataUpdate {
		return
	}
	var p conversation.MetadataUpdate
	if json.Unmarshal(e.Payload, &p) != nil {
		return
	}
	if p.Usage != nil {
		m.usage = m.usage.Add(*p.Usage)
	}
	if p.CostUSD != nil {
		m.cost += *p.CostUSD
		m.hasCost = true
	}
	if p.Model != "" {
		m.model = p.Model
	}
}

// Map returns the messages event e (the next in the log) becomes. A
// duplicate or an event agentd's reducer refuses becomes none.
func (m *Mapper) Map(e conversation.Event) []Message {
	c := conv(e)
	var out []Message
	switch e.Type {
	case conversation.TypeBlockUpsert:
		if e.Seq != 0 && e.Seq <= m.r.LastSeq() {
			return nil // a duplicate
		}
		var p struct {
			Block json.RawMessage `json:"block"`
		}
		var keys map[string]json.RawMessage
		var id string
		if json.Unmarshal(e.Payload, &p) == nil {
			// agentd's reducer has the subagent conversation from here on,
			// even if it refuses the block.
			out = m.announce(out, c, e.Seq)
			if json.Unmarshal(p.Block, &keys) == nil {
				_ = json.Unmarshal(keys["id"], &id)
			}
		}
		_, existed := m.r.Block(c, id)
		err := m.r.Apply(e)
		m.last = max(m.last, e.Seq)
		if err != nil {
			return out
		}
		b, _ := m.r.Block(c, id)
		ref := blockRef{c, id}
		wasDirty := m.isDirty[ref]
		m.clean(ref)
		switch {
		case !existed:
			out = append(out, Message{Event: EventBlockStart, Seq: e.Seq, Data: BlockStart{SessionID: m.session, ConversationID: c, Block: b, Seq: e.Seq}})
			if ended(b.Status) {
				out = append(out, Message{Event: EventBlockComplete, Seq: e.Seq, Data: BlockComplete{SessionID: m.session, ConversationID: c, BlockID: id, Block: b, Seq: e.Seq}})
			}
		case sets(keys, "status") && ended(b.Status):
			out = append(out, Message{Event: EventBlockComplete, Seq: e.Seq, Data: BlockComplete{SessionID: m.session, ConversationID: c, BlockID: id, Block: b, Seq: e.Seq}})
		default:
			out = append(out, Message{Event: EventBlockUpdate, Seq: e.Seq, Data: BlockUpdate{SessionID: m.session, ConversationID: c, BlockID: id,
				Updates: updates(b, keys, wasDirty), Seq: e.Seq}})
		}
		return out
	case conversation.TypeBlockDelta:
		if e.Seq != 0 && e.Seq <= m.r.LastSeq() {
			return nil
		}
		var p conversation.BlockDelta
		if json.Unmarshal(e.Payload, &p) == nil {
			out = m.announce(out, c, e.Seq)
		}
		err := m.r.Apply(e)
		m.last = max(m.last, e.Seq)
		if err != nil {
			return out
		}
		b, _ := m.r.Block(c, p.BlockID)
		if b.Type == conversation.BlockAssistantText || b.Type == conversation.BlockThinking {
			return append(out, Message{Event: EventBlockDelta, Seq: e.Seq, Data: BlockDelta{SessionID: m.session, ConversationID: c, BlockID: p.BlockID, Delta: p.Delta, Seq: e.Seq}})
		}
		ref := blockRef{c, p.BlockID}
		if !m.isDirty[ref] {
			m.isDirty[ref] = true
			m.dirty = append(m.dirty, ref)
		}
		return out
	}

	// Every other type goes through the reducer too (it keeps the
	// subagents, and duplicates out).
	err := m.r.Apply(e)
	if errors.Is(err, conversation.ErrDuplicate) {
		return nil
	}
	m.last = max(m.last, e.Seq)
	if err != nil {
		return nil
	}
	m.fold(e)
	p, err := e.Decode()
	if err != nil {
		return nil
	}
	switch p := p.(type) {
	case *conversation.MetadataUpdate:
		md := Metadata{Model: m.model, Usage: &Usage{InputTokens: m.usage.InputTokens, OutputTokens: m.usage.OutputTokens,
			CacheReadTokens: m.usage.CacheReadInputTokens, CacheWriteTokens: m.usage.CacheCreationInputTokens,
			TotalTokens: m.usage.InputTokens + m.usage.OutputTokens + m.usage.CacheReadInputTokens + m.usage.CacheCreationInputTokens}}
		if m.hasCost {
			cost := m.cost
			md.CostUSD = &cost
		}
		out = append(out, Message{Event: EventMetadataUpdate, Seq: e.Seq, Data: MetadataUpdate{SessionID: m.session, ConversationID: c, Metadata: md, Seq: e.Seq}})
	case *conversation.StatusChange:
		out = append(out, Message{Event: EventStatus, Seq: e.Seq, Data: Status{SessionID: m.session, Status: p.Status, Runtime: p.Runtime, Seq: e.Seq}})
	case *conversation.FileChange:
		switch p.Kind {
		case conversation.TypeFileDeleted:
			out = append(out, Message{Event: EventFileDeleted, Seq: e.Seq, Data: FileEvent{SessionID: m.session, Path: p.Path, Seq: e.Seq}})
		case conversation.TypeFileCreated:
			out = append(out, Message{Event: EventFileCreated, Seq: e.Seq, Data: FileEvent{SessionID: m.session, File: &File{Path: p.Path, Size: p.Size, SHA256: p.SHA256}, Seq: e.Seq}})
		default:
			out = append(out, Message{Event: EventFileModified, Seq: e.Seq, Data: FileEvent{SessionID: m.session, File: &File{Path: p.Path, Size: p.Size, SHA256: p.SHA256}, Seq: e.Seq}})
		}
	case *conversation.SubagentSpawned:
		out = m.announce(out, p.ToolUseID, e.Seq)
	case *conversation.SubagentCompleted:
		out = m.announce(out, p.ToolUseID, e.Seq)
		st := "completed"
		if p.Status == conversation.StatusError {
			st = "failed"
		}
		out = append(out, Message{Event: EventSubagentCompleted, Seq: e.Seq, Data: SubagentCompleted{SessionID: m.session, SubagentID: p.ToolUseID, Status: st, Seq: e.Seq}})
	case *conversation.ErrorEvent:
		out = append(out, Message{Event: EventError, Seq: e.Seq, Data: Error{Message: p.Message, Code: p.Code, SessionID: m.session, Seq: e.Seq}})
	case *conversation.QueryCompleted, *conversation.QueryFailed:
		// A turn's end: every text the client lacks goes first.
		out = m.flush(out, true)
		out = append(out, Message{Event: EventEnvelope, Seq: e.Seq})
	default:
		out = append(out, Message{Event: EventEnvelope, Seq: e.Seq})
	}
	return out
}

// Flush returns updates for the blocks whose appended text the client
// lacks, those within LiveTextLimit (all with force).
func (m *Mapper) Flush(force bool) []Message { return m.flush(nil, force) }

func (m *Mapper) flush(out []Message, force bool) []Message {
	keep := m.dirty[:0]
	for _, ref := range m.dirty {
		b, ok := m.r.Block(ref.conv, ref.id)
		if !ok {
			delete(m.isDirty, ref)
			continue
		}
		field, text := textField(b)
		if !force && len(text) > LiveTextLimit {
			keep = append(keep, ref)
			continue
		}
		delete(m.isDirty, ref)
		raw, _ := json.Marshal(map[string]string{field: text})
		out = append(out, Message{Event: EventBlockUpdate, Seq: m.last, Data: BlockUpdate{SessionID: m.session, ConversationID: ref.conv, BlockID: ref.id, Updates: raw, Seq: m.last}})
	}
	clear(m.dirty[len(keep):])
	m.dirty = keep
	return out
}

func (m *Mapper) clean(ref blockRef) {
	if !m.isDirty[ref] {
		return
	}
	delete(m.isDirty, ref)
	for i, r := range m.dirty {
		if r == ref {
			m.dirty = append(m.dirty[:i], m.dirty[i+1:]...)
			break
		}
	}
}

// announce adds a subagent:discovered for a subagent conversation the
// client does not know yet, with the blocks it already has.
func (m *Mapper) announce(out []Message, c string, seq int64) []Message {
	if c == "" || c == conversation.MainConversation || m.announced[c] {
		return out
	}
	m.announced[c] = true
	blocks := []conversation.Block{}
	for bc, b := range m.r.Blocks() {
		if bc == c {
			blocks = append(blocks, b)
		}
	}
	return append(out, Message{Event: EventSubagentDiscovered, Seq: seq, Data: SubagentDiscovered{SessionID: m.session, Subagent: Subagent{ID: c, Blocks: blocks}, Seq: seq}})
}

// textField is where deltas go in b: output for tool_result and subagent
// blocks, content otherwise (conversation's rule).
func textField(b conversation.Block) (string, string) {
	if b.Type == conversation.BlockToolResult || b.Type == conversation.BlockSubagent {
		return "output", b.Output
	}
	return "content", b.Content
}

func ended(s conversation.BlockStatus) bool {
	return s == conversation.StatusComplete || s == conversation.StatusError
}

func sets(keys map[string]json.RawMessage, k string) bool {
	v, ok := keys[k]
	return ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

// updates is the shallow merge that takes the client's copy of a block to
// b: the fields the upsert named, as agentd's reducer left them (metadata
// merged a level deep, a null field unchanged, null for one agentd now
// omits), the fields b's type
// requires when the upsert named the type, and the appended text the
// client lacks (dirty).
func updates(b conversation.Block, keys map[string]json.RawMessage, dirty bool) json.RawMessage {
	raw, err := json.Marshal(b)
	if err != nil {
		return json.RawMessage("{}")
	}
	var full map[string]json.RawMessage
	if json.Unmarshal(raw, &full) != nil {
		return json.RawMessage("{}")
	}
	out := make(map[string]json.RawMessage, len(keys)+4)
	for k := range keys {
		if v, ok := full[k]; ok {
			out[k] = v
		} else {
			out[k] = json.RawMessage("null") // emptied or removed: agentd omits it
		}
	}
	if _, ok := keys["type"]; ok {
		// The type may have changed: the fields the new one requires, and
		// null for the empty ones an earlier type required.
		for _, t := range conversation.BlockTypes {
			for _, k := range conversation.Required(t) {
				if _, ok := full[k]; !ok {
					out[k] = json.RawMessage("null")
				}
			}
		}
		for _, k := range conversation.Required(b.Type) {
			out[k] = full[k]
		}
		if v, ok := full["timestamp"]; ok {
			out["timestamp"] = v
		}
	}
	if dirty {
		f, _ := textField(b)
		out[f] = full[f]
	}
	res, _ := json.Marshal(out)
	return res
}
