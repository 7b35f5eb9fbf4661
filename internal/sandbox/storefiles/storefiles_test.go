package storefiles_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/sandbox/storefiles"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type files map[string][]store.WorkspaceFile

func (f files) ListWorkspaceFiles(_ context.Context, id string) ([]store.WorkspaceFile, error) {
	if id == "broken" {
		return nil, errors.New("store down")
	}
	return f[id], nil
}

func TestView(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := storefiles.New(files{"s": {
		{Path: "a.txt", Content: []byte("A"), UpdatedAt: at},
		{Path: "src/b.go", Content: []byte("package b"), Mode: 0o755},
		{Path: "src/deep/c", Content: []byte("c")},
		{Path: "../escape", Content: []byte("x")},
	}})
	ctx := context.Background()
	env, err := p.Create(ctx, sandbox.Spec{SessionID: "s", Workspace: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Terminate(ctx)
	all, err := env.List(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, fi := range all {
		paths = append(paths, fi.Path)
	}
	if got := fmtList(paths); got != "a.txt src src/b.go src/deep src/deep/c" {
		t.Fatalf("recursive list: %s", got)
	}
	top, _ := env.List(ctx, ".", false)
	if len(top) != 2 || top[0].Path != "a.txt" || !top[1].IsDir || top[0].ModTime != at || top[0].Size != 1 {
		t.Fatalf("top: %+v", top)
	}
	sub, _ := env.List(ctx, "src", false)
	if len(sub) != 2 || sub[0].Path != "src/b.go" || sub[0].Mode != 0o755 || sub[1].Path != "src/deep" {
		t.Fatalf("src: %+v", sub)
	}
	if b, err := env.ReadFile(ctx, "src/b.go"); err != nil || string(b) != "package b" {
		t.Fatalf("read %q %v", b, err)
	}
	f, err := env.(sandbox.FileOpener).OpenFile(ctx, "a.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "A" || f.Info().Size != 1 {
		t.Fatalf("open %q %+v", b, f.Info())
	}
	for _, c := range []struct {
		path string
		want error
	}{{"missing", sandbox.ErrNotFound}, {"src", sandbox.ErrNotRegular}, {"../escape", sandbox.ErrInvalidPath}, {"/abs", sandbox.ErrInvalidPath}} {
		if _, err := env.ReadFile(ctx, c.path); !errors.Is(err, c.want) {
			t.Errorf("read %s: %v, want %v", c.path, err, c.want)
		}
	}
	if _, err := env.List(ctx, "a.txt", false); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Errorf("list of a file: %v", err)
	}
	if _, err := env.List(ctx, "nope", false); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("list of nothing: %v", err)
	}
	if err := env.WriteFile(ctx, "x", nil, 0); !errors.Is(err, storefiles.ErrReadOnly) {
		t.Errorf("write: %v", err)
	}
	if _, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"true"}}); !errors.Is(err, storefiles.ErrReadOnly) {
		t.Errorf("exec: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, _ := env.Watch(wctx)
	cancel()
	if _, ok := <-ch; ok {
		t.Error("watch delivered an event")
	}
	if _, err := p.Create(ctx, sandbox.Spec{SessionID: "broken"}); err == nil {
		t.Error("a store error was not reported")
	}
	empty, _ := p.Create(ctx, sandbox.Spec{SessionID: "none"})
	if l, err := empty.List(ctx, "", true); err != nil || len(l) != 0 {
		t.Errorf("no files: %v %v", l, err)
	}
}

func fmtList(p []string) string {
	s := ""
	for i, x := range p {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s
}
