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
// Every field but id and type is omitted from JSON when empty, so a
// block:upsert carries only what it sets and a shallow merge by id (the
// contract's rule) leaves the other fields alone. A missing isError is false.
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

// Upsert returns a block:upsert event for b.
func Upsert(b Block) Event { return NewEvent(BlockUpsert{Block: b}) }

// Delta returns a block:delta event appending text to block id.
func Delta(id, text string) Event { return NewEvent(BlockDelta{BlockID: id, Delta: text}) }
