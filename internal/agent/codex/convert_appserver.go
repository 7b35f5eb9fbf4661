package codex

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// AppServerConverter converts the stdout of `codex app-server` (JSON-RPC
// 2.0, one message per line) as of Codex 0.169: the v2 notifications
// (thread/started, turn/started|completed, item/started|completed,
// item/agentMessage/delta, item/reasoning/summaryTextDelta|textDelta,
// item/commandExecution/outputDelta, item/fileChange/patchUpdated,
// thread/tokenUsage/updated, error, …), the approval requests the server
// sends (item/commandExecution/requestApproval,
// item/fileChange/requestApproval, item/permissions/requestApproval and
// the v1 execCommandApproval/applyPatchApproval) and responses, which
// become debug log events.
//
// Block ids are the item ids codex assigns (call ids for tools); an id that
// reappears in a later turn gets a "~n" suffix. Threads spawned by a
// collab spawnAgent call are subagents: their events go to the
// conversation of the spawning item.
type AppServerConverter struct {
	opts       convkit.Options
	mainThread string
	threadConv map[string]string // subagent thread id → conversation id
	subDone    map[string]bool   // subagent conversation ids completed
	totals     map[string]tokenTotals
	reasoning  map[string]*reasoningState
	lastText   map[string]string // subagent conversation id → its last agent message
	errors     int
	blocks     convkit.Blocks
}

type reasoningState struct{ summary, raw bool }

// NewAppServerConverter returns a converter for one app-server connection.
func NewAppServerConverter(opts ...Option) *AppServerConverter {
	return &AppServerConverter{
		opts:       convkit.Build(opts),
		threadConv: map[string]string{},
		subDone:    map[string]bool{},
		totals:     map[string]tokenTotals{},
		reasoning:  map[string]*reasoningState{},
		lastText:   map[string]string{},
		blocks:     convkit.NewBlocks(),
	}
}

// ThreadID is the main thread's id: the first thread started without a
// parent ("" before it).
func (c *AppServerConverter) ThreadID() string { return c.mainThread }

// rpcMessage is any JSON-RPC message, decoded in one pass: params holds
// the union of the fields of the notifications and requests the converter
// reads.
type rpcMessage struct {
	ID          json.RawMessage `json:"id"`
	Method      string          `json:"method"`
	Params      *asParams       `json:"params"`
	Result      json.RawMessage `json:"result"`
	Error       *rpcError       `json:"error"`
	EmittedAtMs int64           `json:"emittedAtMs"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

type asParams struct {
	ThreadID     string          `json:"threadId"`
	TurnID       string          `json:"turnId"`
	ItemID       string          `json:"itemId"`
	Delta        string          `json:"delta"`
	SummaryIndex int             `json:"summaryIndex"`
	Item         *asItem         `json:"item"`
	StartedAtMs  int64           `json:"startedAtMs"`
	CompletedAt  int64           `json:"completedAtMs"`
	Changes      json.RawMessage `json:"changes"`
	Message      string          `json:"message"`
	Thread       *struct {
		ID             string  `json:"id"`
		ParentThreadID *string `json:"parentThreadId"`
		Model          *string `json:"model"`
		CLIVersion     string  `json:"cliVersion"`
	} `json:"thread"`
	Turn *struct {
		ID         string     `json:"id"`
		Status     string     `json:"status"`
		Error      *turnError `json:"error"`
		DurationMs *int64     `json:"durationMs"`
	} `json:"turn"`
	TokenUsage *struct {
		Total *asTokens `json:"total"`
		Last  *asTokens `json:"last"`
	} `json:"tokenUsage"`
	Error     *turnError `json:"error"`
	WillRetry bool       `json:"willRetry"`
	ToModel   string     `json:"toModel"`

	// turn/plan/updated
	Explanation *string    `json:"explanation"`
	Plan        []planStep `json:"plan"`

	// approval requests
	Command        json.RawMessage `json:"command"`
	Cwd            *string         `json:"cwd"`
	Reason         *string         `json:"reason"`
	GrantRoot      *string         `json:"grantRoot"`
	Permissions    json.RawMessage `json:"permissions"`
	ConversationID string          `json:"conversationId"`
	CallID         string          `json:"callId"`
	FileChanges    json.RawMessage `json:"fileChanges"`
}

type planStep struct {
	Step   string `json:"step"`
	Status string `json:"status"`
}

type turnError struct {
	Message        string          `json:"message"`
	CodexErrorInfo json.RawMessage `json:"codexErrorInfo"`
}

// code renders codexErrorInfo ("contextWindowExceeded", or the key of an
// object variant such as {"httpConnectionFailed":{…}}).
func (e *turnError) code() string {
	if e == nil || len(e.CodexErrorInfo) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(e.CodexErrorInfo, &s) == nil {
		return s
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(e.CodexErrorInfo, &m) == nil {
		for k := range m {
			return k // variants have exactly one key
		}
	}
	return ""
}

type asTokens struct {
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	CacheWriteInputTokens int64 `json:"cacheWriteInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
}

