// Package opencode holds agentd's support for OpenCode. The converters in
// convert_*.go turn its output into conversation events: the event stream
// of `opencode serve` (GET /event, EventsConverter) and the JSON of
// `opencode export` (ConvertExport). Converters are pure and stateful: no
// I/O, no clock, one instance per stream, not safe for concurrent use.
package opencode

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// core holds what the events and export converters share: the part
// mapping, session routing and subagent links.
//
// Parts map to blocks by their own ids (prt_…); tool parts use the
// model's call id. A `task` tool call is a subagent: a subagent block
// (id = the call id) and subagent:spawned/completed. Its child session
// (metadata.sessionId of the tool state, or failing that the next session
// created with the calling session as parent while the call is unlinked)
// is routed to the conversation of that call id.
type core struct {
	opts        convkit.Options
	mainSession string
	parents     map[string]string // session → parent session
	sessConv    map[string]string // linked child session → conversation id
	msgRole     map[string]string // message id → user | assistant
	msgModel    map[string]string // message id → model id
	msgTime     map[string]time.Time
	tasks       map[string]*task    // subagent block id → task
	unlinked    map[string][]string // session → its task block ids without a child session yet
	callBlock   map[string]string   // session/callID → block id
	steps       map[string]bool     // step-finish parts counted
	model       string
	lastTS      time.Time
	blocks      convkit.Blocks
}

type task struct {
	id, session, child string
	spawned, done      bool
}

func newCore(opts []Option) core {
	o := convkit.Build(opts)
	return core{
		opts:        o,
		mainSession: o.SessionID,
		parents:     map[string]string{},
		sessConv:    map[string]string{},
		msgRole:     map[string]string{},
		msgModel:    map[string]string{},
		msgTime:     map[string]time.Time{},
		tasks:       map[string]*task{},
		unlinked:    map[string][]string{},
		callBlock:   map[string]string{},
		steps:       map[string]bool{},
		blocks:      convkit.NewBlocks(),
	}
}

// SessionID is the main session's id ("" until known).
func (c *core) SessionID() string { return c.mainSession }

type ocTime struct {
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
	Created   int64 `json:"created"`
	Completed int64 `json:"completed"`
}

type ocTokens struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

type ocToolState struct {
	Status   string                     `json:"status"`
	Input    json.RawMessage            `json:"input"`
	Output   string                     `json:"output"`
	Error    string                     `json:"error"`
	Title    string                     `json:"title"`
	Metadata map[string]json.RawMessage `json:"metadata"`
	Time     *ocTime                    `json:"time"`
}

type ocPart struct {
	ID          string          `json:"id"`
	SessionID   string          `json:"sessionID"`
	MessageID   string          `json:"messageID"`
	Type        string          `json:"type"`
	Text        string          `json:"text"`
	Synthetic   bool            `json:"synthetic"`
	Time        *ocTime         `json:"time"`
	CallID      string          `json:"callID"`
	Tool        string          `json:"tool"`
	State       *ocToolState    `json:"state"`
	Reason      string          `json:"reason"`
	Cost        float64         `json:"cost"`
	Tokens      *ocTokens       `json:"tokens"`
	Prompt      string          `json:"prompt"`
	Description string          `json:"description"`
	Agent       string          `json:"agent"`
	Command     string          `json:"command"`
	Name        string          `json:"name"`
	Files       []string        `json:"files"`
	Hash        string          `json:"hash"`
	Mime        string          `json:"mime"`
	Filename    string          `json:"filename"`
	URL         string          `json:"url"`
	Attempt     int             `json:"attempt"`
	Error       json.RawMessage `json:"error"`
}

type ocMessageInfo struct {
	ID        string          `json:"id"`
	SessionID string          `json:"sessionID"`
	Role      string          `json:"role"`
	Time      ocTime          `json:"time"`
	ModelID   string          `json:"modelID"`
	Error     json.RawMessage `json:"error"`
	Finish    string          `json:"finish"`
	Model     *struct {
		ModelID string `json:"modelID"`
	} `json:"model"`
}

