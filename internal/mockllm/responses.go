package mockllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// OpenAI Responses API (what Codex speaks): request parsing and response
// rendering.

type responsesRequest struct {
	Model           string          `json:"model"`
	Input           json.RawMessage `json:"input"`
	Instructions    string          `json:"instructions"`
	Stream          bool            `json:"stream"`
	MaxOutputTokens int             `json:"max_output_tokens"`
	Tools           []responsesTool `json:"tools"`
	Text            *struct {
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"text"`
}

type responsesTool struct {
	Type  string          `json:"type"`
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"` // a "namespace" groups tools
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
	// Tools of an "additional_tools" item (Codex's gpt-6 models declare
	// their tools there instead of in the top-level tools list).
	Tools []responsesTool `json:"tools"`
}

func addResponsesTools(r *Request, tools []responsesTool, namespace string) {
	for _, t := range tools {
		switch {
		case t.Type == "namespace":
			addResponsesTools(r, t.Tools, t.Name)
		case t.Name != "":
			r.Tools = append(r.Tools, ToolDecl{Name: t.Name, Custom: t.Type == "custom", Namespace: namespace})
		case t.Type != "":
			// Hosted tools (web_search, local_shell, …) are named by type.
			r.Tools = append(r.Tools, ToolDecl{Name: t.Type})
		}
	}
}

func parseResponses(body []byte) (*Request, error) {
	var rr responsesRequest
	if err := json.Unmarshal(body, &rr); err != nil {
		return nil, fmt.Errorf("request body is not a Responses request: %w", err)
	}
	if rr.Model == "" {
		return nil, errors.New("missing required parameter: 'model'")
	}
	r := &Request{Provider: ProviderOpenAI, API: APIResponses, Model: rr.Model, Stream: rr.Stream,
		MaxTokens: rr.MaxOutputTokens, System: rr.Instructions}
	addResponsesTools(r, rr.Tools, "")
	if rr.Text != nil && rr.Text.Format != nil && rr.Text.Format.Type == "json_schema" {
		r.Schema = rr.Text.Format.Schema
		if len(r.Schema) == 0 {
			r.Schema = json.RawMessage(`{"type":"object"}`)
		}
	}
	var s string
	if json.Unmarshal(rr.Input, &s) == nil {
		r.Messages = []Message{{Role: RoleUser, Parts: []Part{{Type: PartText, Text: s}}}}
		return r, nil
	}
	var items []responsesItem
	if len(rr.Input) > 0 {
		if err := json.Unmarshal(rr.Input, &items); err != nil {
			return nil, errors.New("input: must be a string or a list of items")
		}
	}
	for i, it := range items {
		switch {
		case it.Type == "" || it.Type == "message":
			switch it.Role {
			case "user":
				r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: textParts(it.Content, responsesTextTypes...)})
			case "assistant":
				r.Messages = append(r.Messages, Message{Role: RoleAssistant, Parts: textParts(it.Content, responsesTextTypes...)})
			case "system", "developer":
				if t := rawText(it.Content); t != "" {
					if r.System != "" {
						r.System += "\n"
					}
					r.System += t
				}
			default:
				return nil, fmt.Errorf("input[%d].role: unexpected role %q", i, it.Role)
			}
		case it.Type == "additional_tools":
			addResponsesTools(r, it.Tools, "")
		case it.Type == "agent_message":
			// Codex's multi-agent messages between threads (a subagent's
			// task, a child's final answer): input the model reads, so
			// part of the user turn.
			r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: agentMessageParts(it.Content)})
		case it.Type == "reasoning":
			var b strings.Builder
			for _, s := range it.Summary {
				b.WriteString(s.Text)
			}
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Parts: []Part{{Type: PartThinking, Text: b.String()}}})
		case strings.HasSuffix(it.Type, "_call_output"):
			out := rawText(it.Output)
			r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: []Part{{Type: PartToolResult, ToolID: it.CallID, Text: out, IsError: exitCodeFailed(out)}}})
		case strings.HasSuffix(it.Type, "_call"):
			in := it.Arguments
			if in == "" {
				in = it.Input
			}
			name := it.Name
			if name == "" {
				name = strings.TrimSuffix(it.Type, "_call")
			}
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Parts: []Part{{Type: PartToolCall, ToolID: it.CallID, ToolName: name, Text: in}}})
		default:
			// Compaction summaries, item references, …: context, not a turn.
		}
	}
	r.resolveToolNames()
	return r, nil
}

