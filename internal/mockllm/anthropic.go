package mockllm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Anthropic Messages API: request parsing and response rendering.

type anthropicRequest struct {
	Model     string `json:"model"`
	MaxTokens int    `json:"max_tokens"`
	Stream    bool   `json:"stream"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	System json.RawMessage `json:"system"`
	Tools  []struct {
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"tools"`
	OutputFormat *struct {
		Schema json.RawMessage `json:"schema"`
	} `json:"output_format"`
	OutputConfig *struct {
		Format *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"output_config"`
}

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *imageSource    `json:"source"`
}

// imageSource is an image block's source; only base64 data is read.
type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// imagePart is an image block as a Part: what it holds, not its bytes.
func imagePart(b anthropicBlock, inToolResult bool) Part {
	p := Part{Type: PartImage, Image: &ImageInfo{InToolResult: inToolResult}}
	if b.Source == nil {
		return p
	}
	p.Image.MediaType = b.Source.MediaType
	p.Image.SourceType = b.Source.Type
	if data, err := base64.StdEncoding.DecodeString(b.Source.Data); err == nil && b.Source.Type == "base64" {
		sum := sha256.Sum256(data)
		p.Image.SHA256 = hex.EncodeToString(sum[:])
		p.Image.Size = len(data)
	}
	return p
}

// toolResultImages are the image blocks of a tool result's content.
func toolResultImages(raw json.RawMessage) []Part {
	var blocks []anthropicBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	var out []Part
	for _, b := range blocks {
		if b.Type == "image" {
			out = append(out, imagePart(b, true))
		}
	}
	return out
}

func parseAnthropic(body []byte) (*Request, error) {
	var ar anthropicRequest
	if err := json.Unmarshal(body, &ar); err != nil {
		return nil, fmt.Errorf("request body is not a Messages request: %w", err)
	}
	if ar.Model == "" {
		return nil, errors.New("model: field required")
	}
	if len(ar.Messages) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	r := &Request{
		Provider:  ProviderAnthropic,
		API:       APIMessages,
		Model:     ar.Model,
		Stream:    ar.Stream,
		MaxTokens: ar.MaxTokens,
		System:    rawText(ar.System),
	}
	for _, t := range ar.Tools {
		if t.Name != "" {
			r.Tools = append(r.Tools, ToolDecl{Name: t.Name})
		}
	}
	switch {
	case ar.OutputFormat != nil && len(ar.OutputFormat.Schema) > 0:
		r.Schema = ar.OutputFormat.Schema
	case ar.OutputConfig != nil && ar.OutputConfig.Format != nil && len(ar.OutputConfig.Format.Schema) > 0:
		r.Schema = ar.OutputConfig.Format.Schema
	}
	for i, m := range ar.Messages {
		switch m.Role {
		case "user", "assistant":
		case "system":
			// Claude Code's mid-conversation system messages are context,
			// not something the user said.
			if t := rawText(m.Content); t != "" {
				r.System += "\n" + t
			}
			continue
		default:
			return nil, fmt.Errorf("messages.%d.role: unexpected role %q", i, m.Role)
		}
		msg := Message{Role: Role(m.Role)}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			msg.Parts = []Part{{Type: PartText, Text: s}}
			r.Messages = append(r.Messages, msg)
			continue
		}
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, fmt.Errorf("messages.%d.content: must be a string or a list of blocks", i)
		}
		for _, b := range blocks {
			switch b.Type {
			case "text":
				msg.Parts = append(msg.Parts, Part{Type: PartText, Text: b.Text})
			case "thinking":
				msg.Parts = append(msg.Parts, Part{Type: PartThinking, Text: b.Thinking})
			case "tool_use", "server_tool_use", "mcp_tool_use":
				msg.Parts = append(msg.Parts, Part{Type: PartToolCall, ToolID: b.ID, ToolName: b.Name, Text: string(b.Input)})
			case "tool_result":
				msg.Parts = append(msg.Parts, Part{Type: PartToolResult, ToolID: b.ToolUseID, Text: rawText(b.Content), IsError: b.IsError})
				msg.Parts = append(msg.Parts, toolResultImages(b.Content)...)
			case "image":
				msg.Parts = append(msg.Parts, imagePart(b, false))
			default:
				msg.Parts = append(msg.Parts, Part{Type: PartOther})
			}
		}
		r.Messages = append(r.Messages, msg)
	}
	r.resolveToolNames()
	return r, nil
}

// Response shapes, with fields in the order the real API sends them.

type anthropicUsage struct {
	InputTokens              int            `json:"input_tokens"`
	CacheCreationInputTokens int            `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int            `json:"cache_read_input_tokens"`
	CacheCreation            *cacheCreation `json:"cache_creation,omitempty"`
	OutputTokens             int            `json:"output_tokens"`
	ServiceTier              string         `json:"service_tier,omitempty"`
}

type cacheCreation struct {
	Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
}

type anthropicMessage struct {
	Model        string         `json:"model"`
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Content      []any          `json:"content"`
	StopReason   *StopReason    `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

type aText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type aThinking struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

type aToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

type aDelta struct {
	Type        string `json:"type"`
	Text        string `json:"text,omitempty"`
	Thinking    string `json:"thinking,omitempty"`
	Signature   string `json:"signature,omitempty"`
	PartialJSON string `json:"partial_json"`
}

// MarshalJSON writes exactly the field of the delta's type, including
// empty strings (the real API sends "partial_json":"" first).
func (d aDelta) MarshalJSON() ([]byte, error) {
	switch d.Type {
	case "text_delta":
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{d.Type, d.Text})
	case "thinking_delta":
		return json.Marshal(struct {
			Type     string `json:"type"`
			Thinking string `json:"thinking"`
		}{d.Type, d.Thinking})
	case "signature_delta":
		return json.Marshal(struct {
			Type      string `json:"type"`
			Signature string `json:"signature"`
		}{d.Type, d.Signature})
	default:
		return json.Marshal(struct {
			Type        string `json:"type"`
			PartialJSON string `json:"partial_json"`
		}{d.Type, d.PartialJSON})
	}
}

func (p *plan) anthropicContent(ids *idGen) []any {
	out := make([]any, 0, len(p.blocks))
	for i, b := range p.blocks {
		switch b.typ {
		case BlockText:
			out = append(out, aText{"text", b.text})
		case BlockThinking:
			out = append(out, aThinking{"thinking", b.text, b.signature})
		case BlockToolUse:
			out = append(out, aToolUse{"tool_use", p.toolID(i, ids, "toolu_01", 22), b.name, json.RawMessage(b.input)})
		}
	}
	return out
}

func writeAnthropic(w http.ResponseWriter, r *http.Request, p *plan, ids *idGen) {
	setAnthropicHeaders(w, ids, p.now, 0)
	msgID := ids.id("msg_01", 22, "message")
	if !p.stream {
		w.Header().Set("Content-Type", "application/json")
		stop := p.stop
		writeJSON(w, http.StatusOK, anthropicMessage{
			Model: p.model, ID: msgID, Type: "message", Role: "assistant",
			Content:    p.anthropicContent(ids),
			StopReason: &stop,
			Usage:      anthropicUsage{InputTokens: p.inputTokens, OutputTokens: p.outputTokens, CacheCreation: &cacheCreation{}, ServiceTier: "standard"},
		})
		return
	}
	sw := newSSE(w, r, p)
	sw.event("message_start", struct {
		Type    string           `json:"type"`
		Message anthropicMessage `json:"message"`
	}{"message_start", anthropicMessage{
		Model: p.model, ID: msgID, Type: "message", Role: "assistant", Content: []any{},
		Usage: anthropicUsage{InputTokens: p.inputTokens, CacheCreation: &cacheCreation{}, OutputTokens: 1, ServiceTier: "standard"},
	}})
	type blockStart struct {
		Type         string `json:"type"`
		Index        int    `json:"index"`
		ContentBlock any    `json:"content_block"`
	}
	type blockDelta struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
		Delta aDelta `json:"delta"`
	}
	type blockStop struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	ping := func() {
		sw.event("ping", struct {
			Type string `json:"type"`
		}{"ping"})
	}
	if len(p.blocks) == 0 {
		ping()
	}
	for i, b := range p.blocks {
		switch b.typ {
		case BlockText:
			sw.event("content_block_start", blockStart{"content_block_start", i, aText{"text", ""}})
			if i == 0 {
				ping()
			}
			for _, c := range chunks(b.text, p.chunk) {
				sw.event("content_block_delta", blockDelta{"content_block_delta", i, aDelta{Type: "text_delta", Text: c}})
			}
		case BlockThinking:
			sw.event("content_block_start", blockStart{"content_block_start", i, aThinking{"thinking", "", ""}})
			if i == 0 {
				ping()
			}
			for _, c := range chunks(b.text, p.chunk) {
				sw.event("content_block_delta", blockDelta{"content_block_delta", i, aDelta{Type: "thinking_delta", Thinking: c}})
			}
			sw.event("content_block_delta", blockDelta{"content_block_delta", i, aDelta{Type: "signature_delta", Signature: b.signature}})
		case BlockToolUse:
			sw.event("content_block_start", blockStart{"content_block_start", i, struct {
				Type   string          `json:"type"`
				ID     string          `json:"id"`
				Name   string          `json:"name"`
				Input  json.RawMessage `json:"input"`
				Caller struct {
					Type string `json:"type"`
				} `json:"caller"`
			}{Type: "tool_use", ID: p.toolID(i, ids, "toolu_01", 22), Name: b.name, Input: json.RawMessage("{}"), Caller: struct {
				Type string `json:"type"`
			}{"direct"}}})
			if i == 0 {
				ping()
			}
			// The real API opens with an empty partial_json, then the
			// arguments in several pieces.
			sw.event("content_block_delta", blockDelta{"content_block_delta", i, aDelta{Type: "input_json_delta"}})
			if b.input != "{}" {
				for _, c := range chunks(b.input, p.chunk) {
					sw.event("content_block_delta", blockDelta{"content_block_delta", i, aDelta{Type: "input_json_delta", PartialJSON: c}})
				}
			}
		}
		sw.event("content_block_stop", blockStop{"content_block_stop", i})
	}
	if p.streamErr != nil {
		sw.event("error", anthropicErrorBody(p.streamErr, ids))
		sw.end()
		return
	}
	sw.event("message_delta", struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   StopReason `json:"stop_reason"`
			StopSequence *string    `json:"stop_sequence"`
		} `json:"delta"`
		Usage anthropicUsage `json:"usage"`
	}{Type: "message_delta", Delta: struct {
		StopReason   StopReason `json:"stop_reason"`
		StopSequence *string    `json:"stop_sequence"`
	}{StopReason: p.stop}, Usage: anthropicUsage{InputTokens: p.inputTokens, OutputTokens: p.outputTokens}})
	sw.event("message_stop", struct {
		Type string `json:"type"`
	}{"message_stop"})
	sw.end()
}

// setAnthropicHeaders adds request-id and the rate-limit headers the real
// API sends on every answer; retryAfter > 0 marks the limits exhausted.
func setAnthropicHeaders(w http.ResponseWriter, ids *idGen, now time.Time, retryAfter int) {
	h := w.Header()
	h.Set("request-id", ids.id("req_011C", 20, "request"))
	reset := now.Add(time.Duration(retryAfter) * time.Second).UTC().Format(time.RFC3339)
	for _, l := range []struct{ name, limit string }{
		{"requests", "4000"}, {"tokens", "2400000"}, {"input-tokens", "2000000"}, {"output-tokens", "400000"},
	} {
		h.Set("anthropic-ratelimit-"+l.name+"-limit", l.limit)
		remaining := l.limit
		if retryAfter > 0 {
			remaining = "0"
		}
		h.Set("anthropic-ratelimit-"+l.name+"-remaining", remaining)
		h.Set("anthropic-ratelimit-"+l.name+"-reset", reset)
	}
	if retryAfter > 0 {
		h.Set("retry-after", strconv.Itoa(retryAfter))
	}
}

func anthropicErrorType(status int) string {
	switch status {
	case 400:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 402:
		return "billing_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 504:
		return "timeout_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

func anthropicErrorBody(e *apiError, ids *idGen) anthropicError {
	var b anthropicError
	b.Type = "error"
	b.Error.Type = e.typ
	if b.Error.Type == "" {
		b.Error.Type = anthropicErrorType(e.status)
	}
	b.Error.Message = e.message
	b.RequestID = ids.id("req_011C", 20, "request")
	return b
}

func writeAnthropicError(w http.ResponseWriter, e *apiError, ids *idGen, now time.Time) {
	setAnthropicHeaders(w, ids, now, e.retryAfter)
	for k, v := range e.headers {
		w.Header().Set(k, v)
	}
	writeJSON(w, e.status, anthropicErrorBody(e, ids))
}

// countTokens answers POST /v1/messages/count_tokens.
func anthropicCountTokens(w http.ResponseWriter, body []byte) {
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": approxTokensBytes(body)})
}

type anthropicModelInfo struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func anthropicModel(id string) anthropicModelInfo {
	return anthropicModelInfo{"model", id, displayName(id), "2025-01-01T00:00:00Z"}
}

func anthropicModels(models []string) any {
	data := make([]anthropicModelInfo, len(models))
	for i, m := range models {
		data[i] = anthropicModel(m)
	}
	out := struct {
		Data    []anthropicModelInfo `json:"data"`
		HasMore bool                 `json:"has_more"`
		FirstID *string              `json:"first_id"`
		LastID  *string              `json:"last_id"`
	}{Data: data}
	if len(models) > 0 {
		out.FirstID, out.LastID = &models[0], &models[len(models)-1]
	}
	return out
}

func displayName(id string) string {
	return "Mock " + strings.ReplaceAll(id, "-", " ")
}