// ocError is a NamedError: {name, data:{message, …}}.
type ocError struct {
	Name string `json:"name"`
	Data struct {
		Message string `json:"message"`
	} `json:"data"`
}

func parseError(raw json.RawMessage) *ocError {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var e ocError
	if json.Unmarshal(raw, &e) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return &ocError{Name: "UnknownError"}
		}
		e.Data.Message = s
	}
	if e.Data.Message == "" {
		e.Data.Message = e.Name
	}
	return &e
}

// route returns the conversation of a session's events: main for the main
// session, the task call id for a linked child, the session's own id for
// a child nobody linked; ok is false for an unrelated top-level session
// when WithSessionID named the main one.
func (c *core) route(session string) (conv string, ok bool) {
	if session == "" || session == c.mainSession {
		return "", true
	}
	if conv, ok := c.sessConv[session]; ok {
		return conv, true
	}
	if c.mainSession == "" && c.parents[session] == "" {
		c.mainSession = session
		return "", true
	}
	for s, n := session, 0; n < 64 && s != ""; s, n = c.parents[s], n+1 {
		if s == c.mainSession {
			return session, true
		}
	}
	if c.opts.SessionID != "" {
		return "", false
	}
	return session, true
}

// sessionInfo notes a session's parent and links a new child session to
// the calling session's oldest task call that has none yet.
func (c *core) sessionInfo(id, parent string) {
	if id == "" {
		return
	}
	if parent == "" {
		if c.mainSession == "" {
			c.mainSession = id
		}
		return
	}
	c.parents[id] = parent
	if _, linked := c.sessConv[id]; linked {
		return
	}
	if l := c.unlinked[parent]; len(l) > 0 {
		c.link(c.tasks[l[0]], id)
	}
}

func (c *core) link(t *task, child string) {
	if t == nil || child == "" || t.child == child {
		return
	}
	t.child = child
	c.sessConv[child] = t.id
	l := c.unlinked[t.session]
	for i, id := range l {
		if id == t.id {
			c.unlinked[t.session] = append(l[:i:i], l[i+1:]...)
			break
		}
	}
}

func (c *core) at(o *convkit.Out, ms ...int64) {
	for _, m := range ms {
		if m > 0 {
			o.TS = convkit.MsTime(m)
			break
		}
	}
	if o.TS.IsZero() {
		o.TS = c.lastTS
	} else {
		c.lastTS = o.TS
	}
}

func doneStatus(t *ocTime) conversation.BlockStatus {
	if t != nil && t.End > 0 {
		return conversation.StatusComplete
	}
	return conversation.StatusPending
}

