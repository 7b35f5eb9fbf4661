package mockllm

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExampleScriptsParse(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/mockllm/*.yaml")
	jsonFiles, _ := filepath.Glob("../../testdata/mockllm/*.json")
	files = append(files, jsonFiles...)
	if len(files) < 3 {
		t.Fatalf("expected example scripts, found %v", files)
	}
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(s.Rules) == 0 {
			t.Errorf("%s: no rules", f)
		}
	}
}

func TestParseFillsDefaults(t *testing.T) {
	s, err := Parse([]byte(`
rules:
  - reply:
      content:
        - text: hi
        - thinking: hmm
        - name: Bash
  - name: named
    error: {status: 429}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Rules[0].Name != "#0" || s.Rules[1].Name != "named" {
		t.Errorf("names %q %q", s.Rules[0].Name, s.Rules[1].Name)
	}
	c := s.Rules[0].Reply.Content
	if c[0].Type != BlockText || c[1].Type != BlockThinking || c[2].Type != BlockToolUse {
		t.Errorf("inferred types %q %q %q", c[0].Type, c[1].Type, c[2].Type)
	}
	if in, ok := c[2].Input.(map[string]any); !ok || len(in) != 0 {
		t.Errorf("empty tool input should become {}, got %#v", c[2].Input)
	}
}

func TestParseJSONScript(t *testing.T) {
	s, err := Parse([]byte(`{"rules":[{"match":{"userContains":"x","turn":2},"times":1,"reply":{"content":[{"type":"tool_use","name":"Bash","input":{"command":"ls"}}]}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Rules[0].Match.Turn != 2 || s.Rules[0].Times != 1 || s.Rules[0].Reply.Content[0].Name != "Bash" {
		t.Fatalf("parsed %+v", s.Rules[0])
	}
}

func TestParseRejects(t *testing.T) {
	cases := map[string]string{
		"empty":                 ``,
		"not yaml":              `rules: [`,
		"unknown top field":     `rulez: []`,
		"unknown match field":   `rules: [{match: {userContain: x}, reply: {text: hi}}]`,
		"no answer":             `rules: [{match: {userContains: x}}]`,
		"both answers":          `rules: [{reply: {text: hi}, error: {status: 500}}]`,
		"empty reply":           `rules: [{reply: {}}]`,
		"bad block type":        `rules: [{reply: {content: [{type: image}]}}]`,
		"untyped empty block":   `rules: [{reply: {content: [{}]}}]`,
		"tool without name":     `rules: [{reply: {content: [{type: tool_use, input: {a: 1}}]}}]`,
		"tool input list":       `rules: [{reply: {content: [{name: Bash, input: [1, 2]}]}}]`,
		"text with tool fields": `rules: [{reply: {content: [{type: text, text: hi, name: Bash}]}}]`,
		"bad regex":             `rules: [{match: {userRegex: "("}, reply: {text: hi}}]`,
		"bad system regex":      `rules: [{match: {systemRegex: "[a"}, reply: {text: hi}}]`,
		"bad glob":              `rules: [{match: {model: "[a"}, reply: {text: hi}}]`,
		"bad provider":          `rules: [{match: {provider: azure}, reply: {text: hi}}]`,
		"bad api":               `rules: [{match: {api: soap}, reply: {text: hi}}]`,
		"bad kind":              `rules: [{match: {kind: sidecar}, reply: {text: hi}}]`,
		"negative times":        `rules: [{times: -1, reply: {text: hi}}]`,
		"negative turn":         `rules: [{match: {turn: -2}, reply: {text: hi}}]`,
		"contradiction":         `rules: [{match: {toolResult: {name: Bash}, noToolResult: true}, reply: {text: hi}}]`,
		"bad stop reason":       `rules: [{reply: {text: hi, stopReason: refusal}}]`,
		"negative delay":        `rules: [{reply: {text: hi, delayMs: -5}}]`,
		"status too low":        `rules: [{error: {status: 200}}]`,
		"status too high":       `rules: [{error: {status: 600}}]`,
		"bad header":            `rules: [{error: {status: 500, headers: {"a b": x}}}]`,
		"header injection":      `rules: [{error: {status: 500, headers: {x: "a\nb"}}}]`,
		"bad template":          `rules: [{reply: {text: "{{lastUserText"}}]`,
		"unknown template func": `rules: [{reply: {text: "{{secret}}"}}]`,
		"bad template in input": `rules: [{reply: {content: [{name: Bash, input: {command: "{{nope}}"}}]}}]`,
		"bad default":           `default: {}`,
		"empty model name":      `models: [""]`,
		"two documents":         "rules: []\n---\nrules: []\n",
	}
	for name, src := range cases {
		_, err := Parse([]byte(src))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !errors.Is(err, ErrInvalidScript) {
			t.Errorf("%s: error %v does not wrap ErrInvalidScript", name, err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules: [{reply: {}}]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !errors.Is(err, ErrInvalidScript) || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("invalid file: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../../testdata/mockllm/*.yaml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`rules: [{match: {userRegex: "a+"}, reply: {text: "{{lastUserText}}"}}]`))
	f.Add([]byte(`{"rules":[{"error":{"status":429,"retryAfter":1}}]}`))
	f.Add([]byte("rules:\n  - reply:\n      content:\n        - name: x\n          input: {a: [1, {b: c}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidScript) {
				t.Fatalf("error %v does not wrap ErrInvalidScript", err)
			}
			return
		}
		// A script that parses must be usable: answer one request of each
		// API without panicking.
		srv := New(s)
		for _, api := range []API{APIMessages, APIResponses, APIChat, APIGemini} {
			serveOnce(t, srv, api, "hello")
		}
	})
}
