package mockllm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sseEvent is one server-sent event: its "event:" name (may be empty) and
// its data (the "data:" lines joined by "\n").
type sseEvent struct {
	Event string
	Data  string
}

// parseSSE parses an event stream the way the SSE spec says: fields per
// line, a blank line ends an event, ":" lines are comments. It is used on
// both mock-llm's output and recorded real streams.
func parseSSE(r io.Reader) ([]sseEvent, error) {
	var out []sseEvent
	var cur sseEvent
	var data []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	flush := func() {
		if len(data) > 0 || cur.Event != "" {
			cur.Data = strings.Join(data, "\n")
			out = append(out, cur)
		}
		cur, data = sseEvent{}, nil
	}
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, ":"):
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				cur.Event = value
			case "data":
				data = append(data, value)
			case "id", "retry":
			default:
				return nil, fmt.Errorf("unknown SSE field %q", field)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	flush()
	return out, nil
}

// anthropicResult is what a client accumulates from a Messages stream.
type anthropicResult struct {
	ID         string
	Model      string
	Blocks     []map[string]any // type, text/thinking/signature, id/name/input
	StopReason string
	InputTok   int
	OutputTok  int
	Pings      int
	Err        map[string]any
}

// checkAnthropicStream validates the Messages stream grammar (message_start
// first; blocks started, filled with deltas of their own kind and stopped
// in index order; message_delta; message_stop last; ping anywhere; event
// name equal to the data's type) and accumulates the message, like the
// official SDKs' Message.Accumulate.
func checkAnthropicStream(events []sseEvent) (*anthropicResult, error) {
	res := &anthropicResult{}
	type open struct {
		typ     string
		partial strings.Builder
	}
	var cur *open
	state := "start"
	for i, ev := range events {
		var d map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			return nil, fmt.Errorf("event %d: data is not JSON: %v", i, err)
		}
		typ, _ := d["type"].(string)
		if ev.Event != "" && ev.Event != typ {
			return nil, fmt.Errorf("event %d: event name %q but data type %q", i, ev.Event, typ)
		}
		if typ == "ping" {
			res.Pings++
			continue
		}
		if typ == "error" {
			e, _ := d["error"].(map[string]any)
			res.Err = e
			state = "error"
			continue
		}
		if state == "start" && typ != "message_start" {
			return nil, fmt.Errorf("event %d: %s before message_start", i, typ)
		}
		if state == "stopped" || state == "error" {
			return nil, fmt.Errorf("event %d: %s after the stream ended", i, typ)
		}
		switch typ {
		case "message_start":
			if state != "start" {
				return nil, fmt.Errorf("event %d: second message_start", i)
			}
			m := d["message"].(map[string]any)
			res.ID, _ = m["id"].(string)
			res.Model, _ = m["model"].(string)
			if u, ok := m["usage"].(map[string]any); ok {
				res.InputTok = int(u["input_tokens"].(float64))
			}
			state = "message"
		case "content_block_start":
			if cur != nil {
				return nil, fmt.Errorf("event %d: block started while another is open", i)
			}
			if idx := int(d["index"].(float64)); idx != len(res.Blocks) {
				return nil, fmt.Errorf("event %d: block index %d, want %d", i, idx, len(res.Blocks))
			}
			cb := d["content_block"].(map[string]any)
			block := map[string]any{}
			for k, v := range cb {
				block[k] = v
			}
			res.Blocks = append(res.Blocks, block)
			cur = &open{typ: cb["type"].(string)}
		case "content_block_delta":
			if cur == nil || int(d["index"].(float64)) != len(res.Blocks)-1 {
				return nil, fmt.Errorf("event %d: delta for a block that is not open", i)
			}
			delta := d["delta"].(map[string]any)
			block := res.Blocks[len(res.Blocks)-1]
			dt := delta["type"].(string)
			switch dt {
			case "text_delta":
				if cur.typ != "text" {
					return nil, fmt.Errorf("event %d: text_delta in a %s block", i, cur.typ)
				}
				block["text"] = block["text"].(string) + delta["text"].(string)
			case "thinking_delta":
				if cur.typ != "thinking" {
					return nil, fmt.Errorf("event %d: thinking_delta in a %s block", i, cur.typ)
				}
				block["thinking"] = block["thinking"].(string) + delta["thinking"].(string)
			case "signature_delta":
				if cur.typ != "thinking" {
					return nil, fmt.Errorf("event %d: signature_delta in a %s block", i, cur.typ)
				}
				block["signature"] = delta["signature"].(string)
			case "input_json_delta":
				if cur.typ != "tool_use" && cur.typ != "server_tool_use" && cur.typ != "mcp_tool_use" {
					return nil, fmt.Errorf("event %d: input_json_delta in a %s block", i, cur.typ)
				}
				pj, ok := delta["partial_json"].(string)
				if !ok {
					return nil, fmt.Errorf("event %d: input_json_delta without partial_json", i)
				}
				cur.partial.WriteString(pj)
			case "citations_delta":
			default:
				return nil, fmt.Errorf("event %d: unknown delta type %q", i, dt)
			}
		case "content_block_stop":
			if cur == nil || int(d["index"].(float64)) != len(res.Blocks)-1 {
				return nil, fmt.Errorf("event %d: stop for a block that is not open", i)
			}
			if cur.partial.Len() > 0 {
				var in any
				if err := json.Unmarshal([]byte(cur.partial.String()), &in); err != nil {
					return nil, fmt.Errorf("event %d: tool input %q is not JSON: %v", i, cur.partial.String(), err)
				}
				res.Blocks[len(res.Blocks)-1]["input"] = in
			}
			cur = nil
		case "message_delta":
			if cur != nil {
				return nil, fmt.Errorf("event %d: message_delta with a block open", i)
			}
			delta := d["delta"].(map[string]any)
			res.StopReason, _ = delta["stop_reason"].(string)
			if u, ok := d["usage"].(map[string]any); ok {
				res.OutputTok = int(u["output_tokens"].(float64))
			}
			state = "delta"
		case "message_stop":
			if state != "delta" {
				return nil, fmt.Errorf("event %d: message_stop without message_delta", i)
			}
			state = "stopped"
		default:
			return nil, fmt.Errorf("event %d: unknown event type %q", i, typ)
		}
	}
	if state != "stopped" && state != "error" {
		return nil, fmt.Errorf("stream ended in state %s", state)
	}
	return res, nil
}

