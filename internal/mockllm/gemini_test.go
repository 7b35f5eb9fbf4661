package mockllm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type geminiResult struct {
	Text, Thought string
	Calls         []map[string]any
	Finish        string
	Usage         map[string]any
	ResponseID    string
}

// checkGeminiStream accumulates generateContent chunks: one response id,
// role "model", finishReason only on the last chunk.
func checkGeminiStream(chunks []string) (*geminiResult, error) {
	res := &geminiResult{}
	for i, data := range chunks {
		var r struct {
			Candidates []struct {
				Content struct {
					Role  string
					Parts []struct {
						Text         string
						Thought      bool
						FunctionCall map[string]any `json:"functionCall"`
					}
				}
				FinishReason string `json:"finishReason"`
			}
			UsageMetadata map[string]any `json:"usageMetadata"`
			ResponseID    string         `json:"responseId"`
		}
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			return nil, fmt.Errorf("chunk %d: %v", i, err)
		}
		if len(r.Candidates) != 1 || r.Candidates[0].Content.Role != "model" {
			return nil, fmt.Errorf("chunk %d: candidates %+v", i, r.Candidates)
		}
		if res.ResponseID != "" && r.ResponseID != res.ResponseID {
			return nil, fmt.Errorf("chunk %d: response id changed", i)
		}
		res.ResponseID = r.ResponseID
		if res.Finish != "" {
			return nil, fmt.Errorf("chunk %d after finishReason", i)
		}
		for _, p := range r.Candidates[0].Content.Parts {
			switch {
			case p.FunctionCall != nil:
				res.Calls = append(res.Calls, p.FunctionCall)
			case p.Thought:
				res.Thought += p.Text
			default:
				res.Text += p.Text
			}
		}
		res.Finish = r.Candidates[0].FinishReason
		res.Usage = r.UsageMetadata
	}
	if res.Finish == "" {
		return nil, fmt.Errorf("no finishReason")
	}
	return res, nil
}

func geminiBody(contents ...map[string]any) map[string]any {
	return map[string]any{
		"contents":          contents,
		"systemInstruction": map[string]any{"role": "user", "parts": []map[string]any{{"text": "You are Gemini CLI."}}},
		"tools":             []map[string]any{{"functionDeclarations": []map[string]any{{"name": "run_shell_command"}, {"name": "write_file"}}}},
		"generationConfig":  map[string]any{"temperature": 1},
	}
}

func gUser(text string) map[string]any {
	return map[string]any{"role": "user", "parts": []map[string]any{{"text": text}}}
}

