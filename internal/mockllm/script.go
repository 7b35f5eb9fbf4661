package mockllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrInvalidScript is wrapped by every error Parse and Load return for a
// script that was read but is not valid.
var ErrInvalidScript = errors.New("mockllm: invalid script")

// Provider is an API family a request arrived on.
type Provider string

// Providers.
const (
	ProviderAnthropic Provider = "anthropic"
	ProviderOpenAI    Provider = "openai"
	ProviderGemini    Provider = "gemini"
)

// API is one wire protocol.
type API string

// APIs.
const (
	APIMessages  API = "messages"  // Anthropic POST /v1/messages
	APIResponses API = "responses" // OpenAI POST /v1/responses
	APIChat      API = "chat"      // OpenAI POST /v1/chat/completions
	APIGemini    API = "gemini"    // Gemini :generateContent / :streamGenerateContent
	APIOther     API = "other"     // model lists, token counts, probes, unknown routes
)

// Kind says what a model request is for. Agent CLIs make side requests
// (a session title, a routing classifier, a quota probe) next to the main
// conversation; rules match only KindMain unless they say otherwise, so a
// rule written for the conversation never answers a side request by
// accident.
type Kind string

// Kinds.
const (
	// KindMain is the agent's conversation (anything not recognised as a
	// side request).
	KindMain Kind = "main"
	// KindTitle is a request for a session title (no tools; the system
	// prompt or the user text asks to generate a title).
	KindTitle Kind = "title"
	// KindStructured asks for JSON output with a schema and offers no tools
	// (Gemini CLI's model router and next-speaker check, structured side
	// queries).
	KindStructured Kind = "structured"
	// KindQuota is Claude Code's quota probe (max_tokens 1, text "quota").
	KindQuota Kind = "quota"
	// KindAny is only valid in a matcher: it matches every kind.
	KindAny Kind = "any"
)

// StopReason is why the scripted model stopped, in Anthropic's terms; each
// API maps it to its own (finish_reason, finishReason, status).
type StopReason string

// Stop reasons.
const (
	StopEndTurn   StopReason = "end_turn"
	StopToolUse   StopReason = "tool_use"
	StopMaxTokens StopReason = "max_tokens"
)

// BlockType is the type of one scripted content block.
type BlockType string

// Block types.
const (
	BlockText     BlockType = "text"
	BlockThinking BlockType = "thinking"
	BlockToolUse  BlockType = "tool_use"
)

// Script is a parsed, validated list of rules. A Script is not modified
// after Parse returns and may be shared by servers.
type Script struct {
	// Rules are tried in order; the first live rule that matches answers.
	Rules []Rule `yaml:"rules" json:"rules"`
	// Default answers main requests no rule matched. When nil, the answer
	// is a text saying "mock-llm: no rule matched …".
	Default *Reply `yaml:"default,omitempty" json:"default,omitempty"`
	// Models is what the model-list endpoints report (defaults to a small
	// plausible list per provider).
	Models []string `yaml:"models,omitempty" json:"models,omitempty"`
}

// Rule is one scripted answer.
type Rule struct {
	// Name identifies the rule in the request log (defaults to "#<index>").
	Name  string `yaml:"name,omitempty" json:"name,omitempty"`
	Match Match  `yaml:"match,omitempty" json:"match,omitempty"`
	// Times limits how often the rule answers; 0 means no limit. A used-up
	// rule is skipped, so "429 once, then success" is two rules.
	Times int `yaml:"times,omitempty" json:"times,omitempty"`
	// Exactly one of Reply and Error is set.
	Reply *Reply      `yaml:"reply,omitempty" json:"reply,omitempty"`
	Error *ErrorReply `yaml:"error,omitempty" json:"error,omitempty"`

	userRe *regexp.Regexp
	sysRe  *regexp.Regexp
}

