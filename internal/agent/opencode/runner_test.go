package opencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
)

const fakeEnv = "AGENTD_FAKE_OPENCODE"

// FakeServeMain plays a scripted `opencode serve` when the test binary was
// started as one; TestMain calls it first and exits when it ran.
func FakeServeMain() bool {
	scenario := os.Getenv(fakeEnv)
	if scenario == "" {
		return false
	}
	if scenario == "no-listen" {
		fmt.Println("starting up")
		fmt.Fprintln(os.Stderr, "Error: the fake could not bind")
		os.Exit(7)
	}
	pw := os.Getenv("OPENCODE_SERVER_PASSWORD")
	events := make(chan string, 1024)
	push := func(typ string, props map[string]any) {
		b, _ := json.Marshal(map[string]any{"type": typ, "properties": props})
		events <- string(b)
	}
	text := func(id, s string) {
		now := time.Now().UnixMilli()
		push("message.updated", map[string]any{"info": map[string]any{"id": "msg_a" + id, "sessionID": "ses_1", "role": "assistant", "time": map[string]any{"created": now}}})
		push("message.part.updated", map[string]any{"part": map[string]any{"id": "prt_" + id, "sessionID": "ses_1", "messageID": "msg_a" + id, "type": "text", "text": s,
			"time": map[string]any{"start": now, "end": now}}})
	}
	idle := func() { push("session.idle", map[string]any{"sessionID": "ses_1"}) }
	replies := make(chan string, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /event", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case e := <-events:
				if e == "DROP" {
					return
				}
				fmt.Fprintf(w, ": comment\ndata: %s\n\n", e)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("GET /global/health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"healthy":true,"version":"0.0.1"}`)
	})
	mux.HandleFunc("GET /session/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "ses_1" {
			http.Error(w, `{"name":"NotFoundError"}`, 404)
			return
		}
		fmt.Fprint(w, `{"id":"ses_1"}`)
	})
	mux.HandleFunc("POST /session", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"id":"ses_1"}`) })
	var turns int
	mux.HandleFunc("POST /session/{id}/prompt_async", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			System string
			Parts  []struct{ Text string }
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.WriteHeader(204)
		turns++
		id := fmt.Sprint(turns)
		now := time.Now().UnixMilli()
		push("message.updated", map[string]any{"info": map[string]any{"id": "msg_u" + id, "sessionID": "ses_1", "role": "user", "time": map[string]any{"created": now}}})
		switch scenario {
		case "ok":
			text(id, "you said "+body.Parts[0].Text+" / system: "+body.System)
			idle()
		case "error":
			push("session.error", map[string]any{"sessionID": "ses_1", "error": map[string]any{"name": "APIError", "data": map[string]any{"message": "the provider said no"}}})
			idle()
		case "permission":
			push("message.part.updated", map[string]any{"part": map[string]any{"id": "prt_t" + id, "sessionID": "ses_1", "messageID": "msg_u" + id, "type": "tool",
				"tool": "bash", "callID": "call_9", "state": map[string]any{"status": "running", "input": map[string]any{"command": "rm -rf /"}}}})
			push("permission.asked", map[string]any{"id": "per_1", "sessionID": "ses_1", "permission": "bash", "patterns": []string{"rm -rf /"},
				"metadata": map[string]any{"command": "rm -rf /"}, "tool": map[string]any{"messageID": "msg_u" + id, "callID": "call_9"}})
			go func() { text(id, "reply "+<-replies); idle() }()
		case "crash":
			go func() {
				time.Sleep(50 * time.Millisecond)
				fmt.Fprintln(os.Stderr, "panic: the fake fell over")
				os.Exit(9)
			}()
		case "drop":
			events <- "DROP"
		case "stuck":
			text(id, "partial")
		case "many":
			now := time.Now().UnixMilli()
			push("message.updated", map[string]any{"info": map[string]any{"id": "msg_a" + id, "sessionID": "ses_1", "role": "assistant", "time": map[string]any{"created": now}}})
			push("message.part.updated", map[string]any{"part": map[string]any{"id": "prt_" + id, "sessionID": "ses_1", "messageID": "msg_a" + id, "type": "text", "text": ""}})
			for i := 0; i < 200; i++ {
				push("message.part.delta", map[string]any{"sessionID": "ses_1", "messageID": "msg_a" + id, "partID": "prt_" + id, "field": "text", "delta": "word "})
			}
			idle()
		}
	})
	mux.HandleFunc("POST /permission/{id}/reply", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		replies <- string(b)
		fmt.Fprint(w, "true")
	})
	mux.HandleFunc("POST /session/{id}/abort", func(w http.ResponseWriter, r *http.Request) {
		if scenario == "stuck" {
			http.Error(w, "no", 500)
			return
		}
		fmt.Fprint(w, "true")
		push("session.error", map[string]any{"sessionID": "ses_1", "error": map[string]any{"name": "MessageAbortedError", "data": map[string]any{"message": "Aborted"}}})
		idle()
	})
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "opencode" || p != pw || pw == "" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Println("some banner")
	fmt.Printf("opencode server listening on http://%s\n", ln.Addr())
	_ = http.Serve(ln, auth)
	return true
}

func fakeRunner(t *testing.T, scenario string, h *agenttest.FakeHost) *runner {
	t.Helper()
	bin := agenttest.FakeEnv(t, h, fakeEnv, scenario)
	r := agenttest.Start[*runner](t, Architecture{Command: bin, StopGrace: 200 * time.Millisecond, StartTimeout: 20 * time.Second}, h)
	agenttest.CloseAtEnd(t, r)
	return r
}

// logs joins the messages of h's log events.
func logs(h *agenttest.FakeHost) string { return strings.Join(h.Logs(), "\n") }

func TestRunnerTurnsAndState(t *testing.T) {
	h := &agenttest.FakeHost{Prof: profile.Profile{SystemPrompt: "be brief"}}
	r := fakeRunner(t, "ok", h)
	for i, q := range []string{"q1", "q2"} {
		if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: q, Content: "hello " + q}); err != nil {
			t.Fatal(err)
		}
		if got := h.Texts(); len(got) != i+1 || got[i] != "you said hello "+q+" / system: be brief" {
			t.Fatalf("texts %q", got)
		}
	}
	if string(h.AgentState()) != `{"sessionId":"ses_1"}` || h.Info() != [2]string{"0.0.1", "ses_1"} {
		t.Fatalf("state %s info %v", h.AgentState(), h.Info())
	}
	// What the server prints on stdout is kept as debug logs.
	if !strings.Contains(logs(h), "opencode output") {
		t.Fatalf("the server's banner was not logged: %q", logs(h))
	}
}

func TestRunnerLostSessionStartsNew(t *testing.T) {
	h := &agenttest.FakeHost{}
	_ = h.SaveAgentState(context.Background(), json.RawMessage(`{"sessionId":"ses_gone"}`))
	r := fakeRunner(t, "ok", h)
	if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"}); err != nil {
		t.Fatal(err)
	}
	if string(h.AgentState()) != `{"sessionId":"ses_1"}` || !strings.Contains(logs(h), "could not continue session ses_gone") {
		t.Fatalf("state %s logs %q", h.AgentState(), logs(h))
	}
}

func TestRunnerModelError(t *testing.T) {
	r := fakeRunner(t, "error", &agenttest.FakeHost{})
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeModelError || !strings.Contains(err.Error(), "the provider said no") {
		t.Fatalf("err %v", err)
	}
}

func TestRunnerPermission(t *testing.T) {
	for _, tc := range []struct {
		behavior conversation.PermissionBehavior
		want     string
	}{{conversation.Allow, `{"reply":"once"}`}, {conversation.Deny, `{"message":"not here","reply":"reject"}`}} {
		t.Run(string(tc.behavior), func(t *testing.T) {
			h := &agenttest.FakeHost{Decide: func(agent.PermissionRequest) agent.PermissionDecision {
				return agent.PermissionDecision{Behavior: tc.behavior, Message: "not here"}
			}}
			r := fakeRunner(t, "permission", h)
			if _, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"}); err != nil {
				t.Fatal(err)
			}
			if len(h.Perms()) != 1 || h.Perms()[0].ToolName != "bash" || h.Perms()[0].ToolUseID != "call_9" ||
				!strings.Contains(string(h.Perms()[0].Input), `"command":"rm -rf /"`) {
				t.Fatalf("permission requests %+v", h.Perms())
			}
			if got := h.Texts(); len(got) != 1 || got[0] != "reply "+tc.want {
				t.Fatalf("texts %q", got)
			}
		})
	}
}

func TestRunnerCrashAfterListening(t *testing.T) {
	r := fakeRunner(t, "crash", &agenttest.FakeHost{})
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeAgentExited || !strings.Contains(err.Error(), "the fake fell over") || !strings.Contains(err.Error(), "code 9") {
		t.Fatalf("err %v (%s)", err, agent.CodeOf(err))
	}
}

func TestRunnerNeverListens(t *testing.T) {
	h := &agenttest.FakeHost{}
	r := fakeRunner(t, "no-listen", h)
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeAgentExited || !strings.Contains(err.Error(), "could not bind") {
		t.Fatalf("err %v (%s)", err, agent.CodeOf(err))
	}
	if !strings.Contains(logs(h), "opencode output") {
		t.Fatalf("stdout before the failure not logged: %q", logs(h))
	}
}

func TestRunnerLostEventStream(t *testing.T) {
	r := fakeRunner(t, "drop", &agenttest.FakeHost{})
	_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeAgentProtocol || !strings.Contains(err.Error(), "event stream") {
		t.Fatalf("err %v (%s)", err, agent.CodeOf(err))
	}
	// The next turn starts a new server.
	_, err = r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q2", Content: "hi"})
	if agent.CodeOf(err) != agent.CodeAgentProtocol {
		t.Fatalf("second turn: %v", err)
	}
}

func TestRunnerInterrupt(t *testing.T) {
	for _, scenario := range []string{"permission", "stuck"} {
		t.Run(scenario, func(t *testing.T) {
			h := &agenttest.FakeHost{} // never answers the permission
			r := fakeRunner(t, scenario, h)
			errc := make(chan error, 1)
			go func() {
				_, err := r.Turn(agenttest.TurnCtx(t), agent.Turn{QueryID: "q1", Content: "hi"})
				errc <- err
			}()
			agenttest.WaitFor(t, 20*time.Second, "the turn to start", func() bool {
				return len(h.Texts()) != 0 || len(h.Find(conversation.TypeBlockUpsert)) != 0
			})
			if err := r.Interrupt(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; !errors.Is(err, agent.ErrInterrupted) {
				t.Fatalf("err %v", err)
			}
			for _, e := range h.Find(conversation.TypeError) {
				t.Fatalf("the abort was reported as an error: %s", e.Payload)
			}
			for _, e := range h.Find(conversation.TypeBlockUpsert) {
				var u conversation.BlockUpsert
				_ = json.Unmarshal(e.Payload, &u)
				if u.Block.Type == conversation.BlockError {
					t.Fatalf("error block for the abort: %s", e.Payload)
				}
			}
		})
	}
}

func TestPermissions(t *testing.T) {
	for _, tc := range []struct {
		prof profile.Profile
		want string
	}{
		{profile.Profile{}, `{"bash":"ask","doom_loop":"ask","edit":"ask","external_directory":"ask","question":"deny","webfetch":"ask"}`},
		{profile.Profile{ApprovalMode: "yolo", DisallowedTools: []string{"webfetch"}}, `{"bash":"allow","doom_loop":"allow","edit":"allow","external_directory":"allow","question":"deny","webfetch":"deny"}`},
		{profile.Profile{ApprovalMode: "auto_edit", AllowedTools: []string{"bash(git *)"}, DisallowedTools: []string{"bash(rm *)"}},
			`{"bash":{"*":"ask","git *":"allow","rm *":"deny"},"doom_loop":"ask","edit":"allow","external_directory":"ask","question":"deny","webfetch":"ask"}`},
		{profile.Profile{ApprovalMode: "plan", AllowedTools: []string{"Write"}}, `{"bash":"deny","doom_loop":"ask","edit":"allow","external_directory":"ask","question":"deny","webfetch":"ask"}`},
	} {
		got, err := permissions(tc.prof)
		b, _ := json.Marshal(got)
		if err != nil || string(b) != tc.want {
			t.Errorf("%+v:\n got %s %v\nwant %s", tc.prof, b, err, tc.want)
		}
	}
	if _, err := permissions(profile.Profile{ApprovalMode: "maybe"}); err == nil {
		t.Error("unknown approvalMode accepted")
	}
}

func TestConfig(t *testing.T) {
	c := config(configParams{BaseURL: "http://127.0.0.1:9/v1", Permission: map[string]any{"bash": "ask"},
		MCP: map[string]profile.MCPServer{"fs": {Command: "mcp-fs", Args: []string{"-r"}, Env: map[string]string{"A": "1"}}, "web": {URL: "https://x", Headers: map[string]string{"H": "v"}}}})
	b, _ := json.Marshal(c)
	for _, want := range []string{`"model":"agentd/` + DefaultModel + `"`, `"baseURL":"http://127.0.0.1:9/v1"`, `"apiKey":"{env:OPENAI_API_KEY}"`,
		`"fs":{"command":["mcp-fs","-r"],"environment":{"A":"1"},"type":"local"}`, `"web":{"headers":{"H":"v"},"type":"remote","url":"https://x"}`, `"share":"disabled"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("config lacks %s: %s", want, b)
		}
	}
	for _, tc := range []struct {
		params configParams
		model  string
	}{
		{configParams{Model: "anthropic/claude-x", BaseURL: "http://x"}, "anthropic/claude-x"},
		{configParams{Model: "gpt-9", BaseURL: "http://x"}, "agentd/gpt-9"},
		{configParams{Model: "gpt-9"}, "openai/gpt-9"},
		{configParams{}, ""},
	} {
		got, _ := config(tc.params)["model"].(string)
		if got != tc.model {
			t.Errorf("%+v: model %q, want %q", tc.params, got, tc.model)
		}
	}
}

