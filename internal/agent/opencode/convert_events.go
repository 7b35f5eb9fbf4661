package opencode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// EventsConverter converts the event stream of `opencode serve` (GET
// /event; one {"type","properties"} payload per line, optionally still
// framed as SSE "data:" lines, or wrapped as {"directory","payload"} by
// /global/event): message.updated, message.part.updated (with the older
// inline "delta"), message.part.delta (1.1x+), session.created|updated|
// status|idle|error, permission.asked|updated|replied, todo.updated,
// file.edited and the rest as log events.
//
// A turn is open from the main session's first busy status or activity
// to its next idle (session.status idle or session.idle): the idle emits
// query:completed, or query:failed when a session.error came first.
type EventsConverter struct {
	core
	turnOpen bool
	turnErr  *ocError
	errors   int
}

// NewEventsConverter returns a converter for one event stream.
func NewEventsConverter(opts ...Option) *EventsConverter {
	return &EventsConverter{core: newCore(opts)}
}

type eventLine struct {
	Type       string      `json:"type"`
	Properties *eventProps `json:"properties"`
	Payload    *eventLine  `json:"payload"`
}

type eventProps struct {
	Info      json.RawMessage `json:"info"`
	Part      *ocPart         `json:"part"`
	Delta     *string         `json:"delta"`
	SessionID string          `json:"sessionID"`
	MessageID string          `json:"messageID"`
	PartID    string          `json:"partID"`
	Field     string          `json:"field"`
	Time      json.RawMessage `json:"time"`
	Status    *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Attempt int    `json:"attempt"`
	} `json:"status"`
	Error json.RawMessage `json:"error"`
	File  string          `json:"file"`
	Todos []struct {
		Content string `json:"content"`
		Status  string `json:"status"`
	} `json:"todos"`

	// permissions: permission.asked (1.1x+) and permission.updated (≤1.0)
	ID         string          `json:"id"`
	Permission string          `json:"permission"`
	Patterns   json.RawMessage `json:"patterns"`
	Pattern    json.RawMessage `json:"pattern"`
	Metadata   json.RawMessage `json:"metadata"`
	Tool       *struct {
		MessageID string `json:"messageID"`
		CallID    string `json:"callID"`
	} `json:"tool"`
	PType        string `json:"type"`
	CallID       string `json:"callID"`
	Title        string `json:"title"`
	RequestID    string `json:"requestID"`
	PermissionID string `json:"permissionID"`
	Reply        string `json:"reply"`
	Response     string `json:"response"`
}

// Convert converts one event line.
func (c *EventsConverter) Convert(line []byte) ([]conversation.Event, error) {
	line = bytes.TrimSpace(line)
	switch {
	case bytes.HasPrefix(line, []byte("data:")):
		line = bytes.TrimSpace(line[len("data:"):])
	case len(line) == 0, line[0] == ':', bytes.HasPrefix(line, []byte("event:")), bytes.HasPrefix(line, []byte("id:")),
		bytes.HasPrefix(line, []byte("retry:")):
		return nil, nil // SSE framing
	}
	var ev eventLine
	if err := json.Unmarshal(line, &ev); err != nil {
		return nil, fmt.Errorf("opencode event: %w", err)
	}
	if ev.Type == "" && ev.Payload != nil {
		ev = *ev.Payload
	}
	if ev.Type == "" {
		return nil, fmt.Errorf("opencode event without type")
	}
	p := ev.Properties
	if p == nil {
		p = &eventProps{}
	}
	o := &convkit.Out{}
	var ms int64
	if json.Unmarshal(p.Time, &ms) == nil && ms > 0 {
		c.at(o, ms)
	}
	if err := c.event(o, ev.Type, p, line); err != nil {
		return nil, err
	}
	return o.Events, nil
}