// Match is a rule's conditions; all the set ones must hold. The "last user
// turn" is everything the client sent after the model last spoke: the user
// text parts and tool results of the last user message (or messages).
type Match struct {
	Provider Provider `yaml:"provider,omitempty" json:"provider,omitempty"`
	API      API      `yaml:"api,omitempty" json:"api,omitempty"`
	// Model is a glob (path.Match syntax) on the requested model.
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// Kind defaults to main; "any" matches side requests too.
	Kind Kind `yaml:"kind,omitempty" json:"kind,omitempty"`
	// UserContains: some text part of the last user turn contains it.
	UserContains string `yaml:"userContains,omitempty" json:"userContains,omitempty"`
	// UserRegex: some text part of the last user turn matches it (RE2).
	UserRegex string `yaml:"userRegex,omitempty" json:"userRegex,omitempty"`
	// SystemContains: the system prompt contains it.
	SystemContains string `yaml:"systemContains,omitempty" json:"systemContains,omitempty"`
	// SystemRegex: the system prompt matches it.
	SystemRegex string `yaml:"systemRegex,omitempty" json:"systemRegex,omitempty"`
	// ToolResult: the last user turn holds a matching tool result.
	ToolResult *ToolResultMatch `yaml:"toolResult,omitempty" json:"toolResult,omitempty"`
	// NoToolResult: the last user turn holds no tool result at all.
	NoToolResult bool `yaml:"noToolResult,omitempty" json:"noToolResult,omitempty"`
	// Turn is the model turn within the conversation the request carries:
	// 1 + the number of assistant turns already in it.
	Turn int `yaml:"turn,omitempty" json:"turn,omitempty"`
	// Call is the server-wide number of this request among requests of
	// the same kind (1 = first main request since start or reset).
	Call int `yaml:"call,omitempty" json:"call,omitempty"`
	// HasTools: the request offers tools (true) or none (false).
	HasTools *bool `yaml:"hasTools,omitempty" json:"hasTools,omitempty"`
	// Tool: the request offers a tool of this name.
	Tool string `yaml:"tool,omitempty" json:"tool,omitempty"`
}

// ToolResultMatch matches one tool result of the last user turn.
type ToolResultMatch struct {
	// Name is the tool's name (found through the tool call's id).
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// IsError: the result is (true) or is not (false) an error. Anthropic
	// (is_error) and Gemini (response.error) carry a flag; for OpenAI it is
	// inferred from a non-zero "Process exited with code N" / "Exit code: N"
	// line in the output (what Codex writes).
	IsError *bool `yaml:"isError,omitempty" json:"isError,omitempty"`
	// Contains: the result's text contains it.
	Contains string `yaml:"contains,omitempty" json:"contains,omitempty"`
}

// Reply is a scripted model answer.
type Reply struct {
	// Content is the answer's blocks, in order.
	Content []Block `yaml:"content,omitempty" json:"content,omitempty"`
	// Text is a shorthand for one text block, appended after Content.
	Text string `yaml:"text,omitempty" json:"text,omitempty"`
	// StopReason defaults to tool_use when a tool_use block is present,
	// end_turn otherwise.
	StopReason StopReason `yaml:"stopReason,omitempty" json:"stopReason,omitempty"`
	// Usage overrides the approximate token counts.
	Usage *Usage `yaml:"usage,omitempty" json:"usage,omitempty"`
	// Model overrides the model name reported (default: the requested one).
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// ChunkSize is the number of characters per streamed delta (default 16).
	ChunkSize int `yaml:"chunkSize,omitempty" json:"chunkSize,omitempty"`
	// DelayMs is the pause before each streamed event after the first, so
	// a test can interrupt mid-stream.
	DelayMs int `yaml:"delayMs,omitempty" json:"delayMs,omitempty"`
	// LatencyMs is the pause before the response starts.
	LatencyMs int `yaml:"latencyMs,omitempty" json:"latencyMs,omitempty"`
	// DropAfterEvents > 0 cuts the connection (no clean end of the body)
	// after that many streamed events, like a network failure.
	DropAfterEvents int `yaml:"dropAfterEvents,omitempty" json:"dropAfterEvents,omitempty"`
}

// Usage is a token count override.
type Usage struct {
	InputTokens  int `yaml:"inputTokens,omitempty" json:"inputTokens,omitempty"`
	OutputTokens int `yaml:"outputTokens,omitempty" json:"outputTokens,omitempty"`
}

