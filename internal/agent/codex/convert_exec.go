// Package codex holds agentd's support for OpenAI's Codex CLI. The
// converters in convert_*.go turn its three output formats into
// conversation events: `codex exec --json` lines (ExecJSONConverter), the
// session rollout files under ~/.codex/sessions (RolloutConverter) and the
// app-server JSON-RPC stream (AppServerConverter). Converters are pure and
// stateful: no I/O, no clock, one instance per stream, not safe for
// concurrent use.
package codex

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// ExecJSONConverter converts the JSON lines of `codex exec --json`
// (thread.started, turn.started, item.started/updated/completed,
// turn.completed, turn.failed, error).
//
// codex exec numbers its items item_0, item_1, … afresh in every process,
// so block ids are "<scope>-<turn>-<item id>", where scope is the
// WithIDPrefix prefix or else the thread id, and turn counts the
// turn.started lines this converter has seen.
type ExecJSONConverter struct {
	opts      convkit.Options
	threadID  string
	turn      int
	errors    int
	lastError string // the last error line's message in this turn
	blocks    convkit.Blocks
}

// NewExecJSONConverter returns a converter for one `codex exec --json`
// output stream.
func NewExecJSONConverter(opts ...Option) *ExecJSONConverter {
	return &ExecJSONConverter{opts: convkit.Build(opts), blocks: convkit.NewBlocks()}
}

// ThreadID is the thread id from thread.started ("" before it), which
// `codex exec resume` takes to continue the conversation.
func (c *ExecJSONConverter) ThreadID() string { return c.threadID }

type execLine struct {
	Type     string       `json:"type"`
	ThreadID string       `json:"thread_id"`
	Item     *execItem    `json:"item"`
	Usage    *tokenTotals `json:"usage"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
	ItemID  string `json:"item_id"`
	Delta   string `json:"delta"`
}

type execItem struct {
	ID               string `json:"id"`
	Type             string `json:"type"`
	Text             string `json:"text"`
	Command          string `json:"command"`
	AggregatedOutput string `json:"aggregated_output"`
	ExitCode         *int   `json:"exit_code"`
	Status           string `json:"status"`
	Changes          []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structured_content"`
	} `json:"result"`
	Error             *mcpError       `json:"error"`
	Query             string          `json:"query"`
	Action            json.RawMessage `json:"action"`
	Items             []todoItem      `json:"items"`
	Message           string          `json:"message"`
	SenderThreadID    string          `json:"sender_thread_id"`
	ReceiverThreadIDs []string        `json:"receiver_thread_ids"`
	Prompt            *string         `json:"prompt"`
}

type todoItem struct {
	Text      string `json:"text"`
	Completed bool   `json:"completed"`
}

// Convert converts one line. A line that is not a JSON object is an error
// and yields no events; an unknown type becomes a log event.
func (c *ExecJSONConverter) Convert(line []byte) ([]conversation.Event, error) {
	var l execLine
	if err := json.Unmarshal(line, &l); err != nil {
		return nil, fmt.Errorf("codex exec line: %w", err)
	}
	o := &convkit.Out{}
	switch l.Type {
	case "thread.started":
		c.threadID = l.ThreadID
		o.Log(conversation.LevelInfo, "codex thread started: "+l.ThreadID, line)
	case "turn.started":
		c.turn++
		c.lastError = ""
	case "item.started", "item.updated", "item.completed":
		if err := c.item(o, l.Type == "item.completed", l.Item, line); err != nil {
			return nil, err
		}
	case "item.plan.delta":
		if id := c.blockID(l.ItemID); !c.blocks.AppendText(o, id, l.Delta) {
			o.Log(conversation.LevelDebug, "codex: plan delta for unknown item "+l.ItemID, line)
		}
	case "turn.completed":
		if l.Usage != nil {
			o.Emit("", conversation.MetadataUpdate{Usage: l.Usage.usage()})
		}
		o.Emit("", conversation.QueryCompleted{})
	case "turn.failed":
		msg := "turn failed"
		if l.Error != nil && l.Error.Message != "" {
			msg = l.Error.Message
		}
		if msg != c.lastError {
			// codex exec usually sends the fatal error as an error line
			// first; one block for it is enough.
			c.errorBlock(o, msg)
		}
		o.Emit("", conversation.QueryFailed{Error: msg})
	case "error":
		c.errorBlock(o, l.Message)
	default:
		o.Log(conversation.LevelWarn, "codex: unknown exec event "+strconv.Quote(l.Type), line)
	}
	return o.Events, nil
}

func (c *ExecJSONConverter) scope() string {
	switch {
	case c.opts.IDPrefix != "":
		return c.opts.IDPrefix
	case c.threadID != "":
		return c.threadID
	}
	return "codex"
}

func (c *ExecJSONConverter) blockID(itemID string) string {
	return c.scope() + "-" + strconv.Itoa(c.turn) + "-" + itemID
}

