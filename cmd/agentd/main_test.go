package main_test

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/agentdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// agentd runs the built binary and returns stdout, stderr and the exit code.
func agentd(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(agentdtest.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {}, {"--help"}} {
		out, _, code := agentd(t, nil, args...)
		if code != 0 || !strings.Contains(out, "serve") || !strings.Contains(out, "convert") || !strings.Contains(out, "help [<command>") {
			t.Fatalf("%v: %d\n%s", args, code, out)
		}
		if strings.Contains(out, "executor") {
			t.Fatalf("%v: the internal executor command is listed:\n%s", args, out)
		}
	}
	out, _, code := agentd(t, nil, "help", "run")
	if code != 0 || !strings.HasPrefix(out, "Usage: agentd run") {
		t.Fatalf("help run: %d\n%s", code, out)
	}
	// Hidden, not gone: the server starts it.
	if out, _, code := agentd(t, nil, "executor", "--help"); code != 0 || !strings.Contains(out, "executor") {
		t.Fatalf("executor --help: %d %s", code, out)
	}
}

// A usage error is one line and a hint, exit 2.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
		hint string
	}{
		{[]string{"serve", "--bogus"}, "agentd: unknown flag --bogus", "Run 'agentd serve --help' for usage."},
		{[]string{"run"}, "agentd: missing flags: --architecture=STRING", "Run 'agentd run --help' for usage."},
		{[]string{"nope"}, "agentd: unexpected argument nope", "Run 'agentd --help' for usage."},
		{[]string{"convert", "/etc/hostname"}, "agentd: missing --format (agentd convert --list shows the formats)", "Run 'agentd convert --help' for usage."},
	} {
		out, errOut, code := agentd(t, nil, tc.args...)
		if code != 2 || out != "" || errOut != tc.msg+"\n"+tc.hint+"\n" {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %q", tc.args, code, out, errOut)
		}
	}
}

func TestConvertFormats(t *testing.T) {
	out, _, code := agentd(t, nil, "convert", "--list")
	if code != 0 || !strings.Contains(out, "opencode-run-json") || strings.Count(out, "\n") < 10 {
		t.Fatalf("--list: %d\n%s", code, out)
	}
	help, _, _ := agentd(t, nil, "convert", "--help")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		name := strings.Fields(l)[0]
		if !strings.Contains(help, "    "+name+" ") {
			t.Errorf("--help does not list %s", name)
		}
	}
	// A file that is not in the format: a warning and exit 1.
	run := filepath.Join(agentdtest.RepoRoot(t), "internal/agent/opencode/testdata/run-json/shell-probe.jsonl")
	_, errOut, code := agentd(t, nil, "convert", "-f", "claude-stream-json", run)
	if code != 1 || !strings.Contains(errOut, "no events: the input does not look like claude-stream-json output") {
		t.Fatalf("wrong format: %d %s", code, errOut)
	}
	out, _, code = agentd(t, nil, "convert", "--blocks", "-f", "opencode-run-json", run)
	if code != 0 || !strings.Contains(out, "The probe ran for openai.") {
		t.Fatalf("opencode run json: %d %s", code, out)
	}
}

// `agentd run` finds a server started with AGENTD_ADDR through the same
// variable, and exits with the shell command's status.
func TestRunUsesServeAddress(t *testing.T) {
	p := agentdtest.StartProcess(t, nil, "--data-dir", t.TempDir(), "--no-ui")
	addr := strings.TrimPrefix(p.URL, "http://")
	_, _, code := agentd(t, []string{"AGENTD_ADDR=" + addr, "AGENTD_SERVER="}, "run", "-a", "shell", "exit 7")
	if code != 7 {
		t.Fatalf("exit code %d, want 7", code)
	}
	out, _, code := agentd(t, []string{"AGENTD_ADDR=" + addr}, "run", "-a", "shell", "echo fine")
	if code != 0 || !strings.Contains(out, "fine") {
		t.Fatalf("echo: %d %s", code, out)
	}
	_, errOut, code := agentd(t, []string{"AGENTD_ADDR=" + addr}, "run", "-a", "no-such-arch", "x")
	if code != 1 || !strings.Contains(errOut, "the server refused it") || strings.Contains(errOut, "is agentd serve running") {
		t.Fatalf("bad architecture: %d %s", code, errOut)
	}
}

// A bad --artifacts URL, or an object store that does not answer, stops
// serve at start with one clear line (never the credentials) and exit 1.
func TestServeRefusesBadArtifacts(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	for _, tc := range []struct{ url, msg string }{
		{"s3://Bad_Bucket", `agentd: artifacts URL: "Bad_Bucket" is not a valid bucket name`},
		{"s3://key:hunter2@bucket", "agentd: artifacts URL: credentials do not go in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"gs://bucket", `agentd: artifacts URL: scheme "gs" is not s3`},
		{"s3://agentd-test?endpoint=http://" + closed, "agentd: artifacts s3://agentd-test?endpoint=http://" + closed + "&path-style=true: bucket not reachable: "},
	} {
		out, errOut, code := agentd(t, []string{"AGENTD_ARTIFACTS=" + tc.url}, "serve", "--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--no-ui")
		if code != 1 || out != "" || !strings.Contains(errOut, tc.msg) || strings.Contains(errOut, "hunter2") {
			t.Errorf("%s: exit %d\nstdout %q\nstderr %q", tc.url, code, out, errOut)
		}
	}
}
