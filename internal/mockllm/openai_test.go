package mockllm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// responsesResult is what a Responses API client accumulates.
type responsesResult struct {
	ID       string
	Status   string
	Items    []map[string]any // output_item.done items, in order
	Text     string           // output_text deltas
	Args     map[string]string
	Reason   string // reasoning summary deltas
	Usage    map[string]any
	Final    map[string]any // the response of the last event
	EvTypes  []string
	Incomple string
}

// checkResponsesStream validates a Responses stream: event name equals the
// data type, sequence numbers count up from 0, response.created comes
// first, every added item is done in order, deltas add up to the done
// texts, and one terminal event (completed/incomplete/failed) ends it.
func checkResponsesStream(evs []sseEvent) (*responsesResult, error) {
	res := &responsesResult{Args: map[string]string{}}
	var openItems []map[string]any
	done := false
	for i, ev := range evs {
		var d map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			return nil, fmt.Errorf("event %d: %v", i, err)
		}
		typ, _ := d["type"].(string)
		res.EvTypes = append(res.EvTypes, typ)
		if ev.Event != typ {
			return nil, fmt.Errorf("event %d: name %q, type %q", i, ev.Event, typ)
		}
		if seq, ok := d["sequence_number"].(float64); !ok || int(seq) != i {
			return nil, fmt.Errorf("event %d: sequence_number %v", i, d["sequence_number"])
		}
		if done {
			return nil, fmt.Errorf("event %d: %s after the terminal event", i, typ)
		}
		if i == 0 && typ != "response.created" {
			return nil, fmt.Errorf("first event %s", typ)
		}
		switch typ {
		case "response.created", "response.in_progress":
			r := d["response"].(map[string]any)
			if res.ID == "" {
				res.ID = r["id"].(string)
			} else if r["id"] != res.ID {
				return nil, fmt.Errorf("event %d: response id changed", i)
			}
		case "response.output_item.added":
			if int(d["output_index"].(float64)) != len(res.Items)+len(openItems) || len(openItems) > 0 {
				return nil, fmt.Errorf("event %d: item added out of order", i)
			}
			openItems = append(openItems, d["item"].(map[string]any))
		case "response.output_text.delta":
			res.Text += d["delta"].(string)
		case "response.reasoning_summary_text.delta":
			res.Reason += d["delta"].(string)
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			res.Args[d["item_id"].(string)] += d["delta"].(string)
		case "response.function_call_arguments.done":
			if got := res.Args[d["item_id"].(string)]; got != d["arguments"] {
				return nil, fmt.Errorf("event %d: deltas %q, done %q", i, got, d["arguments"])
			}
		case "response.custom_tool_call_input.done":
			if got := res.Args[d["item_id"].(string)]; got != d["input"] {
				return nil, fmt.Errorf("event %d: deltas %q, done %q", i, got, d["input"])
			}
		case "response.output_text.done", "response.content_part.added", "response.content_part.done",
			"response.reasoning_summary_part.added", "response.reasoning_summary_part.done", "response.reasoning_summary_text.done":
		case "response.output_item.done":
			if len(openItems) != 1 {
				return nil, fmt.Errorf("event %d: done without an open item", i)
			}
			item := d["item"].(map[string]any)
			if item["id"] != openItems[0]["id"] {
				return nil, fmt.Errorf("event %d: done item %v is not the open one", i, item["id"])
			}
			res.Items = append(res.Items, item)
			openItems = nil
		case "response.completed", "response.incomplete", "response.failed":
			r := d["response"].(map[string]any)
			res.Final, res.Status = r, r["status"].(string)
			if u, ok := r["usage"].(map[string]any); ok {
				res.Usage = u
			}
			out, _ := r["output"].([]any)
			if typ != "response.failed" && len(out) != len(res.Items) {
				return nil, fmt.Errorf("final output has %d items, stream had %d", len(out), len(res.Items))
			}
			done = true
		default:
			return nil, fmt.Errorf("event %d: unknown type %s", i, typ)
		}
	}
	if !done {
		return nil, fmt.Errorf("no terminal event")
	}
	return res, nil
}