// agentMessageParts reads a Codex agent_message's content: text parts and
// "encrypted_content" parts, whose payload a client cannot read but which
// mock-llm's own replies fill with plain text (the spawn_agent message).
func agentMessageParts(raw json.RawMessage) []Part {
	var parts []struct {
		Type             string `json:"type"`
		Text             string `json:"text"`
		EncryptedContent string `json:"encrypted_content"`
	}
	_ = json.Unmarshal(raw, &parts)
	var out []Part
	for _, p := range parts {
		switch {
		case slices.Contains(responsesTextTypes, p.Type):
			out = append(out, Part{Type: PartText, Text: p.Text})
		case p.Type == "encrypted_content":
			out = append(out, Part{Type: PartText, Text: p.EncryptedContent})
		default:
			out = append(out, Part{Type: PartOther})
		}
	}
	return out
}

// failedExitRe finds the exit status Codex writes into a command's output
// ("Process exited with code 1", "Exit code: 1"); OpenAI tool results have
// no error flag, so a non-zero status is the best signal there is.
var failedExitRe = regexp.MustCompile(`(?m)^(?:Process exited with code|Exit code:) *[1-9][0-9]*\s*$`)

func exitCodeFailed(out string) bool { return failedExitRe.MatchString(out) }

// responsesTextTypes are the Responses API's text part types.
var responsesTextTypes = []string{"input_text", "output_text", "text"}

// Response shapes.

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type respObject struct {
	ID                string     `json:"id"`
	Object            string     `json:"object"`
	CreatedAt         int64      `json:"created_at"`
	Status            string     `json:"status"`
	Error             *respError `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Model             string     `json:"model"`
	Output            []any      `json:"output"`
	ParallelToolCalls bool       `json:"parallel_tool_calls"`
	Store             bool       `json:"store"`
	Usage             *respUsage `json:"usage"`
}

type respError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type respOutputText struct {
	Type        string `json:"type"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
	Text        string `json:"text"`
}

type respMessage struct {
	ID      string           `json:"id"`
	Type    string           `json:"type"`
	Status  string           `json:"status"`
	Content []respOutputText `json:"content"`
	Role    string           `json:"role"`
}

type respSummary struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type respReasoning struct {
	ID               string        `json:"id"`
	Type             string        `json:"type"`
	Summary          []respSummary `json:"summary"`
	EncryptedContent string        `json:"encrypted_content,omitempty"`
}