func (t *asTokens) totals() tokenTotals {
	return tokenTotals{t.InputTokens, t.CachedInputTokens, t.CacheWriteInputTokens, t.OutputTokens}
}

type asItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`

	Text    string          `json:"text"`
	Summary []string        `json:"summary"`
	Content json.RawMessage `json:"content"`

	Command          string  `json:"command"`
	Cwd              string  `json:"cwd"`
	Status           string  `json:"status"`
	AggregatedOutput *string `json:"aggregatedOutput"`
	ExitCode         *int    `json:"exitCode"`
	DurationMs       *int64  `json:"durationMs"`

	Changes json.RawMessage `json:"changes"`

	Server       string          `json:"server"`
	Tool         string          `json:"tool"`
	Namespace    *string         `json:"namespace"`
	Arguments    json.RawMessage `json:"arguments"`
	Result       *mcpResult      `json:"result"`
	Error        *mcpError       `json:"error"`
	ContentItems []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"contentItems"`
	Success *bool `json:"success"`

	SenderThreadID    string   `json:"senderThreadId"`
	ReceiverThreadIDs []string `json:"receiverThreadIds"`
	Prompt            *string  `json:"prompt"`
	Model             *string  `json:"model"`
	AgentsStates      map[string]struct {
		Status  string  `json:"status"`
		Message *string `json:"message"`
	} `json:"agentsStates"`
	Kind          string `json:"kind"`
	AgentThreadID string `json:"agentThreadId"`
	AgentPath     string `json:"agentPath"`

	Query   string          `json:"query"`
	Action  json.RawMessage `json:"action"`
	Results json.RawMessage `json:"results"`

	Path      string `json:"path"`
	Review    string `json:"review"`
	Fragments []struct {
		Text string `json:"text"`
	} `json:"fragments"`

	StartedAtMs   *int64 `json:"startedAtMs"`
	CompletedAtMs *int64 `json:"completedAtMs"`
}

type fileUpdateChange struct {
	Path string `json:"path"`
	Kind struct {
		Type     string  `json:"type"`
		MovePath *string `json:"move_path"`
	} `json:"kind"`
	Diff string `json:"diff"`
}

// Convert converts one JSON-RPC message line.
func (c *AppServerConverter) Convert(line []byte) ([]conversation.Event, error) {
	var m rpcMessage
	if err := json.Unmarshal(line, &m); err != nil {
		var head struct {
			Method string `json:"method"`
		}
		if json.Unmarshal(line, &head) != nil || handledMethods[head.Method] {
			return nil, fmt.Errorf("codex app-server line: %w", err)
		}
		// A method this converter does not read, in a shape its
		// params struct does not fit: keep it as a log.
		o := &convkit.Out{}
		o.Log(conversation.LevelDebug, "codex message "+head.Method, line)
		return o.Events, nil
	}
	o := &convkit.Out{TS: convkit.MsTime(m.EmittedAtMs)}
	hasID := len(m.ID) > 0 && string(m.ID) != "null"
	p := m.Params
	if p == nil {
		p = &asParams{}
	}
	switch {
	case m.Method != "" && hasID:
		c.serverRequest(o, &m, p, line)
	case m.Method != "":
		if err := c.notification(o, m.Method, p, line); err != nil {
			return nil, err
		}
	case m.Error != nil:
		o.Log(conversation.LevelWarn, "codex app-server error response: "+m.Error.Message, line)
	case hasID:
		o.Log(conversation.LevelDebug, "codex app-server response", line)
	default:
		return nil, fmt.Errorf("codex app-server line: neither request, notification nor response")
	}
	return o.Events, nil
}

