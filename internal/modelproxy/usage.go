package modelproxy

import (
	"bytes"
	"encoding/json"
	"mime"

	"github.com/agentd/agentd/conversation"
)

// Bounds on what the usage parser holds: one SSE line, or one whole JSON
// answer. Usage lines are small, but OpenAI's response.completed repeats
// the whole response; anything longer is passed on uncounted.
const (
	maxLine = 16 << 20
	maxBody = 16 << 20
)

// usageParser reads the token usage out of a model answer as its bytes go
// by, without holding the stream up: an SSE stream line by line, a JSON
// answer (or Gemini's JSON-array stream) at its end. Feeding the same bytes
// in any split gives the same result. Not safe for concurrent use.
type usageParser struct {
	prov     Provider
	sse      bool
	buf      []byte // the SSE line so far, or the JSON body
	overflow bool   // buf outgrew its bound: skip to the next line (SSE) or give up (JSON)

	usage conversation.Usage
	seen  bool
	model string
}

func newUsageParser(p Provider, contentType string) *usageParser {
	mt, _, _ := mime.ParseMediaType(contentType)
	return &usageParser{prov: p, sse: mt == "text/event-stream"}
}

// Write feeds bytes of the answer; it never fails.
func (u *usageParser) Write(b []byte) (int, error) {
	n := len(b)
	if !u.sse {
		if !u.overflow {
			if len(u.buf)+len(b) > maxBody {
				u.overflow, u.buf = true, nil
			} else {
				u.buf = append(u.buf, b...)
			}
		}
		return n, nil
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			u.appendLine(b)
			break
		}
		u.appendLine(b[:i])
		if !u.overflow {
			u.line(u.buf)
		}
		u.buf, u.overflow = u.buf[:0], false
		b = b[i+1:]
	}
	return n, nil
}

func (u *usageParser) appendLine(b []byte) {
	if u.overflow {
		return
	}
	if len(u.buf)+len(b) > maxLine {
		u.overflow, u.buf = true, u.buf[:0]
		return
	}
	u.buf = append(u.buf, b...)
}

// line handles one SSE line: only data lines that mention usage are
// decoded.
func (u *usageParser) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte{'\r'})
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte("sage")) { // usage, usageMetadata
		return
	}
	u.object(bytes.TrimSpace(data))
}

// Result returns the usage the answer reported (ok false if none) and the
// model it named. It finishes a last SSE line that had no newline.
func (u *usageParser) Result() (conversation.Usage, string, bool) {
	if u.sse {
		if len(u.buf) > 0 && !u.overflow {
			u.line(u.buf)
		}
		u.buf = nil
	} else if !u.overflow {
		body := bytes.TrimSpace(u.buf)
		if len(body) > 0 && body[0] == '[' {
			var items []json.RawMessage
			if json.Unmarshal(body, &items) == nil {
				for _, it := range items {
					u.object(it)
				}
			}
		} else {
			u.object(body)
		}
		u.buf = nil
	}
	return u.usage, u.model, u.seen
}

// wireUsage holds every provider's usage fields.
type wireUsage struct {
	// Anthropic (input excludes the cache) and OpenAI Responses (input
	// includes the cached part, given in the details).
	InputTokens        *int64 `json:"input_tokens"`
	OutputTokens       *int64 `json:"output_tokens"`
	CacheCreation      *int64 `json:"cache_creation_input_tokens"`
	CacheRead          *int64 `json:"cache_read_input_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	// OpenAI Chat Completions.
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type geminiUsage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}

type wireObject struct {
	Type    string     `json:"type"`
	Model   string     `json:"model"`
	Usage   *wireUsage `json:"usage"`
	Message *struct {
		Model string     `json:"model"`
		Usage *wireUsage `json:"usage"`
	} `json:"message"`
	Response *struct {
		Model string     `json:"model"`
		Usage *wireUsage `json:"usage"`
	} `json:"response"`
	UsageMetadata *geminiUsage `json:"usageMetadata"`
	ModelVersion  string       `json:"modelVersion"`
}

// object applies one decoded event or answer. Every provider reports usage
// cumulatively within an answer, so later reports replace earlier ones;
// Anthropic's message_delta replaces only the fields it carries.
func (u *usageParser) object(data []byte) {
	var o wireObject
	if json.Unmarshal(data, &o) != nil {
		return
	}
	switch u.prov {
	case Anthropic:
		if o.Message != nil {
			u.setModel(o.Message.Model)
			if o.Message.Usage != nil {
				u.usage, u.seen = conversation.Usage{}, true
				u.mergeAnthropic(o.Message.Usage)
			}
		}
		if o.Type == "message" {
			u.setModel(o.Model)
		}
		if o.Usage != nil {
			u.seen = true
			u.mergeAnthropic(o.Usage)
		}
	case OpenAI:
		if o.Response != nil {
			u.setModel(o.Response.Model)
			if o.Response.Usage != nil {
				u.setOpenAI(o.Response.Usage)
			}
		}
		if o.Usage != nil {
			u.setModel(o.Model)
			u.setOpenAI(o.Usage)
		} else if u.model == "" {
			u.setModel(o.Model)
		}
	case Gemini:
		u.setModel(o.ModelVersion)
		if m := o.UsageMetadata; m != nil {
			cached := min(m.CachedContentTokenCount, m.PromptTokenCount)
			u.usage = conversation.Usage{
				InputTokens:          m.PromptTokenCount - cached + m.ToolUsePromptTokenCount,
				CacheReadInputTokens: cached,
				OutputTokens:         m.CandidatesTokenCount + m.ThoughtsTokenCount,
			}
			u.seen = true
		}
	}
}

func (u *usageParser) setModel(m string) {
	if m != "" {
		u.model = m
	}
}

func (u *usageParser) mergeAnthropic(w *wireUsage) {
	if w.InputTokens != nil {
		u.usage.InputTokens = *w.InputTokens
	}
	if w.OutputTokens != nil {
		u.usage.OutputTokens = *w.OutputTokens
	}
	if w.CacheCreation != nil {
		u.usage.CacheCreationInputTokens = *w.CacheCreation
	}
	if w.CacheRead != nil {
		u.usage.CacheReadInputTokens = *w.CacheRead
	}
}

func (u *usageParser) setOpenAI(w *wireUsage) {
	var in, out, cached int64
	switch {
	case w.PromptTokens != nil || w.CompletionTokens != nil:
		in, out = deref(w.PromptTokens), deref(w.CompletionTokens)
		if w.PromptTokensDetails != nil {
			cached = w.PromptTokensDetails.CachedTokens
		}
	case w.InputTokens != nil || w.OutputTokens != nil:
		in, out = deref(w.InputTokens), deref(w.OutputTokens)
		if w.InputTokensDetails != nil {
			cached = w.InputTokensDetails.CachedTokens
		}
	default:
		return
	}
	cached = max(0, min(cached, in))
	u.usage = conversation.Usage{InputTokens: in - cached, CacheReadInputTokens: cached, OutputTokens: out}
	u.seen = true
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// total is what a budget counts: every token the model read or wrote,
// cached or not.
func total(u conversation.Usage) int64 {
	return u.InputTokens + u.OutputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
}
