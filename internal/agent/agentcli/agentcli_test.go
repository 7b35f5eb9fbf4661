package agentcli

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaults(t *testing.T) {
	if got := Command("", "codex"); got != "codex" {
		t.Errorf("Command default %q", got)
	}
	if got := Command("/opt/codex", "codex"); got != "/opt/codex" {
		t.Errorf("Command set %q", got)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if got := StopGrace(d); got != 3*time.Second {
			t.Errorf("StopGrace(%v) = %v", d, got)
		}
		if got := StartTimeout(d); got != 2*time.Minute {
			t.Errorf("StartTimeout(%v) = %v", d, got)
		}
	}
	if got := StopGrace(time.Millisecond); got != time.Millisecond {
		t.Errorf("StopGrace set %v", got)
	}
	if got := StartTimeout(time.Second); got != time.Second {
		t.Errorf("StartTimeout set %v", got)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]string{
		"codex-cli 0.169.0\n":    "0.169.0",
		"0.61.0":                 "0.61.0",
		"1.2.3-beta.1+build (x)": "1.2.3-beta.1+build",
		"no version":             "",
		"1.2":                    "",
		"":                       "",
	} {
		if got := ParseVersion(in); got != want {
			t.Errorf("ParseVersion(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseVersion(f *testing.F) {
	f.Add("codex-cli 0.169.0")
	f.Add("1.2.3-rc.1+x")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		v := ParseVersion(s)
		if v != "" && !strings.Contains(s, v) {
			t.Fatalf("%q is not in %q", v, s)
		}
	})
}

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cli")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	v, err := Probe(ctx, script(t, `echo "tool 4.5.6"`))
	if err != nil || v != "4.5.6" {
		t.Fatalf("Probe = %q, %v", v, err)
	}
	if _, err := Probe(ctx, "agentcli-test-no-such-cli"); err == nil || !strings.Contains(err.Error(), "not installed or not on PATH") {
		t.Fatalf("missing CLI: %v", err)
	}
	if _, err := Probe(ctx, script(t, `echo hello`)); err == nil || !strings.Contains(err.Error(), "printed no version") {
		t.Fatalf("no version: %v", err)
	}
	if _, err := Probe(ctx, script(t, `exit 3`)); err == nil || !strings.Contains(err.Error(), "--version") {
		t.Fatalf("failing CLI: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Probe(cctx, script(t, `echo 1.2.3`)); err == nil {
		t.Fatal("a cancelled probe succeeded")
	}
}

func TestReadEnv(t *testing.T) {
	ctx := context.Background()
	env, err := local.New(local.Options{}).Create(ctx, sandbox.Spec{SessionID: "s", Workspace: t.TempDir(),
		Env: map[string]string{"AGENTCLI_X": "a 'b' \"c\" $d"}})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Terminate(context.Background())
	if v, err := ReadEnv(ctx, env, "AGENTCLI_X"); err != nil || v != "a 'b' \"c\" $d" {
		t.Fatalf("ReadEnv = %q, %v", v, err)
	}
	if v, err := ReadEnv(ctx, env, "AGENTCLI_UNSET"); err != nil || v != "" {
		t.Fatalf("unset: %q, %v", v, err)
	}
	for _, bad := range []string{"", "1X", "X;rm", "X}", "A-B"} {
		if _, err := ReadEnv(ctx, env, bad); err == nil {
			t.Errorf("ReadEnv(%q) accepted", bad)
		}
	}
}

func TestInstructions(t *testing.T) {
	if got := Instructions(profile.Profile{}); got != "" {
		t.Fatalf("empty profile: %q", got)
	}
	p := profile.Profile{SystemPrompt: "  Be brief. \n", Rules: []profile.Rule{
		{Name: "style", Content: " tabs "}, {Name: "empty", Content: "  "}, {Name: "tests", Content: "run them"}}}
	want := "Be brief.\n\n# style\n\ntabs\n\n# tests\n\nrun them"
	if got := Instructions(p); got != want {
		t.Fatalf("Instructions = %q, want %q", got, want)
	}
}

func TestLogEvent(t *testing.T) {
	for in, want := range map[string]string{`{"a":1}`: `{"a":1}`, "not json": `"not json"`, "": `""`} {
		e := LogEvent(conversation.LevelWarn, "m", []byte(in))
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		var l conversation.LogEvent
		switch v := p.(type) {
		case *conversation.LogEvent:
			l = *v
		case conversation.LogEvent:
			l = v
		default:
			t.Fatalf("payload %T", p)
		}
		if l.Level != conversation.LevelWarn || l.Message != "m" || string(l.Data) != want {
			t.Errorf("LogEvent(%q) = %+v, want data %s", in, l, want)
		}
		if !json.Valid(l.Data) {
			t.Errorf("data %q is not JSON", l.Data)
		}
	}
}

func TestSplitEnd(t *testing.T) {
	text := conversation.NewEvent(conversation.LogEvent{Message: "a"})
	done := conversation.NewEvent(conversation.QueryCompleted{})
	failed := conversation.NewEvent(conversation.QueryFailed{Error: "boom", Code: "x"})
	out, end := SplitEnd([]conversation.Event{text, done, text, failed})
	if len(out) != 2 || out[0].Type != text.Type || out[1].Type != text.Type {
		t.Fatalf("out %+v", out)
	}
	if f, ok := end.(conversation.QueryFailed); !ok || f.Error != "boom" {
		t.Fatalf("end %#v, want the last one as a value", end)
	}
	out, end = SplitEnd([]conversation.Event{text})
	if len(out) != 1 || end != nil {
		t.Fatalf("no end: %v %v", out, end)
	}
	bad := conversation.Event{Type: conversation.TypeQueryCompleted, Payload: json.RawMessage(`[`)}
	if out, end := SplitEnd([]conversation.Event{bad}); len(out) != 0 || end != nil {
		t.Fatalf("undecodable end: %v %v", out, end)
	}
	if _, ok := Deref(&conversation.QueryCompleted{}).(conversation.QueryCompleted); !ok {
		t.Fatal("Deref kept the pointer")
	}
}

func TestFailed(t *testing.T) {
	err := Failed(agent.CodeModelError, "codex", conversation.QueryFailed{Error: "rate limited", Code: "429"})
	if agent.CodeOf(err) != agent.CodeModelError || err.Error() != "codex: rate limited (429)" {
		t.Fatalf("%v (%s)", err, agent.CodeOf(err))
	}
	err = Failed(agent.CodeSandboxError, "opencode", conversation.QueryFailed{Error: "gone"})
	if agent.CodeOf(err) != agent.CodeSandboxError || err.Error() != "opencode: gone" {
		t.Fatalf("%v", err)
	}
}

func TestOffer(t *testing.T) {
	ch := make(chan conversation.Payload, 1)
	Offer(ch, conversation.QueryCompleted{})
	Offer(ch, conversation.QueryFailed{}) // must not block; the first stays
	if _, ok := (<-ch).(conversation.QueryCompleted); !ok {
		t.Fatal("the first end was not kept")
	}
	Offer(make(chan conversation.Payload), conversation.QueryCompleted{}) // nobody waiting
}

type emitHost struct {
	agent.Host
	err  error
	got  []conversation.Event
	logs strings.Builder
}

func (h *emitHost) Emit(ctx context.Context, evs ...conversation.Event) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("no deadline")
	}
	h.got = append(h.got, evs...)
	return h.err
}

func (h *emitHost) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(&h.logs, nil)) }

func TestEmit(t *testing.T) {
	h := &emitHost{}
	Emit(h, "codex")
	if len(h.got) != 0 {
		t.Fatal("emitted nothing as something")
	}
	Emit(h, "codex", conversation.NewEvent(conversation.LogEvent{Message: "a"}))
	if len(h.got) != 1 || h.logs.Len() != 0 {
		t.Fatalf("got %d, logs %q", len(h.got), h.logs.String())
	}
	h.err = errors.New("disk full")
	Emit(h, "gemini", conversation.NewEvent(conversation.LogEvent{Message: "b"}))
	if !strings.Contains(h.logs.String(), "record gemini events") || !strings.Contains(h.logs.String(), "disk full") {
		t.Fatalf("logs %q", h.logs.String())
	}
}
