package agentd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/store/postgres/pgtest"
)

// Two agentd serve processes share one store (issue 12): the second starts
// while a turn runs on the first. Its start-up recovery must leave that
// session alone (its lease is the first's), and the turn ends normally on
// the first with every line of output once and seqs without gap or repeat.
// Before fencing, the second wrote query:failed SERVER_RESTARTED and status
// terminated into the running session and the first's next append failed.
func TestSecondServerLeavesRunningSessionAlone(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		secondServerLeavesRunningSessionAlone(t, "sqlite://"+filepath.Join(t.TempDir(), "shared.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		secondServerLeavesRunningSessionAlone(t, postgresStore(t))
	})
}

// postgresStore returns a store URL on a new schema of the test server.
// The server comes from scripts/pg.sh (CI): these tests start no private
// server, which would outlive the package's goleak check.
func postgresStore(t *testing.T) string {
	t.Helper()
	if os.Getenv(pgtest.EnvDSN) == "" {
		if os.Getenv(pgtest.EnvRequire) != "" {
			t.Fatalf("%s is not set (scripts/pg.sh start)", pgtest.EnvDSN)
		}
		t.Skipf("set %s to run against PostgreSQL (eval \"$(scripts/pg.sh start)\")", pgtest.EnvDSN)
	}
	return pgtest.Schema(t)
}

func secondServerLeavesRunningSessionAlone(t *testing.T, storeURL string) {
	ctx := context.Background()
	a := agentdtest.StartProcess(t, nil, "--data-dir", t.TempDir(), "--store", storeURL, "--no-ui")
	created, err := a.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	const lines = 40
	started := filepath.Join(t.TempDir(), "started")
	release := filepath.Join(t.TempDir(), "release")
	// Half the output, then wait for the second server to be up, then the
	// rest: the turn spans the second server's whole start-up.
	cmd := fmt.Sprintf(`for i in $(seq 1 %d); do echo line $i; done; touch %s; while [ ! -e %s ]; do sleep 0.05; done; for i in $(seq %d %d); do echo line $i; done`,
		lines/2, started, release, lines/2+1, lines)
	sent, err := a.Client.Send(ctx, id, cmd)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil })

	b := agentdtest.StartProcess(t, nil, "--data-dir", t.TempDir(), "--store", storeURL, "--no-ui")
	if !strings.Contains(b.Logs(), "session runs on another server") {
		t.Fatalf("the second server's start-up did not see the session's lease; its log:\n%s", b.Logs())
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	end := waitTurn(t, a.Client, id, sent.QueryID)
	if end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("the turn ended %s %s; want query:completed", end.Type, end.Payload)
	}
	// session:idle follows the turn's end (the status is set just before
	// the event is appended: wait for the event itself).
	waitFor(t, func() bool {
		p, err := a.Client.Events(ctx, id, 0, 0)
		return err == nil && len(p.Events) > 0 && p.Events[len(p.Events)-1].Type == conversation.TypeSessionIdle
	})
	page, err := a.Client.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range page.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap or a repeat", i, e.Seq)
		}
		switch e.Type {
		case conversation.TypeQueryFailed:
			t.Fatalf("seq %d: query:failed %s", e.Seq, e.Payload)
		case conversation.TypeStatus:
			var st struct{ Status conversation.SessionStatus }
			_ = json.Unmarshal(e.Payload, &st)
			if st.Status == conversation.SessionTerminated {
				t.Fatalf("seq %d: the session was terminated: %s", e.Seq, e.Payload)
			}
		}
	}
	st, err := a.Client.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	out := st.Blocks[len(st.Blocks)-1]
	if out.Type != conversation.BlockToolResult || out.Output != want.String() {
		t.Fatalf("the turn's output block %s %q; want every line once:\n%s", out.Type, out.Output, want.String())
	}
	// The second server reads the same log.
	pageB, err := b.Client.Events(ctx, id, 0, 0)
	if err != nil || len(pageB.Events) != len(page.Events) {
		var types []string
		for _, e := range pageB.Events {
			types = append(types, string(e.Type))
		}
		t.Fatalf("the second server reads %d events, %v; want %d: %v", len(pageB.Events), err, len(page.Events), types)
	}
}

