package runcli_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/runcli"
)

func run(t *testing.T, server, arch, prompt string) (string, string, error) {
	t.Helper()
	var out, errOut strings.Builder
	no := false
	err := runcli.Run(context.Background(), runcli.Options{Server: server, Architecture: arch, Prompt: prompt,
		In: strings.NewReader(""), Out: &out, Err: &errOut, Color: &no})
	return out.String(), errOut.String(), err
}

// `agentd run` exits with the shell command's status, reports what the
// server refused as such, and a server it cannot reach as that.
func TestRunAgainstServer(t *testing.T) {
	srv := agentdtest.Start(t, agentd.Config{DisableUI: true})
	out, _, err := run(t, srv.URL, "shell", "echo hi")
	if err != nil || !strings.Contains(out, "hi") {
		t.Fatalf("echo: %q %v", out, err)
	}
	_, _, err = run(t, srv.URL, "shell", "echo failing >&2; exit 7")
	var exit runcli.ExitError
	if !errors.As(err, &exit) || exit.Code != 7 {
		t.Fatalf("exit 7: %v", err)
	}
	_, _, err = run(t, srv.URL, "nope", "x")
	if err == nil || !strings.Contains(err.Error(), "the server refused it") || !strings.Contains(err.Error(), "400 UNKNOWN_ARCHITECTURE") || strings.Contains(err.Error(), "running?") {
		t.Fatalf("unknown architecture: %v", err)
	}
	_, _, err = run(t, "http://127.0.0.1:1", "shell", "x")
	if err == nil || !strings.Contains(err.Error(), "cannot reach agentd at http://127.0.0.1:1") {
		t.Fatalf("unreachable: %v", err)
	}
}