func (c *ExecJSONConverter) errorBlock(o *convkit.Out, msg string) {
	c.errors++
	c.lastError = msg
	id := c.blocks.Claim("error:"+strconv.Itoa(c.errors), c.scope()+"-"+strconv.Itoa(c.turn)+"-error-"+strconv.Itoa(c.errors))
	c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockError, Status: conversation.StatusError, Message: msg})
	o.Emit("", conversation.ErrorEvent{Message: msg})
}

func (c *ExecJSONConverter) item(o *convkit.Out, done bool, it *execItem, line []byte) error {
	if it == nil {
		return fmt.Errorf("codex exec item event without item")
	}
	if it.ID == "" {
		return fmt.Errorf("codex exec item without id")
	}
	id := c.blocks.Claim("item:"+strconv.Itoa(c.turn)+":"+it.ID, c.blockID(it.ID))
	failed := it.Status == "failed" || it.Status == "declined"
	st := convkit.StatusOf(done, failed)
	switch it.Type {
	case "agent_message":
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: convkit.StatusOf(done, false), Content: it.Text})
	case "plan":
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockAssistantText, Status: convkit.StatusOf(done, false), Content: it.Text,
			Metadata: map[string]any{"kind": "plan"}})
	case "reasoning":
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockThinking, Status: convkit.StatusOf(done, false), Content: it.Text})
	case "command_execution":
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st, ToolName: "shell", ToolUseID: id,
			Input: convkit.MustJSON(map[string]string{"command": it.Command})})
		if done || it.AggregatedOutput != "" {
			isErr := failed || (it.ExitCode != nil && *it.ExitCode != 0)
			var meta map[string]any
			if it.ExitCode != nil {
				meta = map[string]any{"exitCode": *it.ExitCode}
			}
			c.blocks.Put(o, "", conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult,
				Status: convkit.StatusOf(done, isErr), ToolUseID: id, Output: it.AggregatedOutput, IsError: isErr, Metadata: meta})
		}
	case "file_change":
		changes := make([]map[string]string, 0, len(it.Changes))
		var summary strings.Builder
		for _, ch := range it.Changes {
			changes = append(changes, map[string]string{"path": ch.Path, "kind": ch.Kind})
			fmt.Fprintf(&summary, "%s %s\n", ch.Kind, ch.Path)
		}
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st, ToolName: "apply_patch", ToolUseID: id,
			Input: convkit.MustJSON(map[string]any{"changes": changes})})
		if done {
			c.blocks.Put(o, "", conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult,
				Status: st, ToolUseID: id, Output: summary.String(), IsError: failed, Metadata: map[string]any{"status": it.Status}})
		}
	case "mcp_tool_call":
		failed = failed || it.Error != nil
		c.blocks.Put(o, "", mcpToolUse(id, convkit.StatusOf(done, failed), it.Server, it.Tool, it.Arguments))
		if done {
			// The exec protocol names the result's fields in snake case.
			c.blocks.Put(o, "", conversation.Block{ID: conversation.ToolResultID(id), Type: conversation.BlockToolResult,
				Status: convkit.StatusOf(true, failed), ToolUseID: id, Output: mcpOutput(it.Error, (*mcpResult)(it.Result)), IsError: failed})
		}
	case "web_search":
		in := map[string]any{"query": it.Query}
		if len(it.Action) > 0 && string(it.Action) != "null" {
			in["action"] = it.Action
		}
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st, ToolName: "web_search", ToolUseID: id,
			Input: convkit.MustJSON(in)})
	case "todo_list":
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockSystem, Status: convkit.StatusOf(done, false), Subtype: "todo_list",
			Message: renderTodos(it.Items), Metadata: map[string]any{"items": it.Items}})
	case "collab_tool_call":
		in := map[string]any{"receiverThreadIds": it.ReceiverThreadIDs}
		if it.Prompt != nil {
			in["prompt"] = *it.Prompt
		}
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st, ToolName: it.Tool, ToolUseID: id,
			Input: convkit.MustJSON(in)})
	case "error":
		c.blocks.Put(o, "", conversation.Block{ID: id, Type: conversation.BlockError, Status: conversation.StatusError, Message: it.Message})
		if done {
			o.Emit("", conversation.ErrorEvent{Message: it.Message})
		}
	default:
		o.Log(conversation.LevelWarn, "codex: unknown exec item type "+strconv.Quote(it.Type), line)
	}
	return nil
}

func renderTodos(items []todoItem) string {
	var sb strings.Builder
	for _, it := range items {
		if it.Completed {
			sb.WriteString("[x] ")
		} else {
			sb.WriteString("[ ] ")
		}
		sb.WriteString(it.Text)
		sb.WriteByte('\n')
	}
	return sb.String()
}