func (c *EventsConverter) event(o *convkit.Out, typ string, p *eventProps, line []byte) error {
	switch typ {
	case "message.updated":
		var info ocMessageInfo
		if err := json.Unmarshal(p.Info, &info); err != nil || info.ID == "" {
			return fmt.Errorf("opencode message.updated: bad info")
		}
		if o.TS.IsZero() {
			c.at(o, info.Time.Completed, info.Time.Created)
		}
		if conv, ok := c.message(o, &info); ok && conv == "" {
			c.turnOpen = true
		}
	case "message.part.updated":
		if p.Part == nil {
			return fmt.Errorf("opencode message.part.updated without part")
		}
		c.part(o, p.Part, line)
		if conv, ok := c.route(p.Part.SessionID); ok && conv == "" {
			c.turnOpen = true
		}
	case "message.part.delta":
		if p.PartID == "" {
			return fmt.Errorf("opencode message.part.delta without partID")
		}
		c.delta(o, p, line)
	case "session.created", "session.updated":
		var info struct {
			ID       string `json:"id"`
			ParentID string `json:"parentID"`
			Title    string `json:"title"`
		}
		if err := json.Unmarshal(p.Info, &info); err != nil || info.ID == "" {
			return fmt.Errorf("opencode %s: bad info", typ)
		}
		_, known := c.parents[info.ID]
		known = known || info.ID == c.mainSession
		c.sessionInfo(info.ID, info.ParentID)
		if typ == "session.created" || !known {
			o.Log(conversation.LevelInfo, "opencode session "+info.ID+" "+strconv.Quote(info.Title), line)
		}
	case "session.status":
		if p.Status == nil {
			return nil
		}
		switch p.Status.Type {
		case "busy":
			if conv, ok := c.route(p.SessionID); ok && conv == "" {
				c.turnOpen = true
			}
		case "idle":
			c.idle(o, p.SessionID)
		case "retry":
			o.Log(conversation.LevelWarn, "opencode retry "+strconv.Itoa(p.Status.Attempt)+": "+p.Status.Message, line)
		}
	case "session.idle":
		c.idle(o, p.SessionID)
	case "session.error":
		c.sessionError(o, p)
	case "permission.asked", "permission.updated":
		c.permissionAsked(o, typ, p)
	case "permission.replied":
		if c.opts.OmitPermissionEvents {
			return nil
		}
		id := p.RequestID
		if id == "" {
			id = p.PermissionID
		}
		reply := p.Reply
		if reply == "" {
			reply = p.Response
		}
		behavior := conversation.Allow
		if reply == "reject" {
			behavior = conversation.Deny
		}
		conv, ok := c.route(p.SessionID)
		if ok && id != "" {
			o.Emit(conv, conversation.PermissionResolved{RequestID: id, Behavior: behavior, By: conversation.ByUser, Message: reply})
		}
	case "todo.updated":
		conv, ok := c.route(p.SessionID)
		if !ok {
			return nil
		}
		var sb strings.Builder
		for _, t := range p.Todos {
			mark := "[ ] "
			switch t.Status {
			case "completed":
				mark = "[x] "
			case "in_progress":
				mark = "[~] "
			case "cancelled":
				mark = "[-] "
			}
			sb.WriteString(mark + t.Content + "\n")
		}
		c.blocks.Put(o, conv, conversation.Block{ID: c.blocks.Claim("todo:"+p.SessionID, p.SessionID+"-todo"), Type: conversation.BlockSystem,
			Status: conversation.StatusComplete, Subtype: "todo_list", Message: sb.String(), Metadata: map[string]any{"todos": p.Todos}})
	case "message.removed", "message.part.removed":
		o.Log(conversation.LevelInfo, "opencode "+typ+" (the converted blocks stay)", line)
	case "file.edited":
		o.Log(conversation.LevelInfo, "opencode edited "+p.File, line)
	case "server.connected", "server.heartbeat", "session.diff", "file.watcher.updated", "message.part.started":
		// Nothing a reader of the conversation needs.
	default:
		o.Log(conversation.LevelDebug, "opencode event "+typ, line)
	}
	return nil
}

// delta applies a message.part.delta. Its part was announced by a
// message.part.updated; an unknown part becomes an assistant text (a
// thinking part announced later turns into its own block).
func (c *EventsConverter) delta(o *convkit.Out, p *eventProps, line []byte) {
	conv, ok := c.route(p.SessionID)
	if !ok || p.Delta == nil {
		return
	}
	if p.Field != "" && p.Field != "text" {
		o.Log(conversation.LevelDebug, "opencode delta to field "+p.Field, line)
		return
	}
	if conv == "" {
		c.turnOpen = true
	}
	id := c.blocks.Claim("part:"+p.PartID, p.PartID)
	if c.blocks.AppendText(o, id, *p.Delta) {
		return
	}
	c.at(o, c.msgTime[p.MessageID].UnixMilli())
	typ := conversation.BlockAssistantText
	if c.msgRole[p.MessageID] == "user" {
		typ = conversation.BlockUserMessage
	}
	c.blocks.Put(o, conv, conversation.Block{ID: id, Type: typ, Status: conversation.StatusPending, Content: *p.Delta})
}

func (c *EventsConverter) idle(o *convkit.Out, session string) {
	if conv, ok := c.route(session); !ok || conv != "" || !c.turnOpen {
		return
	}
	c.turnOpen = false
	if e := c.turnErr; e != nil {
		c.turnErr = nil
		o.Emit("", conversation.QueryFailed{Error: e.Data.Message, Code: e.Name, Interrupted: e.Name == "MessageAbortedError"})
		return
	}
	o.Emit("", conversation.QueryCompleted{})
}

func (c *EventsConverter) sessionError(o *convkit.Out, p *eventProps) {
	conv, ok := c.route(p.SessionID)
	if !ok {
		return
	}
	e := parseError(p.Error)
	if e == nil {
		e = &ocError{Name: "UnknownError"}
		e.Data.Message = "opencode session error"
	}
	if conv == "" {
		c.turnErr = e
	}
	c.errors++
	scope := p.SessionID
	if scope == "" {
		scope = c.mainSession
	}
	id := c.blocks.Claim("sesserr:"+strconv.Itoa(c.errors), scope+"-error-"+strconv.Itoa(c.errors))
	c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockError, Status: conversation.StatusError,
		Message: e.Data.Message, Code: e.Name})
	o.Emit(conv, conversation.ErrorEvent{Message: e.Data.Message, Code: e.Name})
}

func (c *EventsConverter) permissionAsked(o *convkit.Out, typ string, p *eventProps) {
	if c.opts.OmitPermissionEvents || p.ID == "" {
		return
	}
	conv, ok := c.route(p.SessionID)
	if !ok {
		return
	}
	in := map[string]any{}
	tool, callID := p.Permission, p.CallID
	if typ == "permission.updated" {
		tool = p.PType
		if len(p.Pattern) > 0 {
			in["pattern"] = p.Pattern
		}
		if p.Title != "" {
			in["title"] = p.Title
		}
	} else if len(p.Patterns) > 0 {
		in["patterns"] = p.Patterns
	}
	if p.Tool != nil {
		callID = p.Tool.CallID
	}
	if len(p.Metadata) > 0 && string(p.Metadata) != "null" {
		in["metadata"] = p.Metadata
	}
	toolUse := ""
	if callID != "" {
		toolUse = c.callBlock[p.SessionID+"/"+callID]
		if toolUse == "" {
			toolUse = callID
		}
	}
	o.Emit(conv, conversation.PermissionRequested{RequestID: p.ID, ToolName: tool, Input: convkit.MustJSON(in), ToolUseID: toolUse})
}