// handledMethods are the methods whose params the converter reads; a
// line naming one that does not decode is an error, not a log.
var handledMethods = map[string]bool{
	"thread/started": true, "turn/started": true, "turn/completed": true, "item/started": true, "item/completed": true,
	"item/agentMessage/delta": true, "item/plan/delta": true, "item/reasoning/summaryPartAdded": true,
	"item/reasoning/summaryTextDelta": true, "item/reasoning/textDelta": true, "item/commandExecution/outputDelta": true,
	"item/fileChange/outputDelta": true, "item/fileChange/patchUpdated": true, "thread/tokenUsage/updated": true,
	"error": true, "turn/plan/updated": true, "item/commandExecution/requestApproval": true,
	"item/fileChange/requestApproval": true, "item/permissions/requestApproval": true,
	"execCommandApproval": true, "applyPatchApproval": true,
}

// conv returns the conversation of a thread: main for the main thread (and
// for lines that name none), the spawning item's id for a subagent thread.
func (c *AppServerConverter) conv(threadID string) string {
	if threadID == "" || threadID == c.mainThread {
		return ""
	}
	if conv, ok := c.threadConv[threadID]; ok {
		return conv
	}
	if c.mainThread == "" {
		c.mainThread = threadID
		return ""
	}
	return threadID // a thread nobody linked: its own conversation
}

func (c *AppServerConverter) itemBlockID(p *asParams, itemID string) string {
	return c.blocks.Claim("item:"+p.ThreadID+":"+p.TurnID+":"+itemID, itemID)
}

func (c *AppServerConverter) notification(o *convkit.Out, method string, p *asParams, line []byte) error {
	if strings.HasPrefix(method, "item/") && method != "item/started" && method != "item/completed" && p.ItemID == "" {
		o.Log(conversation.LevelDebug, "codex notification "+method+" without itemId", line)
		return nil
	}
	switch method {
	case "thread/started":
		if p.Thread == nil {
			return fmt.Errorf("codex app-server thread/started without thread")
		}
		t := p.Thread
		if t.ParentThreadID == nil || *t.ParentThreadID == "" {
			if c.mainThread == "" {
				c.mainThread = t.ID
			}
			if t.ID == c.mainThread && t.Model != nil && *t.Model != "" {
				o.Emit("", conversation.MetadataUpdate{Model: *t.Model})
			}
		}
		o.Log(conversation.LevelInfo, "codex thread started: "+t.ID, line)
	case "turn/started":
		c.conv(p.ThreadID)
	case "turn/completed":
		c.turnCompleted(o, p)
	case "item/started", "item/completed":
		return c.item(o, p, method == "item/completed", line)
	case "item/agentMessage/delta", "item/plan/delta":
		id := c.itemBlockID(p, p.ItemID)
		if !c.blocks.Has(id) {
			b := conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: conversation.StatusPending}
			if method == "item/plan/delta" {
				b.Metadata = map[string]any{"kind": "plan"}
			}
			c.blocks.Put(o, c.conv(p.ThreadID), b)
		}
		c.blocks.AppendText(o, id, p.Delta)
	case "item/reasoning/summaryPartAdded":
		id := c.itemBlockID(p, p.ItemID)
		if p.SummaryIndex > 0 && c.blocks.Text(id) != "" {
			c.reasoningDelta(o, p, id, "\n\n", true)
		}
	case "item/reasoning/summaryTextDelta":
		c.reasoningDelta(o, p, c.itemBlockID(p, p.ItemID), p.Delta, true)
	case "item/reasoning/textDelta":
		c.reasoningDelta(o, p, c.itemBlockID(p, p.ItemID), p.Delta, false)
	case "item/commandExecution/outputDelta", "item/fileChange/outputDelta":
		id := c.itemBlockID(p, p.ItemID)
		rid := conversation.ToolResultID(id)
		if !c.blocks.Has(rid) {
			c.blocks.Put(o, c.conv(p.ThreadID), conversation.Block{ID: rid, Type: conversation.BlockToolResult,
				Status: conversation.StatusPending, ToolUseID: id})
		}
		c.blocks.AppendText(o, rid, p.Delta)
	case "item/fileChange/patchUpdated":
		id := c.itemBlockID(p, p.ItemID)
		c.blocks.Put(o, c.conv(p.ThreadID), conversation.Block{ID: id, Type: conversation.BlockToolUse, ToolName: "apply_patch",
			ToolUseID: id, Input: changesInput(p.Changes)})
	case "thread/tokenUsage/updated":
		c.tokenUsage(o, p)
	case "error":
		msg := "codex error"
		if p.Error != nil && p.Error.Message != "" {
			msg = p.Error.Message
		}
		if p.WillRetry {
			o.Log(conversation.LevelWarn, "codex error (retrying): "+msg, line)
			return nil
		}
		c.errors++
		conv := c.conv(p.ThreadID)
		id := c.blocks.Claim("error:"+strconv.Itoa(c.errors), c.scope(p)+"-error-"+strconv.Itoa(c.errors))
		c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockError,
			Status: conversation.StatusError, Message: msg, Code: p.Error.code()})
		o.Emit(conv, conversation.ErrorEvent{Message: msg, Code: p.Error.code()})
	case "model/rerouted":
		if p.ToModel != "" && c.conv(p.ThreadID) == "" {
			o.Emit("", conversation.MetadataUpdate{Model: p.ToModel})
		}
		o.Log(conversation.LevelInfo, "codex model rerouted to "+p.ToModel, line)
	case "warning", "configWarning", "deprecationNotice", "guardianWarning":
		o.Log(conversation.LevelWarn, "codex "+method, line)
	case "turn/plan/updated":
		c.planUpdated(o, p)
	default:
		o.Log(conversation.LevelDebug, "codex notification "+method, line)
	}
	return nil
}

