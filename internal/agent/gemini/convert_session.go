package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// SessionConverter converts a saved Gemini CLI chat. Two layouts exist:
// the single JSON document of older versions
// (chats/session-<time>-<id>.json: {sessionId, startTime, messages:[…]},
// see ConvertDocument) and the JSON-lines log of newer ones (0.5x+,
// session-…jsonl: a metadata record, then message records, where a
// message updated later is appended again whole, plus {"$set":…} metadata
// updates and {"$rewindTo": id} records; see Convert).
//
// Messages are user, gemini (content, thoughts, toolCalls with their
// results, tokens, model), info, warning and error. Block ids are
// "<message id>-<n>", n counting the message's text and thought blocks in
// the order first seen, so a message recorded again keeps its ids; tool
// blocks use the call id. A gemini answer without tool calls ends a turn:
// query:completed is emitted when the next user message arrives, or by
// Flush.
type SessionConverter struct {
	opts       convkit.Options
	sessionID  string
	model      string
	n          map[string]int  // message id → blocks allocated
	usageSeen  map[string]bool // message ids whose tokens were counted
	ended      map[string]bool // answers whose turn end was emitted
	finalMsgID string          // the last gemini answer, while its turn is open
	finalText  string
	blocks     convkit.Blocks
}

// NewSessionConverter returns a converter for one saved session.
func NewSessionConverter(opts ...Option) *SessionConverter {
	return &SessionConverter{opts: convkit.Build(opts), n: map[string]int{}, usageSeen: map[string]bool{}, ended: map[string]bool{},
		blocks: convkit.NewBlocks()}
}

// SessionID is the session's id once a record named it.
func (c *SessionConverter) SessionID() string { return c.sessionID }

type sessionMessage struct {
	ID             string          `json:"id"`
	Timestamp      string          `json:"timestamp"`
	Type           string          `json:"type"`
	Content        json.RawMessage `json:"content"`
	DisplayContent json.RawMessage `json:"displayContent"`
	Model          string          `json:"model"`
	Thoughts       []struct {
		Subject     string `json:"subject"`
		Description string `json:"description"`
		Timestamp   string `json:"timestamp"`
	} `json:"thoughts"`
	Tokens *struct {
		Input    int64 `json:"input"`
		Output   int64 `json:"output"`
		Cached   int64 `json:"cached"`
		Thoughts int64 `json:"thoughts"`
		Tool     int64 `json:"tool"`
	} `json:"tokens"`
	ToolCalls []toolCall `json:"toolCalls"`
}

type toolCall struct {
	ID            string          `json:"id"`
	Name          string          `json:"name"`
	Args          json.RawMessage `json:"args"`
	Result        json.RawMessage `json:"result"`
	Status        string          `json:"status"`
	Timestamp     string          `json:"timestamp"`
	ResultDisplay json.RawMessage `json:"resultDisplay"`
	DisplayName   string          `json:"displayName"`
}

// sessionRecord is one line of the JSON-lines layout (or the legacy
// document, which has the metadata fields and messages).
type sessionRecord struct {
	sessionMessage
	SessionID string            `json:"sessionId"`
	StartTime string            `json:"startTime"`
	Set       json.RawMessage   `json:"$set"`
	RewindTo  *string           `json:"$rewindTo"`
	Messages  []json.RawMessage `json:"messages"`
}

// Convert converts one record of the JSON-lines layout.
func (c *SessionConverter) Convert(line []byte) ([]conversation.Event, error) {
	var r sessionRecord
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("gemini session record: %w", err)
	}
	o := &convkit.Out{TS: convkit.ParseTime(r.Timestamp)}
	switch {
	case r.RewindTo != nil:
		o.Log(conversation.LevelWarn, "gemini session rewound to message "+*r.RewindTo+" (earlier blocks stay)", line)
	case len(r.Set) > 0:
		var set struct {
			Messages []json.RawMessage `json:"messages"`
		}
		if json.Unmarshal(r.Set, &set) == nil && set.Messages != nil {
			for _, m := range set.Messages {
				c.rawMessage(o, m)
			}
		}
	case r.ID != "" && r.Type != "":
		c.message(o, &r.sessionMessage, line)
	case r.SessionID != "":
		c.metadata(o, r.SessionID, line)
	default:
		o.Log(conversation.LevelWarn, "gemini: unknown session record", line)
	}
	return o.Events, nil
}

