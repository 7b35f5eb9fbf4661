package mockllm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Gemini generateContent / streamGenerateContent: request parsing and
// response rendering. The REST API accepts camelCase and snake_case field
// names; both are read.

type geminiPart struct {
	Text             string              `json:"text,omitempty"`
	InlineData       *geminiBlob         `json:"inlineData,omitempty"`
	InlineDataSnake  *geminiBlob         `json:"inline_data,omitempty"`
	Thought          bool                `json:"thought,omitempty"`
	ThoughtSignature string              `json:"thoughtSignature,omitempty"`
	FunctionCall     *geminiFunctionCall `json:"functionCall,omitempty"`
	FunctionResponse *struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse,omitempty"`
	FunctionCallSnake *geminiFunctionCall `json:"function_call,omitempty"`
	FunctionRespSnake *struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"function_response,omitempty"`
}

type geminiFunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

type geminiGenConfig struct {
	ResponseMimeType        string          `json:"responseMimeType"`
	ResponseSchema          json.RawMessage `json:"responseSchema"`
	ResponseJSONSchema      json.RawMessage `json:"responseJsonSchema"`
	MaxOutputTokens         int             `json:"maxOutputTokens"`
	ResponseMimeTypeSnake   string          `json:"response_mime_type"`
	ResponseSchemaSnake     json.RawMessage `json:"response_schema"`
	ResponseJSONSchemaSnake json.RawMessage `json:"response_json_schema"`
	MaxOutputTokensSnake    int             `json:"max_output_tokens"`
}

type geminiTool struct {
	FunctionDeclarations      []struct{ Name string } `json:"functionDeclarations"`
	FunctionDeclarationsSnake []struct{ Name string } `json:"function_declarations"`
}

type geminiRequest struct {
	Contents               []geminiContent  `json:"contents"`
	SystemInstruction      *geminiContent   `json:"systemInstruction"`
	SystemInstructionSnake *geminiContent   `json:"system_instruction"`
	Tools                  []geminiTool     `json:"tools"`
	GenerationConfig       *geminiGenConfig `json:"generationConfig"`
	GenerationConfigSnake  *geminiGenConfig `json:"generation_config"`
}

// geminiModelAction splits ".../models/{model}:{action}".
func geminiModelAction(path string) (model, action string) {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return "", ""
	}
	model, action, _ = strings.Cut(path[i+len("/models/"):], ":")
	return model, action
}

func parseGemini(body []byte, hr *http.Request) (*Request, error) {
	var gr geminiRequest
	if err := json.Unmarshal(body, &gr); err != nil {
		//lint:ignore ST1005 the wording of Gemini's own error, which clients may match
		return nil, fmt.Errorf("Invalid JSON payload received: %v", err)
	}
	model, action := geminiModelAction(hr.URL.Path)
	if model == "" {
		return nil, errors.New("model name missing from the path")
	}
	r := &Request{Provider: ProviderGemini, API: APIGemini, Model: model, Stream: action == "streamGenerateContent"}
	sys := gr.SystemInstruction
	if sys == nil {
		sys = gr.SystemInstructionSnake
	}
	if sys != nil {
		var texts []string
		for _, p := range sys.Parts {
			if p.Text != "" {
				texts = append(texts, p.Text)
			}
		}
		r.System = strings.Join(texts, "\n")
	}
	for _, t := range gr.Tools {
		for _, f := range append(t.FunctionDeclarations, t.FunctionDeclarationsSnake...) {
			if f.Name != "" {
				r.Tools = append(r.Tools, ToolDecl{Name: f.Name})
			}
		}
	}
	gc := gr.GenerationConfig
	if gc == nil {
		gc = gr.GenerationConfigSnake
	}
	if gc != nil {
		r.MaxTokens = max(gc.MaxOutputTokens, gc.MaxOutputTokensSnake)
		for _, s := range []json.RawMessage{gc.ResponseJSONSchema, gc.ResponseSchema, gc.ResponseJSONSchemaSnake, gc.ResponseSchemaSnake} {
			if len(s) > 0 && string(s) != "null" {
				r.Schema = s
				break
			}
		}
		if len(r.Schema) == 0 && (gc.ResponseMimeType == "application/json" || gc.ResponseMimeTypeSnake == "application/json") {
			r.Schema = json.RawMessage(`{"type":"object"}`)
		}
	}
	if len(gr.Contents) == 0 {
		return nil, errors.New("contents is not specified")
	}
	for _, c := range gr.Contents {
		role := RoleUser
		if c.Role == "model" {
			role = RoleAssistant
		}
		msg := Message{Role: role}
		for _, p := range c.Parts {
			fc := p.FunctionCall
			if fc == nil {
				fc = p.FunctionCallSnake
			}
			fr := p.FunctionResponse
			if fr == nil {
				fr = p.FunctionRespSnake
			}
			switch {
			case fc != nil:
				msg.Parts = append(msg.Parts, Part{Type: PartToolCall, ToolID: fc.ID, ToolName: fc.Name, Text: string(fc.Args)})
			case fr != nil:
				text, isErr := geminiFunctionResponse(fr.Response)
				msg.Parts = append(msg.Parts, Part{Type: PartToolResult, ToolID: fr.ID, ToolName: fr.Name, Text: text, IsError: isErr})
			case p.InlineData != nil || p.InlineDataSnake != nil:
				b := p.InlineData
				if b == nil {
					b = p.InlineDataSnake
				}
				msg.Parts = append(msg.Parts, b.part())
			case p.Thought:
				msg.Parts = append(msg.Parts, Part{Type: PartThinking, Text: p.Text})
			case p.Text != "":
				msg.Parts = append(msg.Parts, Part{Type: PartText, Text: p.Text})
			default:
				msg.Parts = append(msg.Parts, Part{Type: PartOther})
			}
		}
		r.Messages = append(r.Messages, msg)
	}
	return r, nil
}

// geminiFunctionResponse reads a functionResponse.response: Gemini CLI
// sends {"output": "…"} or {"error": "…"}.
func geminiFunctionResponse(raw json.RawMessage) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return rawText(raw), false
	}
	if e, ok := m["error"]; ok {
		return rawText(e), true
	}
	if o, ok := m["output"]; ok {
		return rawText(o), false
	}
	return string(raw), false
}

type geminiUsage struct {
	PromptTokenCount     int `json:"promptTokenCount"`
	CandidatesTokenCount int `json:"candidatesTokenCount,omitempty"`
	TotalTokenCount      int `json:"totalTokenCount"`
	ThoughtsTokenCount   int `json:"thoughtsTokenCount,omitempty"`
}

type geminiOutPart struct {
	Text         string `json:"text,omitempty"`
	Thought      bool   `json:"thought,omitempty"`
	FunctionCall *struct {
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall,omitempty"`
	ThoughtSignature string `json:"thoughtSignature,omitempty"`
}