// A second agentd serve on the same data folder (so the same node id,
// which leases cannot tell apart) refuses to start, and the first's turn
// goes on untouched.
func TestSecondServerOnSameDataDirRefused(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	a := agentdtest.StartProcess(t, nil, "--data-dir", data, "--no-ui")
	created, err := a.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	release := filepath.Join(t.TempDir(), "release")
	sent, err := a.Client.Send(ctx, created.SessionID, fmt.Sprintf(`echo before; while [ ! -e %s ]; do sleep 0.05; done; echo after`, release))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, agentdtest.Binary(t), "serve", "--addr", "127.0.0.1:0", "--data-dir", data, "--no-ui")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "data folder in use by another agentd") {
		t.Fatalf("a second serve on the same data folder: %v\n%s", err, out)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if end := waitTurn(t, a.Client, created.SessionID, sent.QueryID); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("the first server's turn ended %s %s", end.Type, end.Payload)
	}
	// In process too: agentd.New on a folder in use fails with
	// ErrDataDirInUse, and works once the folder is free.
	if _, err := agentd.New(ctx, agentd.Config{DataDir: data, Logger: slog.New(slog.DiscardHandler)}); !errors.Is(err, agentd.ErrDataDirInUse) {
		t.Fatalf("agentd.New on a folder in use = %v, want ErrDataDirInUse", err)
	}
	a.Kill()
	srv, err := agentd.New(ctx, agentd.Config{DataDir: data, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("agentd.New after the first server died: %v", err)
	}
	if err := srv.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// A session the second server left alone at its start (its lease was
// the first's) is taken over by the second once the first dies: its lease
// expires, the second's sweep settles the turn (SERVER_LOST), and the
// next message runs there. On SQLite without a bus as on PostgreSQL.
func TestLeftAloneSessionTakenOverWhenItsServerDies(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		leftAloneTakenOver(t, "sqlite://"+filepath.Join(t.TempDir(), "shared.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		leftAloneTakenOver(t, postgresStore(t))
	})
}

func leftAloneTakenOver(t *testing.T, storeURL string) {
	ctx := context.Background()
	args := []string{"--store", storeURL, "--no-ui", "--lease-ttl", "1s"}
	a := agentdtest.StartProcess(t, nil, append([]string{"--data-dir", t.TempDir()}, args...)...)
	created, err := a.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	started := filepath.Join(t.TempDir(), "started")
	sent, err := a.Client.Send(ctx, id, fmt.Sprintf("echo before; touch %s; sleep 600", started))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := os.Stat(started); return err == nil })
	b := agentdtest.StartProcess(t, nil, append([]string{"--data-dir", t.TempDir()}, args...)...)
	if !strings.Contains(b.Logs(), "session runs on another server") {
		t.Fatalf("the second server's start-up did not leave the session alone; its log:\n%s", b.Logs())
	}
	a.Kill()
	end := waitTurn(t, b.Client, id, sent.QueryID)
	var p conversation.QueryFailed
	_ = json.Unmarshal(end.Payload, &p)
	if end.Type != conversation.TypeQueryFailed || p.Code != "SERVER_LOST" {
		t.Fatalf("the turn ended %s %s", end.Type, end.Payload)
	}
	next, err := b.Client.Send(ctx, id, "echo after")
	if err != nil {
		t.Fatal(err)
	}
	if end := waitTurn(t, b.Client, id, next.QueryID); end.Type != conversation.TypeQueryCompleted {
		t.Fatalf("the next turn ended %s %s", end.Type, end.Payload)
	}
	page, err := b.Client.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range page.Events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the log has a gap or a repeat", i, e.Seq)
		}
	}
	st, err := b.Client.Session(ctx, id)
	if err != nil || st.Blocks[len(st.Blocks)-1].Output != "after\n" {
		t.Fatalf("state %+v, %v", st, err)
	}
}
