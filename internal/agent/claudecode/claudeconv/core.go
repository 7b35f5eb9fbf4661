package claudeconv

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
)

// ErrMalformed wraps the error for a line that is not a JSON object (bad or
// truncated JSON). The line is skipped; the converter stays usable.
var ErrMalformed = errors.New("claudecode: malformed line")

// ErrIgnored wraps the error for a line of a kind that carries nothing for
// the conversation (transcript bookkeeping: summary, file-history-snapshot,
// queue-operation, last-prompt, custom-title, ai-title, agent-name,
// pr-link). The line is skipped.
var ErrIgnored = errors.New("claudecode: line ignored")

// partKind classifies content blocks for matching a streamed block to the
// complete line that carries it.
type partKind uint8

const (
	kindOther partKind = iota
	kindText
	kindThinking
	kindTool
)

func partKindOf(typ string) partKind {
	switch typ {
	case "text":
		return kindText
	case "thinking", "redacted_thinking":
		return kindThinking
	case "tool_use", "server_tool_use", "mcp_tool_use":
		return kindTool
	}
	return kindOther
}

// toolInfo is what later lines need to know about a tool call.
type toolInfo struct {
	name      string
	skillName string // Skill calls: the skill requested
}

// partialMessage is the message being streamed (stream_event lines) in one
// conversation.
type partialMessage struct {
	msgID  string
	model  string
	blocks []partialBlock
}

type partialBlock struct {
	open     bool // content_block_start seen
	done     bool // the complete assistant line arrived
	kind     partKind
	subagent bool
	id       string
	toolName string
	json     []byte // accumulated input_json_delta
}

// maxStreamIndex bounds content_block indexes taken from the input, so a
// corrupt index cannot make the converter allocate without limit.
const maxStreamIndex = 4096

// core is the conversion shared by the stream and transcript converters:
// block numbering, tool and subagent bookkeeping, and the mapping of every
// line type to events. It is not safe for concurrent use.
type core struct {
	sc, sc2 scanner // sc for lines, sc2 for values inside a line
	// out is the line's events. Its block:upsert and block:delta events
	// have no payload yet: typed holds them, so a BlockSink takes them
	// without JSON and finish encodes them for everyone else.
	out   []conversation.Event
	typed []typedEvent
	// scratch collects the hand-encoded payloads of one line; at the end of
	// the line they move to one allocation of their own (see finish).
	scratch []byte

	lineNo   int
	msgCount map[string]int      // message id → content blocks numbered so far
	seen     map[string]struct{} // uuids of message lines converted
	tools    map[string]*toolInfo
	subs     subagentIndex
	// skills maps a conversation to the skill a Skill call just loaded;
	// the skill's content follows as a synthetic user message.
	skills   map[string]string
	partial  map[string]*partialMessage    // conversation → streamed message
	msgUsage map[string]conversation.Usage // transcript: usage emitted per message

	// usageFromMessages sums usage from assistant lines (transcripts, which
	// have no result lines); the stream takes it from result lines.
	usageFromMessages bool

	mainModel string
	initModel string
	lastCost  float64

	// keepImages: tool results' images become attachments, their bytes
	// held in images for the runtime to store (images.go).
	keepImages bool
	images     []Image
}

func newCore() *core {
	return &core{
		msgCount: make(map[string]int),
		seen:     make(map[string]struct{}),
		tools:    make(map[string]*toolInfo),
		skills:   make(map[string]string),
		partial:  make(map[string]*partialMessage),
		msgUsage: make(map[string]conversation.Usage),
	}
}

// lineCtx is where a line's events go.
type lineCtx struct {
	conv string
	ts   time.Time
}

