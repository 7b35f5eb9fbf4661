package agentd_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/agentdtest"
)

func TestDefaultDataDir(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/x/data")
	if got := agentd.DefaultDataDir(); got != "/x/data/agentd" {
		t.Fatalf("with XDG_DATA_HOME: %s", got)
	}
	t.Setenv("XDG_DATA_HOME", "relative") // ignored, as the spec says
	t.Setenv("HOME", "/home/u")
	if got := agentd.DefaultDataDir(); got != "/home/u/.local/share/agentd" {
		t.Fatalf("without: %s", got)
	}
}

// A second server on a data folder in use refuses to start, says why,
// and leaves the first one alone; once the first stops, it starts.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first := agentdtest.Start(t, agentd.Config{DataDir: dir})
	_, err := agentd.New(context.Background(), agentd.Config{DataDir: dir, Addr: "127.0.0.1:0"})
	if !errors.Is(err, agentd.ErrDataDirInUse) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second server: %v", err)
	}
	if _, err := first.Client.Health(context.Background()); err != nil {
		t.Fatalf("first server hurt: %v", err)
	}
	first.Stop()
	second := agentdtest.Start(t, agentd.Config{DataDir: dir})
	if _, err := second.Client.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The CLI: a second `agentd serve` on the same folder exits non-zero with
// one clear line; the start-up line names the data folder.
func TestServeRefusesBusyDataDir(t *testing.T) {
	dir := t.TempDir()
	p := agentdtest.StartProcess(t, nil, "--data-dir", dir, "--no-ui")
	if !strings.Contains(p.Logs(), "(data: "+dir+")") {
		t.Fatalf("start-up line does not name the data folder:\n%s", p.Logs())
	}
	out, err := exec.Command(agentdtest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--no-ui").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("second serve: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "in use by another agentd") {
		t.Fatalf("second serve said:\n%s", out)
	}
	// Without --data-dir, the user's data folder.
	home := t.TempDir()
	cmd := exec.Command(agentdtest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--no-ui")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME=", "AGENTD_DATA_DIR=")
	cmd.Dir = t.TempDir()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), "listening") {
		n, err := stderr.Read(buf)
		if err != nil {
			t.Fatalf("no start-up line: %v\n%s", err, got.String())
		}
		got.Write(buf[:n])
	}
	want := filepath.Join(home, ".local", "share", "agentd")
	if !strings.Contains(got.String(), "(data: "+want+")") {
		t.Fatalf("default data folder not %s:\n%s", want, got.String())
	}
	if _, err := os.Stat(filepath.Join(cmd.Dir, "data")); !os.IsNotExist(err) {
		t.Fatal("a ./data folder was created in the working directory")
	}
}
