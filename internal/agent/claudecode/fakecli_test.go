package claudecode

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A fake Claude Code CLI for the runner's tests: the test binary itself,
// run through a wrapper script called "claude" (see fakeCLIDir). It speaks
// the stream-json and control protocols as Claude Code 2.1 does, writes a
// transcript under CLAUDE_CONFIG_DIR, and acts out the scenario named by
// the first word of each user message:
//
//	hello        a streamed text answer "turn N" (N: user prompts in the transcript, so resumes show)
//	tool NAME    a tool call that asks for permission; the result echoes the answer
//	cancelperm   asks for permission, withdraws the request, reports responses seen
//	hang         a tool call that runs until the control interrupt
//	stubborn     like hang but ignores the control interrupt (SIGINT ends it)
//	immortal     ignores the interrupt and SIGINT
//	crash        exits mid-turn with a message on stderr
//	apierror     the answer is an API error (is_error result)
//	junk         unknown and broken lines, then an answer
//	hook         sends a hook_callback control request, reports the answer
//	subagent     a Task subagent whose text only its transcript has
//	subagent-nofile  the same without a subagent transcript
//	slow N       N streamed lines "line i", one every 40 ms, then a result
//	big N        N bytes of streamed text at once, then "big end" 300 ms later
//
// Every start is recorded (argv, env) in CLAUDE_CONFIG_DIR/fake-starts.jsonl.

const fakeEnv = "AGENTD_FAKE_CLAUDE"

// fakeCLIDir writes the wrapper script and returns its folder.
func fakeCLIDir(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := fmt.Sprintf("#!/bin/sh\n%s=1 exec '%s' \"$@\"\n", fakeEnv, exe)
	if err := os.WriteFile(filepath.Join(dir, "claude"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// writeScript writes an executable shell script called claude into a new
// folder and returns the folder.
func writeScript(t testing.TB, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "claude"), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

type fakeCLI struct {
	outMu  sync.Mutex
	out    *bufio.Writer
	sid    string
	cwd    string
	config string
	trans  string // main transcript path
	seq    atomic.Int64
	model  string

	respMu    sync.Mutex
	responses map[string]chan json.RawMessage // our control requests awaiting answers
	interrupt chan struct{}
	late      sync.WaitGroup // transcript writes behind the stream
	in        chan map[string]json.RawMessage
}

func runFakeCLI(args []string) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-v") {
		fmt.Println("9.9.9 (Claude Code)")
		return 0
	}
	f := &fakeCLI{out: bufio.NewWriterSize(os.Stdout, 1<<16), responses: map[string]chan json.RawMessage{},
		interrupt: make(chan struct{}, 1), in: make(chan map[string]json.RawMessage, 16), model: "fake-model"}
	f.cwd, _ = os.Getwd()
	f.config = os.Getenv("CLAUDE_CONFIG_DIR")
	resume := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--resume="); ok {
			resume = v
		}
		if v, ok := strings.CutPrefix(a, "--model="); ok {
			f.model = v
		}
	}
	f.recordStart(args)
	dir := filepath.Join(f.config, "projects", projectDirName(f.cwd))
	if resume != "" {
		f.sid = resume
		f.trans = filepath.Join(dir, resume+".jsonl")
		data, err := os.ReadFile(f.trans)
		if err != nil || strings.Contains(string(data), "CORRUPT") {
			f.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true,
				"duration_ms": 0, "num_turns": 0, "session_id": resume, "errors": []string{"No conversation found with session ID: " + resume}})
			fmt.Fprintf(os.Stderr, "No conversation found with session ID: %s\n", resume)
			return 1
		}
	} else {
		f.sid = fmt.Sprintf("fake-%d-%d", os.Getpid(), time.Now().UnixNano())
		f.trans = filepath.Join(dir, f.sid+".jsonl")
	}
	_ = os.MkdirAll(dir, 0o755)
	f.seq.Store(time.Now().UnixNano())

	go f.readStdin()
	defer f.late.Wait() // like Claude Code, flush the transcript before exiting
	for msg := range f.in {
		var typ string
		_ = json.Unmarshal(msg["type"], &typ)
		switch typ {
		case "control_request":
			var id string
			_ = json.Unmarshal(msg["request_id"], &id)
			var req struct{ Subtype string }
			_ = json.Unmarshal(msg["request"], &req)
			switch req.Subtype {
			case "initialize":
				f.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": id, "response": map[string]any{"commands": []any{}}}})
			case "interrupt":
				f.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": id}})
			}
		case "user":
			var m struct{ Content string }
			_ = json.Unmarshal(msg["message"], &m)
			if code := f.turn(m.Content); code >= 0 {
				f.late.Wait()
				return code
			}
		}
	}
	return 0
}