// ConvertDocument converts a whole session in the single-document layout.
// A message that does not decode becomes a log event; only a document that
// is not a session at all is an error.
func (c *SessionConverter) ConvertDocument(doc []byte) ([]conversation.Event, error) {
	var r sessionRecord
	if err := json.Unmarshal(doc, &r); err != nil {
		return nil, fmt.Errorf("gemini session: %w", err)
	}
	if r.SessionID == "" && r.Messages == nil {
		return nil, fmt.Errorf("gemini session: neither sessionId nor messages")
	}
	o := &convkit.Out{TS: convkit.ParseTime(r.StartTime)}
	if r.SessionID != "" {
		meta := map[string]string{"sessionId": r.SessionID, "startTime": r.StartTime}
		c.metadata(o, r.SessionID, convkit.MustJSON(meta))
	}
	for _, m := range r.Messages {
		c.rawMessage(o, m)
	}
	o.Events = append(o.Events, c.Flush()...)
	return o.Events, nil
}

// Flush ends the open turn: query:completed for a final answer nothing
// followed.
func (c *SessionConverter) Flush() []conversation.Event {
	o := &convkit.Out{}
	c.endTurn(o)
	return o.Events
}

func (c *SessionConverter) metadata(o *convkit.Out, id string, raw []byte) {
	if c.sessionID == "" {
		c.sessionID = id
	}
	o.Log(conversation.LevelInfo, "gemini session "+id, raw)
}

func (c *SessionConverter) rawMessage(o *convkit.Out, raw json.RawMessage) {
	var m sessionMessage
	if err := json.Unmarshal(raw, &m); err != nil || m.ID == "" {
		o.Log(conversation.LevelWarn, "gemini: session message that does not decode", raw)
		return
	}
	ts := o.TS
	o.TS = convkit.ParseTime(m.Timestamp)
	c.message(o, &m, raw)
	o.TS = ts
}

// blockID returns the id of the message's block for key, allocating the
// next "<message id>-<n>" the first time.
func (c *SessionConverter) blockID(msgID, key string) string {
	k := "msg:" + msgID + ":" + key
	if id, ok := c.blocks.Claimed(k); ok {
		return id
	}
	n := c.n[msgID]
	c.n[msgID] = n + 1
	return c.blocks.Claim(k, msgID+"-"+strconv.Itoa(n))
}

func (c *SessionConverter) endTurn(o *convkit.Out) {
	if c.finalMsgID == "" {
		return
	}
	o.Emit("", conversation.QueryCompleted{Result: c.finalText})
	c.ended[c.finalMsgID] = true
	c.finalMsgID, c.finalText = "", ""
}

