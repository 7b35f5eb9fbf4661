package codex

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/convkit"
)

// tokenTotals are codex's token counts: input includes the cached part
// (and the cache writes, for providers that report them).
type tokenTotals struct {
	InputTokens           int64 `json:"input_tokens"`
	CachedInputTokens     int64 `json:"cached_input_tokens"`
	CacheWriteInputTokens int64 `json:"cache_write_input_tokens"`
	OutputTokens          int64 `json:"output_tokens"`
}

// minus returns t - prev, or t itself when a count went down (a reset).
func (t tokenTotals) minus(prev tokenTotals) tokenTotals {
	d := tokenTotals{t.InputTokens - prev.InputTokens, t.CachedInputTokens - prev.CachedInputTokens,
		t.CacheWriteInputTokens - prev.CacheWriteInputTokens, t.OutputTokens - prev.OutputTokens}
	if d.InputTokens < 0 || d.CachedInputTokens < 0 || d.CacheWriteInputTokens < 0 || d.OutputTokens < 0 {
		return t
	}
	return d
}

// usage converts codex counts to agentd's, where InputTokens excludes
// cache reads and writes (as Anthropic's do), so totals add up the same
// way for every architecture.
func (t tokenTotals) usage() *conversation.Usage {
	cached := min(max(t.CachedInputTokens, 0), max(t.InputTokens, 0))
	write := min(max(t.CacheWriteInputTokens, 0), max(t.InputTokens, 0)-cached)
	return &conversation.Usage{InputTokens: max(t.InputTokens, 0) - cached - write, OutputTokens: max(t.OutputTokens, 0),
		CacheReadInputTokens: cached, CacheCreationInputTokens: write}
}

// mcpContentText joins the text items of an MCP result's content; other
// items are kept as JSON.
func mcpContentText(items []json.RawMessage) string {
	var sb strings.Builder
	for _, it := range items {
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(it, &c) == nil && c.Type == "text" {
			sb.WriteString(c.Text)
			continue
		}
		sb.Write(bytes.TrimSpace(it))
	}
	return sb.String()
}

// mcpResult is the result of an MCP tool call item. The exec protocol
// carries the same fields in snake case; its struct converts to this one.
type mcpResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent"`
}

// mcpError is the error of a failed MCP tool call item (both protocols).
type mcpError struct {
	Message string `json:"message"`
}

// mcpToolUse is the tool_use block of an MCP tool call item, named
// mcp__<server>__<tool> as Claude Code names MCP tools.
func mcpToolUse(id string, st conversation.BlockStatus, server, tool string, args json.RawMessage) conversation.Block {
	return conversation.Block{ID: id, Type: conversation.BlockToolUse, Status: st,
		ToolName: "mcp__" + server + "__" + tool, ToolUseID: id, Input: convkit.ObjectInput(args),
		Metadata: map[string]any{"server": server, "tool": tool}}
}

// mcpOutput is a finished MCP tool call's output: the error's message, or
// the result's text content, or its structured content when there is no
// text.
func mcpOutput(e *mcpError, r *mcpResult) string {
	switch {
	case e != nil:
		return e.Message
	case r != nil:
		out := mcpContentText(r.Content)
		if out == "" && len(r.StructuredContent) > 0 && string(r.StructuredContent) != "null" {
			out = string(r.StructuredContent)
		}
		return out
	}
	return ""
}
