package modelproxy

import (
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
)

type usageCase struct {
	name  string
	prov  Provider
	ctype string
	body  string
	want  conversation.Usage
	model string
	none  bool // no usage expected
}

var usageCases = []usageCase{
	{
		name: "anthropic stream with cache", prov: Anthropic, ctype: "text/event-stream; charset=utf-8",
		body: "event: message_start\n" +
			`data: {"type":"message_start","message":{"id":"msg_1","model":"claude-opus-4-8","usage":{"input_tokens":5,"cache_creation_input_tokens":1000,"cache_read_input_tokens":20000,"output_tokens":1}}}` + "\n\n" +
			"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the usage is fine"}}` + "\n\n" +
			"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":300}}` + "\n\n" +
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		want:  conversation.Usage{InputTokens: 5, CacheCreationInputTokens: 1000, CacheReadInputTokens: 20000, OutputTokens: 300},
		model: "claude-opus-4-8",
	},
	{
		name: "anthropic message", prov: Anthropic, ctype: "application/json",
		body:  `{"id":"msg_1","type":"message","model":"claude-haiku","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":12,"output_tokens":3,"cache_read_input_tokens":4}}`,
		want:  conversation.Usage{InputTokens: 12, OutputTokens: 3, CacheReadInputTokens: 4},
		model: "claude-haiku",
	},
	{
		name: "anthropic error stream", prov: Anthropic, ctype: "text/event-stream",
		body: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"usage high\"}}\n\n",
		none: true,
	},
	{
		name: "openai responses stream with cache", prov: OpenAI, ctype: "text/event-stream",
		body: `data: {"type":"response.created","response":{"id":"resp_1","model":"gpt-5.5","usage":null}}` + "\r\n\r\n" +
			`data: {"type":"response.output_text.delta","delta":"hi"}` + "\r\n\r\n" +
			`data: {"type":"response.completed","response":{"id":"resp_1","model":"gpt-5.5","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":100,"input_tokens_details":{"cached_tokens":30},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":5},"total_tokens":107}}}` + "\r\n\r\n",
		want:  conversation.Usage{InputTokens: 70, CacheReadInputTokens: 30, OutputTokens: 7},
		model: "gpt-5.5",
	},
	{
		name: "openai response", prov: OpenAI, ctype: "application/json",
		body: `{"id":"resp_1","object":"response","model":"gpt-5.5","usage":{"input_tokens":9,"output_tokens":2,"total_tokens":11}}`,
		want: conversation.Usage{InputTokens: 9, OutputTokens: 2}, model: "gpt-5.5",
	},
	{
		name: "openai chat stream", prov: OpenAI, ctype: "text/event-stream",
		body: `data: {"id":"c1","model":"gpt-4o","choices":[{"delta":{"content":"hi"}}],"usage":null}` + "\n\n" +
			`data: {"id":"c1","model":"gpt-4o","choices":[],"usage":{"prompt_tokens":50,"completion_tokens":4,"total_tokens":54,"prompt_tokens_details":{"cached_tokens":10}}}` + "\n\n" +
			"data: [DONE]\n\n",
		want: conversation.Usage{InputTokens: 40, CacheReadInputTokens: 10, OutputTokens: 4}, model: "gpt-4o",
	},
	{
		name: "openai chat", prov: OpenAI, ctype: "application/json",
		body: `{"id":"c1","object":"chat.completion","model":"gpt-4o","usage":{"prompt_tokens":8,"completion_tokens":1}}`,
		want: conversation.Usage{InputTokens: 8, OutputTokens: 1}, model: "gpt-4o",
	},
	{
		name: "gemini sse, cumulative", prov: Gemini, ctype: "text/event-stream",
		body: `data: {"candidates":[{"content":{"parts":[{"text":"a"}]}}],"usageMetadata":{"promptTokenCount":40,"totalTokenCount":40},"modelVersion":"gemini-3.8-flash"}` + "\n\n" +
			`data: {"candidates":[{"content":{"parts":[{"text":"b"}]}}],"usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":6,"cachedContentTokenCount":15,"thoughtsTokenCount":9,"totalTokenCount":55},"modelVersion":"gemini-3.8-flash"}` + "\n\n",
		want: conversation.Usage{InputTokens: 25, CacheReadInputTokens: 15, OutputTokens: 15}, model: "gemini-3.8-flash",
	},
	{
		name: "gemini json array", prov: Gemini, ctype: "application/json",
		body: `[{"usageMetadata":{"promptTokenCount":3}},` + "\n" + `{"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":2},"modelVersion":"g"}]`,
		want: conversation.Usage{InputTokens: 3, OutputTokens: 2}, model: "g",
	},
	{name: "malformed json", prov: OpenAI, ctype: "application/json", body: `{"usage":{"prompt_tokens":`, none: true},
	{name: "malformed sse", prov: Anthropic, ctype: "text/event-stream", body: "data: {\"usage\": nope}\n\ndata: usage\n", none: true},
	{name: "no content type", prov: Gemini, ctype: "", body: `{"usageMetadata":{"promptTokenCount":1}}`, want: conversation.Usage{InputTokens: 1}},
	{
		name: "last line without newline", prov: Anthropic, ctype: "text/event-stream",
		body: `data: {"type":"message_start","message":{"usage":{"input_tokens":2,"output_tokens":1}}}`,
		want: conversation.Usage{InputTokens: 2, OutputTokens: 1},
	},
}