func TestParseListening(t *testing.T) {
	for line, want := range map[string]string{
		"opencode server listening on http://127.0.0.1:4096":      "http://127.0.0.1:4096",
		"opencode server listening on http://127.0.0.1:4096/ now": "http://127.0.0.1:4096",
		"opencode server listening on http://localhost:1":         "http://localhost:1",
		"opencode server listening on http://[::1]:5":             "http://[::1]:5",
		"opencode server listening on http://10.0.0.1:4096":       "",
		"opencode server listening on https://127.0.0.1:4096":     "",
		"opencode server listening on http://127.0.0.1":           "",
		"opencode server listening on http://u:p@127.0.0.1:1":     "",
		"opencode server listening on http://127.0.0.1:1/x":       "",
		"listening": "",
	} {
		got, ok := ParseListening(line)
		if got != want || ok != (want != "") {
			t.Errorf("%q: %q %v, want %q", line, got, ok, want)
		}
	}
}

func TestReadSSE(t *testing.T) {
	in := ": hello\n\ndata: {\"a\":1}\n\nevent: x\nid: 3\ndata: first\ndata: second\r\n\r\ndata:nospace\n\n" +
		"data: " + strings.Repeat("x", 100) + "\n\ndata: tail"
	var got []string
	err := readSSE(strings.NewReader(in), 50, func(b []byte) { got = append(got, string(b)) })
	want := []string{`{"a":1}`, "first\nsecond", "nospace", "tail"}
	if !errors.Is(err, io.EOF) || strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("got %q %v, want %q", got, err, want)
	}
}