func (c *AppServerConverter) scope(p *asParams) string {
	switch {
	case c.opts.IDPrefix != "":
		return c.opts.IDPrefix
	case p.TurnID != "":
		return p.TurnID
	case c.mainThread != "":
		return c.mainThread
	}
	return "codex"
}

func (c *AppServerConverter) reasoningDelta(o *convkit.Out, p *asParams, id, delta string, summary bool) {
	rs := c.reasoning[id]
	if rs == nil {
		rs = &reasoningState{}
		c.reasoning[id] = rs
	}
	// Summaries and raw text both stream into Content; whichever starts
	// first owns it, and item/completed settles the final text.
	if (summary && rs.raw) || (!summary && rs.summary) {
		return
	}
	if summary {
		rs.summary = true
	} else {
		rs.raw = true
	}
	if !c.blocks.Has(id) {
		c.blocks.Put(o, c.conv(p.ThreadID), conversation.Block{ID: id, Type: conversation.BlockThinking, Status: conversation.StatusPending})
	}
	c.blocks.AppendText(o, id, delta)
}

func (c *AppServerConverter) turnCompleted(o *convkit.Out, p *asParams) {
	if p.Turn == nil {
		return
	}
	conv := c.conv(p.ThreadID)
	var dur int64
	if p.Turn.DurationMs != nil {
		dur = *p.Turn.DurationMs
	}
	if conv != "" {
		// A subagent thread's turn ended: its task is done, and its last
		// message is its answer.
		c.subagentDone(o, conv, p.Turn.Status == "completed", c.lastText[conv])
		return
	}
	switch p.Turn.Status {
	case "interrupted":
		o.Emit("", conversation.QueryCompleted{Interrupted: true, DurationMs: dur})
	case "failed":
		msg := "turn failed"
		if p.Turn.Error != nil && p.Turn.Error.Message != "" {
			msg = p.Turn.Error.Message
		}
		o.Emit("", conversation.QueryFailed{Error: msg, Code: p.Turn.Error.code(), DurationMs: dur})
	default:
		o.Emit("", conversation.QueryCompleted{DurationMs: dur})
	}
}

