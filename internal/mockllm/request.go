package mockllm

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Request is a model request seen through the provider-neutral lens the
// rules match on.
type Request struct {
	Provider Provider
	API      API
	Model    string
	Stream   bool
	Kind     Kind
	// System is the system prompt (Anthropic system, OpenAI
	// instructions/system/developer messages, Gemini systemInstruction).
	System string
	// Tools are the names of the tools offered, in request order.
	Tools []ToolDecl
	// Messages is the conversation, oldest first.
	Messages []Message
	// Schema is the JSON schema of a structured-output request, if any.
	Schema json.RawMessage
	// MaxTokens is the requested output limit (0 when not given).
	MaxTokens int
	// IncludeUsage is OpenAI chat's stream_options.include_usage.
	IncludeUsage bool
	// InputTokens approximates the request's size in tokens.
	InputTokens int
}

// ToolDecl is one tool a request offers.
type ToolDecl struct {
	Name string
	// Custom is an OpenAI Responses freeform tool ("type":"custom"), whose
	// calls carry a string input instead of JSON arguments.
	Custom bool
	// Namespace is the OpenAI Responses namespace the tool was declared in
	// (Codex groups its multi-agent tools under "collaboration"); calls to
	// it name the namespace, or the client does not find the tool.
	Namespace string
}

// Role is who wrote a message.
type Role string

// Roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// Message is one conversation message.
type Message struct {
	Role  Role
	Parts []Part
}

// PartType is the type of a message part.
type PartType string

// Part types.
const (
	PartText       PartType = "text"
	PartThinking   PartType = "thinking"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
	PartImage      PartType = "image"
	PartOther      PartType = "other"
)

// Part is one piece of a message.
type Part struct {
	Type PartType
	// Text is the text, thinking, or tool result content.
	Text string
	// ToolID links a tool call to its result.
	ToolID string
	// ToolName is the tool's name (for results, resolved through ToolID
	// when the wire format does not carry it).
	ToolName string
	IsError  bool
	// Image describes an image part (Anthropic image blocks, of a user
	// message or inside a tool result).
	Image *ImageInfo
}

// ImageInfo describes an image a request carried, as logged and as the
// images template function tells it.
type ImageInfo struct {
	MediaType  string `json:"mediaType"`
	SourceType string `json:"sourceType,omitempty"`
	// SHA256 and Size are of the decoded bytes (base64 sources only).
	SHA256       string `json:"sha256,omitempty"`
	Size         int    `json:"size"`
	InToolResult bool   `json:"inToolResult,omitempty"`
}

// Images describes the images of the last user turn, in order.
func (r *Request) Images() []ImageInfo {
	var out []ImageInfo
	for _, p := range r.LastUserTurn() {
		if p.Type == PartImage && p.Image != nil {
			out = append(out, *p.Image)
		}
	}
	return out
}

// describeImages is the images template function's text: one line per
// image, "image <mediaType> <size> bytes sha256:<hex>" (" (tool result)"
// after one inside a tool result; "image (url source)" for one without
// base64 data), or "no images".
func describeImages(ims []ImageInfo) string {
	if len(ims) == 0 {
		return "no images"
	}
	var b strings.Builder
	for i, im := range ims {
		if i > 0 {
			b.WriteByte('\n')
		}
		where := ""
		if im.InToolResult {
			where = " (tool result)"
		}
		if im.SHA256 == "" {
			fmt.Fprintf(&b, "image (%s source)%s", im.SourceType, where)
			continue
		}
		fmt.Fprintf(&b, "image %s %d bytes sha256:%s%s", im.MediaType, im.Size, im.SHA256, where)
	}
	return b.String()
}

// ToolResult is a tool result of the last user turn, as logged.
type ToolResult struct {
	Name    string `json:"name"`
	ID      string `json:"id,omitempty"`
	IsError bool   `json:"isError"`
	Content string `json:"content"`
}

// LastUserTurn returns the parts the client sent after the model last
// spoke: all parts of the trailing user messages. Claude Code can put the
// next prompt in the same message as the previous turn's tool result, so
// callers look at every part.
func (r *Request) LastUserTurn() []Part {
	i := len(r.Messages)
	for i > 0 && r.Messages[i-1].Role == RoleUser {
		i--
	}
	var parts []Part
	for _, m := range r.Messages[i:] {
		parts = append(parts, m.Parts...)
	}
	return parts
}