func FuzzParseListening(f *testing.F) {
	for _, s := range []string{"opencode server listening on http://127.0.0.1:4096", "listening on http://[::1]:1", "listening on http://%zz", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		u, ok := ParseListening(line)
		if !ok {
			if u != "" {
				t.Fatal("url without ok")
			}
			return
		}
		if !strings.HasPrefix(u, "http://") {
			t.Fatalf("%q", u)
		}
		if again, ok := ParseListening("listening on " + u); !ok || again != u {
			t.Fatalf("%q does not parse back: %q", u, again)
		}
	})
}

func FuzzReadSSE(f *testing.F) {
	f.Add([]byte("data: {\"type\":\"x\"}\n\n"), 64)
	f.Add([]byte(": c\r\ndata: a\ndata: b\n\n\n\ndata: c"), 4)
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		if max <= 0 || max > 1<<16 {
			return
		}
		n := 0
		err := readSSE(bytes.NewReader(in), max, func(b []byte) {
			n++
			for _, line := range bytes.Split(b, []byte("\n")) {
				if len(line) > max {
					t.Fatalf("a data line longer than %d: %d", max, len(line))
				}
			}
		})
		if !errors.Is(err, io.EOF) {
			t.Fatalf("err %v", err)
		}
		if n > bytes.Count(in, []byte("data:")) {
			t.Fatalf("%d events from %d data lines", n, bytes.Count(in, []byte("data:")))
		}
	})
}

