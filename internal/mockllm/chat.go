package mockllm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// OpenAI Chat Completions (what OpenCode's openai-compatible provider
// speaks): request parsing and response rendering, plus the OpenAI error
// and model-list shapes shared with the Responses API.

type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Stream              bool          `json:"stream"`
	MaxTokens           int           `json:"max_tokens"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
}

type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCallID       string          `json:"tool_call_id"`
	ReasoningContent string          `json:"reasoning_content"`
	ToolCalls        []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

func parseChat(body []byte) (*Request, error) {
	var cr chatRequest
	if err := json.Unmarshal(body, &cr); err != nil {
		return nil, fmt.Errorf("request body is not a Chat Completions request: %w", err)
	}
	if cr.Model == "" {
		return nil, errors.New("missing required parameter: 'model'")
	}
	if len(cr.Messages) == 0 {
		return nil, errors.New("missing required parameter: 'messages'")
	}
	r := &Request{Provider: ProviderOpenAI, API: APIChat, Model: cr.Model, Stream: cr.Stream, MaxTokens: cr.MaxTokens}
	if cr.MaxCompletionTokens > 0 {
		r.MaxTokens = cr.MaxCompletionTokens
	}
	r.IncludeUsage = cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage
	for _, t := range cr.Tools {
		if t.Function.Name != "" {
			r.Tools = append(r.Tools, ToolDecl{Name: t.Function.Name})
		}
	}
	if rf := cr.ResponseFormat; rf != nil && (rf.Type == "json_schema" || rf.Type == "json_object") {
		r.Schema = json.RawMessage(`{"type":"object"}`)
		if rf.JSONSchema != nil && len(rf.JSONSchema.Schema) > 0 {
			r.Schema = rf.JSONSchema.Schema
		}
	}
	for i, m := range cr.Messages {
		switch m.Role {
		case "system", "developer":
			if t := rawText(m.Content); t != "" {
				if r.System != "" {
					r.System += "\n"
				}
				r.System += t
			}
		case "user":
			r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: textParts(m.Content, "text")})
		case "assistant":
			msg := Message{Role: RoleAssistant}
			if m.ReasoningContent != "" {
				msg.Parts = append(msg.Parts, Part{Type: PartThinking, Text: m.ReasoningContent})
			}
			if t := rawText(m.Content); t != "" {
				msg.Parts = append(msg.Parts, Part{Type: PartText, Text: t})
			}
			for _, tc := range m.ToolCalls {
				msg.Parts = append(msg.Parts, Part{Type: PartToolCall, ToolID: tc.ID, ToolName: tc.Function.Name, Text: tc.Function.Arguments})
			}
			r.Messages = append(r.Messages, msg)
		case "tool", "function":
			out := rawText(m.Content)
			r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: []Part{{Type: PartToolResult, ToolID: m.ToolCallID, ToolName: m.Name, Text: out, IsError: exitCodeFailed(out)}}})
		default:
			return nil, fmt.Errorf("messages[%d].role: unexpected role %q", i, m.Role)
		}
	}
	r.resolveToolNames()
	return r, nil
}

// textParts reads message content that is a string or an array of typed
// parts: parts of the given text types become text, others PartOther.
// (Chat Completions says "text"; Responses "input_text" or "output_text".)
func textParts(raw json.RawMessage, textTypes ...string) []Part {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Type: PartText, Text: s}}
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
		// ImageURL is a Responses input_image's data URL (a string), or a
		// Chat image_url part's {"url": …}.
		ImageURL json.RawMessage `json:"image_url"`
	}
	_ = json.Unmarshal(raw, &parts)
	var out []Part
	for _, p := range parts {
		switch {
		case slices.Contains(textTypes, p.Type):
			out = append(out, Part{Type: PartText, Text: p.Text})
		case p.Type == "input_image" || p.Type == "image_url":
			out = append(out, urlImagePart(p.ImageURL))
		default:
			out = append(out, Part{Type: PartOther})
		}
	}
	return out
}

// urlImagePart describes an OpenAI image part from its URL: a base64 data:
// URL is decoded (media type, size, sha256), any other is noted as such.
func urlImagePart(raw json.RawMessage) Part {
	var u string
	if json.Unmarshal(raw, &u) != nil {
		var obj struct {
			URL string `json:"url"`
		}
		_ = json.Unmarshal(raw, &obj)
		u = obj.URL
	}
	p := Part{Type: PartImage, Image: &ImageInfo{SourceType: "url"}}
	rest, ok := strings.CutPrefix(u, "data:")
	meta, data, ok2 := strings.Cut(rest, ",")
	mt, b64 := strings.CutSuffix(meta, ";base64")
	if !ok || !ok2 || !b64 {
		return p
	}
	p.Image.SourceType, p.Image.MediaType = "base64", mt
	if b, err := base64.StdEncoding.DecodeString(data); err == nil {
		sum := sha256.Sum256(b)
		p.Image.SHA256, p.Image.Size = hex.EncodeToString(sum[:]), len(b)
	}
	return p
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatDelta struct {
	Role             string         `json:"role,omitempty"`
	Content          *string        `json:"content,omitempty"`
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
}

type chatChoice struct {
	Index        int        `json:"index"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Message      any        `json:"message,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chatChunk struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	Choices           []chatChoice `json:"choices"`
	Usage             *chatUsage   `json:"usage,omitempty"`
}

func chatFinish(s StopReason) string {
	switch s {
	case StopToolUse:
		return "tool_calls"
	case StopMaxTokens:
		return "length"
	}
	return "stop"
}

func writeChat(w http.ResponseWriter, r *http.Request, p *plan, ids *idGen) {
	setOpenAIHeaders(w, ids, 0)
	id := ids.id("chatcmpl-", 29, "completion")
	usage := &chatUsage{p.inputTokens, p.outputTokens, p.inputTokens + p.outputTokens}
	finish := chatFinish(p.stop)
	base := chatChunk{ID: id, Created: p.now.Unix(), Model: p.model, SystemFingerprint: "fp_mockllm"}
	if !p.stream {
		type message struct {
			Role             string         `json:"role"`
			Content          *string        `json:"content"`
			ReasoningContent string         `json:"reasoning_content,omitempty"`
			ToolCalls        []chatToolCall `json:"tool_calls,omitempty"`
		}
		msg := message{Role: "assistant"}
		var text, reasoning strings.Builder
		for i, b := range p.blocks {
			switch b.typ {
			case BlockText:
				text.WriteString(b.text)
			case BlockThinking:
				reasoning.WriteString(b.text)
			case BlockToolUse:
				tc := chatToolCall{ID: p.toolID(i, ids, "call_", 24), Type: "function"}
				tc.Function.Name, tc.Function.Arguments = b.name, b.input
				msg.ToolCalls = append(msg.ToolCalls, tc)
			}
		}
		if text.Len() > 0 || len(msg.ToolCalls) == 0 {
			t := text.String()
			msg.Content = &t
		}
		msg.ReasoningContent = reasoning.String()
		base.Object = "chat.completion"
		base.Choices = []chatChoice{{Message: msg, FinishReason: &finish}}
		base.Usage = usage
		writeJSON(w, http.StatusOK, base)
		return
	}
	sw := newSSE(w, r, p)
	base.Object = "chat.completion.chunk"
	send := func(d chatDelta, fin *string) {
		c := base
		c.Choices = []chatChoice{{Delta: &d, FinishReason: fin}}
		sw.event("", c)
	}
	empty := ""
	send(chatDelta{Role: "assistant", Content: &empty}, nil)
	toolIndex := 0
	for i, b := range p.blocks {
		switch b.typ {
		case BlockText:
			for _, c := range chunks(b.text, p.chunk) {
				send(chatDelta{Content: &c}, nil)
			}
		case BlockThinking:
			for _, c := range chunks(b.text, p.chunk) {
				send(chatDelta{ReasoningContent: &c}, nil)
			}
		case BlockToolUse:
			idx := toolIndex
			toolIndex++
			tc := chatToolCall{Index: &idx, ID: p.toolID(i, ids, "call_", 24), Type: "function"}
			tc.Function.Name = b.name
			send(chatDelta{ToolCalls: []chatToolCall{tc}}, nil)
			for _, c := range chunks(b.input, p.chunk) {
				d := chatToolCall{Index: &idx}
				d.Function.Arguments = c
				send(chatDelta{ToolCalls: []chatToolCall{d}}, nil)
			}
		}
	}
	if e := p.streamErr; e != nil {
		sw.event("", openAIErrorBody(e))
		sw.end()
		return
	}
	send(chatDelta{}, &finish)
	if p.includeUsage {
		c := base
		c.Choices = []chatChoice{}
		c.Usage = usage
		sw.event("", c)
	}
	sw.write("", []byte("[DONE]"))
	sw.end()
}

// OpenAI errors, headers and models.

func openAIErrorCode(e *apiError) string {
	switch {
	case e.status == 429:
		return "rate_limit_exceeded"
	case e.status == 401:
		return "invalid_api_key"
	case e.status == 404:
		return "model_not_found"
	case e.status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func openAIErrorBody(e *apiError) openAIError {
	var b openAIError
	b.Error.Message = e.message
	b.Error.Type = e.typ
	if b.Error.Type == "" {
		switch {
		case e.status == 429:
			b.Error.Type = "requests"
		case e.status >= 500:
			b.Error.Type = "server_error"
		default:
			b.Error.Type = "invalid_request_error"
		}
	}
	b.Error.Code = openAIErrorCode(e)
	return b
}

func setOpenAIHeaders(w http.ResponseWriter, ids *idGen, retryAfter int) {
	h := w.Header()
	h.Set("x-request-id", ids.id("req_", 32, "request"))
	h.Set("openai-processing-ms", "1")
	h.Set("x-ratelimit-limit-requests", "10000")
	h.Set("x-ratelimit-limit-tokens", "30000000")
	remainingReq, remainingTok, reset := "9999", "29999000", "6ms"
	if retryAfter > 0 {
		remainingReq, remainingTok, reset = "0", "0", strconv.Itoa(retryAfter)+"s"
		h.Set("retry-after", strconv.Itoa(retryAfter))
		h.Set("retry-after-ms", strconv.Itoa(retryAfter*1000))
	}
	h.Set("x-ratelimit-remaining-requests", remainingReq)
	h.Set("x-ratelimit-remaining-tokens", remainingTok)
	h.Set("x-ratelimit-reset-requests", reset)
	h.Set("x-ratelimit-reset-tokens", reset)
}

func writeOpenAIError(w http.ResponseWriter, e *apiError, ids *idGen) {
	setOpenAIHeaders(w, ids, e.retryAfter)
	for k, v := range e.headers {
		w.Header().Set(k, v)
	}
	writeJSON(w, e.status, openAIErrorBody(e))
}

type openAIModelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func openAIModel(id string) openAIModelInfo {
	return openAIModelInfo{id, "model", 1700000000, "mock-llm"}
}

func openAIModels(models []string) any {
	data := make([]openAIModelInfo, len(models))
	for i, m := range models {
		data[i] = openAIModel(m)
	}
	return struct {
		Object string            `json:"object"`
		Data   []openAIModelInfo `json:"data"`
	}{"list", data}
}