// Block is one content block of a reply. Type may be left out: it is text
// when Text is set, thinking when Thinking is set, tool_use when Name is.
type Block struct {
	Type     BlockType `yaml:"type,omitempty" json:"type,omitempty"`
	Text     string    `yaml:"text,omitempty" json:"text,omitempty"`
	Thinking string    `yaml:"thinking,omitempty" json:"thinking,omitempty"`
	// Name and Input describe a tool call. Input is an object, or a string
	// for OpenAI custom (freeform) tools.
	Name  string `yaml:"name,omitempty" json:"name,omitempty"`
	Input any    `yaml:"input,omitempty" json:"input,omitempty"`
	// ID fixes the tool call id (default: derived from the request number).
	ID string `yaml:"id,omitempty" json:"id,omitempty"`
}

// ErrorReply is a scripted API error.
type ErrorReply struct {
	// Status is the HTTP status, 400–599 (e.g. 429, 500, 529).
	Status int `yaml:"status" json:"status"`
	// Type is the provider error type; defaults from Status
	// (rate_limit_error, api_error, overloaded_error, …).
	Type string `yaml:"type,omitempty" json:"type,omitempty"`
	// Message defaults to a sentence naming the status.
	Message string `yaml:"message,omitempty" json:"message,omitempty"`
	// RetryAfter sets the retry-after header (seconds) and the rate-limit
	// reset headers.
	RetryAfter int `yaml:"retryAfter,omitempty" json:"retryAfter,omitempty"`
	// Headers are added to the response.
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// InStream sends the error inside a 200 event stream after the stream
	// started (Anthropic "event: error", OpenAI Responses "error" event)
	// instead of as the HTTP status. Only for streamed requests.
	InStream bool `yaml:"inStream,omitempty" json:"inStream,omitempty"`
}

// maxScriptBytes bounds Load; a script is a test fixture, not data.
const maxScriptBytes = 16 << 20

// Load reads and parses a script file (YAML, or JSON, which is YAML).
func Load(file string) (*Script, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("load script: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load script %s: %w", file, err)
	}
	if len(data) > maxScriptBytes {
		return nil, fmt.Errorf("load script %s: %w: larger than %d bytes", file, ErrInvalidScript, maxScriptBytes)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load script %s: %w", file, err)
	}
	return s, nil
}

// Parse parses and validates a script. Unknown fields are errors, so a
// typo in a matcher cannot silently match everything.
func Parse(data []byte) (*Script, error) {
	var s Script
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty script", ErrInvalidScript)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidScript, err)
	}
	// A second document would be silently ignored; refuse it.
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one YAML document", ErrInvalidScript)
	}
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidScript, err)
	}
	return &s, nil
}

func (s *Script) validate() error {
	for i := range s.Rules {
		r := &s.Rules[i]
		if r.Name == "" {
			r.Name = fmt.Sprintf("#%d", i)
		}
		if err := r.validate(); err != nil {
			return fmt.Errorf("rule %s: %w", r.Name, err)
		}
	}
	if s.Default != nil {
		if err := s.Default.validate(); err != nil {
			return fmt.Errorf("default: %w", err)
		}
	}
	for _, m := range s.Models {
		if strings.TrimSpace(m) == "" {
			return errors.New("models: empty model name")
		}
	}
	return nil
}

func (r *Rule) validate() error {
	if r.Times < 0 {
		return fmt.Errorf("times %d is negative", r.Times)
	}
	if (r.Reply == nil) == (r.Error == nil) {
		return errors.New("needs exactly one of reply and error")
	}
	if err := r.Match.validate(); err != nil {
		return fmt.Errorf("match: %w", err)
	}
	var err error
	if r.Match.UserRegex != "" {
		if r.userRe, err = regexp.Compile(r.Match.UserRegex); err != nil {
			return fmt.Errorf("match.userRegex: %w", err)
		}
	}
	if r.Match.SystemRegex != "" {
		if r.sysRe, err = regexp.Compile(r.Match.SystemRegex); err != nil {
			return fmt.Errorf("match.systemRegex: %w", err)
		}
	}
	if r.Reply != nil {
		return r.Reply.validate()
	}
	return r.Error.validate()
}

