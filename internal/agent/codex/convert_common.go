package codex

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentd/agentd/conversation"
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
