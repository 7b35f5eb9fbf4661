package conversation

import (
	"encoding/json"
	"time"
)

// BlockType names a block type.
type BlockType string

const (
	BlockUserMessage   BlockType = "user_message"
	BlockAssistantText BlockType = "assistant_text"
	BlockThinking      BlockType = "thinking"
	BlockToolUse       BlockType = "tool_use"
	BlockToolResult    BlockType = "tool_result"
	BlockSystem        BlockType = "system"
	BlockSubagent      BlockType = "subagent"
	BlockError         BlockType = "error"
	BlockSkillLoad     BlockType = "skill_load"
)

// BlockTypes lists every block type.
var BlockTypes = []BlockType{
	BlockUserMessage, BlockAssistantText, BlockThinking, BlockToolUse,
	BlockToolResult, BlockSystem, BlockSubagent, BlockError, BlockSkillLoad,
}

// BlockStatus is a block's completion state.
type BlockStatus string

const (
	StatusPending  BlockStatus = "pending"
	StatusComplete BlockStatus = "complete"
	StatusError    BlockStatus = "error"
)

// Block is one unit of a conversation. It is a flat union of every block
// type's fields; which fields are meaningful depends on Type:
//
//	user_message    Content
//	assistant_text  Content, Model
//	thinking        Content, Summary
//	tool_use        ToolName, ToolUseID, Input, DisplayName, Description
//	tool_result     ToolUseID, Output, IsError, DurationMs
//	system          Subtype, Message
//	subagent        SubagentID, ToolUseID, Name, Input, Description, Output, DurationMs
//	error           Message, Code
//	skill_load      SkillName, Content
//
// In a block:upsert (BlockUpsert's JSON) every field but id and type is
// omitted when empty, so an upsert carries only what it sets and a shallow
// merge by id (the contract's rule) leaves the other fields alone; a
// missing isError is false. A block of a reduced conversation (State, and
// Block's own JSON) also carries the fields its type requires, empty ones
// included (see Required): a client merging updates into it, or appending
// deltas to it, finds them all.
type Block struct {
	ID        string         `json:"id"`
	Type      BlockType      `json:"type"`
	Timestamp time.Time      `json:"timestamp,omitzero"`
	Status    BlockStatus    `json:"status,omitempty"`
	Metadata  map[string]any `json:"metadata,omitempty"`

	Content string `json:"content,omitempty"`
	Model   string `json:"model,omitempty"`
	Summary string `json:"summary,omitempty"`

	ToolName    string          `json:"toolName,omitempty"`
	ToolUseID   string          `json:"toolUseId,omitempty"`
	Input       json.RawMessage `json:"input,omitempty"`
	DisplayName string          `json:"displayName,omitempty"`
	Description string          `json:"description,omitempty"`

	Output     string `json:"output,omitempty"`
	IsError    bool   `json:"isError,omitempty"`
	DurationMs int64  `json:"durationMs,omitempty"`

	Subtype string `json:"subtype,omitempty"`
	Message string `json:"message,omitempty"`
	Code    string `json:"code,omitempty"`

	SubagentID string `json:"subagentId,omitempty"`
	Name       string `json:"name,omitempty"`
	SkillName  string `json:"skillName,omitempty"`

	// Truncated is set when the block's text was longer than the server
	// keeps in a conversation; the full text is an artifact.
	Truncated *Truncation `json:"truncated,omitempty"`
	// Attachments are images and files the block carries (a user's images,
	// an image a tool returned), stored as artifacts.
	Attachments []ArtifactRef `json:"attachments,omitempty"`
}

// ToolResultID is the block id of the tool_result for toolUseID. The tool_use
// block itself has id toolUseID, so the two never collide.
func ToolResultID(toolUseID string) string { return toolUseID + "-result" }

// appendText appends a block:delta to the text field the contract names:
// Output for tool_result and subagent blocks, Content otherwise.
func (b *Block) appendText(delta string) {
	switch b.Type {
	case BlockToolResult, BlockSubagent:
		b.Output += delta
	default:
		b.Content += delta
	}
}

