package mockllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"
)

// plan is a resolved answer, ready for any API's renderer.
type plan struct {
	stream       bool
	model        string
	blocks       []planBlock
	stop         StopReason
	inputTokens  int
	outputTokens int
	chunk        int
	delay        time.Duration
	latency      time.Duration
	dropAfter    int
	includeUsage bool
	now          time.Time
	// streamErr ends a stream with an error event instead of a normal end.
	streamErr *apiError
}

type planBlock struct {
	typ       BlockType
	text      string // text or thinking
	signature string // thinking
	id        string // fixed tool call id
	name      string
	input     string // tool input: JSON, or free text for custom tools
	custom    bool
	namespace string // OpenAI Responses tool namespace, if declared in one
}

func (p *plan) toolID(i int, ids *idGen, prefix string, n int) string {
	if p.blocks[i].id != "" {
		return p.blocks[i].id
	}
	return ids.id(prefix, n, "tool"+strconv.Itoa(i))
}

// apiError is a resolved scripted error.
type apiError struct {
	status     int
	typ        string
	message    string
	retryAfter int
	headers    map[string]string
}

// match reports whether the rule answers req; call is req's number among
// requests of its kind.
func (r *Rule) match(req *Request, call int) bool {
	m := &r.Match
	kind := m.Kind
	if kind == "" {
		kind = KindMain
	}
	if kind != KindAny && kind != req.Kind {
		return false
	}
	if m.Provider != "" && m.Provider != req.Provider {
		return false
	}
	if m.API != "" && m.API != req.API {
		return false
	}
	if m.Model != "" {
		if ok, _ := path.Match(m.Model, req.Model); !ok {
			return false
		}
	}
	if m.Turn != 0 && m.Turn != req.Turn() {
		return false
	}
	if m.Call != 0 && m.Call != call {
		return false
	}
	if m.HasTools != nil && *m.HasTools != (len(req.Tools) > 0) {
		return false
	}
	if m.Tool != "" && !req.OffersTool(m.Tool) {
		return false
	}
	if m.SystemContains != "" && !strings.Contains(req.System, m.SystemContains) {
		return false
	}
	if r.sysRe != nil && !r.sysRe.MatchString(req.System) {
		return false
	}
	if m.UserContains != "" || r.userRe != nil {
		found := false
		for _, t := range req.UserTexts() {
			if (m.UserContains == "" || strings.Contains(t, m.UserContains)) && (r.userRe == nil || r.userRe.MatchString(t)) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	results := req.ToolResults()
	if m.NoToolResult && len(results) > 0 {
		return false
	}
	if tm := m.ToolResult; tm != nil {
		found := false
		for _, tr := range results {
			if (tm.Name == "" || tm.Name == tr.Name) &&
				(tm.IsError == nil || *tm.IsError == tr.IsError) &&
				(tm.Contains == "" || strings.Contains(tr.Content, tm.Contains)) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// tmplCtx is what templates can see.
type tmplCtx struct {
	req  *Request
	call int
	seq  int
}

func (c *tmplCtx) funcs() template.FuncMap {
	return template.FuncMap{
		"lastUserText": func() string { return c.req.LastUserText() },
		"userText":     func() string { return strings.Join(c.req.UserTexts(), "\n") },
		"toolResult": func() string {
			r := c.req.ToolResults()
			if len(r) == 0 {
				return ""
			}
			return r[len(r)-1].Content
		},
		"toolNames": func() string { return strings.Join(c.req.ToolNames(), ",") },
		"images":    func() string { return describeImages(c.req.Images()) },
		"model":     func() string { return c.req.Model },
		"provider":  func() string { return string(c.req.Provider) },
		"api":       func() string { return string(c.req.API) },
		"kind":      func() string { return string(c.req.Kind) },
		"turn":      func() int { return c.req.Turn() },
		"call":      func() int { return c.call },
		"request":   func() int { return c.seq },
	}
}

var dummyCtx = &tmplCtx{req: &Request{}}

// checkTemplate validates a template at load time.
func checkTemplate(s string) error {
	if !strings.Contains(s, "{{") {
		return nil
	}
	_, err := template.New("").Funcs(dummyCtx.funcs()).Option("missingkey=error").Parse(s)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	return nil
}

// render expands a template. Templates are parsed per request with the
// request's own functions, which keeps concurrent requests apart.
func (c *tmplCtx) render(s string) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	t, err := template.New("").Funcs(c.funcs()).Parse(s)
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, nil); err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	return b.String(), nil
}

func (c *tmplCtx) renderValue(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return c.render(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := c.renderValue(e)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := c.renderValue(e)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	default:
		return v, nil
	}
}

const defaultChunk = 16

// buildPlan resolves a reply for req: templates expanded, tool inputs
// encoded, stop reason and usage filled in.
func buildPlan(req *Request, reply *Reply, tc *tmplCtx, ids *idGen, now time.Time) (*plan, error) {
	p := &plan{
		stream:       req.Stream,
		model:        req.Model,
		chunk:        reply.ChunkSize,
		delay:        time.Duration(reply.DelayMs) * time.Millisecond,
		latency:      time.Duration(reply.LatencyMs) * time.Millisecond,
		dropAfter:    reply.DropAfterEvents,
		includeUsage: req.IncludeUsage,
		now:          now,
	}
	if p.chunk == 0 {
		p.chunk = defaultChunk
	}
	if reply.Model != "" {
		p.model = reply.Model
	}
	blocks := reply.Content
	if reply.Text != "" {
		blocks = append(append([]Block(nil), blocks...), Block{Type: BlockText, Text: reply.Text})
	}
	outRunes := 0
	hasTool := false
	for i, b := range blocks {
		pb := planBlock{typ: b.Type, id: b.ID, name: b.Name}
		var err error
		switch b.Type {
		case BlockText:
			pb.text, err = tc.render(b.Text)
		case BlockThinking:
			pb.text, err = tc.render(b.Thinking)
			pb.signature = ids.signature(strconv.Itoa(i))
		case BlockToolUse:
			hasTool = true
			pb.input, pb.custom, err = toolInput(req, b, tc)
			if t := req.tool(b.Name); t != nil {
				pb.namespace = t.Namespace
			}
		}
		if err != nil {
			return nil, fmt.Errorf("content[%d]: %w", i, err)
		}
		outRunes += utf8.RuneCountInString(pb.text) + utf8.RuneCountInString(pb.input) + len(pb.name)
		p.blocks = append(p.blocks, pb)
	}
	p.stop = reply.StopReason
	if p.stop == "" {
		p.stop = StopEndTurn
		if hasTool {
			p.stop = StopToolUse
		}
	}
	p.inputTokens = req.InputTokens
	p.outputTokens = approxTokens(outRunes)
	if u := reply.Usage; u != nil {
		if u.InputTokens > 0 {
			p.inputTokens = u.InputTokens
		}
		if u.OutputTokens > 0 {
			p.outputTokens = u.OutputTokens
		}
	}
	return p, nil
}

// toolInput encodes a tool call's input. A string input goes as is to an
// OpenAI custom tool; for any other tool it must be a JSON object, or it
// is wrapped as {"input": "<string>"}.
func toolInput(req *Request, b Block, tc *tmplCtx) (string, bool, error) {
	v, err := tc.renderValue(b.Input)
	if err != nil {
		return "", false, err
	}
	custom := false
	if t := req.tool(b.Name); t != nil && t.Custom {
		custom = true
	}
	if s, ok := v.(string); ok {
		if custom {
			return s, true, nil
		}
		var obj map[string]any
		if json.Unmarshal([]byte(s), &obj) == nil {
			v = obj
		} else {
			v = map[string]any{"input": s}
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return "", false, fmt.Errorf("tool input: %w", err)
	}
	if custom {
		// A custom tool takes free text; give it the JSON.
		return string(data), true, nil
	}
	return string(data), false, nil
}

func buildError(e *ErrorReply, tc *tmplCtx) (*apiError, error) {
	msg, err := tc.render(e.Message)
	if err != nil {
		return nil, err
	}
	if msg == "" {
		msg = defaultErrorMessage(e.Status)
	}
	return &apiError{status: e.Status, typ: e.Type, message: msg, retryAfter: e.RetryAfter, headers: e.Headers}, nil
}

func defaultErrorMessage(status int) string {
	switch status {
	case 429:
		return "Rate limit exceeded (mock-llm scripted error)"
	case 529:
		return "Overloaded (mock-llm scripted error)"
	case 500:
		return "Internal server error (mock-llm scripted error)"
	}
	if t := http.StatusText(status); t != "" {
		return t + " (mock-llm scripted error)"
	}
	return fmt.Sprintf("HTTP %d (mock-llm scripted error)", status)
}

// builtinReply answers a request no rule matched.
func builtinReply(req *Request, script *Script, call int) *Reply {
	switch req.Kind {
	case KindTitle:
		title := titleFor(req)
		if len(req.Schema) > 0 {
			return &Reply{Text: schemaJSON(req.Schema, title)}
		}
		return &Reply{Text: title}
	case KindStructured:
		return &Reply{Text: schemaJSON(req.Schema, "mock-llm")}
	case KindQuota:
		return &Reply{Text: "ok", Usage: &Usage{OutputTokens: 1}}
	}
	if script != nil && script.Default != nil {
		return script.Default
	}
	last := req.LastUserText()
	if len(last) > 200 {
		last = last[:200] + "…"
	}
	return &Reply{Text: fmt.Sprintf("mock-llm: no rule matched (%s %s call %d, turn %d, model %q, last user text %q)",
		req.Provider, req.API, call, req.Turn(), req.Model, last)}
}

// titleFor makes a short, deterministic title from the user's text: the
// first words of its first line that is not a markup tag.
func titleFor(req *Request) string {
	text := tagRe.ReplaceAllString(req.LastUserText(), "\n")
	for _, line := range strings.Split(text, "\n") {
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		if len(words) > 6 {
			words = words[:6]
		}
		t := strings.Join(words, " ")
		return strings.ToUpper(t[:1]) + t[1:]
	}
	return "Mock session"
}

var tagRe = regexp.MustCompile(`</?[A-Za-z_][A-Za-z0-9_-]*>`)

// schemaJSON makes a JSON value that satisfies a (simple) JSON schema:
// enums take their first value, strings the filler, numbers their minimum
// or 1, objects all their properties. Gemini's upper-case OpenAPI types
// are accepted too.
func schemaJSON(schema json.RawMessage, filler string) string {
	var s any
	if err := json.Unmarshal(schema, &s); err != nil {
		return "{}"
	}
	data, err := json.Marshal(schemaValue(s, filler, 0))
	if err != nil {
		return "{}"
	}
	return string(data)
}

func schemaValue(s any, filler string, depth int) any {
	m, ok := s.(map[string]any)
	if !ok || depth > 12 {
		return nil
	}
	if v, ok := m["const"]; ok {
		return v
	}
	if v, ok := m["default"]; ok {
		return v
	}
	if e, ok := m["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := m[k].([]any); ok && len(alts) > 0 {
			return schemaValue(alts[0], filler, depth+1)
		}
	}
	typ := ""
	switch t := m["type"].(type) {
	case string:
		typ = strings.ToLower(t)
	case []any:
		for _, e := range t {
			if s, ok := e.(string); ok && s != "null" {
				typ = strings.ToLower(s)
				break
			}
		}
	}
	if typ == "" {
		if _, ok := m["properties"]; ok {
			typ = "object"
		}
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props, _ := m["properties"].(map[string]any)
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out[k] = schemaValue(props[k], filler, depth+1)
		}
		return out
	case "array":
		n := 0
		if mi, ok := m["minItems"].(float64); ok {
			n = int(mi)
		}
		out := make([]any, 0, n)
		for i := 0; i < n && i < 16; i++ {
			out = append(out, schemaValue(m["items"], filler, depth+1))
		}
		return out
	case "integer", "number":
		if mi, ok := m["minimum"].(float64); ok {
			return mi
		}
		return 1
	case "boolean":
		return false
	case "null":
		return nil
	default:
		return filler
	}
}