func (f *fakeCLI) recordStart(args []string) {
	if f.config == "" {
		return
	}
	_ = os.MkdirAll(f.config, 0o755)
	env := map[string]string{}
	for _, k := range []string{"CLAUDE_CONFIG_DIR", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY", "PROFILE_VAR"} {
		env[k] = os.Getenv(k)
	}
	b, _ := json.Marshal(map[string]any{"argv": args, "env": env, "pid": os.Getpid()})
	fh, err := os.OpenFile(filepath.Join(f.config, "fake-starts.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fh.Write(append(b, '\n'))
		fh.Close()
	}
}

// readStdin routes control responses to their waiters and the rest to f.in.
func (f *fakeCLI) readStdin() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var msg map[string]json.RawMessage
		if json.Unmarshal(sc.Bytes(), &msg) != nil {
			continue
		}
		var typ string
		_ = json.Unmarshal(msg["type"], &typ)
		if typ == "control_response" {
			var r struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(msg["response"], &r)
			f.respMu.Lock()
			ch := f.responses[r.RequestID]
			f.respMu.Unlock()
			if ch != nil {
				select {
				case ch <- msg["response"]:
				default: // an answer sent again (after a server restart)
				}
			}
			continue
		}
		if typ == "control_request" {
			var req struct{ Subtype string }
			_ = json.Unmarshal(msg["request"], &req)
			if req.Subtype == "interrupt" {
				select {
				case f.interrupt <- struct{}{}:
				default:
				}
			}
		}
		f.in <- msg
	}
	close(f.in)
}

func (f *fakeCLI) emit(v any) {
	b, _ := json.Marshal(v)
	f.outMu.Lock()
	f.out.Write(append(b, '\n'))
	f.out.Flush()
	f.outMu.Unlock()
}

func (f *fakeCLI) id(prefix string) string { return fmt.Sprintf("%s%d", prefix, f.seq.Add(1)) }

// record appends a line to a transcript file.
func record(path string, line map[string]any) {
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	line["timestamp"] = time.Now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(line)
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	fh.Write(append(b, '\n'))
	fh.Close()
}

// line emits a stream line and records it in the main transcript (with a
// delay, like Claude Code's buffered writer, when late).
func (f *fakeCLI) line(m map[string]any, late bool) {
	m["session_id"] = f.sid
	if _, ok := m["parent_tool_use_id"]; !ok {
		m["parent_tool_use_id"] = nil
	}
	f.emit(m)
	typ := m["type"]
	if (typ == "user" || typ == "assistant") && m["parent_tool_use_id"] == nil {
		c := map[string]any{}
		for k, v := range m {
			if k != "session_id" && k != "parent_tool_use_id" {
				c[k] = v
			}
		}
		c["sessionId"] = f.sid
		if late {
			f.late.Add(1)
			time.AfterFunc(80*time.Millisecond, func() { record(f.trans, c); f.late.Done() })
		} else {
			record(f.trans, c)
		}
	}
}

func (f *fakeCLI) assistant(msgID string, part map[string]any, parent any, late bool) string {
	uuid := f.id("uuid-a")
	f.line(map[string]any{"type": "assistant", "uuid": uuid, "parent_tool_use_id": parent,
		"message": map[string]any{"id": msgID, "model": f.model, "role": "assistant", "content": []any{part},
			"usage": map[string]any{"input_tokens": 10, "output_tokens": 2}}}, late)
	return uuid
}

func (f *fakeCLI) toolResult(toolID, content string, isError bool, parent any, extra map[string]any) string {
	uuid := f.id("uuid-u")
	m := map[string]any{"type": "user", "uuid": uuid, "parent_tool_use_id": parent,
		"message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": toolID, "content": content, "is_error": isError}}}}
	for k, v := range extra {
		m[k] = v
	}
	f.line(m, false)
	return uuid
}

func (f *fakeCLI) result(text string, isError bool) {
	sub := "success"
	m := map[string]any{"type": "result", "subtype": sub, "is_error": isError, "duration_ms": 5, "num_turns": 1,
		"result": text, "session_id": f.sid, "total_cost_usd": 0.001, "usage": map[string]any{"input_tokens": 10, "output_tokens": 2}}
	f.emit(m)
}

