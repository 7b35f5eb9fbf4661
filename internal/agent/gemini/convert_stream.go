// Package gemini holds agentd's support for Google's Gemini CLI. The
// converters in convert_*.go turn its output into conversation events:
// `gemini --output-format stream-json` lines (StreamJSONConverter), the
// saved chat sessions under ~/.gemini/tmp/<project>/chats
// (SessionConverter) and the single `--output-format json` result
// (ConvertJSONOutput). Converters are pure and stateful: no I/O, no clock,
// one instance per stream, not safe for concurrent use.
package gemini

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// StreamJSONConverter converts `gemini --output-format stream-json` lines
// (init, message, tool_use, tool_result, error, result; Gemini CLI 0.11 to
// 0.61). Assistant text arrives as message chunks with delta:true; the
// chunks between two other events form one assistant_text block, streamed
// as block:delta. Messages carry no ids, so text and user blocks are
// "<prefix>-<n>" (see WithIDPrefix); tool blocks use Gemini's tool_id.
type StreamJSONConverter struct {
	opts      convkit.Options
	sessionID string
	model     string
	n         int
	open      string // the assistant_text block chunks append to
	toolStart map[string]time.Time
	blocks    convkit.Blocks
}

// NewStreamJSONConverter returns a converter for one stream-json output;
// a runner that keeps one converter across turns gets ids that never
// repeat.
func NewStreamJSONConverter(opts ...Option) *StreamJSONConverter {
	return &StreamJSONConverter{opts: convkit.Build(opts), toolStart: map[string]time.Time{}, blocks: convkit.NewBlocks()}
}

// SessionID is the session id from the init line ("" before it), which
// `gemini --resume` takes.
func (c *StreamJSONConverter) SessionID() string { return c.sessionID }

type streamLine struct {
	Type       string          `json:"type"`
	Timestamp  string          `json:"timestamp"`
	SessionID  string          `json:"session_id"`
	Model      string          `json:"model"`
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	Delta      bool            `json:"delta"`
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Severity string `json:"severity"`
	Message  string `json:"message"`
	Stats    *struct {
		InputTokens  int64  `json:"input_tokens"`
		OutputTokens int64  `json:"output_tokens"`
		Cached       int64  `json:"cached"`
		Input        *int64 `json:"input"`
		DurationMs   int64  `json:"duration_ms"`
	} `json:"stats"`
}

// Convert converts one stream-json line.
func (c *StreamJSONConverter) Convert(line []byte) ([]conversation.Event, error) {
	var l streamLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("gemini stream-json line: %w", err)
	}
	o := &convkit.Out{TS: convkit.ParseTime(l.Timestamp)}
	switch l.Type {
	case "init":
		if c.sessionID == "" {
			c.sessionID = l.SessionID
		}
		if l.Model != "" && l.Model != c.model {
			c.model = l.Model
			o.Emit("", conversation.MetadataUpdate{Model: l.Model})
		}
		o.Log(conversation.LevelInfo, "gemini session "+l.SessionID, line)
	case "message":
		c.message(o, &l)
	case "tool_use":
		if l.ToolID == "" {
			return nil, fmt.Errorf("gemini tool_use without tool_id")
		}
		c.closeText(o)
		id := c.blocks.Claim("tool:"+l.ToolID, l.ToolID)
		c.toolStart[id] = o.TS
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: conversation.StatusPending,
			ToolName: l.ToolName, ToolUseID: id, Input: convkit.ObjectInput(l.Parameters)})
	case "tool_result":
		if l.ToolID == "" {
			return nil, fmt.Errorf("gemini tool_result without tool_id")
		}
		c.closeText(o)
		c.toolResult(o, &l)
	case "error":
		c.closeText(o)
		if l.Severity == "warning" {
			o.Log(conversation.LevelWarn, "gemini warning: "+l.Message, line)
			break
		}
		c.errorBlock(o, l.Message, "")
	case "result":
		c.closeText(o)
		c.result(o, &l)
	default:
		o.Log(conversation.LevelWarn, "gemini: unknown stream-json event "+strconv.Quote(l.Type), line)
	}
	return o.Events, nil
}

