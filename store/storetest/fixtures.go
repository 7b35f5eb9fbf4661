package storetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
)

// baseTime is a timestamp with sub-millisecond digits in a non-UTC zone, so
// stores that drop the milliseconds or shift the instant are caught.
var baseTime = time.Date(2026, time.November, 21, 23, 47, 49, 108_765_432, time.FixedZone("CET", 3600))

// fullSession is a session with every field set.
func fullSession(id string, created time.Time) store.Session {
	return store.Session{
		ID:              id,
		Architecture:    "claude-code",
		AgentProfileRef: "reviewer",
		Name:            "Fix the flaky test — ünïcode ✓",
		Status:          conversation.SessionIdle,
		SessionOptions:  json.RawMessage(`{"model":"claude-sonnet-4-5","maxTurns":3,"nested":{"a":[1,2,null]}}`),
		Runtime: conversation.Runtime{
			Status:         conversation.SessionIdle,
			Architecture:   "claude-code",
			Sandbox:        "executor",
			AgentVersion:   "2.0.14",
			AgentSessionID: "7c1e6a52-claude",
			ActiveQueryID:  "q3",
			LastError:      "exit status 1",
		},
		CreatedAt:    created,
		LastActivity: created.Add(90*time.Second + 123*time.Millisecond),
		Turns:        3,
		SandboxState: json.RawMessage(`{"socket":"/run/agentd/s.sock","pid":4242}`),
		AgentState:   json.RawMessage(`{"sessionId":"7c1e6a52-claude"}`),
	}
}

// minimalSession is a session with only the required fields set.
func minimalSession(id string, created time.Time) store.Session {
	return store.Session{
		ID:           id,
		Architecture: "shell",
		Status:       conversation.SessionCreated,
		Runtime:      conversation.Runtime{Status: conversation.SessionCreated, Architecture: "shell"},
		CreatedAt:    created,
	}
}

// createSession stores a minimal session named id or fails t.
func createSession(t *testing.T, s store.Store, id string) {
	t.Helper()
	if err := s.CreateSession(ctx(t), minimalSession(id, baseTime)); err != nil {
		t.Fatalf("CreateSession(%q): %v", id, err)
	}
}

// fullProfile is a profile with every field, and every nested field, set.
func fullProfile(id string) profile.Profile {
	return profile.Profile{
		ID:           id,
		Name:         "Reviewer " + id,
		Description:  "Reviews pull requests.",
		SystemPrompt: "You review code.\nBe brief.",
		Model:        "claude-sonnet-4-5",
		Architecture: "claude-code",
		Skills: []profile.Skill{{
			Name:        "lint",
			Description: "Runs the linters",
			Content:     "# Lint\nRun `make lint`.",
			Files:       map[string]string{"scripts/lint.sh": "#!/bin/sh\nmake lint\n", "README.md": "lint"},
		}},
		Subagents: []profile.Subagent{{
			Name:        "tester",
			Description: "Writes tests",
			Prompt:      "Write table tests.",
			Tools:       []string{"Read", "Edit"},
			Model:       "claude-haiku-4-5",
		}},
		Commands: []profile.Command{{Name: "review", Description: "Review the diff", Content: "Review $ARGUMENTS"}},
		Rules:    []profile.Rule{{Name: "style", Content: "Use gofmt."}},
		MCPServers: map[string]profile.MCPServer{
			"fs": {
				Type:    "stdio",
				Command: "mcp-fs",
				Args:    []string{"--root", "/workspace"},
				Env:     map[string]string{"FS_MODE": "ro"},
			},
			"search": {
				Type:    "http",
				URL:     "https://mcp.example.com/search",
				Headers: map[string]string{"Authorization": "Bearer token"},
			},
		},
		DefaultWorkspaceFiles: []profile.File{{Path: "NOTES.md", Content: "notes"}, {Path: "empty.txt", Content: ""}},
		EnvironmentVariables:  map[string]string{"GOFLAGS": "-mod=mod", "LANG": "C.UTF-8"},
		AllowedTools:          []string{"Read", "Bash(git:*)"},
		DisallowedTools:       []string{"WebFetch"},
		ApprovalMode:          "auto_edit",
	}
}

// event builds an event of session at seq with a payload unique to both.
func event(session string, seq int64) conversation.Event {
	return conversation.Event{
		Seq:     seq,
		Type:    conversation.TypeBlockDelta,
		Payload: json.RawMessage(fmt.Sprintf(`{"blockId":"msg_01-0","delta":"%s/%d"}`, session, seq)),
		Context: conversation.Context{
			SessionID:      session,
			ConversationID: conversation.MainConversation,
			Source:         conversation.SourceRunner,
			Timestamp:      baseTime.Add(time.Duration(seq) * time.Millisecond),
		},
	}
}