func (m *Match) validate() error {
	switch m.Provider {
	case "", ProviderAnthropic, ProviderOpenAI, ProviderGemini:
	default:
		return fmt.Errorf("unknown provider %q (anthropic, openai, gemini)", m.Provider)
	}
	switch m.API {
	case "", APIMessages, APIResponses, APIChat, APIGemini:
	default:
		return fmt.Errorf("unknown api %q (messages, responses, chat, gemini)", m.API)
	}
	switch m.Kind {
	case "", KindMain, KindTitle, KindStructured, KindQuota, KindAny:
	default:
		return fmt.Errorf("unknown kind %q (main, title, structured, quota, any)", m.Kind)
	}
	if m.Model != "" {
		if _, err := path.Match(m.Model, ""); err != nil {
			return fmt.Errorf("model glob %q: %w", m.Model, err)
		}
	}
	if m.Turn < 0 || m.Call < 0 {
		return errors.New("turn and call count from 1")
	}
	if m.ToolResult != nil && m.NoToolResult {
		return errors.New("toolResult and noToolResult contradict each other")
	}
	return nil
}

func (r *Reply) validate() error {
	if len(r.Content) == 0 && r.Text == "" {
		return errors.New("reply has no content (give content blocks or text)")
	}
	for i := range r.Content {
		if err := r.Content[i].validate(); err != nil {
			return fmt.Errorf("content[%d]: %w", i, err)
		}
	}
	switch r.StopReason {
	case "", StopEndTurn, StopToolUse, StopMaxTokens:
	default:
		return fmt.Errorf("unknown stopReason %q (end_turn, tool_use, max_tokens)", r.StopReason)
	}
	if r.ChunkSize < 0 || r.DelayMs < 0 || r.LatencyMs < 0 || r.DropAfterEvents < 0 {
		return errors.New("chunkSize, delayMs, latencyMs and dropAfterEvents must not be negative")
	}
	if r.Usage != nil && (r.Usage.InputTokens < 0 || r.Usage.OutputTokens < 0) {
		return errors.New("usage must not be negative")
	}
	if err := checkTemplate(r.Text); err != nil {
		return fmt.Errorf("text: %w", err)
	}
	return nil
}

func (b *Block) validate() error {
	if b.Type == "" {
		switch {
		case b.Name != "":
			b.Type = BlockToolUse
		case b.Thinking != "":
			b.Type = BlockThinking
		case b.Text != "":
			b.Type = BlockText
		default:
			return errors.New("block has no type and nothing to infer it from")
		}
	}
	switch b.Type {
	case BlockText:
		if b.Text == "" {
			return errors.New("text block with empty text")
		}
		if b.Name != "" || b.Input != nil || b.Thinking != "" {
			return errors.New("text block with tool or thinking fields")
		}
		return checkTemplate(b.Text)
	case BlockThinking:
		if b.Thinking == "" {
			return errors.New("thinking block with empty thinking")
		}
		if b.Name != "" || b.Input != nil || b.Text != "" {
			return errors.New("thinking block with text or tool fields")
		}
		return checkTemplate(b.Thinking)
	case BlockToolUse:
		if b.Name == "" {
			return errors.New("tool_use block without name")
		}
		if b.Text != "" || b.Thinking != "" {
			return errors.New("tool_use block with text or thinking")
		}
		switch in := b.Input.(type) {
		case nil:
			b.Input = map[string]any{}
		case map[string]any, string:
		default:
			return fmt.Errorf("tool_use input must be an object or a string, not %T", in)
		}
		if _, err := json.Marshal(b.Input); err != nil {
			return fmt.Errorf("tool_use input: %w", err)
		}
		return walkStrings(b.Input, checkTemplate)
	default:
		return fmt.Errorf("unknown block type %q (text, thinking, tool_use)", b.Type)
	}
}

func (e *ErrorReply) validate() error {
	if e.Status < 400 || e.Status > 599 {
		return fmt.Errorf("error status %d is not 400–599", e.Status)
	}
	if e.RetryAfter < 0 {
		return errors.New("retryAfter must not be negative")
	}
	for k := range e.Headers {
		if k == "" || strings.ContainsAny(k, " \r\n:") {
			return fmt.Errorf("bad header name %q", k)
		}
	}
	for _, v := range e.Headers {
		if strings.ContainsAny(v, "\r\n") {
			return errors.New("header value with a line break")
		}
	}
	return checkTemplate(e.Message)
}

// walkStrings calls fn on every string inside v (maps, lists, scalars).
func walkStrings(v any, fn func(string) error) error {
	switch x := v.(type) {
	case string:
		return fn(x)
	case map[string]any:
		for _, e := range x {
			if err := walkStrings(e, fn); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := walkStrings(e, fn); err != nil {
				return err
			}
		}
	}
	return nil
}
