//go:build linux

package chaos

import (
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
)

// With AGENTD_CHAOS_CLAUDE=1 a Claude Code session (the pinned CLI against
// mock-llm, in this process on loopback) takes part in every round: the
// scripted model (agentdtest.CountSlowlyScript) has the CLI run a paced Bash
// command, then answers.

const (
	claudePrompt = "count slowly"
	claudeLines  = 30
	claudeIntro  = "Counting now."
	claudeAnswer = "Counted to thirty."
)

// claudeProfile lets Bash run without a prompt; the CLI retries model calls
// while the server (its model proxy) is down.
var claudeProfile = agentdtest.CountSlowlyProfile

// claudeSetup starts mock-llm and returns the server's extra environment
// and flags, and mock-llm's port.
func claudeSetup(t *testing.T) (env, args []string, port int) {
	bin := agentdtest.AgentBin(t, "claude")
	_, url := agentdtest.MockLLM(t, agentdtest.CountSlowlyScript)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	if port, err = strconv.Atoi(u.Port()); err != nil {
		t.Fatalf("mock-llm's URL %q: %v", url, err)
	}
	dir := t.TempDir()
	data, _ := json.Marshal(claudeProfile)
	if err := os.WriteFile(filepath.Join(dir, "chaos.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	env = []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=test-key", "PATH=" + bin + ":" + os.Getenv("PATH")}
	return env, []string{"--profiles", dir}, port
}

// checkClaudeTurn checks a Claude Code turn's events (from its
// query:started to its end): no upsert stored twice, each text block the
// scripted text (a prefix of it if the turn failed: nothing streamed twice
// by a resumed turn), the Bash output's lines each once and in order, and,
// when the turn completed, all of them and the model's answer.
func (h *harness) checkClaudeTurn(where string, evs []storedEvent, completed bool) {
	seen := map[string]bool{}
	r := conversation.NewReducer()
	for _, ev := range evs {
		_ = r.Apply(ev)
		switch ev.Type {
		case conversation.TypeBlockUpsert, conversation.TypeMetadataUpdate:
			if seen[string(ev.Payload)] {
				h.failf("%s: stored twice (seq %d): %s %s", where, ev.Seq, ev.Type, ev.Payload)
			}
			seen[string(ev.Payload)] = true
		}
	}
	answered, outputs := false, 0
	for _, b := range r.State().Blocks {
		switch b.Type {
		case conversation.BlockAssistantText:
			ok := b.Content == claudeIntro || b.Content == claudeAnswer
			if !completed {
				ok = strings.HasPrefix(claudeIntro, b.Content) || strings.HasPrefix(claudeAnswer, b.Content)
			}
			if !ok {
				h.failf("%s: text block %s holds %q", where, b.ID, b.Content)
			}
			answered = answered || b.Content == claudeAnswer
		case conversation.BlockToolResult:
			outputs++
			out, n := strings.TrimSpace(b.Output)+"\n", 0
			for strings.HasPrefix(out, fmt.Sprintf("line %d\n", n+1)) {
				out = out[len(fmt.Sprintf("line %d\n", n+1)):]
				n++
			}
			if strings.Contains(out, "line ") || (completed && n != claudeLines) {
				h.failf("%s: Bash output after %d good lines: %q", where, n, b.Output)
			}
		}
	}
	if completed && (!answered || outputs != 1) {
		h.failf("%s completed with %d Bash results and answered %v", where, outputs, answered)
	}
}
