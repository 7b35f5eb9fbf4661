package codex

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
)

// Option configures a converter.
type Option func(*options)

type options struct {
	idPrefix             string
	omitUserMessages     bool
	omitPermissionEvents bool
}

func buildOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return o
}

// WithIDPrefix scopes block ids the CLI does not make unique across
// processes (codex exec numbers its items item_0, item_1, … in every
// process). The live runner passes the turn's query id so a resumed thread
// never reuses a block id of an earlier turn.
func WithIDPrefix(prefix string) Option { return func(o *options) { o.idPrefix = prefix } }

// WithoutUserMessages drops the user messages the CLI echoes: in a live
// session agentd has already appended the user's message itself.
func WithoutUserMessages() Option { return func(o *options) { o.omitUserMessages = true } }

// WithoutPermissionEvents drops permission:requested for approval requests:
// a live runner asks through agent.Host.RequestPermission, which emits its
// own events.
func WithoutPermissionEvents() Option { return func(o *options) { o.omitPermissionEvents = true } }

// out collects the events of one input line, stamped with the line's time.
type out struct {
	events []conversation.Event
	ts     time.Time
}

func (o *out) emit(conv string, p conversation.Payload) {
	o.events = append(o.events, conversation.NewEvent(p).In(conv).At(o.ts).From(conversation.SourceRunner))
}

// log emits a log event keeping raw, which must be valid JSON: callers pass
// the line they decoded.
func (o *out) log(level conversation.LogLevel, msg string, raw []byte) {
	o.emit("", conversation.LogEvent{Level: level, Message: msg, Data: append(json.RawMessage(nil), raw...)})
}

// blockState is what a converter remembers about a block it emitted, so
// later updates become deltas or upserts of just the changed fields.
type blockState struct {
	conv string
	text string             // Content, or Output for tool_result and subagent blocks
	last conversation.Block // the other fields as last upserted
}

// blocks tracks emitted blocks by id. Not safe for concurrent use.
type blocks struct {
	m     map[string]*blockState
	taken map[string]string // source key → block id
	used  map[string]bool   // block ids handed out by claim
}

func newBlocks() blocks {
	return blocks{m: map[string]*blockState{}, taken: map[string]string{}, used: map[string]bool{}}
}