// Required lists the JSON fields a block of type t always has in a reduced
// conversation (besides id, type and timestamp), as the block types of the
// contract (and of the seed's clients) mark them: Block's JSON writes them
// even when empty. The reducer also gives tool_use and subagent blocks a
// status ("pending") and an input ({} and "") when they have none.
func Required(t BlockType) []string {
	switch t {
	case BlockUserMessage, BlockAssistantText, BlockThinking:
		return []string{"content"}
	case BlockToolUse:
		return []string{"toolName", "toolUseId", "input", "status"}
	case BlockToolResult:
		return []string{"toolUseId", "output", "isError"}
	case BlockSystem:
		return []string{"subtype", "message"}
	case BlockSubagent:
		return []string{"subagentId", "input", "status"}
	case BlockError:
		return []string{"message"}
	case BlockSkillLoad:
		return []string{"skillName", "content"}
	}
	return nil
}

// fillRequired gives b what the reducer fills in after every upsert: the
// event's timestamp when b has none, and a status and an input for the
// types that require them. Empty strings and false need no filling: Go's
// zero values, written by MarshalJSON.
func fillRequired(b *Block, ts time.Time) {
	if b.Timestamp.IsZero() && !ts.IsZero() {
		b.Timestamp = ts
	}
	switch b.Type {
	case BlockToolUse:
		if len(b.Input) == 0 {
			b.Input = json.RawMessage("{}")
		}
		if b.Status == "" {
			b.Status = StatusPending
		}
	case BlockSubagent:
		if len(b.Input) == 0 {
			b.Input = json.RawMessage(`""`)
		}
		if b.Status == "" {
			b.Status = StatusPending
		}
	}
}

// partialBlock is Block without its MarshalJSON: only the fields set.
type partialBlock Block

// MarshalJSON writes b with the fields its type requires (Required), empty
// or not; BlockUpsert writes only the fields set.
func (b Block) MarshalJSON() ([]byte, error) {
	out, err := json.Marshal(partialBlock(b))
	if err != nil {
		return nil, err
	}
	return AppendRequired(out, &b), nil
}

// AppendRequired completes obj, the JSON object of b's fields that are set
// (as a block:upsert writes it; it ends with '}'), into Block's JSON: the
// fields b's type requires that are empty are added, in Required's order.
func AppendRequired(obj []byte, b *Block) []byte {
	var extra []byte
	for _, f := range Required(b.Type) {
		var v string
		switch f {
		case "content":
			if b.Content == "" {
				v = `""`
			}
		case "toolName":
			if b.ToolName == "" {
				v = `""`
			}
		case "toolUseId":
			if b.ToolUseID == "" {
				v = `""`
			}
		case "output":
			if b.Output == "" {
				v = `""`
			}
		case "isError":
			if !b.IsError {
				v = "false"
			}
		case "subtype":
			if b.Subtype == "" {
				v = `""`
			}
		case "message":
			if b.Message == "" {
				v = `""`
			}
		case "subagentId":
			if b.SubagentID == "" {
				v = `""`
			}
		case "skillName":
			if b.SkillName == "" {
				v = `""`
			}
		case "input":
			if len(b.Input) == 0 {
				v = "{}"
				if b.Type == BlockSubagent {
					v = `""`
				}
			}
		case "status":
			if b.Status == "" {
				v = `"pending"`
			}
		}
		if v != "" {
			extra = append(extra, `,"`+f+`":`+v...)
		}
	}
	if len(extra) == 0 {
		return obj
	}
	// obj has at least id and type before its closing brace.
	return append(append(obj[:len(obj)-1], extra...), '}')
}

// upsertJSON is BlockUpsert's JSON: the block as set.
type upsertJSON struct {
	Block partialBlock `json:"block"`
}

// MarshalJSON writes the block as set (see Block).
func (u BlockUpsert) MarshalJSON() ([]byte, error) {
	return json.Marshal(upsertJSON{partialBlock(u.Block)})
}

// Upsert returns a block:upsert event for b.
func Upsert(b Block) Event { return NewEvent(BlockUpsert{Block: b}) }

// Delta returns a block:delta event appending text to block id.
func Delta(id, text string) Event { return NewEvent(BlockDelta{BlockID: id, Delta: text}) }
