package mockllm

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// answerText sends a non-streamed Messages request and returns the text
// of the answer and the log entry.
func answerText(t *testing.T, s *Server, url string, body any) (string, RecordedRequest) {
	t.Helper()
	before := len(s.Requests())
	resp, out := post(t, url+"/v1/messages", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	var m struct {
		Content []struct{ Type, Text string }
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range m.Content {
		b.WriteString(c.Text)
	}
	reqs := s.Requests()
	if len(reqs) != before+1 {
		t.Fatalf("log grew by %d", len(reqs)-before)
	}
	return b.String(), reqs[len(reqs)-1]
}

func TestMatchers(t *testing.T) {
	script := `
rules:
  - {name: by-model, match: {model: "claude-haiku-*"}, reply: {text: haiku}}
  - {name: by-regex, match: {userRegex: "^deploy (prod|staging)$"}, reply: {text: regex}}
  - {name: by-system, match: {systemContains: "pirate"}, reply: {text: arr}}
  - {name: by-system-re, match: {systemRegex: "(?i)^you are a robot"}, reply: {text: beep}}
  - {name: no-tools, match: {hasTools: false}, reply: {text: "no tools"}}
  - {name: needs-write, match: {tool: Write}, reply: {text: "has Write"}}
  - {name: error-result, match: {toolResult: {isError: true}}, reply: {text: "tool failed"}}
  - {name: turn-three, match: {turn: 3}, reply: {text: "turn three"}}
  - {name: fallback, reply: {text: "fallback {{call}}"}}
`
	s, ts := newTestServer(t, script)
	base := func(msgs ...map[string]any) map[string]any { return anthropicBody(false, msgs...) }
	cases := []struct {
		name string
		body map[string]any
		want string
	}{
		{"model glob", func() map[string]any { b := base(userText("x")); b["model"] = "claude-haiku-4-5"; return b }(), "haiku"},
		{"regex", base(userText("deploy prod")), "regex"},
		{"regex miss", base(userText("deploy prod now")), "fallback 3"},
		{"system string", func() map[string]any { b := base(userText("x")); b["system"] = "Talk like a pirate."; return b }(), "arr"},
		{"system blocks", func() map[string]any {
			b := base(userText("x"))
			b["system"] = []map[string]any{{"type": "text", "text": "You are a robot."}}
			return b
		}(), "beep"},
		{"no tools", func() map[string]any { b := base(userText("x")); delete(b, "tools"); return b }(), "no tools"},
		{"offers tool", func() map[string]any {
			b := base(userText("x"))
			b["tools"] = []map[string]any{{"name": "Write"}}
			return b
		}(), "has Write"},
		{"error result", base(userText("x"),
			map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "t1", "name": "Bash", "input": map[string]any{}}}},
			map[string]any{"role": "user", "content": []map[string]any{{"type": "tool_result", "tool_use_id": "t1", "content": "exit 1", "is_error": true}}},
		), "tool failed"},
		{"turn three", base(userText("a"),
			map[string]any{"role": "assistant", "content": "b"}, userText("c"),
			map[string]any{"role": "assistant", "content": "d"}, userText("e"),
		), "turn three"},
	}
	for _, c := range cases {
		got, rec := answerText(t, s, ts.URL, c.body)
		if got != c.want {
			t.Errorf("%s: answer %q, want %q (rule %q)", c.name, got, c.want, rec.Rule)
		}
	}
}

func TestTimesAndOrder(t *testing.T) {
	script := `
rules:
  - {name: first, times: 2, match: {userContains: go}, reply: {text: "first"}}
  - {name: second, times: 1, match: {userContains: go}, reply: {text: "second"}}
  - {name: third, match: {userContains: go}, reply: {text: "third"}}
`
	s, ts := newTestServer(t, script)
	var got []string
	for i := 0; i < 5; i++ {
		a, _ := answerText(t, s, ts.URL, anthropicBody(false, userText("go")))
		got = append(got, a)
	}
	if strings.Join(got, ",") != "first,first,second,third,third" {
		t.Fatalf("answers %v", got)
	}
	// Reset makes the rules fresh again and clears the log.
	s.Reset()
	if len(s.Requests()) != 0 {
		t.Fatal("log not cleared")
	}
	if a, _ := answerText(t, s, ts.URL, anthropicBody(false, userText("go"))); a != "first" {
		t.Fatalf("after reset %q", a)
	}
}