// claim returns the block id for the source object key, preferring want. A
// want already given to another key gets a "~n" suffix, so a CLI that
// reuses an id (a scripted model's "call_1" in every turn) never merges two
// blocks. The id's tool_result sibling (conversation.ToolResultID) is
// reserved with it. Deterministic: it depends only on the order of the
// input.
func (bs *blocks) claim(key, want string) string {
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

// lookup returns the id claimed for key, or want when none was.
func (bs *blocks) lookup(key, want string) string {
	if id, ok := bs.taken[key]; ok {
		return id
	}
	return want
}

func (bs *blocks) has(id string) bool { return bs.m[id] != nil }

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
	set(b.Metadata != nil && !bytes.Equal(mustJSON(b.Metadata), mustJSON(last.Metadata)), func() { diff.Metadata, merged.Metadata = b.Metadata, b.Metadata })
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

// put brings block b.ID to the state b describes; b's text field holds the
// full text. A new block is upserted whole (stamped with the line's time
// when b has none). For a known block the text becomes a delta when it
// extends what was sent, part of the upsert when it does not, and nothing
// when unchanged or empty; other fields are upserted only when they
// changed. A known block stays in the conversation it was created in.
func (bs *blocks) put(o *out, conv string, b conversation.Block) {
	st := bs.m[b.ID]
	if st != nil && b.Type != "" && b.Type != st.last.Type {
		// Malformed input gave one id to objects of two types: keep them
		// apart rather than turn one block into another.
		b.ID = bs.claim("retype:"+b.ID+":"+string(b.Type), b.ID+"~"+string(b.Type))
		st = bs.m[b.ID]
	}
	full := *textOf(&b)
	if st == nil {
		if b.Timestamp.IsZero() {
			b.Timestamp = o.ts
		}
		last := b
		last.Timestamp = time.Time{}
		*textOf(&last) = ""
		bs.m[b.ID] = &blockState{conv: conv, text: full, last: last}
		o.emit(conv, conversation.BlockUpsert{Block: b})
		return
	}
	if b.Type == "" {
		b.Type = st.last.Type
	}
	diff, merged, any := changed(st.last, b)
	st.last = merged
	switch {
	case full == "" || full == st.text:
	case strings.HasPrefix(full, st.text) && !any:
		o.emit(st.conv, conversation.BlockDelta{BlockID: b.ID, Delta: full[len(st.text):]})
		st.text = full
		return
	case strings.HasPrefix(full, st.text):
		o.emit(st.conv, conversation.BlockDelta{BlockID: b.ID, Delta: full[len(st.text):]})
		st.text = full
	default:
		*textOf(&diff) = full
		st.text = full
		any = true
	}
	if any {
		o.emit(st.conv, conversation.BlockUpsert{Block: diff})
	}
}

// appendText appends delta to a known block's text; it reports false for an
// unknown block.
func (bs *blocks) appendText(o *out, id, delta string) bool {
	st := bs.m[id]
	if st == nil {
		return false
	}
	if delta == "" {
		return true
	}
	st.text += delta
	o.emit(st.conv, conversation.BlockDelta{BlockID: id, Delta: delta})
	return true
}

func (bs *blocks) text(id string) string {
	if st := bs.m[id]; st != nil {
		return st.text
	}
	return ""
}

// tokenTotals are codex's token counts: input includes the cached part
// (and the cache writes, for providers that report them).
type tokenTotals struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
}

// minus returns t - prev, or t itself when a count went down (a reset).
func (t tokenTotals) minus(prev tokenTotals) tokenTotals {
	d := tokenTotals{t.InputTokens - prev.InputTokens, t.CachedInputTokens - prev.CachedInputTokens,
		t.CacheWriteInputTokens - prev.CacheWriteInputTokens, t.OutputTokens - prev.OutputTokens}
	if d.InputTokens < 0 || d.CachedInputTokens < 0 || d.CacheWriteInputTokens < 0 || d.OutputTokens < 0 {
		return t
	}
	return d
}

// usage converts codex counts to agentd's, where InputTokens excludes
// cache reads and writes (as Anthropic's do), so totals add up the same
// way for every architecture.
func (t tokenTotals) usage() *conversation.Usage {
	cached := min(max(t.CachedInputTokens, 0), max(t.InputTokens, 0))
	write := min(max(t.CacheWriteInputTokens, 0), max(t.InputTokens, 0)-cached)
	return &conversation.Usage{InputTokens: max(t.InputTokens, 0) - cached - write, OutputTokens: max(t.OutputTokens, 0),
		CacheReadInputTokens: cached, CacheCreationInputTokens: write}
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// mustJSON marshals plain data.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// objectInput returns raw when it is a JSON object, else wraps it as
// {"input": raw} so a tool_use input is always an object.
func objectInput(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return append(json.RawMessage(nil), t...)
	}
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage(`{}`)
	}
	if !json.Valid(t) {
		return mustJSON(map[string]string{"input": string(raw)})
	}
	return mustJSON(map[string]json.RawMessage{"input": t})
}

func statusOf(done, failed bool) conversation.BlockStatus {
	switch {
	case failed:
		return conversation.StatusError
	case done:
		return conversation.StatusComplete
	}
	return conversation.StatusPending
}

// mcpContentText joins the text items of an MCP result's content; other
// items are kept as JSON.
func mcpContentText(items []json.RawMessage) string {
	var sb strings.Builder
	for _, it := range items {
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(it, &c) == nil && c.Type == "text" {
			sb.WriteString(c.Text)
			continue
		}
		sb.Write(bytes.TrimSpace(it))
	}
	return sb.String()
}