// part converts one part as it now is (message.part.updated, or an
// exported part).
func (c *core) part(o *convkit.Out, p *ocPart, raw []byte) {
	if p.ID == "" {
		o.Log(conversation.LevelWarn, "opencode: part without id", raw)
		return
	}
	conv, ok := c.route(p.SessionID)
	if !ok {
		return
	}
	// A part's time is its own start, else its message's creation, else
	// the event's: the same whatever carries the part (stream or export).
	var start int64
	if p.Time != nil {
		start = p.Time.Start
	}
	if p.State != nil && p.State.Time != nil && p.State.Time.Start > 0 {
		start = p.State.Time.Start
	}
	if t := c.msgTime[p.MessageID]; start <= 0 && !t.IsZero() {
		start = t.UnixMilli()
	}
	if start > 0 {
		c.at(o, start)
	} else if o.TS.IsZero() {
		c.at(o)
	}
	switch p.Type {
	case "text":
		id := c.blocks.Claim("part:"+p.ID, p.ID)
		if c.msgRole[p.MessageID] == "user" {
			if conv == "" && c.opts.OmitUserMessages {
				return
			}
			b := conversation.Block{ID: id, Type: conversation.BlockUserMessage, Status: conversation.StatusComplete, Content: p.Text}
			if p.Synthetic {
				b.Metadata = map[string]any{"synthetic": true}
			}
			c.blocks.Put(o, conv, b)
			return
		}
		c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: doneStatus(p.Time),
			Content: p.Text, Model: c.msgModel[p.MessageID]})
	case "reasoning":
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("part:"+p.ID, p.ID), Type: conversation.BlockThinking,
			Status: doneStatus(p.Time), Content: p.Text})
	case "tool":
		c.tool(o, conv, p)
	case "step-start", "snapshot":
	case "step-finish":
		if c.steps[p.ID] || p.Tokens == nil {
			return
		}
		c.steps[p.ID] = true
		t := p.Tokens
		// opencode's input excludes cache reads and writes (as
		// Anthropic's does); reasoning is billed as output.
		u := conversation.Usage{InputTokens: t.Input, OutputTokens: t.Output + t.Reasoning,
			CacheReadInputTokens: t.Cache.Read, CacheCreationInputTokens: t.Cache.Write}
		m := conversation.MetadataUpdate{}
		if u != (conversation.Usage{}) {
			m.Usage = &u
		}
		if p.Cost > 0 {
			cost := p.Cost
			m.CostUSD = &cost
		}
		if m.Usage != nil || m.CostUSD != nil {
			o.Emit(conv, m)
		}
	case "subtask":
		// The task tool call that follows runs it; that call is the
		// subagent, so this is only a note.
		msg := p.Description
		if p.Agent != "" {
			msg = "@" + p.Agent + ": " + msg
		}
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("part:"+p.ID, p.ID), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: "subtask", Message: msg,
			Metadata: map[string]any{"agent": p.Agent, "prompt": p.Prompt, "command": p.Command}})
	case "agent":
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("part:"+p.ID, p.ID), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: "agent", Message: p.Name})
	case "file":
		name := p.Filename
		if name == "" && !strings.HasPrefix(p.URL, "data:") {
			name = p.URL
		}
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("part:"+p.ID, p.ID), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: "file", Message: name, Metadata: map[string]any{"mime": p.Mime}})
	case "compaction":
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("part:"+p.ID, p.ID), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: "compaction", Message: "context compacted"})
	case "patch":
		o.Log(conversation.LevelInfo, "opencode patch "+p.Hash+": "+strings.Join(p.Files, ", "), raw)
	case "retry":
		msg := "opencode retry " + strconv.Itoa(p.Attempt)
		if e := parseError(p.Error); e != nil {
			msg += ": " + e.Data.Message
		}
		o.Log(conversation.LevelWarn, msg, raw)
	default:
		o.Log(conversation.LevelDebug, "opencode part "+strconv.Quote(p.Type), raw)
	}
}

func metaString(m map[string]json.RawMessage, key string) string {
	var s string
	_ = json.Unmarshal(m[key], &s)
	return s
}

func (c *core) tool(o *convkit.Out, conv string, p *ocPart) {
	want := p.CallID
	if want == "" {
		want = p.ID
	}
	id := c.blocks.Claim("part:"+p.ID, want)
	if p.CallID != "" {
		c.callBlock[p.SessionID+"/"+p.CallID] = id
	}
	st := p.State
	if st == nil {
		st = &ocToolState{Status: "pending"}
	}
	var dur int64
	if st.Time != nil && st.Time.End > 0 && st.Time.Start > 0 && st.Time.End >= st.Time.Start {
		dur = st.Time.End - st.Time.Start
	}
	if p.Tool == "task" {
		c.task(o, conv, p, id, st, dur)
		return
	}
	done := st.Status == "completed" || st.Status == "error"
	failed := st.Status == "error"
	c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: convkit.StatusOf(done, failed),
		ToolName: p.Tool, ToolUseID: id, Input: convkit.ObjectInput(st.Input), Description: st.Title})
	rid := conversation.ToolResultID(id)
	switch {
	case st.Status == "running":
		// bash streams its output into metadata.output while it runs.
		if out := metaString(st.Metadata, "output"); out != "" {
			c.blocks.Put(o, conv, conversation.Block{ID: rid, Type: conversation.BlockToolResult, Status: conversation.StatusPending,
				ToolUseID: id, Output: out})
		}
	case done:
		output := st.Output
		if failed {
			output = st.Error
		}
		var meta map[string]any
		if raw, ok := st.Metadata["exit"]; ok {
			var code int
			if json.Unmarshal(raw, &code) == nil {
				meta = map[string]any{"exitCode": code}
			}
		}
		if st.Time != nil && st.Time.End > 0 {
			c.at(o, st.Time.End)
		}
		c.blocks.Put(o, conv, conversation.Block{ID: rid, Type: conversation.BlockToolResult, Status: convkit.StatusOf(true, failed),
			ToolUseID: id, Output: output, IsError: failed, DurationMs: dur, Metadata: meta})
	}
}