// BenchmarkRunnerTurn measures agentd's own cost of a turn over a running
// server: the prompt request, 200 streamed deltas through SSE parsing and
// conversion, the emits (the fake host only appends).
func BenchmarkRunnerTurn(b *testing.B) {
	h := &agenttest.FakeHost{}
	bin := agenttest.FakeEnv(b, h, fakeEnv, "many")
	run := agenttest.Start[agent.Runner](b, Architecture{Command: bin, StopGrace: 200 * time.Millisecond}, h)
	defer run.Close(context.Background())
	agenttest.BenchTurns(b, run, h, true)
}

// BenchmarkReadSSE measures the event-stream parser on typical OpenCode
// delta events.
func BenchmarkReadSSE(b *testing.B) {
	ev := `data: {"type":"message.part.delta","properties":{"sessionID":"ses_1","messageID":"msg_1","partID":"prt_1","field":"text","delta":"some streamed words "}}` + "\n\n"
	in := []byte(strings.Repeat(ev, 1000))
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		n := 0
		_ = readSSE(bytes.NewReader(in), 1<<20, func([]byte) { n++ })
		if n != 1000 {
			b.Fatal(n)
		}
	}
}

// TestLateDeltaNeverStaysPending races an event stream's delta, which
// opens a pending text block, against the end of the turn.
func TestLateDeltaNeverStaysPending(t *testing.T) {
	agenttest.LateUpdateRace(t, 300, func(i int, h *agenttest.FakeHost) (func(), func()) {
		r := newRunner(Architecture{}, h)
		r.conv = NewEventsConverter(WithSessionID("ses_1"), WithoutUserMessages(), WithoutPermissionEvents())
		r.cur = &turnState{end: make(chan conversation.Payload, 1), asked: map[string]bool{}}
		r.turnOpen = true
		delta, _ := json.Marshal(map[string]any{"type": "message.part.delta", "properties": map[string]any{
			"sessionID": "ses_1", "messageID": "msg_a", "partID": fmt.Sprint("prt_", i), "field": "text", "delta": "one "}})
		return func() { r.onEvent(nil, delta) }, r.endTurn
	})
}