// events builds events of session with seqs from..to inclusive.
func events(session string, from, to int64) []conversation.Event {
	var out []conversation.Event
	for seq := from; seq <= to; seq++ {
		out = append(out, event(session, seq))
	}
	return out
}

// sameInstant reports whether a and b are within a millisecond of each other
// and agree on being zero.
func sameInstant(a, b time.Time) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	d := a.Sub(b)
	return d > -time.Millisecond && d < time.Millisecond
}

// jsonEqual reports whether a and b are equal JSON values; empty and nil are
// equal to each other only.
func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}

// diffSession lists the fields where got differs from want.
func diffSession(want, got store.Session) []string {
	var d []string
	check := func(field string, equal bool, w, g any) {
		if !equal {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w))
		}
	}
	check("ID", want.ID == got.ID, want.ID, got.ID)
	check("Architecture", want.Architecture == got.Architecture, want.Architecture, got.Architecture)
	check("AgentProfileRef", want.AgentProfileRef == got.AgentProfileRef, want.AgentProfileRef, got.AgentProfileRef)
	check("Name", want.Name == got.Name, want.Name, got.Name)
	check("Status", want.Status == got.Status, want.Status, got.Status)
	check("SessionOptions", jsonEqual(want.SessionOptions, got.SessionOptions), string(want.SessionOptions), string(got.SessionOptions))
	check("Runtime", want.Runtime == got.Runtime, want.Runtime, got.Runtime)
	check("CreatedAt", sameInstant(want.CreatedAt, got.CreatedAt), want.CreatedAt, got.CreatedAt)
	check("LastActivity", sameInstant(want.LastActivity, got.LastActivity), want.LastActivity, got.LastActivity)
	check("Turns", want.Turns == got.Turns, want.Turns, got.Turns)
	check("SandboxState", jsonEqual(want.SandboxState, got.SandboxState), string(want.SandboxState), string(got.SandboxState))
	check("AgentState", jsonEqual(want.AgentState, got.AgentState), string(want.AgentState), string(got.AgentState))
	return d
}

// diffEvent lists the fields where got differs from want.
func diffEvent(want, got conversation.Event) []string {
	var d []string
	check := func(field string, equal bool, w, g any) {
		if !equal {
			d = append(d, fmt.Sprintf("%s: got %v, want %v", field, g, w))
		}
	}
	check("Seq", want.Seq == got.Seq, want.Seq, got.Seq)
	check("Type", want.Type == got.Type, want.Type, got.Type)
	check("Payload", bytes.Equal(want.Payload, got.Payload), fmt.Sprintf("%q", want.Payload), fmt.Sprintf("%q", got.Payload))
	wc, gc := want.Context, got.Context
	check("SessionID", wc.SessionID == gc.SessionID, wc.SessionID, gc.SessionID)
	check("ConversationID", wc.ConversationID == gc.ConversationID, wc.ConversationID, gc.ConversationID)
	check("Source", wc.Source == gc.Source, wc.Source, gc.Source)
	check("Timestamp", sameInstant(wc.Timestamp, gc.Timestamp), wc.Timestamp, gc.Timestamp)
	check("Actor", actorString(wc.Actor) == actorString(gc.Actor), actorString(wc.Actor), actorString(gc.Actor))
	return d
}

func actorString(a *string) string {
	if a == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%q", *a)
}

// checkEvents fails t unless got equals want event for event.
func checkEvents(t *testing.T, what string, want, got []conversation.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events (seqs %v), want %d (seqs %v)", what, len(got), seqs(got), len(want), seqs(want))
	}
	for i := range want {
		if d := diffEvent(want[i], got[i]); len(d) > 0 {
			t.Errorf("%s: event %d (seq %d) differs:\n  %v", what, i, want[i].Seq, d)
		}
	}
}

// seqs lists the seqs of evs.
func seqs(evs []conversation.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// readAll returns every event of session or fails t.
func readAll(t *testing.T, s store.Store, session string) []conversation.Event {
	t.Helper()
	evs, err := s.ReadEvents(ctx(t), session, 0, 0)
	if err != nil {
		t.Fatalf("ReadEvents(%q): %v", session, err)
	}
	return evs
}

// lastSeq returns the session's LastSeq or fails t.
func lastSeq(t *testing.T, s store.Store, session string) int64 {
	t.Helper()
	n, err := s.LastSeq(ctx(t), session)
	if err != nil {
		t.Fatalf("LastSeq(%q): %v", session, err)
	}
	return n
}

func ptr[T any](v T) *T { return &v }