// streamText streams a text message and completes it.
func (f *fakeCLI) streamText(text string, late bool) {
	msgID := f.id("msg_")
	ev := func(e map[string]any) {
		f.emit(map[string]any{"type": "stream_event", "event": e, "session_id": f.sid, "parent_tool_use_id": nil, "uuid": f.id("uuid-s")})
	}
	ev(map[string]any{"type": "message_start", "message": map[string]any{"id": msgID, "model": f.model, "role": "assistant", "content": []any{}}})
	ev(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	for i := 0; i < len(text); i += 3 {
		ev(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": text[i:min(i+3, len(text))]}})
	}
	f.assistant(msgID, map[string]any{"type": "text", "text": text}, nil, late)
	ev(map[string]any{"type": "content_block_stop", "index": 0})
	ev(map[string]any{"type": "message_stop"})
}

// ask sends can_use_tool and waits for the answer (nil after timeout).
func (f *fakeCLI) ask(tool, toolID string, input map[string]any, timeout time.Duration) (string, json.RawMessage) {
	reqID := f.id("req-")
	ch := make(chan json.RawMessage, 1)
	f.respMu.Lock()
	f.responses[reqID] = ch
	f.respMu.Unlock()
	f.emit(map[string]any{"type": "control_request", "request_id": reqID, "request": map[string]any{
		"subtype": "can_use_tool", "tool_name": tool, "input": input, "tool_use_id": toolID}})
	select {
	case r := <-ch:
		return reqID, r
	case <-time.After(timeout):
		return reqID, nil
	}
}

func (f *fakeCLI) prompts() int {
	data, _ := os.ReadFile(f.trans)
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, `"fake-prompt":true`) {
			n++
		}
	}
	return n
}

