package agentd_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// previousRelease is the commit the upgrade test builds "the previous
// release" from: there is no release tag yet, so it is the last commit
// before the latest schema change (store/sqlite/migrations/0005_identity:
// users and tokens), i.e. a store at schema version 4. Move it to the
// latest release tag once there is one (docs/deploy.md, "Upgrades").
const previousRelease = "59f9336e850180eabe4f3d8f8f516122fd20b48c"

// A store written by the previous release's binary, opened by this one:
// its migrations run at start, every session and every event is kept and
// the sessions go on. Then the previous binary refuses the migrated store
// with a clear message instead of using it, and so does this binary for a
// store newer than it knows.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the previous release")
	}
	old := previousBinary(t)
	data := t.TempDir()
	ctx := t.Context()

	// The previous release writes two sessions of two turns each.
	oldSrv := startOld(t, old, data)
	var ids []string
	for i, name := range []string{"first", "second"} {
		created, err := oldSrv.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.SessionID)
		for _, cmd := range []string{fmt.Sprintf("echo %d > kept.txt && echo written", i), "seq 1 20"} {
			sent, err := oldSrv.Send(ctx, created.SessionID, cmd)
			if err != nil {
				t.Fatal(err)
			}
			waitTurn(t, oldSrv, created.SessionID, sent.QueryID)
		}
	}
	before := map[string][]conversation.Event{}
	for _, id := range ids {
		page, err := oldSrv.Events(ctx, id, 0, 0)
		if err != nil || len(page.Events) < 8 {
			t.Fatalf("events written by the previous release: %d, %v", len(page.Events), err)
		}
		before[id] = page.Events
	}
	stopOld(t)

	// This binary migrates the store at start and keeps everything.
	srv := agentdtest.StartProcess(t, nil, "--data-dir", data)
	c := srv.Client
	list, err := c.Sessions(ctx)
	if err != nil || len(list) != len(ids) {
		t.Fatalf("sessions after the upgrade: %+v, %v", list, err)
	}
	for i, id := range ids {
		page, err := c.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) < len(before[id]) || !reflect.DeepEqual(page.Events[:len(before[id])], before[id]) {
			t.Fatalf("session %s: %d events after the upgrade, %d before (or they differ)", id, len(page.Events), len(before[id]))
		}
		sent, err := c.Send(ctx, id, "cat kept.txt")
		if err != nil {
			t.Fatal(err)
		}
		waitTurn(t, c, id, sent.QueryID)
		if out := turnOutput(ctx, t, c, id); out != fmt.Sprintf("%d\n", i) {
			t.Fatalf("session %s's workspace after the upgrade: %q", id, out)
		}
	}
	srv.Terminate()

	// The previous release refuses the store it cannot read.
	out := mustRefuse(t, old, data)
	if !strings.Contains(out, "newer than this binary") || !strings.Contains(out, "run a newer agentd") {
		t.Fatalf("the previous release on the upgraded store:\n%s", out)
	}

	// And this binary a store from a release newer than itself.
	db, err := sql.Open("sqlite", filepath.Join(data, "agentd.db"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', 0)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out = mustRefuse(t, agentdtest.Binary(t), data)
	if !strings.Contains(out, "the database is at version 999") || !strings.Contains(out, "run a newer agentd") {
		t.Fatalf("this binary on a store from the future:\n%s", out)
	}
}

// previousBinary builds agentd at previousRelease (git archive of the
// commit, go build), cached in ~/.cache/agentd/release-<commit>/agentd
// (AGENTD_RELEASE_CACHE overrides ~/.cache/agentd). Without the commit (a
// shallow clone) the test skips, unless AGENTD_REQUIRE_UPGRADE is set.
func previousBinary(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("AGENTD_RELEASE_CACHE")
	if cache == "" {
		home, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		cache = filepath.Join(home, "agentd")
	}
	bin := filepath.Join(cache, "release-"+previousRelease, "agentd")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	root := agentdtest.RepoRoot(t)
	if err := exec.Command("git", "-C", root, "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		msg := fmt.Sprintf("commit %s (the previous release) is not in this clone (fetch its history): %v", previousRelease, err)
		if os.Getenv("AGENTD_REQUIRE_UPGRADE") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	src := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, previousRelease, src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousRelease, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-ldflags", "-X github.com/agentd/agentd.Version=previous", "-o", bin+".tmp", "./cmd/agentd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the previous release: %v\n%s", err, out)
	}
	if err := os.Rename(bin+".tmp", bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

var oldProc *exec.Cmd

// startOld runs `bin serve` on data and returns a client once it listens.
func startOld(t *testing.T, bin, data string) *client.Client {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	oldProc = cmd
	t.Cleanup(func() {
		if oldProc != nil {
			_ = syscall.Kill(-oldProc.Process.Pid, syscall.SIGKILL)
			_ = oldProc.Wait()
			oldProc = nil
		}
	})
	ready := make(chan string, 1)
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			if u, ok := strings.CutPrefix(line, "agentd listening on "); ok {
				u, _, _ = strings.Cut(u, " ")
				ready <- u
			}
		}
		close(ready)
	}()
	select {
	case u, ok := <-ready:
		if !ok {
			t.Fatalf("the previous release exited at start")
		}
		c, err := client.New(u)
		if err != nil {
			t.Fatal(err)
		}
		return c
	case <-time.After(60 * time.Second):
		t.Fatal("the previous release did not start")
	}
	return nil
}

// stopOld stops the server startOld started, with SIGTERM, as an operator
// does before an upgrade.
func stopOld(t *testing.T) {
	t.Helper()
	_ = oldProc.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- oldProc.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("the previous release did not stop on SIGTERM")
	}
	oldProc = nil
}

// mustRefuse runs `bin serve` on data, which must exit non-zero at start;
// it returns what it printed.
func mustRefuse(t *testing.T, bin, data string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", data).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("%s serve on %s: %v (want a refusal at start)\n%s", bin, data, err, out)
	}
	return string(out)
}