func (c *AppServerConverter) tokenUsage(o *convkit.Out, p *asParams) {
	if p.TokenUsage == nil {
		return
	}
	var inc tokenTotals
	prev, seen := c.totals[p.ThreadID]
	switch {
	case p.TokenUsage.Total != nil && seen:
		inc = p.TokenUsage.Total.totals().minus(prev)
	case p.TokenUsage.Total != nil:
		inc = p.TokenUsage.Total.totals()
	case p.TokenUsage.Last != nil:
		inc = p.TokenUsage.Last.totals()
	default:
		return
	}
	if t := p.TokenUsage.Total; t != nil {
		c.totals[p.ThreadID] = t.totals()
	}
	if inc == (tokenTotals{}) {
		return
	}
	o.Emit(c.conv(p.ThreadID), conversation.MetadataUpdate{Usage: inc.usage()})
}

func (c *AppServerConverter) planUpdated(o *convkit.Out, p *asParams) {
	var sb strings.Builder
	if p.Explanation != nil && *p.Explanation != "" {
		sb.WriteString(*p.Explanation)
		sb.WriteByte('\n')
	}
	for _, s := range p.Plan {
		mark := "[ ] "
		switch s.Status {
		case "completed":
			mark = "[x] "
		case "inProgress":
			mark = "[~] "
		}
		sb.WriteString(mark + s.Step + "\n")
	}
	id := c.blocks.Claim("plan:"+p.ThreadID+":"+p.TurnID, c.scope(p)+"-plan")
	c.blocks.Put(o, c.conv(p.ThreadID), conversation.Block{ID: id, Type: conversation.BlockSystem, Status: conversation.StatusComplete,
		Subtype: "todo_list", Message: sb.String(), Metadata: map[string]any{"plan": p.Plan}})
}

func changesInput(raw json.RawMessage) json.RawMessage {
	var changes []fileUpdateChange
	_ = json.Unmarshal(raw, &changes)
	list := make([]map[string]any, 0, len(changes))
	for _, ch := range changes {
		m := map[string]any{"path": ch.Path, "kind": ch.Kind.Type}
		if ch.Diff != "" {
			m["diff"] = ch.Diff
		}
		if ch.Kind.MovePath != nil {
			m["movePath"] = *ch.Kind.MovePath
		}
		list = append(list, m)
	}
	return convkit.MustJSON(map[string]any{"changes": list})
}

func changesSummary(raw json.RawMessage) string {
	var changes []fileUpdateChange
	_ = json.Unmarshal(raw, &changes)
	var sb strings.Builder
	for _, ch := range changes {
		fmt.Fprintf(&sb, "%s %s\n", ch.Kind.Type, ch.Path)
	}
	return sb.String()
}