// UserTexts returns the text parts of the last user turn with
// harness-injected context (<system-reminder>, <environment_context>, …)
// removed; parts left empty are dropped.
func (r *Request) UserTexts() []string {
	var out []string
	for _, p := range r.LastUserTurn() {
		if p.Type != PartText {
			continue
		}
		if t := stripHarnessContext(p.Text); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// LastUserText is the last of UserTexts ("" when there is none).
func (r *Request) LastUserText() string {
	t := r.UserTexts()
	if len(t) == 0 {
		return ""
	}
	return t[len(t)-1]
}

// ToolResults returns the tool results of the last user turn.
func (r *Request) ToolResults() []ToolResult {
	var out []ToolResult
	for _, p := range r.LastUserTurn() {
		if p.Type == PartToolResult {
			out = append(out, ToolResult{Name: p.ToolName, ID: p.ToolID, IsError: p.IsError, Content: p.Text})
		}
	}
	return out
}

// Turn is 1 + the number of assistant turns in the conversation.
func (r *Request) Turn() int {
	n := 1
	for i, m := range r.Messages {
		if m.Role == RoleAssistant && (i == 0 || r.Messages[i-1].Role != RoleAssistant) {
			n++
		}
	}
	return n
}

// OffersTool reports whether a tool of that name is offered.
func (r *Request) OffersTool(name string) bool {
	return r.tool(name) != nil
}

func (r *Request) tool(name string) *ToolDecl {
	for i := range r.Tools {
		if r.Tools[i].Name == name {
			return &r.Tools[i]
		}
	}
	return nil
}

// ToolNames lists the offered tools' names.
func (r *Request) ToolNames() []string {
	out := make([]string, len(r.Tools))
	for i, t := range r.Tools {
		out[i] = t.Name
	}
	return out
}

// resolveToolNames fills in result parts' tool names from the calls with
// the same id, for wire formats whose results carry only the id.
func (r *Request) resolveToolNames() {
	names := map[string]string{}
	for _, m := range r.Messages {
		for _, p := range m.Parts {
			if p.Type == PartToolCall && p.ToolID != "" {
				names[p.ToolID] = p.ToolName
			}
		}
	}
	for mi := range r.Messages {
		for pi := range r.Messages[mi].Parts {
			p := &r.Messages[mi].Parts[pi]
			if p.Type == PartToolResult && p.ToolName == "" {
				p.ToolName = names[p.ToolID]
			}
		}
	}
}

// harnessTags are wrappers agent CLIs put around context they inject into
// user messages; rules should see what the user typed.
var harnessTags = []string{"system-reminder", "environment_context", "session_context", "user_instructions"}

var harnessRes = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(harnessTags))
	for i, t := range harnessTags {
		out[i] = regexp.MustCompile(`(?s)<` + t + `>.*?</` + t + `>`)
	}
	return out
}()

func stripHarnessContext(s string) string {
	if strings.IndexByte(s, '<') >= 0 {
		for _, re := range harnessRes {
			s = re.ReplaceAllString(s, "")
		}
	}
	return strings.TrimSpace(s)
}

// titleRe recognises a title request: "You are a title generator"
// (OpenCode), "Generate a concise, sentence-case title" (Claude Code),
// "Generate a title for this conversation". It wants the words close
// together, because long prompts mention "title" and "generate" apart.
var titleRe = regexp.MustCompile(`(?i)\btitle generator\b|\bgenerate\b[^.\n]{0,40}\btitle\b`)

// classify decides the request's kind from its shape. It is deliberately
// conservative: anything not clearly a side request is main.
func (r *Request) classify() Kind {
	if len(r.Tools) > 0 {
		return KindMain
	}
	if r.MaxTokens == 1 && strings.EqualFold(strings.TrimSpace(r.LastUserText()), "quota") {
		return KindQuota
	}
	prompt := r.System + "\n" + strings.Join(r.UserTexts(), "\n")
	if titleRe.MatchString(prompt) {
		return KindTitle
	}
	if len(r.Schema) > 0 {
		return KindStructured
	}
	return KindMain
}

// approxTokens is the usual chars/4 estimate, at least 1.
func approxTokens(runes int) int {
	if n := (runes + 3) / 4; n > 0 {
		return n
	}
	return 1
}

func approxTokensBytes(b []byte) int {
	return approxTokens(utf8.RuneCount(b))
}

// rawText decodes a JSON string, or the text of an array of content parts
// ({"type":"text","text":…} or {"text":…}), or falls back to the raw JSON.
func rawText(raw json.RawMessage) string {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Text == "" {
				continue
			}
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}