func (c *SessionConverter) message(o *convkit.Out, m *sessionMessage, raw []byte) {
	switch m.Type {
	case "user":
		text := partsText(m.DisplayContent)
		if text == "" {
			text = partsText(m.Content)
		}
		// As Gemini CLI does when it resumes: a user record with no text
		// carries tool responses (already shown with their calls), and
		// <session_context>/<hook_context> ones are injected context.
		trimmed := strings.TrimSpace(text)
		if trimmed == "" {
			c.functionResponses(o, m.Content)
			return
		}
		if strings.HasPrefix(trimmed, "<session_context>") || strings.HasPrefix(trimmed, "<hook_context>") {
			o.Log(conversation.LevelDebug, "gemini: context sent to the model", raw)
			return
		}
		c.endTurn(o)
		if c.opts.OmitUserMessages {
			return
		}
		c.blocks.Put(o, "", conversation.Block{ID: c.blockID(m.ID, "text"), Type: conversation.BlockUserMessage,
			Status: conversation.StatusComplete, Content: text})
	case "gemini":
		c.gemini(o, m)
	case "info", "warning":
		c.blocks.Put(o, "", conversation.Block{ID: c.blockID(m.ID, "text"), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: m.Type, Message: partsText(m.Content)})
	case "error":
		msg := partsText(m.Content)
		id := c.blockID(m.ID, "text")
		isNew := !c.blocks.Has(id)
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockError, Status: conversation.StatusError, Message: msg})
		if isNew {
			o.Emit("", conversation.ErrorEvent{Message: msg})
		}
	default:
		o.Log(conversation.LevelWarn, "gemini: unknown message type "+strconv.Quote(m.Type), raw)
	}
}

func (c *SessionConverter) gemini(o *convkit.Out, m *sessionMessage) {
	if m.Model != "" && m.Model != c.model {
		c.model = m.Model
		o.Emit("", conversation.MetadataUpdate{Model: m.Model})
	}
	for i, th := range m.Thoughts {
		b := conversation.Block{ID: c.blockID(m.ID, "thought-"+strconv.Itoa(i)), Type: conversation.BlockThinking,
			Timestamp: convkit.ParseTime(th.Timestamp), Status: conversation.StatusComplete, Content: th.Description, Summary: th.Subject}
		c.blocks.Put(o, "", b)
	}
	text := partsText(m.Content)
	if text != "" {
		c.blocks.Put(o, "", conversation.Block{ID: c.blockID(m.ID, "text"), Type: conversation.BlockAssistantText,
			Status: conversation.StatusComplete, Content: text, Model: m.Model})
	}
	for i := range m.ToolCalls {
		c.toolCall(o, m.ID, &m.ToolCalls[i])
	}
	calls := c.functionCalls(o, m.Content)
	if m.Tokens != nil && !c.usageSeen[m.ID] {
		c.usageSeen[m.ID] = true
		t := m.Tokens
		// Gemini's prompt count includes the cached part; thoughts are
		// billed as output.
		u := conversation.Usage{InputTokens: max(t.Input-t.Cached, 0) + t.Tool, OutputTokens: t.Output + t.Thoughts, CacheReadInputTokens: t.Cached}
		if u != (conversation.Usage{}) {
			o.Emit("", conversation.MetadataUpdate{Usage: &u})
		}
	}
	switch {
	case len(m.ToolCalls) > 0 || calls > 0:
		if c.finalMsgID == m.ID {
			c.finalMsgID, c.finalText = "", ""
		}
	case text != "" && !c.ended[m.ID]:
		// A history rewritten on resume repeats answers already ended.
		c.finalMsgID, c.finalText = m.ID, text
	}
}

func (c *SessionConverter) toolCall(o *convkit.Out, msgID string, tc *toolCall) {
	key := tc.ID
	if key == "" {
		key = msgID + "-" + tc.Name
	}
	id := c.blocks.Claim("tool:"+key, key)
	b := conversation.Block{ID: id, Type: conversation.BlockToolUse, Timestamp: convkit.ParseTime(tc.Timestamp), ToolName: tc.Name, ToolUseID: id,
		Input: convkit.ObjectInput(tc.Args), DisplayName: tc.DisplayName}
	done := tc.Status != "" && tc.Status != "executing" && tc.Status != "scheduled" && tc.Status != "validating" && tc.Status != "awaiting_approval"
	isErr := done && tc.Status != "success"
	b.Status = convkit.StatusOf(done, isErr)
	c.blocks.Put(o, "", b)
	if !done {
		return
	}
	// The display text, as stream-json's tool_result shows, when the tool
	// has one; else what went back to the model.
	var output string
	if json.Unmarshal(tc.ResultDisplay, &output) != nil || output == "" {
		output = functionResponseText(tc.Result)
	}
	c.blocks.Put(o, "", conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult, Timestamp: convkit.ParseTime(tc.Timestamp),
		Status: convkit.StatusOf(true, isErr), ToolUseID: id, Output: output, IsError: isErr, Metadata: map[string]any{"status": tc.Status}})
}

