package claudeconv

import "testing"

func TestSubagentIDs(t *testing.T) {
	for in, want := range map[string]string{
		"agent-a9b844f.jsonl": "a9b844f", "agent-a9b844f": "a9b844f", " a9b844f ": "a9b844f", "": "",
	} {
		if got := normalizeAgentID(in); got != want {
			t.Errorf("normalizeAgentID(%q) = %q, want %q", in, got, want)
		}
	}
	text := "Done.\nagentId: a9b844f (for resuming to continue this agent's work if needed)"
	if got := agentIDFromText(text); got != "a9b844f" {
		t.Errorf("agentIDFromText = %q", got)
	}
	if got := stripAgentTrailer(text); got != "Done." {
		t.Errorf("stripAgentTrailer = %q", got)
	}
	newer := "Subagent finished.\nagentId: a981e20f (use SendMessage with to: 'a981e20f' to continue this agent)\n<usage>subagent_tokens: 11778\nduration_ms: 512</usage>"
	if got := stripAgentTrailer(newer); got != "Subagent finished." {
		t.Errorf("stripAgentTrailer(newer) = %q", got)
	}
	if got := agentIDFromText(newer); got != "a981e20f" {
		t.Errorf("agentIDFromText(newer) = %q", got)
	}
	if got := stripAgentTrailer("agentId: x\nmore text"); got != "agentId: x\nmore text" {
		t.Errorf("a mid-text mention was stripped: %q", got)
	}
	if agentIDFromText("no id here") != "" {
		t.Error("found an id in plain text")
	}

	var x subagentIndex
	a, isNew := x.spawn("toolu_a", "main", "same prompt", "general-purpose", "")
	if !isNew {
		t.Fatal("first spawn not new")
	}
	if _, isNew := x.spawn("toolu_a", "main", "other", "", ""); isNew {
		t.Fatal("second spawn of one tool_use was new")
	}
	b, _ := x.spawn("toolu_b", "main", "same prompt", "", "")
	if got := x.claimPrompt("same prompt"); got != a {
		t.Fatalf("first claim = %v, want toolu_a", got)
	}
	if got := x.claimPrompt("  same prompt\n"); got != b {
		t.Fatalf("second claim (whitespace differs) = %v, want toolu_b", got)
	}
	if x.claimPrompt("same prompt") != nil || x.claimPrompt("") != nil {
		t.Fatal("claimed a prompt twice")
	}
	x.bind("toolu_a", "agent-AAA")
	x.bind("toolu_b", "AAA") // taken: keeps the first binding
	x.bind("toolu_unknown", "BBB")
	if x.agent("AAA") != a || x.agent("agent-AAA.jsonl") != a || b.agentID != "" || x.agent("BBB") != nil {
		t.Fatalf("bindings: a=%q b=%q", a.agentID, b.agentID)
	}
	for _, tc := range []struct{ tool, agent, key, want string }{
		{"toolu_z", "AAA", "k", "toolu_z"},
		{"", "AAA", "k", "toolu_a"},
		{"", "agent-CCC.jsonl", "k", "agent-CCC"},
		{"", "", "k", "sidechain-k"},
	} {
		if got := x.conversationID(tc.tool, tc.agent, tc.key); got != tc.want {
			t.Errorf("conversationID(%q, %q, %q) = %q, want %q", tc.tool, tc.agent, tc.key, got, tc.want)
		}
	}
}