func (c *AppServerConverter) item(o *convkit.Out, p *asParams, done bool, line []byte) error {
	it := p.Item
	if it == nil {
		return fmt.Errorf("codex app-server item notification without item")
	}
	if it.ID == "" {
		return fmt.Errorf("codex app-server item without id")
	}
	if o.TS.IsZero() {
		switch {
		case done && p.CompletedAt > 0:
			o.TS = convkit.MsTime(p.CompletedAt)
		case p.StartedAtMs > 0:
			o.TS = convkit.MsTime(p.StartedAtMs)
		}
	}
	conv := c.conv(p.ThreadID)
	id := c.itemBlockID(p, it.ID)
	failed := it.Status == "failed" || it.Status == "declined"
	st := convkit.StatusOf(done, failed)
	var dur int64
	if it.DurationMs != nil {
		dur = *it.DurationMs
	}
	put := func(b conversation.Block) { c.blocks.Put(o, conv, b) }
	result := func(output string, isErr bool, meta map[string]any) {
		put(conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult, Status: convkit.StatusOf(true, isErr),
			ToolUseID: id, Output: output, IsError: isErr, DurationMs: dur, Metadata: meta})
	}
	switch it.Type {
	case "userMessage":
		if c.opts.OmitUserMessages {
			return nil
		}
		put(conversation.Block{ID: id, Type: conversation.BlockUserMessage, Status: conversation.StatusComplete, Content: userInputText(it.Content)})
	case "agentMessage":
		if done && conv != "" {
			c.lastText[conv] = it.Text
		}
		put(conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: convkit.StatusOf(done, false), Content: it.Text})
	case "plan":
		put(conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: convkit.StatusOf(done, false), Content: it.Text,
			Metadata: map[string]any{"kind": "plan"}})
	case "reasoning":
		var raw []string
		_ = json.Unmarshal(it.Content, &raw)
		b := conversation.Block{ID: id, Type: conversation.BlockThinking, Status: convkit.StatusOf(done, false),
			Content: strings.Join(it.Summary, "\n\n")}
		if r := strings.Join(raw, "\n\n"); r != "" {
			b.Content, b.Summary = r, b.Content
		}
		if b.Content == "" && !c.blocks.Has(id) && done {
			return nil // nothing readable
		}
		put(b)
	case "commandExecution":
		put(conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st, ToolName: "shell", ToolUseID: id,
			Input: convkit.MustJSON(map[string]string{"command": it.Command, "cwd": it.Cwd})})
		if done {
			isErr := failed || (it.ExitCode != nil && *it.ExitCode != 0)
			meta := map[string]any{"status": it.Status}
			if it.ExitCode != nil {
				meta["exitCode"] = *it.ExitCode
			}
			output := c.blocks.Text(conversation.ToolResultID(id))
			if it.AggregatedOutput != nil {
				output = *it.AggregatedOutput
			}
			result(output, isErr, meta)
		}
	case "fileChange":
		put(conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st, ToolName: "apply_patch", ToolUseID: id,
			Input: changesInput(it.Changes)})
		if done {
			result(changesSummary(it.Changes), failed, map[string]any{"status": it.Status})
		}
	case "mcpToolCall":
		failed = failed || it.Error != nil
		put(mcpToolUse(id, convkit.StatusOf(done, failed), it.Server, it.Tool, it.Arguments))
		if done {
			result(mcpOutput(it.Error, it.Result), failed, nil)
		}
	case "dynamicToolCall":
		failed = failed || (it.Success != nil && !*it.Success)
		name := it.Tool
		if it.Namespace != nil && *it.Namespace != "" {
			name = *it.Namespace + "." + it.Tool
		}
		put(conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(done, failed), ToolName: name, ToolUseID: id,
			Input: convkit.ObjectInput(it.Arguments)})
		if done {
			var sb strings.Builder
			for _, ci := range it.ContentItems {
				if ci.Type == "inputText" {
					sb.WriteString(ci.Text)
				}
			}
			result(sb.String(), failed, nil)
		}
	case "collabAgentToolCall":
		c.collab(o, conv, id, done, it)
	case "subAgentActivity":
		o.Log(conversation.LevelDebug, "codex subagent "+it.Kind+": "+it.AgentThreadID, line)
		if it.Kind == "started" {
			c.subagentStarted(o, conv, id, it)
		} else if sub, ok := c.threadConv[it.AgentThreadID]; ok && (it.Kind == "completed" || it.Kind == "interrupted") {
			c.subagentDone(o, sub, it.Kind == "completed", c.lastText[sub])
		}
	case "webSearch":
		in := map[string]any{"query": it.Query}
		if len(it.Action) > 0 && string(it.Action) != "null" {
			in["action"] = it.Action
		}
		put(conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(done, false), ToolName: "web_search", ToolUseID: id,
			Input: convkit.MustJSON(in)})
		if done && len(it.Results) > 0 && string(it.Results) != "null" {
			result(string(it.Results), false, nil)
		}
	case "imageView":
		put(conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(done, false), ToolName: "view_image", ToolUseID: id,
			Input: convkit.MustJSON(map[string]string{"path": it.Path})})
	case "contextCompaction":
		put(conversation.Block{ID: id, Type: conversation.BlockSystem, Status: convkit.StatusOf(done, false), Subtype: "compaction",
			Message: "context compacted"})
	case "enteredReviewMode", "exitedReviewMode":
		put(conversation.Block{ID: id, Type: conversation.BlockSystem, Status: conversation.StatusComplete, Subtype: it.Type, Message: it.Review})
	case "hookPrompt":
		var sb strings.Builder
		for _, f := range it.Fragments {
			sb.WriteString(f.Text)
		}
		put(conversation.Block{ID: id, Type: conversation.BlockSystem, Status: conversation.StatusComplete, Subtype: "hook_prompt",
			Message: sb.String()})
	default:
		o.Log(conversation.LevelDebug, "codex item "+strconv.Quote(it.Type), line)
	}
	return nil
}