// partsText reads Gemini content: a string, a Part ({text}) or a list of
// Parts, keeping the text parts.
func partsText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	type part struct {
		Text    *string `json:"text"`
		Thought bool    `json:"thought"`
	}
	var parts []part
	if json.Unmarshal(raw, &parts) != nil {
		var one part
		if json.Unmarshal(raw, &one) != nil || one.Text == nil {
			return ""
		}
		parts = []part{one}
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Text != nil && !p.Thought {
			sb.WriteString(*p.Text)
		}
	}
	return sb.String()
}

// functionResponseText reads a tool call's result: the Parts sent back to
// the model, whose functionResponse.response holds {output} or {error}.
func functionResponseText(raw json.RawMessage) string {
	var parts []struct {
		FunctionResponse *struct {
			Response map[string]json.RawMessage `json:"response"`
		} `json:"functionResponse"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var sb strings.Builder
	for _, p := range parts {
		switch {
		case p.FunctionResponse != nil:
			r := p.FunctionResponse.Response
			for _, k := range []string{"output", "error"} {
				if v, ok := r[k]; ok {
					if s := partsText(v); s != "" {
						sb.WriteString(s)
					} else {
						sb.Write(v)
					}
				}
			}
			_, hasOut := r["output"]
			_, hasErr := r["error"]
			if !hasOut && !hasErr && len(r) > 0 {
				sb.Write(convkit.MustJSON(r)) // keys sorted: deterministic
			}
		case p.Text != nil:
			sb.WriteString(*p.Text)
		}
	}
	return sb.String()
}

type functionPart struct {
	FunctionCall *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		ID       string                     `json:"id"`
		Name     string                     `json:"name"`
		Response map[string]json.RawMessage `json:"response"`
	} `json:"functionResponse"`
}

func functionParts(raw json.RawMessage) []functionPart {
	var parts []functionPart
	_ = json.Unmarshal(raw, &parts)
	return parts
}

// functionCalls turns the functionCall parts of a gemini message (the
// form a history rewritten on resume has, instead of toolCalls) into
// tool_use blocks, unless toolCalls already did; it returns how many the
// message has.
func (c *SessionConverter) functionCalls(o *convkit.Out, content json.RawMessage) int {
	n := 0
	for _, p := range functionParts(content) {
		fc := p.FunctionCall
		if fc == nil || fc.ID == "" {
			continue
		}
		n++
		id := c.blocks.Claim("tool:"+fc.ID, fc.ID)
		if c.blocks.Has(id) {
			continue
		}
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: conversation.StatusPending,
			ToolName: fc.Name, ToolUseID: id, Input: convkit.ObjectInput(fc.Args)})
	}
	return n
}

// functionResponses completes, from a user record's functionResponse
// parts, the tool calls that have no result yet.
func (c *SessionConverter) functionResponses(o *convkit.Out, content json.RawMessage) {
	for _, p := range functionParts(content) {
		fr := p.FunctionResponse
		if fr == nil || fr.ID == "" {
			continue
		}
		id := c.blocks.Lookup("tool:"+fr.ID, fr.ID)
		rid := conversation.ToolResultID(id)
		if !c.blocks.Has(id) || c.blocks.Has(rid) {
			continue
		}
		_, isErr := fr.Response["error"]
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(true, isErr)})
		c.blocks.Put(o, "", conversation.Block{ID: rid, Type: conversation.BlockToolResult, Status: convkit.StatusOf(true, isErr),
			ToolUseID: id, Output: functionResponseText(convkit.MustJSON([]functionPart{p})), IsError: isErr})
	}
}