func parseTimestamp(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// convert turns one decoded line into events addressed to conv. raw is the
// line as read, for handlers that decode more of it and for logs.
func (c *core) convert(l *wireLine, raw []byte, conv string) ([]conversation.Event, error) {
	err := c.convertLine(l, raw, conv)
	return c.finish(), err
}

// convertLine converts one line into c.out and c.typed (see convert); the
// caller takes them with finish or emitTo.
func (c *core) convertLine(l *wireLine, raw []byte, conv string) error {
	c.out = c.out[:0]
	clear(c.typed) // drop the strings of the previous line's blocks
	c.typed = c.typed[:0]
	c.lineNo++
	lc := lineCtx{conv: conv, ts: parseTimestamp(l.Timestamp)}
	if lc.conv == "" {
		lc.conv = conversation.MainConversation
	}
	var err error
	switch l.Type {
	case "assistant":
		c.assistant(l, lc)
	case "user":
		c.user(l, lc)
	case "stream_event":
		c.streamEvent(l, lc)
	case "system":
		c.system(l, raw, lc)
	case "result":
		c.result(raw, lc)
	case "error":
		c.errorLine(raw, lc)
	case "summary", "file-history-snapshot", "queue-operation", "last-prompt", "custom-title", "ai-title", "agent-name", "pr-link":
		err = fmt.Errorf("%w: %s line", ErrIgnored, l.Type)
	case "attachment":
		// Context Claude Code attaches to a turn (agent and skill listings,
		// mentioned files, reminders): what the model saw, not what was
		// said.
		c.log(lc, conversation.LevelDebug, "attachment", nil)
	case "keep_alive", "stream_request_start", "tool_progress", "progress":
		// Liveness and progress ticks (and, in transcripts, progress lines
		// that repeat what the subagent files hold): nothing for the
		// conversation, and frequent enough that logging them would swamp
		// the log.
	case "control_request", "control_response", "control_cancel_request":
		c.log(lc, conversation.LevelDebug, "control protocol message: "+l.Subtype, raw)
	case "":
		c.log(lc, conversation.LevelWarn, "Claude Code line without a type", raw)
	default:
		c.log(lc, conversation.LevelInfo, "unknown Claude Code line type "+strconv.Quote(l.Type), raw)
	}
	return err
}

// typedEvent is a block:upsert (block) or block:delta (id, text) of the
// line, kept typed until its payload is needed; event is its index in out.
type typedEvent struct {
	event    int
	block    conversation.Block
	id, text string
}

// finish encodes the line's typed events (their payloads share one
// allocation; scratch is reused for the next line) and returns the line's
// events, which are the caller's.
func (c *core) finish() []conversation.Event {
	if len(c.out) == 0 {
		return nil
	}
	out := append([]conversation.Event(nil), c.out...)
	if len(c.typed) > 0 {
		c.scratch = c.scratch[:0]
		ends := make([]int, len(c.typed))
		for i := range c.typed {
			t := &c.typed[i]
			if out[t.event].Type == conversation.TypeBlockDelta {
				c.scratch = appendDeltaPayload(c.scratch, t.id, t.text)
			} else {
				c.scratch = appendUpsertPayload(c.scratch, &t.block)
			}
			ends[i] = len(c.scratch)
		}
		// append onto nil does not clear the copied bytes, unlike make.
		arena := append([]byte(nil), c.scratch...)
		start := 0
		for i, t := range c.typed {
			out[t.event].Payload = arena[start:ends[i]:ends[i]]
			start = ends[i]
		}
		if cap(c.scratch) > 1<<20 {
			c.scratch = nil // do not pin one huge line's buffer
		}
	}
	return out
}

// emitTo gives the line's events to sink in order: the typed ones as they
// are when it is a BlockSink, else as finish encodes them.
func (c *core) emitTo(sink Sink) error {
	bs, ok := sink.(BlockSink)
	if !ok {
		for _, e := range c.finish() {
			if err := sink.Emit(e); err != nil {
				return err
			}
		}
		return nil
	}
	typed := c.typed
	for i := range c.out {
		e := &c.out[i]
		var err error
		switch {
		case len(typed) == 0 || typed[0].event != i:
			err = bs.Emit(*e)
		case e.Type == conversation.TypeBlockDelta:
			err = bs.EmitDelta(e.Context, typed[0].id, typed[0].text)
			typed = typed[1:]
		default:
			err = bs.EmitBlock(e.Context, &typed[0].block)
			typed = typed[1:]
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// --- emitting ---

func (c *core) push(typ conversation.EventType, payload []byte, lc lineCtx) {
	c.out = append(c.out, conversation.Event{
		Type:    typ,
		Payload: payload,
		Context: conversation.Context{ConversationID: lc.conv, Source: conversation.SourceRunner, Timestamp: lc.ts},
	})
}

func (c *core) upsert(b *conversation.Block, lc lineCtx) {
	c.typed = append(c.typed, typedEvent{event: len(c.out), block: *b})
	c.push(conversation.TypeBlockUpsert, nil, lc)
}

func (c *core) delta(id, text string, lc lineCtx) {
	c.typed = append(c.typed, typedEvent{event: len(c.out), id: id, text: text})
	c.push(conversation.TypeBlockDelta, nil, lc)
}

func (c *core) emit(p conversation.Payload, lc lineCtx) {
	e := conversation.NewEvent(p)
	c.push(e.Type, e.Payload, lc)
}

// log emits a log event; data (the raw line, or part of it) is kept when it
// is valid JSON.
func (c *core) log(lc lineCtx, level conversation.LogLevel, msg string, data []byte) {
	c.emit(conversation.LogEvent{Level: level, Message: msg, Data: compactJSON(data)}, lc)
}

// --- ids ---

// lineKey identifies a line for block ids: its uuid, or its position in the
// input when it has none (still deterministic for the same input).
func (c *core) lineKey(l *wireLine) string {
	if l.UUID != "" {
		return l.UUID
	}
	return "line" + strconv.Itoa(c.lineNo)
}

func blockID(key string, n int) string { return key + "-" + strconv.Itoa(n) }

// firstSeen reports whether the line's uuid is new, and records it. Lines
// without a uuid are always new. Resumed sessions copy earlier lines into
// the new transcript; converting them twice would renumber their blocks.
func (c *core) firstSeen(l *wireLine) bool {
	if l.UUID == "" {
		return true
	}
	if _, dup := c.seen[l.UUID]; dup {
		return false
	}
	c.seen[l.UUID] = struct{}{}
	return true
}

// index returns n for the next content block of message msgID: the position
// of the block among all of the message's content blocks, across every line
// that carries the message. When the block was streamed (content_block_start
// index i), the complete line takes the same n so both address one block.
func (c *core) index(conv, msgID string, kind partKind) int {
	if p := c.partial[conv]; p != nil && p.msgID == msgID {
		for i := range p.blocks {
			b := &p.blocks[i]
			if b.open && !b.done && b.kind == kind {
				b.done = true
				if c.msgCount[msgID] < i+1 {
					c.msgCount[msgID] = i + 1
				}
				return i
			}
		}
	}
	n := c.msgCount[msgID]
	c.msgCount[msgID] = n + 1
	if p := c.partial[conv]; p != nil && p.msgID == msgID && n < len(p.blocks) {
		p.blocks[n].done = true
	}
	return n
}

// --- assistant lines ---

func (c *core) assistant(l *wireLine, lc lineCtx) {
	if !c.firstSeen(l) {
		return
	}
	m := &l.Message
	msgID := m.ID
	if msgID == "" {
		msgID = c.lineKey(l)
	}
	delete(c.skills, lc.conv)
	c.noteModel(m.Model, lc)
	if c.usageFromMessages && m.HasUsage {
		c.messageUsage(msgID, m.Usage, lc)
	}
	if m.IsString {
		c.assistantText(l, lc, msgID, m.ContentString)
		return
	}
	for i := range m.Content {
		c.assistantPart(l, lc, msgID, &m.Content[i])
	}
}

func (c *core) assistantText(l *wireLine, lc lineCtx, msgID, text string) {
	n := c.index(lc.conv, msgID, kindText)
	b := conversation.Block{ID: blockID(msgID, n), Timestamp: lc.ts, Status: conversation.StatusComplete}
	// Transcripts mark API error messages isApiErrorMessage; stream-json
	// gives only the error code on the synthetic message that carries it.
	if l.IsAPIErrorMessage || (l.Error != "" && l.Message.Model == "<synthetic>") {
		b.Type = conversation.BlockError
		b.Message = text
		b.Code = l.Error
		if b.Code == "" && l.APIErrorStatus != 0 {
			b.Code = "HTTP_" + strconv.FormatInt(l.APIErrorStatus, 10)
		}
		b.Status = conversation.StatusError
	} else {
		b.Type = conversation.BlockAssistantText
		b.Content = text
		b.Model = l.Message.Model
	}
	c.upsert(&b, lc)
}

func (c *core) assistantPart(l *wireLine, lc lineCtx, msgID string, p *wirePart) {
	switch p.Type {
	case "text":
		c.assistantText(l, lc, msgID, p.Text)
	case "thinking", "redacted_thinking":
		n := c.index(lc.conv, msgID, kindThinking)
		b := conversation.Block{ID: blockID(msgID, n), Type: conversation.BlockThinking,
			Timestamp: lc.ts, Status: conversation.StatusComplete, Content: p.Text}
		if p.Type == "redacted_thinking" {
			b.Metadata = map[string]any{"redacted": true}
		}
		c.upsert(&b, lc)
	case "tool_use", "server_tool_use", "mcp_tool_use":
		n := c.index(lc.conv, msgID, kindTool)
		c.toolUse(lc, msgID, n, p)
	default:
		n := c.index(lc.conv, msgID, kindOther)
		if strings.HasSuffix(p.Type, "_tool_result") && p.ToolUseID != "" {
			// Server-side tool results (web search, MCP) arrive inside the
			// assistant message.
			c.toolResultBlock(lc, p.ToolUseID, p.Output, p.IsError, 0, c.attach(p.Images))
			return
		}
		_ = n
		c.log(lc, conversation.LevelInfo, "unknown content block type "+strconv.Quote(p.Type), p.Raw)
	}
}

func (c *core) toolUse(lc lineCtx, msgID string, n int, p *wirePart) {
	id := p.ID
	if id == "" {
		id = blockID(msgID, n)
	}
	input := passthroughJSON(p.Input, p.InputSpaced)
	ti := &p.Tool
	if isSubagentTool(p.Name) && p.Type == "tool_use" {
		c.tools[id] = &toolInfo{name: p.Name}
		sa, isNew := c.subs.spawn(id, lc.conv, ti.prompt, ti.subagentType, ti.description)
		b := c.subagentBlock(sa)
		b.Timestamp = lc.ts
		b.Status = conversation.StatusPending
		c.upsert(&b, lc)
		if isNew {
			c.emit(conversation.SubagentSpawned{ToolUseID: id, AgentID: sa.agentID, Prompt: ti.prompt,
				SubagentType: ti.subagentType, Description: ti.description}, lc)
		}
		return
	}
	info := &toolInfo{name: p.Name}
	if p.Name == "Skill" {
		info.skillName = ti.skill
	}
	c.tools[id] = info
	b := conversation.Block{ID: id, Type: conversation.BlockToolUse, Timestamp: lc.ts,
		Status: conversation.StatusComplete, ToolName: p.Name, ToolUseID: id, Input: input,
		Description: ti.description}
	c.upsert(&b, lc)
}

// subagentBlock is the subagent block for sa with the fields the spawn
// knows.
func (c *core) subagentBlock(sa *subagent) conversation.Block {
	b := conversation.Block{ID: sa.toolUseID, Type: conversation.BlockSubagent,
		SubagentID: sa.toolUseID, ToolUseID: sa.toolUseID, Name: sa.subagentType,
		Description: sa.description}
	if sa.prompt != "" {
		b.Input = appendString(nil, sa.prompt)
	}
	return b
}

func (c *core) noteModel(model string, lc lineCtx) {
	if lc.conv != conversation.MainConversation || model == "" || model == "<synthetic>" || model == c.mainModel {
		return
	}
	c.mainModel = model
	c.emit(conversation.MetadataUpdate{Model: model}, lc)
}

// messageUsage emits the growth of a message's usage. Every line of a
// message repeats the message's usage as known when the line was written, so
// only the increase over what was already counted is new.
func (c *core) messageUsage(msgID string, u wireUsage, lc lineCtx) {
	prev := c.msgUsage[msgID]
	inc := conversation.Usage{
		InputTokens:              max(0, u.InputTokens-prev.InputTokens),
		OutputTokens:             max(0, u.OutputTokens-prev.OutputTokens),
		CacheReadInputTokens:     max(0, u.CacheReadInputTokens-prev.CacheReadInputTokens),
		CacheCreationInputTokens: max(0, u.CacheCreationInputTokens-prev.CacheCreationInputTokens),
	}
	if inc == (conversation.Usage{}) {
		return
	}
	c.msgUsage[msgID] = prev.Add(inc)
	c.emit(conversation.MetadataUpdate{Usage: &inc}, lc)
}

// --- user lines ---

func (c *core) user(l *wireLine, lc lineCtx) {
	if !c.firstSeen(l) {
		return
	}
	m := &l.Message
	if m.IsString {
		c.userText(l, lc, 0, m.ContentString)
		return
	}
	// The text and image parts of a line form one block, placed where the
	// first of them is.
	first, texts := -1, 0
	for i := range m.Content {
		switch m.Content[i].Type {
		case "text", "image":
			if first < 0 {
				first = i
			}
			texts++
		}
	}
	results := 0
	for i := range m.Content {
		if m.Content[i].Type == "tool_result" {
			results++
		}
	}
	for i := range m.Content {
		p := &m.Content[i]
		switch p.Type {
		case "tool_result":
			var tur *toolUseResult
			if results == 1 {
				// The structured result describes the line's only result.
				tur = &l.ToolUseResult
			}
			c.toolResult(lc, p, tur)
		case "text", "image":
			if i == first {
				c.userText(l, lc, i, joinUserParts(m.Content, texts))
			}
		default:
			c.log(lc, conversation.LevelInfo, "unknown user content block type "+strconv.Quote(p.Type), p.Raw)
		}
	}
}

func joinUserParts(parts []wirePart, n int) string {
	if n == 1 {
		for i := range parts {
			switch parts[i].Type {
			case "text":
				return parts[i].Text
			case "image":
				return imageNote(parts[i].MediaType)
			}
		}
	}
	var sb strings.Builder
	for i := range parts {
		var s string
		switch parts[i].Type {
		case "text":
			s = parts[i].Text
		case "image":
			s = imageNote(parts[i].MediaType)
		default:
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(s)
	}
	return sb.String()
}

func (c *core) userText(l *wireLine, lc lineCtx, idx int, text string) {
	b := conversation.Block{ID: blockID(c.lineKey(l), idx), Timestamp: lc.ts, Status: conversation.StatusComplete}
	synthetic := l.IsMeta || l.IsSynthetic
	switch {
	case strings.HasPrefix(text, "<task-notification>"):
		c.taskNotification(lc, &b, text)
	case l.IsCompactSummary:
		b.Type = conversation.BlockSystem
		b.Subtype = "compact_summary"
		b.Message = text
	case synthetic && c.takeSkill(l, lc, &b, text):
	case strings.HasPrefix(text, "[Request interrupted by user"):
		b.Type = conversation.BlockSystem
		b.Subtype = "interrupted"
		b.Message = text
	default:
		b.Type = conversation.BlockUserMessage
		b.Content = text
		if synthetic {
			b.Metadata = map[string]any{"synthetic": true}
		}
	}
	c.upsert(&b, lc)
}

// taskNotification handles the message Claude Code injects when a
// background task ends (<task-notification><task-id>…</task-id><status>…
// </status><summary>…</summary><result>…</result>…): it completes the
// background subagent it names, and shows as a system block.
func (c *core) taskNotification(lc lineCtx, b *conversation.Block, text string) {
	b.Type = conversation.BlockSystem
	b.Subtype = "task_notification"
	summary := xmlElement(text, "summary")
	b.Message = orElse(summary, text)
	sa := c.subs.agent(xmlElement(text, "task-id"))
	if sa == nil {
		sa = c.subs.tool(xmlElement(text, "tool-use-id"))
	}
	if sa == nil || !sa.async || sa.done {
		return
	}
	output := orElse(xmlElement(text, "result"), summary)
	c.completeSubagent(sa, xmlElement(text, "status") != "completed", output, 0,
		lineCtx{conv: sa.parentConv, ts: lc.ts})
}

// xmlElement returns the trimmed text of the first <name>…</name> in s.
func xmlElement(s, name string) string {
	_, rest, ok := strings.Cut(s, "<"+name+">")
	if !ok {
		return ""
	}
	v, _, ok := strings.Cut(rest, "</"+name+">")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

// takeSkill turns b into the skill_load block when this synthetic message
// carries the content of a skill a Skill call just loaded.
func (c *core) takeSkill(l *wireLine, lc lineCtx, b *conversation.Block, text string) bool {
	var name string
	if t := c.tools[l.SourceToolUseID]; l.SourceToolUseID != "" && t != nil && t.name == "Skill" {
		name = t.skillName
		delete(c.skills, lc.conv)
	} else if skill, ok := c.skills[lc.conv]; ok {
		name = skill
		delete(c.skills, lc.conv)
	} else {
		return false
	}
	b.Type = conversation.BlockSkillLoad
	b.SkillName = name
	b.Content = text
	return true
}

func (c *core) toolResult(lc lineCtx, p *wirePart, tur *toolUseResult) {
	id := p.ToolUseID
	if id == "" {
		c.log(lc, conversation.LevelWarn, "tool_result without tool_use_id", p.Raw)
		return
	}
	if tur == nil {
		tur = &toolUseResult{}
	}
	info := c.tools[id]
	if sa := c.subs.tool(id); sa != nil {
		c.subagentResult(lc, sa, p, tur)
		return
	}
	dur := tur.DurationMs
	if dur == 0 {
		dur = tur.TotalDurationMs
	}
	c.toolResultBlock(lc, id, p.Output, p.IsError, dur, c.attach(p.Images))
	if info != nil && info.name == "Skill" && !p.IsError {
		name := info.skillName
		if name == "" {
			name = tur.CommandName
		}
		c.skills[lc.conv] = name
	}
}

func (c *core) toolResultBlock(lc lineCtx, toolUseID, output string, isError bool, durationMs int64, attachments []conversation.ArtifactRef) {
	b := conversation.Block{ID: conversation.ToolResultID(toolUseID), Type: conversation.BlockToolResult,
		Timestamp: lc.ts, Status: conversation.StatusComplete, ToolUseID: toolUseID,
		Output: output, IsError: isError, DurationMs: durationMs, Attachments: attachments}
	if isError {
		b.Status = conversation.StatusError
		b.Output = stripToolUseError(output)
	}
	c.upsert(&b, lc)
}

// stripToolUseError removes the <tool_use_error> wrapper Claude Code puts
// around a failed call's message; isError already says it failed.
func stripToolUseError(s string) string {
	const open, closing = "<tool_use_error>", "</tool_use_error>"
	if strings.HasPrefix(s, open) && strings.HasSuffix(s, closing) && len(s) >= len(open)+len(closing) {
		return s[len(open) : len(s)-len(closing)]
	}
	return s
}

func (c *core) subagentResult(lc lineCtx, sa *subagent, p *wirePart, tur *toolUseResult) {
	agentID := tur.AgentID
	if agentID == "" {
		agentID = agentIDFromText(p.Output)
	}
	c.subs.bind(sa.toolUseID, agentID)
	plc := lineCtx{conv: sa.parentConv, ts: lc.ts}
	if (tur.Status == "async_launched" || tur.IsAsync) && !p.IsError {
		// Running in the background: the result only acknowledges the
		// launch; a task_notification reports the end.
		sa.async = true
		b := conversation.Block{ID: sa.toolUseID, Type: conversation.BlockSubagent,
			Metadata: map[string]any{"background": true}}
		c.upsert(&b, plc)
		c.log(plc, conversation.LevelInfo, "subagent "+sa.toolUseID+" runs in the background", nil)
		return
	}
	output := stripAgentTrailer(p.Output)
	if text, ok := tur.content(&c.sc2); ok {
		output = text
	}
	if p.IsError {
		output = stripToolUseError(p.Output)
	}
	c.completeSubagent(sa, p.IsError, output, tur.TotalDurationMs, plc)
}

func (c *core) completeSubagent(sa *subagent, failed bool, output string, durationMs int64, lc lineCtx) {
	status := conversation.StatusComplete
	if failed {
		status = conversation.StatusError
	}
	sa.done = true
	// No timestamp: the block keeps the time it was spawned.
	b := conversation.Block{ID: sa.toolUseID, Type: conversation.BlockSubagent,
		Status: status, Output: output, DurationMs: durationMs}
	c.upsert(&b, lc)
	c.emit(conversation.SubagentCompleted{ToolUseID: sa.toolUseID, AgentID: sa.agentID,
		Status: status, Output: output, DurationMs: durationMs}, lc)
}

// errorLine handles a top-level error line: an error event naming the
// cause.
func (c *core) errorLine(raw []byte, lc lineCtx) {
	var e struct {
		Message string          `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	_ = unmarshalLenient(raw, &e)
	msg, code := e.Message, ""
	var str string
	var obj struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	switch {
	case len(e.Error) == 0:
	case json.Unmarshal(e.Error, &str) == nil:
		msg = orElse(msg, str)
	case json.Unmarshal(e.Error, &obj) == nil:
		msg, code = orElse(msg, obj.Message), obj.Type
	}
	c.emit(conversation.ErrorEvent{Message: orElse(msg, "Claude Code reported an error"), Code: code}, lc)
}

// --- result lines (stream) ---

type resultLine struct {
	Subtype      string   `json:"subtype"`
	IsError      bool     `json:"is_error"`
	DurationMs   float64  `json:"duration_ms"`
	Result       string   `json:"result"`
	TotalCostUSD *float64 `json:"total_cost_usd"`
	Usage        *struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	} `json:"usage"`
	ModelUsage map[string]struct {
		CostUSD      float64 `json:"costUSD"`
		OutputTokens int64   `json:"outputTokens"`
	} `json:"modelUsage"`
	Errors []json.RawMessage `json:"errors"`
}

// unmarshalLenient decodes raw into v, ignoring fields of an unexpected
// type (encoding/json fills the rest and reports the first mismatch).
func unmarshalLenient(raw []byte, v any) error {
	err := json.Unmarshal(raw, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return nil
	}
	return err
}

func (c *core) result(raw []byte, lc lineCtx) {
	var r resultLine
	if err := unmarshalLenient(raw, &r); err != nil {
		c.log(lc, conversation.LevelWarn, "unreadable result line: "+err.Error(), raw)
		return
	}
	lc.conv = conversation.MainConversation
	var md conversation.MetadataUpdate
	if r.Usage != nil {
		md.Usage = &conversation.Usage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
			CacheReadInputTokens: r.Usage.CacheReadInputTokens, CacheCreationInputTokens: r.Usage.CacheCreationInputTokens}
	}
	if r.TotalCostUSD != nil {
		// total_cost_usd counts from the start of the process; the event
		// carries the increment. A smaller total means a new process.
		inc := *r.TotalCostUSD - c.lastCost
		if *r.TotalCostUSD < c.lastCost {
			inc = *r.TotalCostUSD
		}
		c.lastCost = *r.TotalCostUSD
		md.CostUSD = &inc
	}
	// The model that answered in the main conversation; else the one init
	// announced; else the one that cost the most.
	md.Model = orElse(c.mainModel, orElse(c.initModel, mainModelOf(r.ModelUsage)))
	if md.Usage != nil || md.CostUSD != nil || md.Model != "" {
		c.emit(md, lc)
	}
	dur := int64(r.DurationMs)
	if r.IsError || strings.HasPrefix(r.Subtype, "error") {
		code, msg := resultError(&r)
		c.emit(conversation.QueryFailed{Error: msg, Code: code, DurationMs: dur}, lc)
		return
	}
	c.emit(conversation.QueryCompleted{DurationMs: dur, Result: r.Result}, lc)
}

// mainModelOf picks the model that cost the most (ties: the name sorting
// first) from a result's modelUsage.
func mainModelOf(mu map[string]struct {
	CostUSD      float64 `json:"costUSD"`
	OutputTokens int64   `json:"outputTokens"`
}) string {
	best := ""
	for name, u := range mu {
		if best == "" {
			best = name
			continue
		}
		b := mu[best]
		if u.CostUSD > b.CostUSD || (u.CostUSD == b.CostUSD && name < best) {
			best = name
		}
	}
	return best
}

func resultError(r *resultLine) (code, msg string) {
	switch r.Subtype {
	case "error_max_turns":
		code, msg = "MAX_TURNS", "the agent reached its maximum number of turns"
	case "error_during_execution":
		code, msg = "EXECUTION_ERROR", "the agent stopped with an error during execution"
	case "error_max_budget_usd":
		code, msg = "MAX_BUDGET", "the agent reached its budget"
	case "error_max_structured_output_retries":
		code, msg = "STRUCTURED_OUTPUT_RETRIES", "the agent could not produce the requested structured output"
	case "success", "":
		code, msg = "AGENT_ERROR", "the agent reported an error"
		if strings.HasPrefix(r.Result, "API Error") {
			code = "API_ERROR"
		}
	default:
		code = strings.ToUpper(strings.TrimPrefix(r.Subtype, "error_"))
		msg = "the agent stopped: " + r.Subtype
	}
	var details []string
	if r.Result != "" {
		details = append(details, r.Result)
	}
	for _, e := range r.Errors {
		var s string
		if json.Unmarshal(e, &s) == nil {
			details = append(details, s)
		} else if m := compactJSON(e); m != nil {
			details = append(details, string(m))
		}
	}
	if len(details) > 0 {
		msg = strings.Join(details, "; ")
	}
	return code, msg
}
