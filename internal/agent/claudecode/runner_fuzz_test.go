package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// stubProc is a CLI that is never run: the fuzz tests feed the process's
// line handler directly.
type stubProc struct{ writes bytes.Buffer }

func (s *stubProc) Lines() <-chan cliLine { return nil }
func (s *stubProc) Abandon()              {}
func (s *stubProc) Write(b []byte) error {
	if !json.Valid(bytes.TrimSpace(b)) {
		panic("agentd wrote invalid JSON to the CLI: " + string(b))
	}
	s.writes.Write(b)
	return nil
}
func (s *stubProc) CloseStdin() error                   { return nil }
func (s *stubProc) Signal(syscall.Signal) error         { return nil }
func (s *stubProc) Kill() error                         { return nil }
func (s *stubProc) Stop(context.Context, time.Duration) {}
func (s *stubProc) Stderr() string                      { return "" }
func (s *stubProc) Exit() (sandbox.ExitStatus, error)   { return sandbox.ExitStatus{}, nil }
func (s *stubProc) ExitError() error                    { return nil }

// seedLines adds every line of the shared Claude Code files (and of the
// converter's recorded runs) as a seed.
func seedLines(f *testing.F, add func(line []byte)) {
	for _, dir := range []string{streamDir, sessionDir, "claudeconv/testdata/cli-2.1.197/*", "claudeconv/testdata/cli-2.1.197/*/subagents"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.json*"))
		for _, p := range paths {
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			for ln := range bytes.SplitSeq(data, []byte("\n")) {
				if ln = bytes.TrimSpace(ln); len(ln) > 0 && len(ln) < 4096 { // keep the corpus quick to mutate
					add(ln)
				}
			}
		}
	}
}

// A Task call, its subagent's prompt and its result (as in claudeconv's
// TestStreamSubagent).
const (
	lineTask      = `{"type":"assistant","message":{"id":"msg_T","content":[{"type":"tool_use","id":"toolu_task","name":"Task","input":{"subagent_type":"general-purpose","description":"Write file","prompt":"Write hello.txt"}}]},"parent_tool_use_id":null,"uuid":"t1"}`
	lineSubPrompt = `{"type":"user","message":{"role":"user","content":[{"type":"text","text":"Write hello.txt"}]},"parent_tool_use_id":"toolu_task","uuid":"t2"}`
	lineTaskDone  = `{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_task","type":"tool_result","content":[{"type":"text","text":"Wrote it."},{"type":"text","text":"agentId: abc123 (for resuming to continue this agent's work if needed)"}]}]},"parent_tool_use_id":null,"uuid":"t5","tool_use_result":{"status":"completed","agentId":"abc123","content":[{"type":"text","text":"Wrote it."}],"totalDurationMs":2330}}`
)

// FuzzProcessLines feeds arbitrary stdout lines (newline-separated) to the
// runner's line handler: whatever the CLI prints, agentd must not panic,
// every event it emits must be valid (testHost.Emit checks), and every line
// it writes back must be JSON.
func FuzzProcessLines(f *testing.F) {
	var prev []byte
	seedLines(f, func(line []byte) {
		f.Add(append(append(bytes.Clone(prev), '\n'), line...))
		prev = line
	})
	f.Add([]byte(`{"type":"control_request","request_id":"r1","request":{"subtype":"can_use_tool","tool_name":"Bash","input":{"command":"ls"},"tool_use_id":"t1"}}`))
	f.Add([]byte(`{"type":"control_request","request_id":"r2","request":{"subtype":"hook_callback"}}` + "\n" + `{"type":"control_cancel_request","request_id":"r1"}`))
	f.Add([]byte(`{"type":"system","subtype":"init","session_id":"s","cwd":"/w","claude_code_version":"1"}` + "\n" + lineTask + "\n" +
		`{"type":"system","subtype":"task_started","task_id":"a1","tool_use_id":"toolu_task"}` + "\n" + lineSubPrompt + "\n" + lineTaskDone + "\n" +
		`{"type":"result","subtype":"success","is_error":true,"result":"x"}`))
	f.Add([]byte("garbage\n\xff\xfe\n[1]\n{\"type\":\"control_response\",\"response\":{}}"))
	h := newTestHost(f, "")
	h.answer = nil // allow everything at once
	opts := Options{FlushTimeout: time.Millisecond, SubagentPoll: time.Millisecond, MaxBadLines: 5}.withDefaults()
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newRunner(opts, h, materialized{})
		// Both in a local sandbox and in a resumable one (block tracking,
		// deferred events, checkpoints).
		for _, resumable := range []bool{false, true} {
			sp := &stubProc{}
			p := newProcess(r, sp, "t", false, resumable)
			p.shared.turnQuery = "q1"
			for _, ln := range strings.Split(string(data), "\n") {
				p.handleLine(cliLine{Data: []byte(ln)})
				p.flush()
			}
			p.flushAll()
			p.cancel()
			p.ctl.wait()
			h.mu.Lock()
			h.events = h.events[:0]
			h.mu.Unlock()
		}
	})
}

// FuzzParseControl: the control message parser never panics and accepts
// only what it can use.
func FuzzParseControl(f *testing.F) {
	for _, s := range []string{
		`{"type":"control_request","request_id":"a","request":{"subtype":"can_use_tool"}}`,
		`{"type":"control_response","response":{"subtype":"success","request_id":"x"}}`,
		`{"type":"control_cancel_request","request_id":"a"}`,
		`{"type":"control_request"}`, `{"type":"assistant"}`, `[]`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseControl(data)
		if err != nil {
			return
		}
		switch m.Type {
		case typeControlRequest:
			if m.RequestID == "" || len(m.Request) == 0 {
				t.Fatalf("accepted %q", data)
			}
		case typeControlResponse:
			if len(m.Response) == 0 {
				t.Fatalf("accepted %q", data)
			}
		case typeControlCancel:
			if m.RequestID == "" {
				t.Fatalf("accepted %q", data)
			}
		default:
			t.Fatalf("accepted type %q", m.Type)
		}
	})
}

// FuzzParseVersion: any --version output gives a version without spaces.
func FuzzParseVersion(f *testing.F) {
	f.Add("2.1.197 (Claude Code)\n")
	f.Add("")
	f.Add("   \n\t")
	f.Fuzz(func(t *testing.T, out string) {
		v := parseVersion(out)
		if strings.ContainsAny(v, " \t\n") || (v == "" && strings.TrimSpace(out) != "") {
			t.Fatalf("parseVersion(%q) = %q", out, v)
		}
	})
}