// turn acts out one user message. It returns an exit code to exit with,
// or -1 to go on.
func (f *fakeCLI) turn(content string) int {
	record(f.trans, map[string]any{"type": "user", "uuid": f.id("uuid-p"), "sessionId": f.sid, "fake-prompt": true,
		"message": map[string]any{"role": "user", "content": content}})
	f.emit(map[string]any{"type": "system", "subtype": "init", "cwd": f.cwd, "session_id": f.sid, "tools": []string{"Bash", "Task"},
		"model": f.model, "permissionMode": "default", "claude_code_version": "9.9.9", "uuid": f.id("uuid-i")})
	word, arg, _ := strings.Cut(strings.TrimSpace(content), " ")
	switch word {
	case "tool":
		toolID := f.id("toolu_")
		input := map[string]any{"command": "echo hi"}
		f.assistant(f.id("msg_"), map[string]any{"type": "tool_use", "id": toolID, "name": arg, "input": input}, nil, false)
		_, resp := f.ask(arg, toolID, input, 30*time.Second)
		var r struct {
			Subtype  string
			Error    string
			Response struct {
				Behavior     string
				Message      string
				UpdatedInput json.RawMessage `json:"updatedInput"`
			}
		}
		_ = json.Unmarshal(resp, &r)
		switch {
		case r.Subtype == "success" && r.Response.Behavior == "allow":
			f.toolResult(toolID, "ran with "+string(r.Response.UpdatedInput), false, nil, nil)
		case r.Subtype == "success":
			f.toolResult(toolID, "denied: "+r.Response.Message, true, nil, nil)
		default:
			f.toolResult(toolID, "permission failed: "+r.Error, true, nil, nil)
		}
		f.streamText("done", true)
		f.result("done", false)
	case "cancelperm":
		toolID := f.id("toolu_")
		f.assistant(f.id("msg_"), map[string]any{"type": "tool_use", "id": toolID, "name": "Bash", "input": map[string]any{"command": "x"}}, nil, false)
		reqID := f.id("req-")
		ch := make(chan json.RawMessage, 1)
		f.respMu.Lock()
		f.responses[reqID] = ch
		f.respMu.Unlock()
		f.emit(map[string]any{"type": "control_request", "request_id": reqID, "request": map[string]any{
			"subtype": "can_use_tool", "tool_name": "Bash", "input": map[string]any{"command": "x"}, "tool_use_id": toolID}})
		time.Sleep(100 * time.Millisecond)
		f.emit(map[string]any{"type": "control_cancel_request", "request_id": reqID})
		n := 0
		select {
		case <-ch:
			n++
		case <-time.After(400 * time.Millisecond):
		}
		f.toolResult(toolID, "cancelled", true, nil, nil)
		f.result(fmt.Sprintf("responses=%d", n), false)
	case "hang", "stubborn", "immortal":
		if word == "immortal" {
			signal.Ignore(syscall.SIGINT)
		}
		toolID := f.id("toolu_")
		f.assistant(f.id("msg_"), map[string]any{"type": "tool_use", "id": toolID, "name": "Bash", "input": map[string]any{"command": "sleep 30"}}, nil, false)
		for {
			select {
			case <-f.interrupt:
				if word != "hang" {
					continue
				}
				f.toolResult(toolID, "The user doesn't want to proceed with this tool use.", true, nil, nil)
				f.line(map[string]any{"type": "user", "uuid": f.id("uuid-u"), "message": map[string]any{"role": "user",
					"content": []any{map[string]any{"type": "text", "text": "[Request interrupted by user for tool use]"}}}}, false)
				f.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true, "duration_ms": 5, "num_turns": 1, "session_id": f.sid})
				return -1
			case <-time.After(60 * time.Second):
				f.result("slept", false)
				return -1
			}
		}
	case "crash":
		f.streamText("about to crash", false)
		fmt.Fprintln(os.Stderr, "fake crash: boom")
		return 3
	case "apierror":
		f.line(map[string]any{"type": "assistant", "uuid": f.id("uuid-a"), "error": "server_error",
			"message": map[string]any{"id": f.id("synthetic-"), "model": "<synthetic>", "role": "assistant",
				"content": []any{map[string]any{"type": "text", "text": "API Error: 500 boom"}}}}, false)
		f.emit(map[string]any{"type": "result", "subtype": "success", "is_error": true, "api_error_status": 500, "duration_ms": 5,
			"num_turns": 1, "result": "API Error: 500 boom", "session_id": f.sid, "total_cost_usd": 0})
	case "junk":
		f.emit(map[string]any{"type": "brand_new_kind", "x": 1})
		f.outMu.Lock()
		f.out.WriteString("{\"type\":\"assistant\",\"message\":{\"id\":\"trunc\n")
		f.out.WriteString("not json at all \xff\xfe\n")
		f.out.WriteString("[1,2,3]\n")
		f.out.WriteString("{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"nobody\"}}\n")
		f.out.WriteString("{\"type\":\"control_request\",\"request_id\":\"\"}\n")
		f.out.WriteString("{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"mystery\"}]},\"uuid\":\"u-junk\"}\n")
		f.out.Flush()
		f.outMu.Unlock()
		f.streamText("survived", false)
		f.result("survived", false)
	case "askthenresult":
		// Asks, and ends the turn without waiting for the answer.
		reqID := f.id("req-")
		f.emit(map[string]any{"type": "control_request", "request_id": reqID, "request": map[string]any{
			"subtype": "can_use_tool", "tool_name": "Bash", "input": map[string]any{"command": "x"}, "tool_use_id": f.id("toolu_")}})
		time.Sleep(200 * time.Millisecond)
		f.result("moved on", false)
	case "hook":
		reqID := f.id("req-")
		ch := make(chan json.RawMessage, 1)
		f.respMu.Lock()
		f.responses[reqID] = ch
		f.respMu.Unlock()
		f.emit(map[string]any{"type": "control_request", "request_id": reqID, "request": map[string]any{"subtype": "hook_callback", "callback_id": "x"}})
		var r struct{ Subtype, Error string }
		select {
		case raw := <-ch:
			_ = json.Unmarshal(raw, &r)
		case <-time.After(5 * time.Second):
		}
		f.result("hook answer: "+r.Subtype, false)
	case "subagent", "subagent-nofile":
		f.subagent(word == "subagent")
	case "slow":
		n, _ := strconv.Atoi(arg)
		f.slow(n)
	case "big":
		n, _ := strconv.Atoi(arg)
		f.streamText(strings.Repeat("b", n), false)
		time.Sleep(300 * time.Millisecond)
		f.streamText("big end", false)
		f.result("big end", false)
	default:
		f.streamText(fmt.Sprintf("turn %d", f.prompts()), true)
		f.result(fmt.Sprintf("turn %d", f.prompts()), false)
	}
	return -1
}