func parseAll(prov Provider, ctype string, pieces ...string) (conversation.Usage, string, bool) {
	p := newUsageParser(prov, ctype)
	for _, s := range pieces {
		_, _ = p.Write([]byte(s))
	}
	return p.Result()
}

func TestUsageParser(t *testing.T) {
	for _, c := range usageCases {
		t.Run(c.name, func(t *testing.T) {
			u, model, ok := parseAll(c.prov, c.ctype, c.body)
			if c.none {
				if ok {
					t.Fatalf("usage %+v found in an answer without one", u)
				}
				return
			}
			if !ok || u != c.want || model != c.model {
				t.Fatalf("got %+v %q %v, want %+v %q", u, model, ok, c.want, c.model)
			}
			// Any split gives the same: byte by byte.
			bytes := strings.Split(c.body, "")
			if u2, m2, ok2 := parseAll(c.prov, c.ctype, bytes...); u2 != u || m2 != model || ok2 != ok {
				t.Fatalf("fed byte by byte: %+v %q %v", u2, m2, ok2)
			}
		})
	}
}

// TestUsageParserBounds: a line or body too long to hold is passed over,
// and the lines after it still count.
func TestUsageParserBounds(t *testing.T) {
	huge := "data: {\"usage\":{\"input_tokens\":999},\"pad\":\"" + strings.Repeat("x", maxLine) + "\"}\n"
	u, _, ok := parseAll(Anthropic, "text/event-stream", huge[:maxLine/2], huge[maxLine/2:],
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n")
	if !ok || u != (conversation.Usage{OutputTokens: 4}) {
		t.Fatalf("after an oversized line: %+v %v", u, ok)
	}
	body := `{"usage":{"prompt_tokens":1},"pad":"` + strings.Repeat("y", maxBody) + `"}`
	if u, _, ok := parseAll(OpenAI, "application/json", body); ok {
		t.Fatalf("an oversized JSON answer yielded %+v", u)
	}
}

func FuzzUsageParser(f *testing.F) {
	for _, c := range usageCases {
		f.Add(c.body, uint16(len(c.body)/2), string(c.prov), c.ctype)
	}
	f.Fuzz(func(t *testing.T, body string, split uint16, prov, ctype string) {
		u, m, ok := parseAll(Provider(prov), ctype, body)
		i := int(split) % (len(body) + 1)
		u2, m2, ok2 := parseAll(Provider(prov), ctype, body[:i], body[i:])
		if u != u2 || m != m2 || ok != ok2 {
			t.Fatalf("split at %d changed the result: %+v %q %v vs %+v %q %v", i, u, m, ok, u2, m2, ok2)
		}
	})
}

func BenchmarkUsageParserSSE(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(usageCases[0].body)
	for range 2000 {
		sb.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"some streamed text of a typical size\"}}\n\n")
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		p := newUsageParser(Anthropic, "text/event-stream")
		for i := 0; i < len(data); i += 4096 {
			_, _ = p.Write(data[i:min(i+4096, len(data))])
		}
		if _, _, ok := p.Result(); !ok {
			b.Fatal("no usage")
		}
	}
}