// collab handles a collab tool call. spawnAgent becomes a subagent block
// (plus subagent:spawned once the new thread is known) and links the new
// thread's events to it; the other collab tools are plain tool calls. Any
// call reporting a linked agent as finished completes that subagent.
func (c *AppServerConverter) collab(o *convkit.Out, conv, id string, done bool, it *asItem) {
	failed := it.Status == "failed"
	prompt := ""
	if it.Prompt != nil {
		prompt = *it.Prompt
	}
	if it.Tool == "spawnAgent" {
		agentID := ""
		if len(it.ReceiverThreadIDs) > 0 {
			agentID = it.ReceiverThreadIDs[0]
		}
		_, known := c.threadConv[agentID]
		for _, t := range it.ReceiverThreadIDs {
			c.threadConv[t] = id
		}
		// As for Claude's Task tool: the subagent id is the spawning
		// call's id (the subagent's conversation id), the input its
		// prompt; the agent's own id (its thread) goes in the events.
		b := conversation.Block{ID: id, Type: conversation.BlockSubagent, Status: convkit.StatusOf(false, failed),
			SubagentID: id, ToolUseID: id, Input: convkit.MustJSON(prompt)}
		if it.Model != nil {
			b.Metadata = map[string]any{"model": *it.Model}
		}
		c.blocks.Put(o, conv, b)
		if agentID != "" && !known {
			o.Emit(conv, conversation.SubagentSpawned{ToolUseID: id, AgentID: agentID, Prompt: prompt})
		}
		if failed && done {
			c.subagentDone(o, id, false, "")
		}
	} else {
		in := map[string]any{"receiverThreadIds": it.ReceiverThreadIDs}
		if prompt != "" {
			in["prompt"] = prompt
		}
		c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(done, failed),
			ToolName: it.Tool, ToolUseID: id, Input: convkit.MustJSON(in)})
		if done {
			var sb strings.Builder
			for _, t := range sortedKeys(it.AgentsStates) {
				s := it.AgentsStates[t]
				fmt.Fprintf(&sb, "%s: %s", t, s.Status)
				if s.Message != nil {
					sb.WriteString(": " + *s.Message)
				}
				sb.WriteByte('\n')
			}
			c.blocks.Put(o, conv, conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult,
				Status: convkit.StatusOf(true, failed), ToolUseID: id, Output: sb.String(), IsError: failed})
		}
	}
	for _, t := range sortedKeys(it.AgentsStates) {
		s := it.AgentsStates[t]
		sub, ok := c.threadConv[t]
		if !ok {
			continue
		}
		msg := ""
		if s.Message != nil {
			msg = *s.Message
		}
		switch s.Status {
		case "completed", "shutdown":
			c.subagentDone(o, sub, true, msg)
		case "errored", "interrupted", "notFound":
			c.subagentDone(o, sub, false, msg)
		}
	}
}

// subagentStarted handles the multi-agent v2 spawn (features.multi_agent_v2,
// which the runner enables): no collab spawnAgent item, but a
// subAgentActivity "started" item in the parent thread whose id is the
// spawn_agent call's. The child thread sends no thread/started; its
// turn and items just name its id, so linking it here routes them to the
// subagent's conversation. The app-server does not report the spawn's
// message, so the prompt is empty; the agent's path (/root/<task_name>)
// is the description.
func (c *AppServerConverter) subagentStarted(o *convkit.Out, conv, id string, it *asItem) {
	if it.AgentThreadID == "" {
		return
	}
	if _, known := c.threadConv[it.AgentThreadID]; known {
		return // item/completed repeats item/started
	}
	c.threadConv[it.AgentThreadID] = id
	b := conversation.Block{ID: id, Type: conversation.BlockSubagent, Status: conversation.StatusPending,
		SubagentID: id, ToolUseID: id, Input: convkit.MustJSON(""), Metadata: map[string]any{"agentPath": it.AgentPath}}
	if it.Model != nil {
		b.Metadata["model"] = *it.Model
	}
	c.blocks.Put(o, conv, b)
	o.Emit(conv, conversation.SubagentSpawned{ToolUseID: id, AgentID: it.AgentThreadID, Description: it.AgentPath})
}