// Concurrent requests consume a limited rule exactly as often as it allows.
func TestTimesUnderConcurrency(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - {name: limited, times: 5, reply: {text: "limited"}}
  - {name: rest, reply: {text: "rest"}}
`)
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, out := post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("hi")))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.Contains(string(out), `"limited"`):
				counts["limited"]++
			case strings.Contains(string(out), `"rest"`):
				counts["rest"]++
			}
		}()
	}
	wg.Wait()
	if counts["limited"] != 5 || counts["rest"] != 15 {
		t.Fatalf("counts %v", counts)
	}
	calls := map[int]bool{}
	for _, r := range s.ModelRequests(KindMain) {
		calls[r.Call] = true
	}
	if len(calls) != 20 {
		t.Fatalf("call numbers not unique: %v", calls)
	}
}

func TestCallCountsPerKind(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - {name: second-main, match: {call: 2}, reply: {text: "second main call"}}
  - {name: other, reply: {text: "other"}}
`)
	titleReq := map[string]any{"model": "claude-x", "max_tokens": 100, "system": "Generate a concise title for this session",
		"messages": []map[string]any{userText("fix the login bug")}}
	answers := []string{}
	for _, body := range []map[string]any{anthropicBody(false, userText("a")), titleReq, anthropicBody(false, userText("b"))} {
		a, _ := answerText(t, s, ts.URL, body)
		answers = append(answers, a)
	}
	// The title request between the two main calls does not shift the count.
	if answers[0] != "other" || answers[1] != "Fix the login bug" || answers[2] != "second main call" {
		t.Fatalf("answers %q", answers)
	}
}

func TestKindsKeepSideRequestsApart(t *testing.T) {
	s, ts := newTestServer(t, `rules: [{name: everything, reply: {text: "conversation rule"}}]`)
	cases := []struct {
		name string
		body map[string]any
		kind Kind
		want string
	}{
		{"opencode title", map[string]any{"model": "m", "system": "You are a title generator. You output ONLY a thread title.",
			"messages": []map[string]any{userText("Generate a title for this conversation:"), userText("please run the probe")}},
			KindTitle, "Please run the probe"},
		{"claude title (structured)", map[string]any{"model": "m", "max_tokens": 100,
			"system":        []map[string]any{{"type": "text", "text": "Generate a concise, sentence-case title (3-7 words)"}},
			"output_config": map[string]any{"format": map[string]any{"type": "json_schema", "schema": map[string]any{"type": "object", "properties": map[string]any{"title": map[string]any{"type": "string"}}}}},
			"messages":      []map[string]any{userText("<session>\nrun the probe\n</session>\n\nWrite the title in the language the user wrote in.")}},
			KindTitle, `{"title":"Run the probe"}`},
		{"structured", map[string]any{"model": "m", "max_tokens": 100,
			"output_format": map[string]any{"type": "json_schema", "schema": map[string]any{"type": "object", "properties": map[string]any{
				"score": map[string]any{"type": "integer", "minimum": 5}, "ok": map[string]any{"type": "boolean"},
				"mode": map[string]any{"type": "string", "enum": []string{"user", "model"}}, "tags": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1}}}},
			"messages": []map[string]any{userText("classify this")}},
			KindStructured, `{"mode":"user","ok":false,"score":5,"tags":["mock-llm"]}`},
		{"quota", map[string]any{"model": "m", "max_tokens": 1, "messages": []map[string]any{userText("quota")}}, KindQuota, "ok"},
		{"main", anthropicBody(false, userText("hello")), KindMain, "conversation rule"},
		// Codex's gpt-6 prompt has no tools field and mentions "title" and
		// "generated" far apart: still the conversation.
		{"no tools, long prompt", map[string]any{"model": "m", "max_tokens": 100,
			"system":   "type ResourceLink = {\n  name: string;\n  title?: string;\n};\n- `generatedImage(result)`: Appends an image.",
			"messages": []map[string]any{userText("hello")}}, KindMain, "conversation rule"},
	}
	for _, c := range cases {
		got, rec := answerText(t, s, ts.URL, c.body)
		if rec.Kind != c.kind || got != c.want {
			t.Errorf("%s: kind %q answer %q, want %q %q", c.name, rec.Kind, got, c.kind, c.want)
		}
	}
	// A rule can opt into side requests.
	s.SetScript(mustParse(t, `rules: [{match: {kind: title}, reply: {text: "Scripted"}}, {match: {kind: any}, reply: {text: "any"}}]`))
	if got, _ := answerText(t, s, ts.URL, cases[0].body); got != "Scripted" {
		t.Errorf("kind: title rule: %q", got)
	}
	if got, _ := answerText(t, s, ts.URL, cases[3].body); got != "any" {
		t.Errorf("kind: any rule: %q", got)
	}
}