func responsesBody(stream bool, input any, tools ...map[string]any) map[string]any {
	if tools == nil {
		tools = []map[string]any{{"type": "function", "name": "exec_command"}, {"type": "custom", "name": "apply_patch"},
			{"type": "namespace", "name": "multi_agent_v1", "tools": []map[string]any{{"type": "function", "name": "spawn_agent"}}},
			{"type": "web_search"}}
	}
	return map[string]any{"model": "gpt-5.5", "stream": stream, "instructions": "You are Codex.", "input": input, "tools": tools}
}

func TestResponsesStream(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - name: all
    match: {api: responses, userContains: "probe"}
    reply:
      chunkSize: 6
      content:
        - thinking: "Planning the probe."
        - text: "Running it."
        - {name: exec_command, input: {cmd: "echo hi"}}
        - {name: apply_patch, input: "*** Begin Patch\n*** End Patch\n"}
`)
	input := []map[string]any{
		{"type": "additional_tools", "role": "developer", "tools": []map[string]any{{"type": "namespace", "name": "clock", "tools": []map[string]any{{"type": "function", "name": "sleep"}}}}},
		{"type": "message", "role": "developer", "content": []map[string]any{{"type": "input_text", "text": "rules"}}},
		{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": "<environment_context>cwd</environment_context>"}}},
		{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": "run the probe"}}},
	}
	resp, body := post(t, ts.URL+"/v1/responses", responsesBody(true, input))
	if resp.StatusCode != 200 || resp.Header.Get("x-request-id") == "" {
		t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
	}
	res, err := checkResponsesStream(mustSSE(t, body))
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if res.Status != "completed" || !strings.HasPrefix(res.ID, "resp_") || len(res.Items) != 4 {
		t.Fatalf("result %+v", res)
	}
	if res.Text != "Running it." || res.Reason != "Planning the probe." {
		t.Errorf("text %q reasoning %q", res.Text, res.Reason)
	}
	fc, custom := res.Items[2], res.Items[3]
	if fc["type"] != "function_call" || fc["name"] != "exec_command" || fc["arguments"] != `{"cmd":"echo hi"}` || !strings.HasPrefix(fc["call_id"].(string), "call_") {
		t.Errorf("function call %v", fc)
	}
	if custom["type"] != "custom_tool_call" || custom["input"] != "*** Begin Patch\n*** End Patch\n" {
		t.Errorf("custom call %v", custom)
	}
	if res.Items[0]["type"] != "reasoning" || res.Items[0]["encrypted_content"] == "" {
		t.Errorf("reasoning item %v", res.Items[0])
	}
	if res.Usage["input_tokens"].(float64) <= 0 || res.Usage["output_tokens"].(float64) <= 0 {
		t.Errorf("usage %v", res.Usage)
	}
	rec := s.Requests()[0]
	if !reflect.DeepEqual(rec.UserTexts, []string{"run the probe"}) || rec.Rule != "all" {
		t.Errorf("recorded %+v", rec)
	}
	wantTools := []string{"exec_command", "apply_patch", "spawn_agent", "web_search", "sleep"}
	if !reflect.DeepEqual(rec.Tools, wantTools) {
		t.Errorf("tools %v", rec.Tools)
	}
}

func TestResponsesToolResultTurnAndNonStream(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - {name: failed, match: {toolResult: {name: exec_command, isError: true}}, reply: {text: "it failed"}}
  - {name: ok, match: {toolResult: {name: exec_command, contains: "hi"}}, reply: {text: "saw {{toolResult}}", stopReason: max_tokens}}
`)
	history := func(output string) []map[string]any {
		return []map[string]any{
			{"role": "user", "content": "run it"},
			{"type": "reasoning", "summary": []map[string]any{{"type": "summary_text", "text": "hmm"}}},
			{"type": "function_call", "call_id": "call_1", "name": "exec_command", "arguments": `{"cmd":"x"}`},
			{"type": "function_call_output", "call_id": "call_1", "output": output},
		}
	}
	resp, body := post(t, ts.URL+"/v1/responses", responsesBody(false, history("Chunk ID: 1\nProcess exited with code 0\nOutput:\nhi\n")))
	var r map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &r) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if r["status"] != "incomplete" || r["incomplete_details"].(map[string]any)["reason"] != "max_output_tokens" {
		t.Errorf("response %v", r)
	}
	msg := r["output"].([]any)[0].(map[string]any)
	if text := msg["content"].([]any)[0].(map[string]any)["text"].(string); !strings.HasPrefix(text, "saw Chunk ID") {
		t.Errorf("text %q", text)
	}
	_, body = post(t, ts.URL+"/v1/responses", responsesBody(false, history("Process exited with code 2\nOutput:\nboom\n")))
	if !strings.Contains(string(body), "it failed") {
		t.Errorf("non-zero exit should be an error result: %s", body)
	}
	for _, rec := range s.Requests() {
		if rec.Turn != 2 || len(rec.ToolResults) != 1 || rec.ToolResults[0].Name != "exec_command" {
			t.Errorf("recorded %+v", rec)
		}
	}
	// A plain string input is one user message.
	_, body = post(t, ts.URL+"/v1/responses", map[string]any{"model": "gpt-5.5", "input": "just text"})
	if !strings.Contains(string(body), "no rule matched") || !strings.Contains(string(body), "just text") {
		t.Errorf("string input: %s", body)
	}
}