// slow streams n lines slowly in one text block: a turn long enough to
// stop a server in the middle of.
func (f *fakeCLI) slow(n int) {
	msgID := f.id("msg_")
	ev := func(e map[string]any) {
		f.emit(map[string]any{"type": "stream_event", "event": e, "session_id": f.sid, "parent_tool_use_id": nil, "uuid": f.id("uuid-s")})
	}
	ev(map[string]any{"type": "message_start", "message": map[string]any{"id": msgID, "model": f.model, "role": "assistant", "content": []any{}}})
	ev(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	var text strings.Builder
	for i := 1; i <= n; i++ {
		line := fmt.Sprintf("line %d\n", i)
		text.WriteString(line)
		ev(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": line}})
		time.Sleep(40 * time.Millisecond)
	}
	f.assistant(msgID, map[string]any{"type": "text", "text": text.String()}, nil, false)
	ev(map[string]any{"type": "content_block_stop", "index": 0})
	ev(map[string]any{"type": "message_stop"})
	f.result(fmt.Sprintf("%d lines", n), false)
}

// subagent plays a Task call. The stream shows the subagent's prompt, tool
// call and result; its text messages are only in its transcript, which is
// written behind the stream (the last line after the Task result).
func (f *fakeCLI) subagent(withFile bool) {
	taskID := f.id("toolu_task")
	agentID := fmt.Sprintf("a%x", f.seq.Add(1))
	mainMsg := f.id("msg_")
	f.assistant(mainMsg, map[string]any{"type": "text", "text": "Delegating."}, nil, false)
	f.assistant(mainMsg, map[string]any{"type": "tool_use", "id": taskID, "name": "Task",
		"input": map[string]any{"subagent_type": "general-purpose", "description": "Do sub work", "prompt": "SUB: work"}}, nil, false)
	f.emit(map[string]any{"type": "system", "subtype": "task_started", "task_id": agentID, "tool_use_id": taskID,
		"description": "Do sub work", "task_type": "local_agent", "session_id": f.sid, "uuid": f.id("uuid-t")})
	subFile := filepath.Join(f.config, "projects", projectDirName(f.cwd), f.sid, "subagents", "agent-"+agentID+".jsonl")
	sub := func(m map[string]any) {
		if !withFile {
			return
		}
		m["isSidechain"], m["agentId"], m["sessionId"] = true, agentID, f.sid
		record(subFile, m)
	}
	promptUUID := f.id("uuid-sp")
	prompt := map[string]any{"type": "user", "uuid": promptUUID, "message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "SUB: work"}}}}
	f.emit(map[string]any{"type": "user", "uuid": promptUUID, "parent_tool_use_id": taskID, "session_id": f.sid, "message": prompt["message"]})
	subMsg := f.id("msg_sub")
	bashID := f.id("toolu_subbash")
	textLine := map[string]any{"type": "assistant", "uuid": f.id("uuid-st"), "message": map[string]any{"id": subMsg, "model": f.model, "role": "assistant",
		"content": []any{map[string]any{"type": "text", "text": "Sub thinking aloud."}}}}
	toolUUID := f.id("uuid-su")
	toolLine := map[string]any{"type": "assistant", "uuid": toolUUID, "message": map[string]any{"id": subMsg, "model": f.model, "role": "assistant",
		"content": []any{map[string]any{"type": "tool_use", "id": bashID, "name": "Bash", "input": map[string]any{"command": "echo sub"}}}}}
	f.emit(map[string]any{"type": "assistant", "uuid": toolUUID, "parent_tool_use_id": taskID, "session_id": f.sid, "message": toolLine["message"]})
	resUUID := f.id("uuid-sr")
	resMsg := map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": bashID, "content": "sub", "is_error": false}}}
	f.emit(map[string]any{"type": "user", "uuid": resUUID, "parent_tool_use_id": taskID, "session_id": f.sid, "message": resMsg})
	// The transcript catches up.
	time.Sleep(50 * time.Millisecond)
	sub(prompt)
	sub(textLine)
	sub(toolLine)
	sub(map[string]any{"type": "user", "uuid": resUUID, "message": resMsg})
	final := map[string]any{"type": "assistant", "uuid": f.id("uuid-sf"), "message": map[string]any{"id": f.id("msg_sub"), "model": f.model, "role": "assistant",
		"content": []any{map[string]any{"type": "text", "text": "Sub done."}}}}
	f.late.Add(1)
	time.AfterFunc(100*time.Millisecond, func() { sub(final); f.late.Done() })
	f.toolResult(taskID, "Sub done.\nagentId: "+agentID+" (for resuming)", false, nil, map[string]any{
		"tool_use_result": map[string]any{"status": "completed", "agentId": agentID, "totalDurationMs": 42,
			"content": []any{map[string]any{"type": "text", "text": "Sub done."}}}})
	f.streamText("All done.", true)
	f.result("All done.", false)
}