func mustParse(t testing.TB, src string) *Script {
	t.Helper()
	s, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDefaultAnswers(t *testing.T) {
	s, ts := newTestServer(t, `rules: [{match: {userContains: never}, reply: {text: x}}]`)
	got, rec := answerText(t, s, ts.URL, anthropicBody(false, userText("what now?")))
	if !strings.HasPrefix(got, "mock-llm: no rule matched") || !strings.Contains(got, `"what now?"`) {
		t.Fatalf("default answer %q", got)
	}
	if rec.Rule != "" || rec.Builtin != "default" {
		t.Fatalf("log %+v", rec)
	}
	s.SetScript(mustParse(t, `default: {text: "custom default for {{lastUserText}}"}`))
	if got, _ := answerText(t, s, ts.URL, anthropicBody(false, userText("x"))); got != "custom default for x" {
		t.Fatalf("script default %q", got)
	}
}

func TestTemplates(t *testing.T) {
	s, ts := newTestServer(t, `
rules:
  - reply:
      content:
        - text: "last={{lastUserText}} all={{userText}} model={{model}} provider={{provider}} api={{api}} kind={{kind}} turn={{turn}} call={{call}} tool={{toolResult}} n={{len toolNames}}"
        - name: Bash
          input: {command: "echo {{lastUserText}}", nested: [{deep: "{{turn}}"}], number: 7}
`)
	body := anthropicBody(false,
		userText("start"),
		map[string]any{"role": "assistant", "content": []map[string]any{{"type": "tool_use", "id": "t1", "name": "Bash", "input": map[string]any{}}}},
		map[string]any{"role": "user", "content": []map[string]any{
			{"type": "tool_result", "tool_use_id": "t1", "content": "out!"},
			{"type": "text", "text": "one"}, {"type": "text", "text": "two"}}},
	)
	_, out := post(t, ts.URL+"/v1/messages", body)
	var m struct {
		Content []struct {
			Type, Text string
			Input      map[string]any
		}
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	want := "last=two all=one\ntwo model=claude-sonnet-4-5 provider=anthropic api=messages kind=main turn=2 call=1 tool=out! n=4"
	if m.Content[0].Text != want {
		t.Errorf("text\n got %q\nwant %q", m.Content[0].Text, want)
	}
	in := m.Content[1].Input
	if in["command"] != "echo two" || in["nested"].([]any)[0].(map[string]any)["deep"] != "2" || in["number"] != float64(7) {
		t.Errorf("input %v", in)
	}
	_ = s
}

func TestTemplateRuntimeErrorIsReported(t *testing.T) {
	// index out of range only fails when executed.
	_, ts := newTestServer(t, `rules: [{reply: {text: "{{index userText 99}}"}}]`)
	resp, out := post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("x")))
	if resp.StatusCode != 500 || !strings.Contains(string(out), "mock-llm: content[0]: template") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
}

func TestIDsAreDeterministic(t *testing.T) {
	run := func(seed string) []string {
		_, ts := newTestServer(t, `rules: [{reply: {content: [{text: hi}, {name: Bash, input: {a: 1}}]}}]`, WithSeed(seed))
		var ids []string
		for i := 0; i < 3; i++ {
			_, out := post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("x")))
			var m struct {
				ID      string
				Content []struct{ ID string }
			}
			_ = json.Unmarshal(out, &m)
			ids = append(ids, m.ID, m.Content[1].ID)
		}
		return ids
	}
	a, b, c := run("s1"), run("s1"), run("s2")
	if strings.Join(a, ",") != strings.Join(b, ",") {
		t.Fatalf("same seed, different ids:\n%v\n%v", a, b)
	}
	if a[0] == c[0] || a[0] == a[2] {
		t.Fatalf("ids do not vary with seed and call: %v %v", a, c)
	}
	for i, id := range a {
		prefix := "msg_01"
		if i%2 == 1 {
			prefix = "toolu_01"
		}
		if !strings.HasPrefix(id, prefix) || len(id) != len(prefix)+22 {
			t.Errorf("id %q", id)
		}
	}
}

func TestSchemaJSON(t *testing.T) {
	cases := map[string]string{
		`{"type":"OBJECT","properties":{"complexity_reasoning":{"type":"STRING"},"complexity_score":{"type":"INTEGER"}}}`: `{"complexity_reasoning":"f","complexity_score":1}`,
		`{"type":["null","string"]}`:                         `"f"`,
		`{"anyOf":[{"type":"boolean"},{"type":"string"}]}`:   `false`,
		`{"const":"fixed"}`:                                  `"fixed"`,
		`{"type":"number","default":2.5}`:                    `2.5`,
		`{"properties":{"a":{"type":"null"}}}`:               `{"a":null}`,
		`not json`:                                           `{}`,
		`{"type":"array","minItems":2,"items":{"enum":[3]}}`: `[3,3]`,
	}
	for schema, want := range cases {
		if got := schemaJSON(json.RawMessage(schema), "f"); got != want {
			t.Errorf("%s: got %s, want %s", schema, got, want)
		}
	}
}
