package mockllm

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The recorded real streams and mock-llm's own stream go through the same
// parser and grammar checker.
func TestRecordedAnthropicStreamsPassTheChecker(t *testing.T) {
	files, err := filepath.Glob("../../testdata/mockllm/recorded/*.sse")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded streams: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			res, err := checkAnthropicStream(mustSSE(t, readFile(t, f)))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.ID, "msg_01") || len(res.Blocks) == 0 || res.StopReason == "" {
				t.Fatalf("accumulated %+v", res)
			}
		})
	}
	// The vercel fixture has one JSON event per line and no event: lines.
	var evs []sseEvent
	for _, line := range strings.Split(strings.TrimSpace(string(readFile(t, "../../testdata/mockllm/recorded/vercel-ai__anthropic-json-tool.1.chunks.txt"))), "\n") {
		evs = append(evs, sseEvent{Data: line})
	}
	res, err := checkAnthropicStream(evs)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Blocks[0]["input"].(map[string]any); !ok || res.StopReason != "tool_use" {
		t.Fatalf("json-tool fixture accumulated %+v", res)
	}
}

func TestCheckerRejectsBrokenStreams(t *testing.T) {
	good := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01x\",\"model\":\"m\",\"usage\":{\"input_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if _, err := checkAnthropicStream(mustSSE(t, []byte(good))); err != nil {
		t.Fatalf("good stream rejected: %v", err)
	}
	evs := mustSSE(t, []byte(good))
	for name, broken := range map[string][]sseEvent{
		"no message_stop":    evs[:5],
		"no message_start":   evs[1:],
		"block never closed": append(append([]sseEvent{}, evs[:3]...), evs[4:]...),
		"event name differs": append([]sseEvent{{Event: "ping", Data: evs[0].Data}}, evs[1:]...),
	} {
		if _, err := checkAnthropicStream(broken); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

const anthropicScript = `
rules:
  - name: everything
    match: {userContains: "all blocks"}
    reply:
      chunkSize: 5
      content:
        - thinking: "Let me think about {{lastUserText}}."
        - text: "Running a command now."
        - type: tool_use
          name: Bash
          input: {command: "echo hello world", description: "greet"}
  - name: long-answer
    match: {userContains: "limit"}
    reply:
      text: "truncated answer"
      stopReason: max_tokens
      usage: {inputTokens: 1234, outputTokens: 99}
`

func TestAnthropicStreamAllBlockTypes(t *testing.T) {
	_, ts := newTestServer(t, anthropicScript)
	resp, body := post(t, ts.URL+"/v1/messages?beta=true", anthropicBody(true, userText("show all blocks")))
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if resp.Header.Get("request-id") == "" || resp.Header.Get("anthropic-ratelimit-requests-limit") == "" {
		t.Errorf("missing request-id or rate-limit headers: %v", resp.Header)
	}
	evs := mustSSE(t, body)
	res, err := checkAnthropicStream(evs)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if len(res.Blocks) != 3 {
		t.Fatalf("blocks %v", res.Blocks)
	}
	if got := res.Blocks[0]["thinking"]; got != "Let me think about show all blocks." {
		t.Errorf("thinking %q", got)
	}
	if sig, _ := res.Blocks[0]["signature"].(string); len(sig) < 40 {
		t.Errorf("signature %q", sig)
	}
	if got := res.Blocks[1]["text"]; got != "Running a command now." {
		t.Errorf("text %q", got)
	}
	tool := res.Blocks[2]
	if tool["name"] != "Bash" || !strings.HasPrefix(tool["id"].(string), "toolu_01") || len(tool["id"].(string)) != len("toolu_01")+22 {
		t.Errorf("tool block %v", tool)
	}
	if !reflect.DeepEqual(tool["input"], map[string]any{"command": "echo hello world", "description": "greet"}) {
		t.Errorf("tool input %v", tool["input"])
	}
	if res.StopReason != "tool_use" || res.InputTok <= 0 || res.OutputTok <= 0 || res.Pings != 1 {
		t.Errorf("stop %q usage %d/%d pings %d", res.StopReason, res.InputTok, res.OutputTok, res.Pings)
	}
	// Chunking: the text came in pieces of at most 5 runes, and the tool
	// input in several input_json_delta events after an empty one.
	var textDeltas, jsonDeltas []string
	for _, ev := range evs {
		if ev.Event != "content_block_delta" {
			continue
		}
		var raw map[string]map[string]any
		_ = json.Unmarshal([]byte(ev.Data), &raw)
		switch raw["delta"]["type"] {
		case "text_delta":
			textDeltas = append(textDeltas, raw["delta"]["text"].(string))
		case "input_json_delta":
			jsonDeltas = append(jsonDeltas, raw["delta"]["partial_json"].(string))
		}
	}
	for _, d := range textDeltas {
		if len([]rune(d)) > 5 {
			t.Errorf("text delta %q longer than chunkSize", d)
		}
	}
	if len(jsonDeltas) < 3 || jsonDeltas[0] != "" {
		t.Errorf("input_json_delta pieces %q: want an empty first piece and several more", jsonDeltas)
	}
}

func TestAnthropicNonStreamed(t *testing.T) {
	_, ts := newTestServer(t, anthropicScript)
	resp, body := post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("all blocks please")))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var msg struct {
		ID, Type, Role, Model string
		StopReason            string `json:"stop_reason"`
		Content               []map[string]any
		Usage                 struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || msg.Model != "claude-sonnet-4-5" || msg.StopReason != "tool_use" {
		t.Fatalf("message %+v", msg)
	}
	if len(msg.Content) != 3 || msg.Content[0]["type"] != "thinking" || msg.Content[1]["type"] != "text" || msg.Content[2]["type"] != "tool_use" {
		t.Fatalf("content %v", msg.Content)
	}
	if msg.Content[2]["input"].(map[string]any)["command"] != "echo hello world" {
		t.Errorf("tool input %v", msg.Content[2]["input"])
	}
	if msg.Usage.InputTokens <= 0 || msg.Usage.OutputTokens <= 0 {
		t.Errorf("usage %+v", msg.Usage)
	}
}