func TestGeminiStream(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - name: call
    match: {provider: gemini, noToolResult: true}
    reply:
      chunkSize: 4
      content:
        - thinking: "considering"
        - text: "Running now."
        - {name: run_shell_command, input: {command: "echo hi"}}
  - name: after
    match: {toolResult: {name: run_shell_command, isError: false}}
    reply: {text: "output was {{toolResult}}"}
  - name: after-error
    match: {toolResult: {isError: true}}
    reply: {text: "it broke"}
`)
	resp, body := post(t, ts.URL+"/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse", geminiBody(gUser("<session_context>ctx</session_context>"), gUser("run it")), "x-goog-api-key", "k")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	var chunks []string
	for _, ev := range mustSSE(t, body) {
		chunks = append(chunks, ev.Data)
	}
	res, err := checkGeminiStream(chunks)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if res.Text != "Running now." || res.Thought != "considering" || len(res.Calls) != 1 || res.Finish != "STOP" {
		t.Fatalf("result %+v", res)
	}
	if res.Calls[0]["name"] != "run_shell_command" || res.Calls[0]["args"].(map[string]any)["command"] != "echo hi" {
		t.Errorf("call %v", res.Calls[0])
	}
	if res.Usage["promptTokenCount"].(float64) <= 0 || res.Usage["candidatesTokenCount"].(float64) <= 0 {
		t.Errorf("usage %v", res.Usage)
	}
	rec := s.Requests()[0]
	if rec.Model != "gemini-2.5-pro" || !rec.Stream || strings.Join(rec.UserTexts, "|") != "run it" || strings.Join(rec.Tools, ",") != "run_shell_command,write_file" {
		t.Errorf("recorded %+v", rec)
	}

	// Tool results, not streamed; the error flag comes from response.error.
	turn2 := func(response map[string]any) map[string]any {
		return geminiBody(gUser("run it"),
			map[string]any{"role": "model", "parts": []map[string]any{{"functionCall": map[string]any{"name": "run_shell_command", "args": map[string]any{}}}}},
			map[string]any{"role": "user", "parts": []map[string]any{{"functionResponse": map[string]any{"name": "run_shell_command", "response": response}}}},
		)
	}
	_, body = post(t, ts.URL+"/v1beta/models/gemini-2.5-pro:generateContent", turn2(map[string]any{"output": "hi\n"}))
	res, err = checkGeminiStream([]string{string(body)})
	if err != nil || res.Text != "output was hi\n" {
		t.Errorf("turn 2: %v %+v %s", err, res, body)
	}
	_, body = post(t, ts.URL+"/v1beta/models/gemini-2.5-pro:generateContent", turn2(map[string]any{"error": "exit 1"}))
	if !strings.Contains(string(body), "it broke") {
		t.Errorf("error result: %s", body)
	}
	// streamGenerateContent without alt=sse: one JSON array.
	_, body = post(t, ts.URL+"/v1beta/models/gemini-2.5-pro:streamGenerateContent", geminiBody(gUser("x")))
	var arr []json.RawMessage
	if err := json.Unmarshal(body, &arr); err != nil || len(arr) != 1 {
		t.Errorf("array stream: %v %s", err, body)
	}
}

func TestGeminiRouterRequestGetsSchemaJSON(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{reply: {text: "main only"}}]`)
	body := map[string]any{
		"contents":          []map[string]any{gUser("hi")},
		"systemInstruction": map[string]any{"parts": []map[string]any{{"text": "You are a specialized Task Routing AI."}}},
		"generationConfig": map[string]any{"responseMimeType": "application/json", "responseJsonSchema": map[string]any{
			"type": "OBJECT", "properties": map[string]any{"complexity_reasoning": map[string]any{"type": "STRING"}, "complexity_score": map[string]any{"type": "INTEGER"}},
		}},
	}
	_, out := post(t, ts.URL+"/v1beta/models/gemini-2.5-flash-lite:generateContent", body)
	res, err := checkGeminiStream([]string{string(out)})
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Reasoning string `json:"complexity_reasoning"`
		Score     int    `json:"complexity_score"`
	}
	if err := json.Unmarshal([]byte(res.Text), &v); err != nil || v.Score < 1 || v.Reasoning == "" {
		t.Fatalf("router answer %q: %v", res.Text, err)
	}
}

func TestGeminiErrorsCountTokensModels(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{times: 1, error: {status: 429, retryAfter: 7}}, {error: {status: 503, inStream: true}}]`)
	resp, body := post(t, ts.URL+"/v1beta/models/g:streamGenerateContent?alt=sse", geminiBody(gUser("x")))
	var e geminiError
	if resp.StatusCode != 429 || json.Unmarshal(body, &e) != nil || e.Error.Status != "RESOURCE_EXHAUSTED" || e.Error.Code != 429 || len(e.Error.Details) != 1 {
		t.Errorf("429: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts.URL+"/v1beta/models/g:streamGenerateContent?alt=sse", geminiBody(gUser("x")))
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"UNAVAILABLE"`) {
		t.Errorf("in-stream error: %d %s", resp.StatusCode, body)
	}
	for name, b := range map[string]string{"bad json": `{`, "no contents": `{"contents":[]}`} {
		resp, body := post(t, ts.URL+"/v1beta/models/g:generateContent", b)
		if resp.StatusCode != 400 || !strings.Contains(string(body), "INVALID_ARGUMENT") {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
	_, body = post(t, ts.URL+"/v1beta/models/g:countTokens", geminiBody(gUser(strings.Repeat("a", 400))))
	var ct struct{ TotalTokens int }
	if json.Unmarshal(body, &ct) != nil || ct.TotalTokens < 100 {
		t.Errorf("countTokens %s", body)
	}
	req, _ := newGet(ts.URL + "/v1beta/models")
	var list struct{ Models []struct{ Name string } }
	getJSON(t, req, &list)
	if len(list.Models) == 0 || !strings.HasPrefix(list.Models[0].Name, "models/") {
		t.Errorf("models %+v", list)
	}
	req, _ = newGet(ts.URL + "/v1beta/models/gemini-x")
	var one struct{ Name string }
	getJSON(t, req, &one)
	if one.Name != "models/gemini-x" {
		t.Errorf("model %+v", one)
	}
	resp, _ = post(t, ts.URL+"/v1beta/models/g:embedContent", `{}`)
	if resp.StatusCode != 404 {
		t.Errorf("unknown action: %d", resp.StatusCode)
	}
}
