package codex

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// RolloutConverter converts a Codex session rollout file
// (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl): one
// {"timestamp","type","payload"} object per line, with type session_meta,
// response_item, event_msg, turn_context or compacted.
//
// Codex records most things twice: the model's items as response_item and
// the UI's view as event_msg. The converter takes assistant text,
// reasoning and tool calls from response_item (the canonical history,
// present in every version) and user messages from event_msg user_message
// or, in paginated rollouts, from item_completed UserMessage, because the
// user-role response_items also carry injected context (environment,
// AGENTS.md) the user never typed; those become debug log events. The
// event_msg duplicates (agent_message, agent_reasoning, …) are dropped.
//
// Items without an id of their own get "<session id>-<n>", n counting such
// blocks in the file; tool blocks use the call id.
type RolloutConverter struct {
	opts      convkit.Options
	sessionID string
	model     string
	n         int
	calls     int
	errors    int
	lastTotal *tokenTotals
	blocks    convkit.Blocks
}

// NewRolloutConverter returns a converter for one rollout file.
func NewRolloutConverter(opts ...Option) *RolloutConverter {
	return &RolloutConverter{opts: convkit.Build(opts), blocks: convkit.NewBlocks()}
}

// SessionID is the session id from session_meta ("" before it).
func (c *RolloutConverter) SessionID() string { return c.sessionID }

type rolloutLine struct {
	Timestamp string          `json:"timestamp"`
	Type      string          `json:"type"`
	Payload   *rolloutPayload `json:"payload"`
}