func TestAnthropicStopReasonAndUsageOverride(t *testing.T) {
	_, ts := newTestServer(t, anthropicScript)
	_, body := post(t, ts.URL+"/v1/messages", anthropicBody(true, userText("hit the limit")))
	res, err := checkAnthropicStream(mustSSE(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if res.StopReason != "max_tokens" || res.InputTok != 1234 || res.OutputTok != 99 {
		t.Fatalf("got %+v", res)
	}
}

// Our framing compared with a recorded stream: same event sequence for a
// text answer, same field names in every event.
func TestAnthropicFramingMatchesRecording(t *testing.T) {
	rec := mustSSE(t, readFile(t, "../../testdata/mockllm/recorded/llm-anthropic__test_async_prompt__interaction0.sse"))
	_, ts := newTestServer(t, "rules: [{reply: {text: \"- Captain\\n- Scoop\", chunkSize: 4}}]")
	_, body := post(t, ts.URL+"/v1/messages", anthropicBody(true, userText("Two names for a pet pelican")))
	ours := mustSSE(t, body)
	seq := func(evs []sseEvent) string {
		var names []string
		for _, e := range evs {
			if len(names) > 0 && names[len(names)-1] == e.Event && e.Event == "content_block_delta" {
				continue
			}
			names = append(names, e.Event)
		}
		return strings.Join(names, " ")
	}
	if seq(rec) != seq(ours) {
		t.Fatalf("event sequence\nrecorded %s\nours     %s", seq(rec), seq(ours))
	}
	keys := func(data string) string {
		var m map[string]any
		_ = json.Unmarshal([]byte(data), &m)
		var out []string
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			if mm, ok := v.(map[string]any); ok {
				for k, e := range mm {
					out = append(out, prefix+k)
					walk(prefix+k+".", e)
				}
			}
		}
		walk("", m)
		sortStrings(out)
		return strings.Join(out, ",")
	}
	for i := range rec {
		if rec[i].Event == "content_block_delta" {
			continue
		}
		j := indexOfEvent(ours, rec[i].Event)
		r, o := keys(rec[i].Data), keys(ours[j].Data)
		// The recording is from before stop_details; that field is the
		// only one we may lack.
		r = strings.ReplaceAll(strings.ReplaceAll(r, "message.stop_details,", ""), "delta.stop_details,", "")
		r = strings.ReplaceAll(r, "message.usage.inference_geo,", "")
		if r != o {
			t.Errorf("%s fields\nrecorded %s\nours     %s", rec[i].Event, r, o)
		}
	}
}

func indexOfEvent(evs []sseEvent, name string) int {
	for i, e := range evs {
		if e.Event == name {
			return i
		}
	}
	return -1
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestAnthropicCountTokensAndModels(t *testing.T) {
	_, ts := newTestServer(t, "rules: []")
	body := anthropicBody(false, userText(strings.Repeat("word ", 400)))
	resp, out := post(t, ts.URL+"/v1/messages/count_tokens", body)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(out, &ct) != nil || ct.InputTokens < 400 {
		t.Fatalf("count_tokens %d %s", resp.StatusCode, out)
	}
	// The same request as a message reports the same input count.
	_, msg := post(t, ts.URL+"/v1/messages", body)
	var m struct {
		Usage struct {
			InputTokens int `json:"input_tokens"`
		}
	}
	_ = json.Unmarshal(msg, &m)
	if m.Usage.InputTokens != ct.InputTokens {
		t.Errorf("messages says %d input tokens, count_tokens %d", m.Usage.InputTokens, ct.InputTokens)
	}

	req, _ := newGet(ts.URL+"/v1/models", "anthropic-version", "2023-06-01")
	var list struct {
		Data []struct{ Type, ID string }
	}
	getJSON(t, req, &list)
	if len(list.Data) == 0 || list.Data[0].Type != "model" {
		t.Fatalf("anthropic model list %+v", list)
	}
}

func TestAnthropicErrors(t *testing.T) {
	script := `
rules:
  - {name: limited, times: 1, match: {userContains: "429"}, error: {status: 429, retryAfter: 2}}
  - {name: overloaded, match: {userContains: "529"}, error: {status: 529}}
  - {name: broken, match: {userContains: "500"}, error: {status: 500, message: "boom for {{lastUserText}}", headers: {x-extra: "1"}}}
  - {name: custom, match: {userContains: "custom"}, error: {status: 400, type: invalid_request_error, message: "prompt is too long"}}
  - {name: ok, reply: {text: "fine"}}
`
	_, ts := newTestServer(t, script)
	cases := []struct {
		prompt, errType, msgPart string
		status                   int
	}{
		{"429 please", "rate_limit_error", "Rate limit", 429},
		{"529 please", "overloaded_error", "Overloaded", 529},
		{"500 please", "api_error", "boom for 500 please", 500},
		{"custom please", "invalid_request_error", "prompt is too long", 400},
	}
	for _, c := range cases {
		resp, body := post(t, ts.URL+"/v1/messages", anthropicBody(true, userText(c.prompt)))
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d", c.prompt, resp.StatusCode)
			continue
		}
		var e anthropicError
		if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type != c.errType || !strings.Contains(e.Error.Message, c.msgPart) {
			t.Errorf("%s: body %s", c.prompt, body)
		}
		if !strings.HasPrefix(e.RequestID, "req_") {
			t.Errorf("%s: request_id %q", c.prompt, e.RequestID)
		}
		switch c.status {
		case 429:
			if resp.Header.Get("retry-after") != "2" || resp.Header.Get("anthropic-ratelimit-requests-remaining") != "0" {
				t.Errorf("429 headers %v", resp.Header)
			}
		case 500:
			if resp.Header.Get("x-extra") != "1" {
				t.Errorf("custom header missing")
			}
		}
	}
	// times: 1 — the second "429" request falls through to the next rule.
	resp, _ := post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("429 please")))
	if resp.StatusCode != 200 {
		t.Errorf("429 rule should be used up, got %d", resp.StatusCode)
	}
}

