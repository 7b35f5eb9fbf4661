package claudeconv

import (
	"fmt"

	"github.com/agentd/agentd/conversation"
)

// What the live runner (package claudecode) reads from the converter
// besides events: where a line goes, the state a resumed turn starts from,
// a subagent's agent id, and the converter for a subagent's transcript as
// it is written.

// LineInfo is what the converter read of a line besides its events.
type LineInfo struct {
	Type, Subtype   string
	UUID            string
	ParentToolUseID string
	// ToolUse: an assistant line whose message calls a tool.
	ToolUse bool
}

func lineInfo(l *wireLine) LineInfo {
	info := LineInfo{Type: l.Type, Subtype: l.Subtype, UUID: l.UUID, ParentToolUseID: l.ParentToolUseID}
	if l.Type == "assistant" {
		info.ToolUse = hasToolUse(&l.Message)
	}
	return info
}

func hasToolUse(m *wireMessage) bool {
	for i := range m.Content {
		switch m.Content[i].Type {
		case "tool_use", "server_tool_use", "mcp_tool_use":
			return true
		}
	}
	return false
}

// Line describes the line of the last Convert call; it is valid when that
// call returned no error or one wrapping ErrIgnored.
func (sc *StreamConverter) Line() LineInfo { return lineInfo(&sc.l) }

// Seed is the part of a StreamConverter's state that carries from one turn
// to the next and changes what the turn's lines convert to. The runner
// saves it with a turn (its JSON is part of the saved agent state) so that
// a later process converts the turn's lines again to the same events.
type Seed struct {
	Cost      float64 `json:"cost,omitempty"`
	MainModel string  `json:"mainModel,omitempty"`
	InitModel string  `json:"initModel,omitempty"`
	Lines     int     `json:"lines,omitempty"`
}

// Seed returns the converter's carried state as it is now.
func (sc *StreamConverter) Seed() Seed {
	c := sc.c
	return Seed{Cost: c.lastCost, MainModel: c.mainModel, InitModel: c.initModel, Lines: c.lineNo}
}

// Restore sets the converter's carried state to s (a fresh converter that
// continues where the one s was taken from stood).
func (sc *StreamConverter) Restore(s Seed) {
	c := sc.c
	c.lastCost, c.mainModel, c.initModel, c.lineNo = s.Cost, s.MainModel, s.InitModel, s.Lines
}

// AgentID returns the agent id of the subagent the Task call toolUseID
// spawned, once a line named it (task_started, the Task result), else "".
// The converter is the one place that maps subagent ids.
func (sc *StreamConverter) AgentID(toolUseID string) string {
	if s := sc.c.subs.tool(toolUseID); s != nil {
		return s.agentID
	}
	return ""
}

// SubagentConverter converts the lines of one subagent's transcript file,
// as the CLI writes them, into events of the subagent's conversation (the
// spawning tool_use id), with the block ids ConvertTranscript gives. It is
// not safe for concurrent use.
type SubagentConverter struct {
	conv string
	c    *core
	sc   scanner
	l    wireLine
}

// NewSubagentConverter returns a converter for the transcript of the
// subagent whose conversation id is conversationID.
func NewSubagentConverter(conversationID string) *SubagentConverter {
	return &SubagentConverter{conv: conversationID, c: newCore()}
}

// Convert converts one line (without its newline). An error means the line
// was skipped (it wraps ErrMalformed or ErrIgnored). The returned events
// are the caller's.
func (t *SubagentConverter) Convert(line []byte) ([]conversation.Event, error) {
	if err := decodeLine(&t.sc, line, &t.l); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return t.c.convert(&t.l, line, t.conv)
}

// Line describes the line of the last Convert call, as StreamConverter.Line.
func (t *SubagentConverter) Line() LineInfo { return lineInfo(&t.l) }