func (c *StreamJSONConverter) nextID(kind string) string {
	c.n++
	scope := c.opts.IDPrefix
	if scope == "" {
		scope = c.sessionID
	}
	if scope == "" {
		scope = "gemini"
	}
	return c.blocks.Claim(kind+":"+strconv.Itoa(c.n), scope+"-"+strconv.Itoa(c.n))
}

// closeText completes the assistant text being streamed, if any.
func (c *StreamJSONConverter) closeText(o *convkit.Out) {
	if c.open == "" {
		return
	}
	c.blocks.Put(o, "", conversation.Block{ID: c.open, Type: conversation.BlockAssistantText, Status: conversation.StatusComplete})
	c.open = ""
}

func (c *StreamJSONConverter) message(o *convkit.Out, l *streamLine) {
	if l.Role != "assistant" {
		c.closeText(o)
		if c.opts.OmitUserMessages {
			return
		}
		c.blocks.Put(o, "", conversation.Block{ID: c.nextID("user"), Type: conversation.BlockUserMessage,
			Status: conversation.StatusComplete, Content: l.Content})
		return
	}
	if !l.Delta {
		c.closeText(o)
		c.blocks.Put(o, "", conversation.Block{ID: c.nextID("text"), Type: conversation.BlockAssistantText,
			Status: conversation.StatusComplete, Content: l.Content, Model: c.model})
		return
	}
	if c.open == "" {
		c.open = c.nextID("text")
		c.blocks.Put(o, "", conversation.Block{ID: c.open, Type: conversation.BlockAssistantText,
			Status: conversation.StatusPending, Content: l.Content, Model: c.model})
		return
	}
	c.blocks.AppendText(o, c.open, l.Content)
}

func (c *StreamJSONConverter) toolResult(o *convkit.Out, l *streamLine) {
	id := c.blocks.Lookup("tool:"+l.ToolID, l.ToolID)
	isErr := l.Status != "success"
	output := l.Output
	if l.Error != nil && (isErr || output == "") {
		output = l.Error.Message
	}
	var dur int64
	if start, ok := c.toolStart[id]; ok && !start.IsZero() && !o.TS.IsZero() && o.TS.After(start) {
		dur = o.TS.Sub(start).Milliseconds()
	}
	var meta map[string]any
	if l.Error != nil && l.Error.Type != "" {
		meta = map[string]any{"errorType": l.Error.Type}
	}
	st := convkit.StatusOf(true, isErr)
	if c.blocks.Has(id) {
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st})
	}
	c.blocks.Put(o, "", conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult, Status: st,
		ToolUseID: id, Output: output, IsError: isErr, DurationMs: dur, Metadata: meta})
}

func (c *StreamJSONConverter) errorBlock(o *convkit.Out, msg, code string) {
	c.blocks.Put(o, "", conversation.Block{ID: c.nextID("error"), Type: conversation.BlockError, Status: conversation.StatusError,
		Message: msg, Code: code})
	o.Emit("", conversation.ErrorEvent{Message: msg, Code: code})
}

func (c *StreamJSONConverter) result(o *convkit.Out, l *streamLine) {
	var dur int64
	if s := l.Stats; s != nil {
		dur = s.DurationMs
		// input_tokens counts the prompt including its cached part;
		// "input" (0.2x+) is the uncached part.
		in := s.InputTokens - s.Cached
		if s.Input != nil {
			in = *s.Input
		}
		u := conversation.Usage{InputTokens: max(in, 0), OutputTokens: s.OutputTokens, CacheReadInputTokens: s.Cached}
		if u != (conversation.Usage{}) {
			o.Emit("", conversation.MetadataUpdate{Usage: &u})
		}
	}
	if l.Status == "success" {
		o.Emit("", conversation.QueryCompleted{DurationMs: dur})
		return
	}
	msg, code := "gemini run failed", ""
	if l.Error != nil {
		if l.Error.Message != "" {
			msg = l.Error.Message
		}
		code = l.Error.Type
	}
	c.errorBlock(o, msg, code)
	o.Emit("", conversation.QueryFailed{Error: msg, Code: code, DurationMs: dur, Interrupted: code == "FatalCancellationError"})
}
