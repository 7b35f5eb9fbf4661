package agentd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/internal/agentdtest"
)

// deploy/systemd/agentd.service passes `systemd-analyze verify` (every
// directive known, the command there), with ExecStart pointed at this
// source's binary; skipped where systemd-analyze is not installed.
func TestSystemdUnit(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile(filepath.Join(agentdtest.RepoRoot(t), "deploy", "systemd", "agentd.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ProtectSystem=strict", "NoNewPrivileges=yes", "StateDirectory=agentd", "KillSignal=SIGTERM"} {
		if !strings.Contains(string(unit), "\n"+d+"\n") {
			t.Errorf("the unit lacks %s", d)
		}
	}
	text := strings.Replace(string(unit), "ExecStart=/usr/local/bin/agentd ", "ExecStart="+agentdtest.Binary(t)+" ", 1)
	path := filepath.Join(t.TempDir(), "agentd.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