func (c *AppServerConverter) subagentDone(o *convkit.Out, conv string, ok bool, output string) {
	if c.subDone[conv] || !c.blocks.Has(conv) {
		return
	}
	c.subDone[conv] = true
	st := convkit.StatusOf(true, !ok)
	c.blocks.Put(o, "", conversation.Block{ID: conv, Type: conversation.BlockSubagent, Status: st, Output: output})
	o.Emit("", conversation.SubagentCompleted{ToolUseID: conv, Status: st, Output: output})
}

func userInputText(raw json.RawMessage) string {
	var in []struct {
		Type string `json:"type"`
		Text string `json:"text"`
		Name string `json:"name"`
		Path string `json:"path"`
	}
	if json.Unmarshal(raw, &in) != nil {
		return ""
	}
	var parts []string
	for _, p := range in {
		switch p.Type {
		case "text":
			parts = append(parts, p.Text)
		case "skill", "mention":
			parts = append(parts, "@"+p.Name)
		case "localImage":
			parts = append(parts, "["+p.Path+"]")
		}
	}
	return strings.Join(parts, "\n")
}

// Approval is an approval request the app-server sends its client.
type Approval struct {
	// ToolName is "shell" for commands, "apply_patch" for file changes and
	// "permissions" for a sandbox permission request.
	ToolName string
	// Input describes what would run: {command, cwd, reason} or {changes,
	// reason, grantRoot} or {permissions, reason}.
	Input json.RawMessage
	// ItemID is the tool call the request is about; as a block id it is
	// the tool_use id when the item was converted in the same turn.
	ItemID   string
	ThreadID string
	TurnID   string
}

// ParseApprovalRequest recognises an approval request (method and params
// of a server request) and describes it; ok is false for other requests.
func ParseApprovalRequest(method string, params json.RawMessage) (a Approval, ok bool) {
	var p asParams
	if json.Unmarshal(params, &p) != nil {
		return Approval{}, false
	}
	return parseApproval(method, &p)
}

func parseApproval(method string, p *asParams) (a Approval, ok bool) {
	in := map[string]any{}
	if p.Reason != nil {
		in["reason"] = *p.Reason
	}
	switch method {
	case "item/commandExecution/requestApproval", "execCommandApproval":
		a.ToolName = "shell"
		if len(p.Command) > 0 && string(p.Command) != "null" {
			in["command"] = p.Command
		}
		if p.Cwd != nil {
			in["cwd"] = *p.Cwd
		}
	case "item/fileChange/requestApproval", "applyPatchApproval":
		a.ToolName = "apply_patch"
		if p.GrantRoot != nil {
			in["grantRoot"] = *p.GrantRoot
		}
		if len(p.FileChanges) > 0 {
			in["changes"] = p.FileChanges
		}
	case "item/permissions/requestApproval":
		a.ToolName = "permissions"
		if len(p.Permissions) > 0 {
			in["permissions"] = p.Permissions
		}
		if p.Cwd != nil {
			in["cwd"] = *p.Cwd
		}
	default:
		return Approval{}, false
	}
	a.Input = convkit.MustJSON(in)
	a.ItemID, a.ThreadID, a.TurnID = p.ItemID, p.ThreadID, p.TurnID
	if a.ItemID == "" {
		a.ItemID, a.ThreadID = p.CallID, p.ConversationID
	}
	return a, true
}

func (c *AppServerConverter) serverRequest(o *convkit.Out, m *rpcMessage, p *asParams, line []byte) {
	a, ok := parseApproval(m.Method, p)
	if !ok {
		o.Log(conversation.LevelInfo, "codex request "+m.Method, line)
		return
	}
	if c.opts.OmitPermissionEvents {
		return
	}
	reqID := requestID(m.ID)
	toolUse := c.blocks.Lookup("item:"+a.ThreadID+":"+a.TurnID+":"+a.ItemID, a.ItemID)
	o.Emit(c.conv(a.ThreadID), conversation.PermissionRequested{RequestID: reqID, ToolName: a.ToolName, Input: a.Input, ToolUseID: toolUse})
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// requestID renders a JSON-RPC id (string or number) as text.
func requestID(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(bytes.TrimSpace(raw))
}