type geminiCandidate struct {
	Content struct {
		Parts []geminiOutPart `json:"parts"`
		Role  string          `json:"role"`
	} `json:"content"`
	FinishReason string `json:"finishReason,omitempty"`
	Index        int    `json:"index"`
}

type geminiResponse struct {
	Candidates    []geminiCandidate `json:"candidates"`
	UsageMetadata geminiUsage       `json:"usageMetadata"`
	ModelVersion  string            `json:"modelVersion"`
	ResponseID    string            `json:"responseId"`
}

func geminiFinish(s StopReason) string {
	if s == StopMaxTokens {
		return "MAX_TOKENS"
	}
	return "STOP"
}

// geminiParts renders the plan's blocks as parts; streamed text comes in
// chunks, one part per event.
func (p *plan) geminiParts(ids *idGen, chunked bool) []geminiOutPart {
	var out []geminiOutPart
	for i, b := range p.blocks {
		switch b.typ {
		case BlockText, BlockThinking:
			pieces := []string{b.text}
			if chunked {
				pieces = chunks(b.text, p.chunk)
			}
			for _, c := range pieces {
				out = append(out, geminiOutPart{Text: c, Thought: b.typ == BlockThinking})
			}
		case BlockToolUse:
			fc := &struct {
				Name string          `json:"name"`
				Args json.RawMessage `json:"args"`
			}{b.name, json.RawMessage(b.input)}
			// Gemini 3 models sign their function calls; clients echo the
			// signature back.
			out = append(out, geminiOutPart{FunctionCall: fc, ThoughtSignature: ids.signature(fmt.Sprint("fc", i))})
		}
	}
	return out
}

