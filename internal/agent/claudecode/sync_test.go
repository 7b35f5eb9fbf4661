package claudecode

import (
	"context"
	"encoding/json"
	"path"
	"testing"
)

func TestCheckOption(t *testing.T) {
	a := New(Options{})
	for _, c := range []struct {
		key, value string
		known, ok  bool
	}{
		{"permissionMode", `"plan"`, true, true},
		{"permissionMode", `null`, true, true},
		{"permissionMode", `"yolo"`, true, false},
		{"permissionMode", `3`, true, false},
		{"temperature", `1`, false, true},
	} {
		known, err := a.CheckOption(c.key, json.RawMessage(c.value))
		if known != c.known || (err == nil) != c.ok {
			t.Errorf("%s=%s: known %v, err %v", c.key, c.value, known, err)
		}
	}
}

// Sync saves the Claude session's transcript as the CLI has written it so
// far, with or without a CLI running, and nothing before there is one.
func TestSyncSavesTranscript(t *testing.T) {
	h := newTestHost(t, "")
	r := newRunner(Options{}.withDefaults(), h, materialized{})
	ctx := context.Background()
	if err := r.Sync(ctx); err != nil || len(h.transcripts) != 0 {
		t.Fatalf("no session yet: %v %v", err, h.transcripts)
	}
	r.mu.Lock()
	r.state = agentState{ClaudeSessionID: "abc", ProjectDir: "-w"}
	r.mu.Unlock()
	if err := r.Sync(ctx); err != nil || len(h.transcripts) != 0 {
		t.Fatalf("no file yet: %v %v", err, h.transcripts)
	}
	if err := h.env.WriteFile(ctx, path.Join(projectsRel, "-w", "abc.jsonl"), []byte("{\"type\":\"user\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := string(h.transcripts["abc.jsonl"]); got != "{\"type\":\"user\"}\n" {
		t.Fatalf("saved %q", got)
	}
}