var taskTrailer = regexp.MustCompile(`(?s)\s*<task_metadata>.*?</task_metadata>\s*$`)

func (c *core) task(o *convkit.Out, conv string, p *ocPart, id string, st *ocToolState, dur int64) {
	var in struct {
		Description  string `json:"description"`
		Prompt       string `json:"prompt"`
		SubagentType string `json:"subagent_type"`
	}
	_ = json.Unmarshal(st.Input, &in)
	t := c.tasks[id]
	if t == nil {
		t = &task{id: id, session: p.SessionID}
		c.tasks[id] = t
		c.unlinked[p.SessionID] = append(c.unlinked[p.SessionID], id)
	}
	if child := metaString(st.Metadata, "sessionId"); child != "" {
		c.link(t, child)
	}
	b := conversation.Block{ID: id, Type: conversation.BlockSubagent, Status: conversation.StatusPending, SubagentID: id, ToolUseID: id,
		Name: in.SubagentType, Description: in.Description}
	if in.Prompt != "" {
		b.Input = convkit.MustJSON(in.Prompt)
	}
	c.blocks.Put(o, conv, b)
	if !t.spawned && in.Prompt != "" {
		t.spawned = true
		o.Emit(conv, conversation.SubagentSpawned{ToolUseID: id, AgentID: t.child, Prompt: in.Prompt,
			SubagentType: in.SubagentType, Description: in.Description})
	}
	if t.done || (st.Status != "completed" && st.Status != "error") {
		return
	}
	t.done = true
	status, output := conversation.StatusComplete, strings.TrimSpace(taskTrailer.ReplaceAllString(st.Output, ""))
	if st.Status == "error" {
		status, output = conversation.StatusError, st.Error
	}
	if st.Time != nil && st.Time.End > 0 {
		c.at(o, st.Time.End)
	}
	c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockSubagent, Status: status, Output: output, DurationMs: dur})
	o.Emit(conv, conversation.SubagentCompleted{ToolUseID: id, AgentID: t.child, Status: status, Output: output, DurationMs: dur})
}

// message notes a message's role, model and time, and turns an
// assistant error into an error block.
func (c *core) message(o *convkit.Out, info *ocMessageInfo) (conv string, ok bool) {
	if info.ID == "" {
		return "", false
	}
	conv, ok = c.route(info.SessionID)
	if !ok {
		return "", false
	}
	c.msgRole[info.ID] = info.Role
	if _, seen := c.msgTime[info.ID]; !seen && info.Time.Created > 0 {
		c.msgTime[info.ID] = convkit.MsTime(info.Time.Created)
	}
	model := info.ModelID
	if model == "" && info.Model != nil {
		model = info.Model.ModelID
	}
	if info.Role == "assistant" && model != "" {
		c.msgModel[info.ID] = model
		if conv == "" && model != c.model {
			c.model = model
			o.Emit("", conversation.MetadataUpdate{Model: model})
		}
	}
	if e := parseError(info.Error); e != nil {
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("msgerr:"+info.ID, info.ID+"-error"), Type: conversation.BlockError,
			Status: conversation.StatusError, Message: e.Data.Message, Code: e.Name})
	}
	return conv, true
}