func writeGemini(w http.ResponseWriter, r *http.Request, p *plan, ids *idGen) {
	respID := ids.id("", 22, "response")
	thoughts := 0
	for _, b := range p.blocks {
		if b.typ == BlockThinking {
			thoughts += approxTokens(len([]rune(b.text)))
		}
	}
	final := geminiUsage{PromptTokenCount: p.inputTokens, CandidatesTokenCount: p.outputTokens,
		TotalTokenCount: p.inputTokens + p.outputTokens, ThoughtsTokenCount: thoughts}
	resp := func(parts []geminiOutPart, finish string, u geminiUsage) geminiResponse {
		var c geminiCandidate
		c.Content.Parts = parts
		if c.Content.Parts == nil {
			c.Content.Parts = []geminiOutPart{}
		}
		c.Content.Role = "model"
		c.FinishReason = finish
		return geminiResponse{Candidates: []geminiCandidate{c}, UsageMetadata: u, ModelVersion: p.model, ResponseID: respID}
	}
	if !p.stream {
		writeJSON(w, http.StatusOK, resp(p.geminiParts(ids, false), geminiFinish(p.stop), final))
		return
	}
	// Without alt=sse the API streams one JSON array; every client we know
	// asks for SSE, and the array form is served for completeness.
	if r.URL.Query().Get("alt") != "sse" {
		writeJSON(w, http.StatusOK, []geminiResponse{resp(p.geminiParts(ids, false), geminiFinish(p.stop), final)})
		return
	}
	sw := newSSE(w, r, p)
	parts := p.geminiParts(ids, true)
	running := geminiUsage{PromptTokenCount: p.inputTokens, TotalTokenCount: p.inputTokens}
	for i, part := range parts {
		if i == len(parts)-1 && p.streamErr == nil {
			sw.event("", resp([]geminiOutPart{part}, geminiFinish(p.stop), final))
		} else {
			sw.event("", resp([]geminiOutPart{part}, "", running))
		}
	}
	switch {
	case p.streamErr != nil:
		sw.event("", geminiErrorBody(p.streamErr))
	case len(parts) == 0:
		sw.event("", resp(nil, geminiFinish(p.stop), final))
	}
	sw.end()
}

func geminiStatus(code int) string {
	switch code {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case 501:
		return "UNIMPLEMENTED"
	case 503, 529:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if code >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

type geminiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []any  `json:"details,omitempty"`
	} `json:"error"`
}

func geminiErrorBody(e *apiError) geminiError {
	var b geminiError
	b.Error.Code = e.status
	b.Error.Message = e.message
	b.Error.Status = e.typ
	if b.Error.Status == "" {
		b.Error.Status = geminiStatus(e.status)
	}
	if e.retryAfter > 0 {
		b.Error.Details = []any{map[string]string{
			"@type":      "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": fmt.Sprintf("%ds", e.retryAfter),
		}}
	}
	return b
}

func writeGeminiError(w http.ResponseWriter, e *apiError) {
	for k, v := range e.headers {
		w.Header().Set(k, v)
	}
	if e.retryAfter > 0 {
		w.Header().Set("retry-after", fmt.Sprint(e.retryAfter))
	}
	writeJSON(w, e.status, geminiErrorBody(e))
}

type geminiModelInfo struct {
	Name                       string   `json:"name"`
	Version                    string   `json:"version"`
	DisplayName                string   `json:"displayName"`
	InputTokenLimit            int      `json:"inputTokenLimit"`
	OutputTokenLimit           int      `json:"outputTokenLimit"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
	Thinking                   bool     `json:"thinking"`
}

func geminiModel(id string) geminiModelInfo {
	return geminiModelInfo{Name: "models/" + id, Version: "001", DisplayName: displayName(id),
		InputTokenLimit: 1048576, OutputTokenLimit: 65536, Thinking: true,
		SupportedGenerationMethods: []string{"generateContent", "countTokens", "streamGenerateContent"}}
}

func geminiModels(models []string) any {
	out := make([]geminiModelInfo, len(models))
	for i, m := range models {
		out[i] = geminiModel(m)
	}
	return map[string]any{"models": out}
}

// geminiBlob is a part's inline data (an image the client sent).
type geminiBlob struct {
	MimeType      string `json:"mimeType,omitempty"`
	MimeTypeSnake string `json:"mime_type,omitempty"`
	Data          string `json:"data,omitempty"`
}

func (b *geminiBlob) part() Part {
	mt := b.MimeType
	if mt == "" {
		mt = b.MimeTypeSnake
	}
	p := Part{Type: PartImage, Image: &ImageInfo{MediaType: mt, SourceType: "base64"}}
	if data, err := base64.StdEncoding.DecodeString(b.Data); err == nil {
		sum := sha256.Sum256(data)
		p.Image.SHA256, p.Image.Size = hex.EncodeToString(sum[:]), len(data)
	}
	return p
}
