package mockllm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Performance target: mock-llm must never be the slow part of an
// end-to-end test. A Claude Code-sized request (~80 KB: 24 tools, a long
// system prompt, a few turns) should be parsed, matched and answered in
// well under a millisecond in-process, and over loopback HTTP in about a
// millisecond.

const benchScript = `
rules:
  - {name: r1, match: {userContains: "never 1"}, reply: {text: x}}
  - {name: r2, match: {userRegex: "^never [0-9]+$"}, reply: {text: x}}
  - {name: r3, match: {toolResult: {name: Nope}}, reply: {text: x}}
  - {name: r4, match: {model: "gpt-*"}, reply: {text: x}}
  - name: answer
    match: {toolResult: {name: Bash, contains: "ok"}}
    reply:
      content:
        - thinking: "The command worked, so I will summarise what happened for {{lastUserText}}."
        - text: "The command printed ok. Everything is in order; here is a longer explanation of the result so the stream has a realistic number of deltas in it."
        - {name: Bash, input: {command: "ls -la && git status", description: "List files and status"}}
`

// claudeSizedBody builds a Messages request shaped like Claude Code's.
func claudeSizedBody(stream bool) []byte {
	var tools []map[string]any
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("Tool%d", i)
		if i == 0 {
			name = "Bash"
		}
		tools = append(tools, map[string]any{"name": name, "description": strings.Repeat("Describes the tool in detail. ", 60),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}}})
	}
	msgs := []map[string]any{
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "<system-reminder>" + strings.Repeat("context ", 40) + "</system-reminder>"}, {"type": "text", "text": "run the checks"}}},
		{"role": "assistant", "content": []map[string]any{{"type": "text", "text": "Running."}, {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": map[string]any{"command": "make check"}}}},
		{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok " + strings.Repeat("log line\n", 200)}}},
	}
	b, _ := json.Marshal(map[string]any{
		"model": "claude-opus-4-8", "max_tokens": 64000, "stream": stream,
		"system": []map[string]any{{"type": "text", "text": strings.Repeat("You are an agent. Follow the rules. ", 500)}},
		"tools":  tools, "messages": msgs,
	})
	return b
}

func benchHandler(b *testing.B, path string, body []byte) {
	s := New(mustParse(b, benchScript), WithLogLimit(16))
	h := s.Handler()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		if rec.Code != 200 {
			b.Fatalf("status %d: %s", rec.Code, rec.Body.Bytes())
		}
	}
}

func BenchmarkAnthropicStreamClaudeSized(b *testing.B) {
	benchHandler(b, "/v1/messages?beta=true", claudeSizedBody(true))
}

func BenchmarkAnthropicMessageClaudeSized(b *testing.B) {
	benchHandler(b, "/v1/messages", claudeSizedBody(false))
}

func BenchmarkResponsesStream(b *testing.B) {
	body, _ := json.Marshal(responsesBody(true, []map[string]any{
		{"role": "user", "content": "go"},
		{"type": "function_call", "call_id": "c1", "name": "Bash", "arguments": "{}"},
		{"type": "function_call_output", "call_id": "c1", "output": "ok"},
	}))
	benchHandler(b, "/v1/responses", body)
}

func BenchmarkChatStream(b *testing.B) {
	body, _ := json.Marshal(chatBody(true,
		map[string]any{"role": "user", "content": "go"},
		map[string]any{"role": "assistant", "tool_calls": []map[string]any{{"id": "c1", "type": "function", "function": map[string]any{"name": "Bash", "arguments": "{}"}}}},
		map[string]any{"role": "tool", "tool_call_id": "c1", "content": "ok"},
	))
	benchHandler(b, "/v1/chat/completions", body)
}

func BenchmarkGeminiStream(b *testing.B) {
	body, _ := json.Marshal(geminiBody(gUser("go"),
		map[string]any{"role": "model", "parts": []map[string]any{{"functionCall": map[string]any{"name": "Bash", "args": map[string]any{}}}}},
		map[string]any{"role": "user", "parts": []map[string]any{{"functionResponse": map[string]any{"name": "Bash", "response": map[string]any{"output": "ok"}}}}},
	))
	benchHandler(b, "/v1beta/models/g:streamGenerateContent?alt=sse", body)
}

// Over loopback HTTP, as the CLIs use it.
func BenchmarkAnthropicStreamHTTP(b *testing.B) {
	s := New(mustParse(b, benchScript), WithLogLimit(16))
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	body := claudeSizedBody(true)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := http.Post(ts.URL+"/v1/messages", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	b.StopTimer()
	http.DefaultClient.CloseIdleConnections()
}
