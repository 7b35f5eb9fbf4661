package session_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/sandbox/watch"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store/memstore"
)

func shellManager(t *testing.T, sb sandbox.Provider) (*session.Manager, *eventlog.Log) {
	t.Helper()
	return startManager(t, session.Config{Store: memstore.New(), Sandbox: sb, PersistFilesMax: 1 << 20}, shell.Architecture{})
}

// A turn's workspace changes are in the log before its query:completed: a
// client that reads the session when it sees the turn end sees the turn's
// files. (They used to come after query:completed and session:idle, once
// the watcher's debounce had passed.) The debounce here is long, so only a
// flush at the turn's end can bring them in time.
func TestTurnFilesBeforeTurnEnd(t *testing.T) {
	for _, poll := range []bool{false, true} {
		name := map[bool]string{false: "inotify", true: "polling"}[poll]
		t.Run(name, func(t *testing.T) {
			sb := local.New(local.Options{Watch: watch.Options{Debounce: 2 * time.Second, MaxDelay: 10 * time.Second, Poll: poll, PollInterval: 10 * time.Second}})
			m, lg := shellManager(t, sb)
			ctx := context.Background()
			rec, err := m.Create(ctx, session.CreateRequest{Architecture: "shell"}, "alice")
			if err != nil {
				t.Fatal(err)
			}
			s, _ := m.Get(rec.ID)
			sub, _ := lg.Subscribe(ctx, rec.ID, 0)
			defer sub.Close()
			for turn, cmd := range []string{
				"mkdir -p sub && echo a > a.txt && echo b > sub/b.txt && echo c > c.txt",
				"echo more >> a.txt && rm c.txt && echo d > sub/d.txt",
			} {
				q, err := s.Send(ctx, cmd, "alice")
				if err != nil {
					t.Fatal(err)
				}
				var files []string
				for {
					e := nextAny(t, sub)
					if e.Type == conversation.TypeFileCreated || e.Type == conversation.TypeFileModified || e.Type == conversation.TypeFileDeleted {
						var p conversation.FileChange
						json.Unmarshal(e.Payload, &p)
						files = append(files, string(e.Type)+" "+p.Path)
					}
					if e.Type == conversation.TypeQueryCompleted || e.Type == conversation.TypeQueryFailed {
						if e.Type == conversation.TypeQueryFailed {
							t.Fatalf("turn %s failed: %s", q, e.Payload)
						}
						break
					}
				}
				slices.Sort(files)
				want := [][]string{
					{"file:created a.txt", "file:created c.txt", "file:created sub/b.txt"},
					{"file:created sub/d.txt", "file:deleted c.txt", "file:modified a.txt"},
				}[turn]
				if !slices.Equal(files, want) {
					t.Fatalf("turn %d: before query:completed the log had %q, want %q", turn+1, files, want)
				}
				// And the state a client reads at that moment agrees.
				_, st, err := m.State(ctx, rec.ID)
				if err != nil {
					t.Fatal(err)
				}
				var paths []string
				for _, f := range st.WorkspaceFiles {
					paths = append(paths, f.Path)
				}
				slices.Sort(paths)
				wantPaths := [][]string{{"a.txt", "c.txt", "sub/b.txt"}, {"a.txt", "sub/b.txt", "sub/d.txt"}}[turn]
				if !slices.Equal(paths, wantPaths) {
					t.Fatalf("turn %d: workspace files in the state %q, want %q", turn+1, paths, wantPaths)
				}
				next(t, sub, conversation.TypeSessionIdle)
			}
		})
	}
}
