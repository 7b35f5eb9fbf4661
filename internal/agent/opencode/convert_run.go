package opencode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// RunJSONConverter converts the output of `opencode run --format json`:
// one {"type","timestamp","sessionID","part"} object per line, type one
// of step_start, text, reasoning (with --thinking), tool_use, step_finish
// (with the step's tokens and cost), or error ({"error":{name,data}}).
// Each part is the part of the serve event stream, so it converts the same
// way. The output holds one turn and never says it ended: Flush, at the
// end of the input, ends it (query:failed when an error line came).
type RunJSONConverter struct {
	core
	started bool
	turnErr *ocError
	errors  int
}

// NewRunJSONConverter returns a converter for one `opencode run` output.
func NewRunJSONConverter(opts ...Option) *RunJSONConverter {
	return &RunJSONConverter{core: newCore(opts)}
}

type runLine struct {
	Type      string          `json:"type"`
	Timestamp int64           `json:"timestamp"`
	SessionID string          `json:"sessionID"`
	Part      *ocPart         `json:"part"`
	Error     json.RawMessage `json:"error"`
}

// Convert converts one line.
func (c *RunJSONConverter) Convert(line []byte) ([]conversation.Event, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, nil
	}
	var l runLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("opencode run json: %w", err)
	}
	if l.Type == "" {
		return nil, fmt.Errorf("opencode run json: line without type")
	}
	if c.mainSession == "" && l.SessionID != "" {
		c.sessionInfo(l.SessionID, "")
	}
	o := &convkit.Out{}
	if l.Timestamp > 0 {
		c.at(o, l.Timestamp)
	}
	c.started = true
	switch l.Type {
	case "step_start", "text", "reasoning", "tool_use", "step_finish":
		if l.Part == nil {
			return nil, fmt.Errorf("opencode run json: %s without part", l.Type)
		}
		if l.Part.SessionID == "" {
			l.Part.SessionID = l.SessionID
		}
		c.part(o, l.Part, line)
	case "error":
		conv, ok := c.route(l.SessionID)
		if !ok {
			break
		}
		e := parseError(l.Error)
		if e == nil {
			e = &ocError{Name: "UnknownError"}
			e.Data.Message = "opencode error"
		}
		if conv == "" {
			c.turnErr = e
		}
		c.errors++
		id := c.blocks.Claim("runerr:"+strconv.Itoa(c.errors), c.mainSession+"-error-"+strconv.Itoa(c.errors))
		c.blocks.Put(o, conv, conversation.Block{ID: id, Type: conversation.BlockError, Status: conversation.StatusError,
			Message: e.Data.Message, Code: e.Name})
	default:
		o.Log(conversation.LevelDebug, "opencode run event "+strconv.Quote(l.Type), line)
	}
	return o.Events, nil
}

// Flush ends the turn at the end of the output.
func (c *RunJSONConverter) Flush() []conversation.Event {
	if !c.started {
		return nil
	}
	c.started = false
	o := &convkit.Out{}
	c.at(o)
	if e := c.turnErr; e != nil {
		c.turnErr = nil
		o.Emit("", conversation.QueryFailed{Error: e.Data.Message, Code: e.Name, Interrupted: e.Name == "MessageAbortedError"})
	} else {
		o.Emit("", conversation.QueryCompleted{})
	}
	return o.Events
}