func TestResponsesErrors(t *testing.T) {
	_, ts := newTestServer(t, `
rules:
  - {times: 1, error: {status: 429, retryAfter: 3}}
  - {times: 1, error: {status: 500, inStream: true, message: "stream broke"}}
`)
	resp, body := post(t, ts.URL+"/v1/responses", responsesBody(true, "hi"))
	var e openAIError
	if resp.StatusCode != 429 || json.Unmarshal(body, &e) != nil || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" {
		t.Errorf("429: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("retry-after") != "3" || resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
		t.Errorf("429 headers %v", resp.Header)
	}
	resp, body = post(t, ts.URL+"/v1/responses", responsesBody(true, "hi"))
	res, err := checkResponsesStream(mustSSE(t, body))
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %v %s", resp.StatusCode, err, body)
	}
	if res.Status != "failed" || res.Final["error"].(map[string]any)["message"] != "stream broke" {
		t.Errorf("failed response %v", res.Final)
	}
	for name, b := range map[string]string{"bad json": `{`, "no model": `{"input":"x"}`, "bad input": `{"model":"m","input":5}`,
		"bad role": `{"model":"m","input":[{"role":"robot","content":"x"}]}`} {
		resp, body := post(t, ts.URL+"/v1/responses", b)
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"invalid_request_error"`) {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
}

// chatResult is what a Chat Completions client accumulates.
type chatResult struct {
	ID        string
	Content   string
	Reasoning string
	Calls     []map[string]string // id, name, arguments
	Finish    string
	Usage     map[string]any
}

func checkChatStream(evs []sseEvent) (*chatResult, error) {
	res := &chatResult{}
	if len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
		return nil, fmt.Errorf("stream does not end with [DONE]")
	}
	for i, ev := range evs[:len(evs)-1] {
		if ev.Event != "" {
			return nil, fmt.Errorf("event %d has an event name", i)
		}
		var c struct {
			ID      string
			Object  string
			Choices []struct {
				Delta struct {
					Role             string
					Content          *string
					ReasoningContent *string `json:"reasoning_content"`
					ToolCalls        []struct {
						Index    int
						ID, Type string
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
				FinishReason *string `json:"finish_reason"`
			}
			Usage map[string]any
		}
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			return nil, fmt.Errorf("event %d: %v", i, err)
		}
		if c.Object != "chat.completion.chunk" || (res.ID != "" && c.ID != res.ID) {
			return nil, fmt.Errorf("event %d: object %q id %q", i, c.Object, c.ID)
		}
		res.ID = c.ID
		if res.Finish != "" && len(c.Choices) > 0 {
			return nil, fmt.Errorf("event %d: choices after finish_reason", i)
		}
		if c.Usage != nil {
			if len(c.Choices) != 0 {
				return nil, fmt.Errorf("event %d: usage chunk with choices", i)
			}
			res.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			if i == 0 && ch.Delta.Role != "assistant" {
				return nil, fmt.Errorf("first delta without role")
			}
			if ch.Delta.Content != nil {
				res.Content += *ch.Delta.Content
			}
			if ch.Delta.ReasoningContent != nil {
				res.Reasoning += *ch.Delta.ReasoningContent
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == len(res.Calls) {
					if tc.ID == "" || tc.Function.Name == "" {
						return nil, fmt.Errorf("event %d: new tool call without id or name", i)
					}
					res.Calls = append(res.Calls, map[string]string{"id": tc.ID, "name": tc.Function.Name})
				} else if tc.Index != len(res.Calls)-1 {
					return nil, fmt.Errorf("event %d: tool call index %d out of order", i, tc.Index)
				}
				res.Calls[tc.Index]["arguments"] += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				res.Finish = *ch.FinishReason
			}
		}
	}
	return res, nil
}

func chatBody(stream bool, msgs ...map[string]any) map[string]any {
	return map[string]any{"model": "mock-model", "stream": stream, "stream_options": map[string]any{"include_usage": true},
		"tools":    []map[string]any{{"type": "function", "function": map[string]any{"name": "bash"}}},
		"messages": append([]map[string]any{{"role": "system", "content": "You are opencode."}}, msgs...)}
}

func TestChatStreamAndNonStream(t *testing.T) {
	_, ts := newTestServer(t, `
rules:
  - name: tool
    match: {api: chat, noToolResult: true}
    reply:
      chunkSize: 3
      content:
        - thinking: "hm"
        - text: "Let me run it."
        - {name: bash, input: {command: "echo mock", description: "d"}}
        - {name: bash, input: {command: "ls"}}
  - name: after
    match: {toolResult: {name: bash, contains: "mock"}}
    reply: {text: "got {{toolResult}}"}
`)
	resp, body := post(t, ts.URL+"/v1/chat/completions", chatBody(true, map[string]any{"role": "user", "content": "go"}))
	res, err := checkChatStream(mustSSE(t, body))
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %v\n%s", resp.StatusCode, err, body)
	}
	if res.Content != "Let me run it." || res.Reasoning != "hm" || res.Finish != "tool_calls" || len(res.Calls) != 2 {
		t.Fatalf("result %+v", res)
	}
	if res.Calls[0]["name"] != "bash" || res.Calls[0]["arguments"] != `{"command":"echo mock","description":"d"}` || res.Calls[1]["arguments"] != `{"command":"ls"}` {
		t.Errorf("calls %v", res.Calls)
	}
	if !strings.HasPrefix(res.ID, "chatcmpl-") || res.Usage["prompt_tokens"].(float64) <= 0 {
		t.Errorf("id %q usage %v", res.ID, res.Usage)
	}
	// Second turn, not streamed.
	msgs := []map[string]any{
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "go"}}},
		{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function", "function": map[string]any{"name": "bash", "arguments": "{}"}}}},
		{"role": "tool", "tool_call_id": "call_1", "content": "mock\n"},
	}
	resp, body = post(t, ts.URL+"/v1/chat/completions", chatBody(false, msgs...))
	var c struct {
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(body, &c) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if c.Object != "chat.completion" || c.Choices[0].Message.Content != "got mock\n" || c.Choices[0].FinishReason != "stop" || c.Usage.TotalTokens <= 0 {
		t.Errorf("completion %+v", c)
	}
	// Without include_usage there is no usage chunk.
	b := chatBody(true, map[string]any{"role": "user", "content": "go"})
	delete(b, "stream_options")
	_, body = post(t, ts.URL+"/v1/chat/completions", b)
	if res, err := checkChatStream(mustSSE(t, body)); err != nil || res.Usage != nil {
		t.Errorf("usage without include_usage: %v %v", err, res)
	}
}

func TestChatErrorsAndModels(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{error: {status: 503}}]`)
	resp, body := post(t, ts.URL+"/v1/chat/completions", chatBody(true, map[string]any{"role": "user", "content": "go"}))
	var e openAIError
	if resp.StatusCode != 503 || json.Unmarshal(body, &e) != nil || e.Error.Type != "server_error" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	for name, b := range map[string]string{"bad json": `[`, "no messages": `{"model":"m"}`, "bad role": `{"model":"m","messages":[{"role":"x","content":"y"}]}`} {
		if resp, _ := post(t, ts.URL+"/v1/chat/completions", b); resp.StatusCode != 400 {
			t.Errorf("%s: %d", name, resp.StatusCode)
		}
	}
	req, _ := newGet(ts.URL + "/v1/models")
	var list struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	getJSON(t, req, &list)
	if list.Object != "list" || len(list.Data) == 0 || list.Data[0].Object != "model" {
		t.Errorf("openai models %+v", list)
	}
}

