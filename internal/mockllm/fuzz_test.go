package mockllm

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The request parsers see whatever a client sends. Each fuzz target sends
// arbitrary bodies through the whole handler: the answer must be a 400 in
// the provider's error shape or a 200 whose stream passes the same
// grammar checker the API tests use.

const fuzzScript = `
rules:
  - name: echo
    match: {kind: any, userContains: "tool"}
    reply:
      chunkSize: 3
      content:
        - thinking: "t {{userText}}"
        - text: "{{lastUserText}} / {{toolResult}}"
        - {name: Bash, input: {command: "{{lastUserText}}"}}
  - name: text
    match: {kind: any}
    reply: {text: "{{lastUserText}}|{{turn}}|{{kind}}"}
`

func fuzzAPI(f *testing.F, api API, seeds ...string) {
	s := New(mustParse(f, fuzzScript))
	for _, seed := range seeds {
		f.Add([]byte(seed))
	}
	_, body := minimalBody(api, "use a tool", true)
	f.Add(body)
	_, body = minimalBody(api, "plain", false)
	f.Add(body)
	f.Fuzz(func(t *testing.T, body []byte) {
		path, _ := minimalBody(api, "", true)
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusBadRequest:
			if !bytes.Contains(rec.Body.Bytes(), []byte("error")) {
				t.Fatalf("400 without an error body: %s", rec.Body.Bytes())
			}
			return
		case http.StatusOK:
		default:
			t.Fatalf("status %d: %s", rec.Code, rec.Body.Bytes())
		}
		if !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
			return
		}
		evs, err := parseSSE(bytes.NewReader(rec.Body.Bytes()))
		if err != nil {
			t.Fatalf("unparsable stream: %v", err)
		}
		switch api {
		case APIMessages:
			_, err = checkAnthropicStream(evs)
		case APIResponses:
			_, err = checkResponsesStream(evs)
		case APIChat:
			_, err = checkChatStream(evs)
		case APIGemini:
			var chunks []string
			for _, e := range evs {
				chunks = append(chunks, e.Data)
			}
			_, err = checkGeminiStream(chunks)
		}
		if err != nil {
			t.Fatalf("invalid stream: %v\n%s", err, rec.Body.Bytes())
		}
	})
}

func FuzzAnthropicRequest(f *testing.F) {
	fuzzAPI(f, APIMessages,
		`{"model":"m","stream":true,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"r"}],"is_error":true},{"type":"text","text":"use a tool"}]}]}`,
		`{"model":"m","stream":true,"max_tokens":1,"messages":[{"role":"user","content":"quota"}]}`,
		`{"model":"m","stream":true,"output_config":{"format":{"type":"json_schema","schema":{"type":"object","properties":{"a":{"type":"array","minItems":3,"items":{"anyOf":[{"type":"integer","minimum":4}]}}}}}},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"system","content":"ctx"},{"role":"assistant","content":"a"},{"role":"user","content":"<system-reminder>r</system-reminder>"}]}`,
	)
}

func FuzzResponsesRequest(f *testing.F) {
	fuzzAPI(f, APIResponses,
		`{"model":"m","stream":true,"input":"use a tool","tools":[{"type":"custom","name":"Bash"}]}`,
		`{"model":"m","stream":true,"input":[{"type":"function_call","call_id":"c","name":"Bash","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"Exit code: 1"}]}`,
		`{"model":"m","stream":true,"text":{"format":{"type":"json_schema","schema":{"type":"object"}}},"input":"x"}`,
		`{"model":"m","stream":true,"tools":[{"type":"namespace","name":"collaboration","tools":[{"type":"function","name":"spawn_agent"}]}],"input":[{"type":"agent_message","author":"/root","content":[{"type":"input_text","text":"t"},{"type":"encrypted_content","encrypted_content":"spawn_agent"}]}]}`,
	)
}

func FuzzChatRequest(f *testing.F) {
	fuzzAPI(f, APIChat,
		`{"model":"m","stream":true,"messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"bash","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"out"}]}`,
		`{"model":"m","stream":true,"response_format":{"type":"json_object"},"messages":[{"role":"user","content":[{"type":"text","text":"use a tool"}]}]}`,
	)
}

func FuzzGeminiRequest(f *testing.F) {
	fuzzAPI(f, APIGemini,
		`{"contents":[{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"error":"e"}}},{"text":"use a tool"}]}]}`,
		`{"contents":[{"parts":[{"text":"x"}]}],"generation_config":{"response_mime_type":"application/json"},"system_instruction":{"parts":[{"text":"s"}]}}`,
	)
}