// newTestServer serves script (YAML) on an httptest server.
func newTestServer(t testing.TB, script string, opts ...Option) (*Server, *httptest.Server) {
	t.Helper()
	sc, err := Parse([]byte(script))
	if err != nil {
		t.Fatalf("parse script: %v", err)
	}
	s := New(sc, opts...)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

// post sends a JSON body and returns the response (body read fully).
func post(t testing.TB, url string, body any, header ...string) (*http.Response, []byte) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	case []byte:
		data = b
	default:
		var err error
		if data, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, out
}

func mustSSE(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	evs, err := parseSSE(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse SSE: %v\n%s", err, body)
	}
	return evs
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// anthropicBody builds a Messages request.
func anthropicBody(stream bool, messages ...map[string]any) map[string]any {
	return map[string]any{
		"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": stream,
		"tools":    []map[string]any{{"name": "Bash", "input_schema": map[string]any{"type": "object"}}},
		"messages": messages,
	}
}

func userText(text string) map[string]any {
	return map[string]any{"role": "user", "content": text}
}

func newGet(url string, header ...string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req, nil
}

func getJSON(t testing.TB, req *http.Request, v any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", req.URL, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", req.URL, err)
	}
}

// minimalBody is a small valid request of each API carrying text.
func minimalBody(api API, text string, stream bool) (path string, body []byte) {
	q, _ := json.Marshal(text)
	st := "false"
	if stream {
		st = "true"
	}
	switch api {
	case APIMessages:
		return "/v1/messages", []byte(`{"model":"claude-x","max_tokens":10,"stream":` + st + `,"messages":[{"role":"user","content":` + string(q) + `}]}`)
	case APIResponses:
		return "/v1/responses", []byte(`{"model":"gpt-x","stream":` + st + `,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":` + string(q) + `}]}]}`)
	case APIChat:
		return "/v1/chat/completions", []byte(`{"model":"gpt-x","stream":` + st + `,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":` + string(q) + `}]}`)
	default:
		action := "generateContent"
		if stream {
			action = "streamGenerateContent?alt=sse"
		}
		return "/v1beta/models/gemini-x:" + action, []byte(`{"contents":[{"role":"user","parts":[{"text":` + string(q) + `}]}]}`)
	}
}

// serveOnce runs one streamed request through the handler in-process,
// with a short deadline so scripted delays cannot stall a fuzz run.
func serveOnce(t testing.TB, s *Server, api API, text string) *httptest.ResponseRecorder {
	path, body := minimalBody(api, text, true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)).WithContext(ctx)
	rec := httptest.NewRecorder()
	func() {
		defer func() {
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				panic(p)
			}
		}()
		s.Handler().ServeHTTP(rec, req)
	}()
	return rec
}