// rolloutPayload holds the payload fields the converter reads. Fields
// whose JSON type differs between payload kinds stay raw and are decoded
// where their kind is known, so one kind's shape never fails another's.
type rolloutPayload struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	Summary   json.RawMessage `json:"summary"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments json.RawMessage `json:"arguments"`
	Input     json.RawMessage `json:"input"`
	CallID    string          `json:"call_id"`
	Output    json.RawMessage `json:"output"`
	Status    string          `json:"status"`
	Action    json.RawMessage `json:"action"`

	// event_msg fields
	Message          json.RawMessage `json:"message"`
	Info             json.RawMessage `json:"info"`
	LastAgentMessage json.RawMessage `json:"last_agent_message"`
	Reason           json.RawMessage `json:"reason"`
	Item             json.RawMessage `json:"item"`

	// session_meta / turn_context
	Model      json.RawMessage `json:"model"`
	CLIVersion json.RawMessage `json:"cli_version"`
}

// str decodes a JSON string, "" for anything else.
func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Convert converts one rollout line.
func (c *RolloutConverter) Convert(line []byte) ([]conversation.Event, error) {
	var l rolloutLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("codex rollout line: %w", err)
	}
	p := l.Payload
	if p == nil {
		p = &rolloutPayload{}
	}
	o := &convkit.Out{TS: convkit.ParseTime(l.Timestamp)}
	switch l.Type {
	case "session_meta":
		if c.sessionID == "" {
			c.sessionID = p.ID
		}
		o.Log(conversation.LevelInfo, "codex session "+p.ID+" (cli "+str(p.CLIVersion)+")", line)
	case "turn_context":
		if m := str(p.Model); m != "" && m != c.model {
			c.model = m
			o.Emit("", conversation.MetadataUpdate{Model: m})
		}
	case "response_item":
		c.responseItem(o, p, line)
	case "event_msg":
		c.eventMsg(o, p, line)
	case "compacted":
		c.blocks.Put(o, "", conversation.Block{ID: c.ownID(""), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: "compaction", Message: str(p.Message)})
	case "world_state", "token_usage_record", "tool_manifest", "sampling_boundary",
		"inter_agent_communication", "inter_agent_communication_metadata":
		// Bookkeeping of newer versions (model-facing state, per-response
		// usage that token_count events already carry).
		o.Log(conversation.LevelDebug, "codex: rollout "+l.Type, line)
	default:
		o.Log(conversation.LevelWarn, "codex: unknown rollout line type "+strconv.Quote(l.Type), line)
	}
	return o.Events, nil
}

func (c *RolloutConverter) scope() string {
	switch {
	case c.opts.IDPrefix != "":
		return c.opts.IDPrefix
	case c.sessionID != "":
		return c.sessionID
	}
	return "rollout"
}

// ownID returns the item's id when it has one, else the next "<scope>-<n>".
func (c *RolloutConverter) ownID(id string) string {
	if id != "" {
		return c.blocks.Claim("id:"+id, id)
	}
	c.n++
	return c.blocks.Claim("n:"+strconv.Itoa(c.n), c.scope()+"-"+strconv.Itoa(c.n))
}

func joinText(raw json.RawMessage, types ...string) string {
	var parts []contentPart
	if json.Unmarshal(raw, &parts) != nil {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	var sb strings.Builder
	for _, p := range parts {
		for _, t := range types {
			if p.Type == t {
				sb.WriteString(p.Text)
			}
		}
	}
	return sb.String()
}

func (c *RolloutConverter) responseItem(o *convkit.Out, p *rolloutPayload, line []byte) {
	switch p.Type {
	case "message":
		if p.Role != "assistant" {
			o.Log(conversation.LevelDebug, "codex: "+p.Role+" message sent to the model", line)
			return
		}
		text := joinText(p.Content, "output_text", "text")
		c.blocks.Put(o, "", conversation.Block{ID: c.ownID(p.ID), Type: conversation.BlockAssistantText,
			Status: conversation.StatusComplete, Content: text, Model: c.model})
	case "reasoning":
		var parts []contentPart
		_ = json.Unmarshal(p.Summary, &parts)
		var summary []string
		for _, s := range parts {
			if s.Text != "" {
				summary = append(summary, s.Text)
			}
		}
		raw := joinText(p.Content, "reasoning_text", "text")
		b := conversation.Block{Type: conversation.BlockThinking, Status: conversation.StatusComplete, Content: strings.Join(summary, "\n\n")}
		if raw != "" {
			b.Content, b.Summary = raw, b.Content
		}
		if b.Content == "" {
			return // encrypted reasoning only: nothing a reader can use
		}
		b.ID = c.ownID(p.ID)
		c.blocks.Put(o, "", b)
	case "function_call", "custom_tool_call":
		var input json.RawMessage
		if p.Type == "custom_tool_call" {
			input = convkit.MustJSON(map[string]string{"input": str(p.Input)})
		} else if args, isString := stringOrRaw(p.Arguments); isString {
			input = convkit.ObjectInput(json.RawMessage(args))
		} else {
			input = convkit.ObjectInput(p.Arguments)
		}
		name := p.Name
		if p.Namespace != "" {
			name = p.Namespace + "." + p.Name
		}
		id := c.callID(p.CallID, p.ID)
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: conversation.StatusPending,
			ToolName: name, ToolUseID: id, Input: input})
	case "local_shell_call":
		id := c.callID(p.CallID, p.ID)
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: conversation.StatusPending,
			ToolName: "local_shell", ToolUseID: id, Input: convkit.ObjectInput(p.Action)})
	case "function_call_output", "custom_tool_call_output":
		id := c.blocks.Lookup("call:"+p.CallID, p.CallID)
		if id == "" {
			o.Log(conversation.LevelWarn, "codex: tool output without call_id", line)
			return
		}
		r := parseToolOutput(p.Output)
		meta := map[string]any{}
		if r.exitCode != nil {
			meta["exitCode"] = *r.exitCode
		}
		if len(meta) == 0 {
			meta = nil
		}
		if c.blocks.Has(id) {
			c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(true, r.isError)})
		}
		c.blocks.Put(o, "", conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult,
			Status: convkit.StatusOf(true, r.isError), ToolUseID: id, Output: r.output, IsError: r.isError, DurationMs: r.durationMs, Metadata: meta})
	case "web_search_call":
		id := c.ownID(p.ID)
		in := json.RawMessage(`{}`)
		if len(p.Action) > 0 {
			in = convkit.ObjectInput(p.Action)
		}
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(p.Status != "in_progress", p.Status == "failed"),
			ToolName: "web_search", ToolUseID: id, Input: in})
	default:
		o.Log(conversation.LevelDebug, "codex: response item "+strconv.Quote(p.Type), line)
	}
}

// stringOrRaw returns the string a JSON string holds, or raw itself.
func stringOrRaw(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	return string(raw), false
}

// callID claims the block id of a tool call.
func (c *RolloutConverter) callID(callID, itemID string) string {
	if callID == "" {
		return c.ownID(itemID)
	}
	// A call id seen again is a new call (a scripted model reusing ids);
	// later outputs belong to the latest one.
	c.calls++
	id := c.blocks.Claim("callitem:"+strconv.Itoa(c.calls), callID)
	c.blocks.Bind("call:"+callID, id)
	return id
}

func (c *RolloutConverter) eventMsg(o *convkit.Out, p *rolloutPayload, line []byte) {
	switch p.Type {
	case "user_message":
		if c.opts.OmitUserMessages {
			return
		}
		c.blocks.Put(o, "", conversation.Block{ID: c.ownID(""), Type: conversation.BlockUserMessage,
			Status: conversation.StatusComplete, Content: str(p.Message)})
	case "item_completed":
		var it struct {
			Type    string        `json:"type"`
			ID      string        `json:"id"`
			Content []contentPart `json:"content"`
		}
		if json.Unmarshal(p.Item, &it) != nil || it.Type != "UserMessage" {
			return // other items duplicate response_items
		}
		if c.opts.OmitUserMessages {
			return
		}
		var sb strings.Builder
		for _, part := range it.Content {
			if part.Type == "text" {
				sb.WriteString(part.Text)
			}
		}
		c.blocks.Put(o, "", conversation.Block{ID: c.ownID(it.ID), Type: conversation.BlockUserMessage,
			Status: conversation.StatusComplete, Content: sb.String()})
	case "token_count":
		c.tokenCount(o, p.Info)
	case "task_complete", "turn_complete":
		o.Emit("", conversation.QueryCompleted{Result: str(p.LastAgentMessage)})
	case "turn_aborted":
		if reason := str(p.Reason); reason == "interrupted" {
			o.Emit("", conversation.QueryCompleted{Interrupted: true})
		} else {
			o.Emit("", conversation.QueryFailed{Error: "turn aborted: " + reason})
		}
	case "error":
		c.errors++
		id := c.blocks.Claim("error:"+strconv.Itoa(c.errors), c.scope()+"-error-"+strconv.Itoa(c.errors))
		msg := str(p.Message)
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockError, Status: conversation.StatusError, Message: msg})
		o.Emit("", conversation.ErrorEvent{Message: msg})
	case "warning", "stream_error":
		o.Log(conversation.LevelWarn, "codex "+p.Type+": "+str(p.Message), line)
	case "agent_message", "agent_reasoning", "agent_reasoning_raw_content", "agent_reasoning_section_break",
		"task_started", "turn_started", "entered_review_mode", "exited_review_mode":
		// Duplicates of response items, or markers with nothing to show.
	default:
		o.Log(conversation.LevelDebug, "codex: event "+strconv.Quote(p.Type), line)
	}
}

// tokenCount turns a token_count event into a usage increment: the
// difference of total_token_usage from the last one seen, which is robust
// to codex repeating a count.
func (c *RolloutConverter) tokenCount(o *convkit.Out, info json.RawMessage) {
	var in struct {
		Total *tokenTotals `json:"total_token_usage"`
		Last  *tokenTotals `json:"last_token_usage"`
	}
	if len(info) == 0 || json.Unmarshal(info, &in) != nil {
		return
	}
	var inc tokenTotals
	switch {
	case in.Total != nil && c.lastTotal != nil:
		inc = in.Total.minus(*c.lastTotal)
	case in.Total != nil:
		inc = *in.Total
	case in.Last != nil:
		inc = *in.Last
	default:
		return
	}
	if in.Total != nil {
		t := *in.Total
		c.lastTotal = &t
	}
	if inc == (tokenTotals{}) {
		return
	}
	o.Emit("", conversation.MetadataUpdate{Usage: inc.usage()})
}

type toolOutput struct {
	output     string
	exitCode   *int
	durationMs int64
	isError    bool
}

var (
	exitCodeRe   = regexp.MustCompile(`(?m)^(?:Exit code|Process exited with code):? (-?\d+)`)
	wallTimeRe   = regexp.MustCompile(`(?m)^Wall time: ([0-9.]+) seconds`)
	headerLineRe = regexp.MustCompile(`^[A-Z][A-Za-z ]+(?::\s.*|\s-?\d+)$`)
)

// stripHeader removes the "Chunk ID: …\nWall time: …\nProcess exited
// with code N\n…\nOutput:\n" header codex puts before a command's
// output for the model (its facts go to the result's metadata), so the
// result shows what the command printed, as the app-server's does.
func stripHeader(s string) string {
	head, body, ok := strings.Cut(s, "Output:\n")
	if !ok {
		return s
	}
	lines := strings.Split(strings.TrimSuffix(head, "\n"), "\n")
	if head == "" || len(lines) > 8 {
		return s
	}
	for _, l := range lines {
		if !headerLineRe.MatchString(l) {
			return s
		}
	}
	return body
}

// parseToolOutput reads a function_call_output: a JSON string holding
// {"output", "metadata":{"exit_code","duration_seconds"}} (shell tool), a
// plain text that may start with "Exit code: N" / "Wall time: S seconds"
// headers (newer exec tools), or an array of content items.
func parseToolOutput(raw json.RawMessage) toolOutput {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		var items []contentPart
		if json.Unmarshal(raw, &items) == nil {
			return toolOutput{output: joinText(raw, "input_text", "text", "output_text")}
		}
		var obj struct {
			Content string `json:"content"`
			Success *bool  `json:"success"`
		}
		if json.Unmarshal(raw, &obj) == nil {
			return toolOutput{output: obj.Content, isError: obj.Success != nil && !*obj.Success}
		}
		return toolOutput{output: string(raw)}
	}
	var structured struct {
		Output   *string `json:"output"`
		Metadata struct {
			ExitCode        *int     `json:"exit_code"`
			DurationSeconds *float64 `json:"duration_seconds"`
		} `json:"metadata"`
	}
	if strings.HasPrefix(strings.TrimSpace(s), "{") && json.Unmarshal([]byte(s), &structured) == nil && structured.Output != nil {
		r := toolOutput{output: *structured.Output, exitCode: structured.Metadata.ExitCode}
		if d := structured.Metadata.DurationSeconds; d != nil {
			r.durationMs = int64(*d*1000 + 0.5)
		}
		r.isError = r.exitCode != nil && *r.exitCode != 0
		return r
	}
	r := toolOutput{output: s}
	if m := exitCodeRe.FindStringSubmatch(s); m != nil && strings.Index(s, m[0]) < 200 {
		if n, err := strconv.Atoi(m[1]); err == nil {
			r.exitCode = &n
			r.isError = n != 0
		}
	}
	if m := wallTimeRe.FindStringSubmatch(s); m != nil && strings.Index(s, m[0]) < 200 {
		if f, err := strconv.ParseFloat(m[1], 64); err == nil {
			r.durationMs = int64(f*1000 + 0.5)
		}
	}
	r.output = stripHeader(s)
	return r
}