type respFunctionCall struct {
	ID        string `json:"id"`
	Type      string `json:"type"`
	Status    string `json:"status"`
	Arguments string `json:"arguments"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

type respCustomCall struct {
	ID     string `json:"id"`
	Type   string `json:"type"`
	Status string `json:"status"`
	CallID string `json:"call_id"`
	Name   string `json:"name"`
	Input  string `json:"input"`
}

// responsesItems returns each block's item, in progress (empty) and done.
func (p *plan) responsesItems(ids *idGen) (started, done []any) {
	for i, b := range p.blocks {
		salt := "item" + strconv.Itoa(i)
		switch b.typ {
		case BlockText:
			id := ids.hex("msg_", 48, salt)
			started = append(started, respMessage{id, "message", "in_progress", []respOutputText{}, "assistant"})
			done = append(done, respMessage{id, "message", "completed",
				[]respOutputText{{"output_text", []any{}, []any{}, b.text}}, "assistant"})
		case BlockThinking:
			id := ids.hex("rs_", 48, salt)
			started = append(started, respReasoning{ID: id, Type: "reasoning", Summary: []respSummary{}})
			done = append(done, respReasoning{ID: id, Type: "reasoning",
				Summary: []respSummary{{"summary_text", b.text}}, EncryptedContent: b.signature})
		case BlockToolUse:
			callID := p.toolID(i, ids, "call_", 24)
			if b.custom {
				id := ids.hex("ctc_", 48, salt)
				started = append(started, respCustomCall{id, "custom_tool_call", "in_progress", callID, b.name, ""})
				done = append(done, respCustomCall{id, "custom_tool_call", "completed", callID, b.name, b.input})
			} else {
				id := ids.hex("fc_", 48, salt)
				started = append(started, respFunctionCall{id, "function_call", "in_progress", "", callID, b.name, b.namespace})
				done = append(done, respFunctionCall{id, "function_call", "completed", b.input, callID, b.name, b.namespace})
			}
		}
	}
	return started, done
}

func (p *plan) respObject(ids *idGen, status string, output []any) respObject {
	o := respObject{
		ID: ids.hex("resp_", 50, "response"), Object: "response", CreatedAt: p.now.Unix(),
		Status: status, Model: p.model, Output: output, ParallelToolCalls: true,
	}
	if o.Output == nil {
		o.Output = []any{}
	}
	if status != "in_progress" {
		u := &respUsage{InputTokens: p.inputTokens, OutputTokens: p.outputTokens, TotalTokens: p.inputTokens + p.outputTokens}
		for _, b := range p.blocks {
			if b.typ == BlockThinking {
				u.OutputTokensDetails.ReasoningTokens += approxTokens(len([]rune(b.text)))
			}
		}
		o.Usage = u
	}
	if status == "incomplete" {
		o.IncompleteDetails = &struct {
			Reason string `json:"reason"`
		}{"max_output_tokens"}
	}
	return o
}

func writeResponses(w http.ResponseWriter, r *http.Request, p *plan, ids *idGen) {
	setOpenAIHeaders(w, ids, 0)
	started, done := p.responsesItems(ids)
	final := "completed"
	if p.stop == StopMaxTokens {
		final = "incomplete"
	}
	if !p.stream {
		writeJSON(w, http.StatusOK, p.respObject(ids, final, done))
		return
	}
	sw := newSSE(w, r, p)
	seq := 0
	ev := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		sw.event(typ, orderedEvent(fields))
	}
	ev("response.created", map[string]any{"response": p.respObject(ids, "in_progress", nil)})
	ev("response.in_progress", map[string]any{"response": p.respObject(ids, "in_progress", nil)})
	for i, b := range p.blocks {
		item := started[i]
		ev("response.output_item.added", map[string]any{"output_index": i, "item": item})
		switch b.typ {
		case BlockText:
			id := item.(respMessage).ID
			ev("response.content_part.added", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": respOutputText{"output_text", []any{}, []any{}, ""}})
			for _, c := range chunks(b.text, p.chunk) {
				ev("response.output_text.delta", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "delta": c, "logprobs": []any{}})
			}
			ev("response.output_text.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0, "text": b.text, "logprobs": []any{}})
			ev("response.content_part.done", map[string]any{"item_id": id, "output_index": i, "content_index": 0,
				"part": respOutputText{"output_text", []any{}, []any{}, b.text}})
		case BlockThinking:
			id := item.(respReasoning).ID
			ev("response.reasoning_summary_part.added", map[string]any{"item_id": id, "output_index": i, "summary_index": 0,
				"part": respSummary{"summary_text", ""}})
			for _, c := range chunks(b.text, p.chunk) {
				ev("response.reasoning_summary_text.delta", map[string]any{"item_id": id, "output_index": i, "summary_index": 0, "delta": c})
			}
			ev("response.reasoning_summary_text.done", map[string]any{"item_id": id, "output_index": i, "summary_index": 0, "text": b.text})
			ev("response.reasoning_summary_part.done", map[string]any{"item_id": id, "output_index": i, "summary_index": 0,
				"part": respSummary{"summary_text", b.text}})
		case BlockToolUse:
			if b.custom {
				id := item.(respCustomCall).ID
				for _, c := range chunks(b.input, p.chunk) {
					ev("response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": i, "delta": c})
				}
				ev("response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": i, "input": b.input})
			} else {
				id := item.(respFunctionCall).ID
				for _, c := range chunks(b.input, p.chunk) {
					ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": i, "delta": c})
				}
				ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": i, "arguments": b.input})
			}
		}
		ev("response.output_item.done", map[string]any{"output_index": i, "item": done[i]})
	}
	if e := p.streamErr; e != nil {
		o := p.respObject(ids, "failed", done)
		o.Usage = nil
		o.Error = &respError{Code: openAIErrorCode(e), Message: e.message}
		ev("response.failed", map[string]any{"response": o})
		sw.end()
		return
	}
	ev("response."+final, map[string]any{"response": p.respObject(ids, final, done)})
	sw.end()
}

// orderedEvent marshals an event with "type" first and "sequence_number"
// next, like the real stream, then the other fields in a fixed order.
type orderedEvent map[string]any

var eventKeyOrder = []string{"type", "sequence_number", "response", "output_index", "item_id", "content_index", "summary_index", "item", "part", "delta", "text", "arguments", "input", "logprobs"}

func (e orderedEvent) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	first := true
	seen := map[string]bool{}
	put := func(k string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		kd, _ := json.Marshal(k)
		b.Write(kd)
		b.WriteByte(':')
		b.Write(data)
		return nil
	}
	for _, k := range eventKeyOrder {
		if v, ok := e[k]; ok {
			seen[k] = true
			if err := put(k, v); err != nil {
				return nil, err
			}
		}
	}
	for k, v := range e {
		if !seen[k] {
			return nil, fmt.Errorf("event field %q has no place in eventKeyOrder", k)
		}
		_ = v
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}
