package datadir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// oldInstall is a data folder as an older version left it: everything
// 0755/0644, workspaces open.
func oldInstall(t *testing.T) string {
	t.Helper()
	base, err := os.MkdirTemp("", "dd") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	dir := filepath.Join(base, "data")
	os.MkdirAll(filepath.Join(dir, "workspaces", "s1"), 0o755)
	os.MkdirAll(filepath.Join(dir, "workspaces", "s2"), 0o755)
	for _, d := range []string{dir, filepath.Join(dir, "workspaces"), filepath.Join(dir, "workspaces", "s1"), filepath.Join(dir, "workspaces", "s2")} {
		os.Chmod(d, 0o755)
	}
	os.WriteFile(filepath.Join(dir, "workspaces", "s1", "f"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "agentd.db"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "node-id"), nil, 0o644)
	os.Mkdir(filepath.Join(dir, "artifacts"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	os.Symlink("/etc", filepath.Join(dir, "workspaces", "link"))
	return dir
}

func modes(t *testing.T, want map[string]os.FileMode) {
	t.Helper()
	for p, w := range want {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().Perm() != w {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode().Perm(), err, w)
		}
	}
	if fi, _ := os.Stat("/etc/passwd"); fi.Mode().Perm() != 0o644 {
		t.Fatal("followed a symlink")
	}
	if fi, _ := os.Stat("/etc"); fi.Mode().Perm() != 0o755 {
		t.Fatal("followed a symlink")
	}
}

// TestSecureClosed: with agents running as the server's user (local,
// executor without users, bubblewrap switching users itself) the data
// folder, workspaces/ and each workspace become 0700.
func TestSecureClosed(t *testing.T) {
	dir := oldInstall(t)
	if err := Secure(dir, false); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "workspaces")
	modes(t, map[string]os.FileMode{
		dir: 0o700, ws: 0o700, filepath.Join(ws, "s1"): 0o700, filepath.Join(ws, "s2"): 0o700,
		filepath.Join(ws, "s1", "f"): 0o644, filepath.Join(dir, "agentd.db"): 0o644,
	})
	// Through a symlinked data folder too.
	link := filepath.Join(filepath.Dir(dir), "link")
	os.Symlink(dir, link)
	os.Chmod(dir, 0o755)
	if err := Secure(link, false); err != nil {
		t.Fatal(err)
	}
	modes(t, map[string]os.FileMode{dir: 0o700})
	// A fresh one.
	fresh := filepath.Join(t.TempDir(), "fresh")
	if err := os.Mkdir(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Secure(fresh, false); err != nil {
		t.Fatal(err)
	}
	modes(t, map[string]os.FileMode{fresh: 0o700, filepath.Join(fresh, "workspaces"): 0o700})
}

// TestSecureShared: with sandboxes running as other users, who pass
// through to their workspace, the folders are 0711 and everything else in
// the data folder is closed.
func TestSecureShared(t *testing.T) {
	dir := oldInstall(t)
	if err := Secure(dir, true); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "workspaces")
	modes(t, map[string]os.FileMode{
		dir: 0o711, ws: 0o711, filepath.Join(ws, "s1"): 0o700, filepath.Join(ws, "s2"): 0o700,
		filepath.Join(dir, "agentd.db"): 0o600, filepath.Join(dir, "node-id"): 0o600, filepath.Join(dir, "artifacts"): 0o700,
	})
	if err := Secure(filepath.Join(dir, "agentd.db", "x"), true); err == nil {
		t.Fatal("bad data dir accepted")
	}
	// A parent other users cannot pass.
	closed := filepath.Join(dir, "closed")
	os.Mkdir(closed, 0o700)
	os.Mkdir(filepath.Join(closed, "data"), 0o700)
	if err := Secure(filepath.Join(closed, "data"), true); err == nil || !strings.Contains(err.Error(), "cannot be passed") {
		t.Fatalf("closed parent: %v", err)
	}
}