func TestAnthropicInStreamError(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{error: {status: 529, inStream: true}}]`)
	resp, body := post(t, ts.URL+"/v1/messages", anthropicBody(true, userText("hi")))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	res, err := checkAnthropicStream(mustSSE(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if res.Err == nil || res.Err["type"] != "overloaded_error" {
		t.Fatalf("stream error %v\n%s", res.Err, body)
	}
	// Not streamed: an in-stream error is an HTTP error.
	resp, _ = post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("hi")))
	if resp.StatusCode != 529 {
		t.Fatalf("non-streamed status %d", resp.StatusCode)
	}
}

func TestAnthropicBadRequests(t *testing.T) {
	s, ts := newTestServer(t, "rules: []")
	for name, body := range map[string]string{
		"not json":      `{"model":`,
		"no model":      `{"messages":[{"role":"user","content":"hi"}]}`,
		"bad role":      `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`,
		"bad content":   `{"model":"m","messages":[{"role":"user","content":42}]}`,
		"empty message": `{"model":"m","messages":[]}`,
	} {
		resp, out := post(t, ts.URL+"/v1/messages", body)
		var e anthropicError
		if resp.StatusCode != 400 || json.Unmarshal(out, &e) != nil || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, out)
		}
	}
	for _, r := range s.Requests() {
		if r.Status != 400 || r.Error == "" {
			t.Errorf("logged %+v", r)
		}
	}
}

// The Claude Code case from notes/agent-clis.md: the next prompt arrives
// in the same user message as the previous turn's tool result.
func TestToolResultAndTextInOneMessage(t *testing.T) {
	script := `
rules:
  - name: result-and-text
    match: {toolResult: {name: Bash, contains: "42"}, userContains: "next question"}
    reply: {text: "both seen"}
  - name: result-only
    match: {toolResult: {name: Bash}}
    reply: {text: "result only"}
`
	s, ts := newTestServer(t, script)
	msgs := []map[string]any{
		userText("first"),
		{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": map[string]any{"command": "echo 42"}}}},
		{"role": "user", "content": []map[string]any{
			{"type": "tool_result", "tool_use_id": "toolu_1", "content": []map[string]any{{"type": "text", "text": "42"}}},
			{"type": "text", "text": "<system-reminder>ignore me</system-reminder>"},
			{"type": "text", "text": "next question please"},
		}},
	}
	_, body := post(t, ts.URL+"/v1/messages", anthropicBody(false, msgs...))
	if !bytes.Contains(body, []byte("both seen")) {
		t.Fatalf("body %s", body)
	}
	rec := s.Requests()[0]
	if rec.Turn != 2 || len(rec.ToolResults) != 1 || rec.ToolResults[0].Name != "Bash" || rec.ToolResults[0].Content != "42" {
		t.Errorf("recorded %+v", rec)
	}
	if !reflect.DeepEqual(rec.UserTexts, []string{"next question please"}) {
		t.Errorf("user texts %q (system reminders must be stripped)", rec.UserTexts)
	}
}

// Image blocks of a user message and of a tool result are read, logged and
// told by the images template function; the bytes are not kept.
func TestAnthropicImages(t *testing.T) {
	srv, ts := newTestServer(t, `
rules:
  - match: {userContains: "look"}
    reply: {text: "{{images}}"}
`)
	img := []byte("\x89PNG\r\n\x1a\nnot really a png")
	b64 := base64.StdEncoding.EncodeToString(img)
	sum := sha256.Sum256(img)
	msgs := []map[string]any{
		{"role": "user", "content": "run it"},
		{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": map[string]any{}}}},
		{"role": "user", "content": []any{
			map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": []any{
				map[string]any{"type": "text", "text": "shot"},
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/webp", "data": b64}}}},
			map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": b64}},
			map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": "https://example.com/x.png"}},
			map[string]any{"type": "text", "text": "look at these"},
		}},
	}
	resp, body := post(t, ts.URL+"/v1/messages", anthropicBody(false, msgs...))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var msg struct{ Content []struct{ Text string } }
	if err := json.Unmarshal(body, &msg); err != nil || len(msg.Content) != 1 {
		t.Fatalf("%s: %v", body, err)
	}
	h := hex.EncodeToString(sum[:])
	want := "image image/webp 24 bytes sha256:" + h + " (tool result)\nimage image/png 24 bytes sha256:" + h + "\nimage (url source)"
	if msg.Content[0].Text != want {
		t.Fatalf("images told as\n%q, want\n%q", msg.Content[0].Text, want)
	}
	logged := srv.ModelRequests("")
	if len(logged) != 1 || len(logged[0].Images) != 3 || logged[0].Images[1] != (ImageInfo{MediaType: "image/png", SourceType: "base64", SHA256: h, Size: 24}) {
		t.Fatalf("logged %+v", logged)
	}
	if logged[0].ToolResults[0].Content != "shot\n[image: image/webp]" && logged[0].ToolResults[0].Content != "shot" {
		t.Errorf("tool result text %q", logged[0].ToolResults[0].Content)
	}
}