// Codex's multi-agent v2: a call to a tool declared in a namespace names
// the namespace (Codex answers "unsupported call" otherwise), and the
// child's task arrives as an agent_message item whose payload is an
// encrypted_content part (plain text when mock-llm wrote it).
func TestResponsesNamespacedCallAndAgentMessage(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - name: child
    match: {userContains: "subtask: greet", noToolResult: true}
    reply: {text: "hello from the child"}
  - name: spawn
    match: {userContains: "delegate"}
    reply:
      content:
        - {name: spawn_agent, input: {task_name: greeter, message: "subtask: greet"}}
        - {name: exec_command, input: {cmd: "true"}}
`)
	user := func(text string) []map[string]any {
		return []map[string]any{{"type": "message", "role": "user", "content": []map[string]any{{"type": "input_text", "text": text}}}}
	}
	_, body := post(t, ts.URL+"/v1/responses", responsesBody(true, user("please delegate")))
	res, err := checkResponsesStream(mustSSE(t, body))
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	if len(res.Items) != 2 || res.Items[0]["name"] != "spawn_agent" || res.Items[0]["namespace"] != "multi_agent_v1" {
		t.Fatalf("namespaced call %v", res.Items)
	}
	if _, ok := res.Items[1]["namespace"]; ok {
		t.Fatalf("a top-level tool's call names a namespace: %v", res.Items[1])
	}
	child := []map[string]any{{"type": "agent_message", "author": "/root", "recipient": "/root/greeter", "content": []map[string]any{
		{"type": "input_text", "text": "Message Type: NEW_TASK\nPayload:\n"},
		{"type": "encrypted_content", "encrypted_content": "subtask: greet the user"},
		{"type": "input_image", "image_url": "data:"},
	}}}
	_, body = post(t, ts.URL+"/v1/responses", responsesBody(true, child))
	if res, err = checkResponsesStream(mustSSE(t, body)); err != nil || res.Text != "hello from the child" {
		t.Fatalf("child answer %+v, %v\n%s", res, err, body)
	}
	rec := s.Requests()[1]
	if !reflect.DeepEqual(rec.UserTexts, []string{"Message Type: NEW_TASK\nPayload:", "subtask: greet the user"}) || rec.Rule != "child" {
		t.Fatalf("recorded %+v", rec)
	}
	// An agent_message whose content is not a list is no text, not an error.
	resp, _ := post(t, ts.URL+"/v1/responses", responsesBody(true, []map[string]any{{"type": "agent_message", "content": "oops"}}))
	if resp.StatusCode != 200 {
		t.Fatalf("malformed agent_message: status %d", resp.StatusCode)
	}
}
