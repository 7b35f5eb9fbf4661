package local

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

func TestCreateWorkspace(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "a", "b")
	p := New(Options{})
	if p.Name() != "local" {
		t.Fatalf("Name %q", p.Name())
	}
	e, err := p.Create(t.Context(), sandbox.Spec{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(ws)
	if err != nil || info.Mode().Perm() != 0o700 || !info.IsDir() {
		t.Fatalf("workspace %v %v", info, err)
	}
	if e.WorkDir() != ws || !e.Running() {
		t.Fatalf("WorkDir %q Running %v", e.WorkDir(), e.Running())
	}
	if err := e.WriteFile(t.Context(), "kept.txt", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Terminate(t.Context()); err != nil {
		t.Fatal(err)
	}
	// An existing workspace is reused with its contents.
	e2, err := p.Create(t.Context(), sandbox.Spec{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Terminate(context.Background())
	if b, err := e2.ReadFile(t.Context(), "kept.txt"); err != nil || string(b) != "x" {
		t.Fatalf("reused workspace: %q %v", b, err)
	}
	// A workspace reached through a symlink reports its real path.
	if err := os.Symlink(ws, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	e3, err := p.Create(t.Context(), sandbox.Spec{Workspace: filepath.Join(base, "link")})
	if err != nil {
		t.Fatal(err)
	}
	defer e3.Terminate(context.Background())
	if e3.WorkDir() != ws {
		t.Fatalf("WorkDir through a symlink: %q", e3.WorkDir())
	}

	if _, err := p.Create(t.Context(), sandbox.Spec{}); err == nil {
		t.Fatal("Create without a workspace succeeded")
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(t.Context(), sandbox.Spec{Workspace: file}); err == nil {
		t.Fatal("Create on a file succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Create(ctx, sandbox.Spec{Workspace: ws}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled ctx: %v", err)
	}
}

func TestReadWriteFiles(t *testing.T) {
	env := testEnv(t, Options{})
	ctx := t.Context()
	if err := env.WriteFile(ctx, "a/b/c.txt", []byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := env.ReadFile(ctx, "a/b/c.txt"); err != nil || string(b) != "hello" {
		t.Fatalf("read back %q %v", b, err)
	}
	if b, err := env.ReadFile(ctx, "./a//b/./c.txt"); err != nil || string(b) != "hello" {
		t.Fatalf("read via a non-clean path %q %v", b, err)
	}
	info, err := os.Stat(filepath.Join(env.WorkDir(), "a/b/c.txt"))
	if err != nil || info.Mode().Perm() != 0o644 {
		t.Fatalf("default mode %v %v", info.Mode(), err)
	}
	// Overwrite with an exact mode (no umask) and check no temporary file
	// is left beside it.
	if err := env.WriteFile(ctx, "a/b/c.txt", []byte("bye"), 0o755); err != nil {
		t.Fatal(err)
	}
	info, _ = os.Stat(filepath.Join(env.WorkDir(), "a/b/c.txt"))
	if info.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", info.Mode())
	}
	ents, _ := os.ReadDir(filepath.Join(env.WorkDir(), "a/b"))
	if len(ents) != 1 {
		t.Fatalf("folder holds %d entries after writes", len(ents))
	}

	// The empty file is a file.
	if err := env.WriteFile(ctx, "empty", nil, 0); err != nil {
		t.Fatal(err)
	}
	if b, err := env.ReadFile(ctx, "empty"); err != nil || len(b) != 0 {
		t.Fatalf("empty file: %q %v", b, err)
	}
	list, err := env.List(ctx, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[1].Path != "empty" || list[1].Size != 0 || list[1].IsDir {
		t.Fatalf("listing %+v", list)
	}

	if err := env.WriteFiles(ctx, []sandbox.File{
		{Path: "m/1", Content: []byte("1")},
		{Path: "m/2", Content: []byte("2"), Mode: 0o600},
	}); err != nil {
		t.Fatal(err)
	}
	if b, _ := env.ReadFile(ctx, "m/2"); string(b) != "2" {
		t.Fatalf("m/2 = %q", b)
	}
	// One bad path: nothing of the batch is written.
	err = env.WriteFiles(ctx, []sandbox.File{{Path: "n/ok", Content: []byte("1")}, {Path: "../bad"}})
	if !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("batch with a bad path: %v", err)
	}
	if _, err := env.ReadFile(ctx, "n/ok"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("partial batch written: %v", err)
	}

	// Errors.
	if _, err := env.ReadFile(ctx, "missing"); !errors.Is(err, sandbox.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := env.ReadFile(ctx, "a"); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("reading a folder: %v", err)
	}
	if _, err := env.ReadFile(ctx, "empty/x"); !errors.Is(err, sandbox.ErrInvalidPath) && !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("path through a file: %v", err)
	}
	if err := env.WriteFile(ctx, "a", []byte("x"), 0); err == nil {
		t.Fatal("overwriting a folder with a file succeeded")
	}
	if err := env.WriteFile(ctx, "empty/x", []byte("x"), 0); err == nil {
		t.Fatal("writing below a file succeeded")
	}
	for _, p := range []string{"", ".", "./"} {
		if err := env.WriteFile(ctx, p, nil, 0); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Fatalf("write %q: %v", p, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := env.WriteFile(cctx, "c", nil, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("write with a cancelled ctx: %v", err)
	}
}

func TestPathEscapes(t *testing.T) {
	env := testEnv(t, Options{})
	ctx := t.Context()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := env.WorkDir()
	for name, target := range map[string]string{
		"etc":      "/etc",
		"passwd":   "/etc/passwd",
		"out":      outside,
		"up":       "../../..",
		"deep/up":  "../..",
		"loop1":    "loop2",
		"loop2":    "loop1",
		"dangling": filepath.Join(outside, "nothing"),
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	bad := []string{
		"../x", "/etc/passwd", "a/../../x", "..", "x\x00y", `a\b`,
		"etc/passwd", "etc", "passwd", "out/secret", "up/etc/passwd", "deep/up/x",
		"loop1", "dangling",
	}
	for _, p := range bad {
		if _, err := env.ReadFile(ctx, p); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("ReadFile(%q): %v", p, err)
		}
		if err := env.WriteFile(ctx, p, []byte("pwned"), 0); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("WriteFile(%q): %v", p, err)
		}
		if _, err := env.List(ctx, p, true); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("List(%q): %v", p, err)
		}
	}
	for _, p := range []string{"etc/x", "out/secret", "up/tmp", "../x", "/etc/passwd"} {
		if err := env.Remove(ctx, p); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("Remove(%q): %v", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "s" {
		t.Fatal("file outside the workspace changed")
	}
	if _, err := os.Stat(filepath.Join(outside, "nothing")); err == nil {
		t.Fatal("write through a dangling symlink created a file outside")
	}
	// Removing a symlink that points outside removes the link only.
	if err := env.Remove(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatal("Remove followed a symlink out of the workspace")
	}
}

func TestSymlinksInside(t *testing.T) {
	env := testEnv(t, Options{})
	ctx := t.Context()
	ws := env.WorkDir()
	if err := env.WriteFile(ctx, "real/f.txt", []byte("data"), 0); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"rel":     "real",
		"abs":     filepath.Join(ws, "real"),
		"sub/up":  "../real/f.txt",
		"newfile": "real/created.txt", // dangling, inside
	} {
		_ = os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755)
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"rel/f.txt", "abs/f.txt", "sub/up"} {
		if b, err := env.ReadFile(ctx, p); err != nil || string(b) != "data" {
			t.Errorf("ReadFile(%q) = %q, %v", p, b, err)
		}
	}
	// Writing through a symlink writes its target.
	if err := env.WriteFile(ctx, "sub/up", []byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "real/f.txt")); string(b) != "new" {
		t.Fatalf("target = %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "sub/up")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatal("the symlink was replaced")
	}
	if err := env.WriteFile(ctx, "newfile", []byte("c"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "real/created.txt")); string(b) != "c" {
		t.Fatalf("dangling inside link target = %q", b)
	}
	list, err := env.List(ctx, "abs", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := paths(list); got != "abs/created.txt abs/f.txt" {
		t.Fatalf("List via symlink: %s", got)
	}
}

func paths(list []sandbox.FileInfo) string {
	var s []string
	for _, fi := range list {
		p := fi.Path
		if fi.IsDir {
			p += "/"
		}
		s = append(s, p)
	}
	return strings.Join(s, " ")
}

func TestListAndRemove(t *testing.T) {
	env := testEnv(t, Options{})
	ctx := t.Context()
	for _, p := range []string{
		"a.txt", "a/b.txt", "a/c/d.txt", "a-b", ".git/HEAD", "node_modules/x/i.js",
		"src/node_modules/y", ".claude/projects/p.jsonl", ".claude/settings.json", "z/empty",
	} {
		if err := env.WriteFile(ctx, p, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(env.WorkDir(), "emptydir"), 0o755); err != nil {
		t.Fatal(err)
	}
	list, err := env.List(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	want := ".claude/ .claude/settings.json a/ a-b a.txt a/b.txt a/c/ a/c/d.txt emptydir/ src/ z/ z/empty"
	if got := paths(list); got != want {
		t.Fatalf("recursive listing:\n got %s\nwant %s", got, want)
	}
	list, _ = env.List(ctx, ".", false)
	if got := paths(list); got != ".claude/ .git/ a/ a-b a.txt emptydir/ node_modules/ src/ z/" {
		t.Fatalf("top listing: %s", got)
	}
	list, _ = env.List(ctx, "a", true)
	if got := paths(list); got != "a/b.txt a/c/ a/c/d.txt" {
		t.Fatalf("listing a: %s", got)
	}
	// An ignored folder asked for explicitly is listed.
	list, _ = env.List(ctx, "node_modules", true)
	if got := paths(list); got != "node_modules/x/ node_modules/x/i.js" {
		t.Fatalf("listing node_modules: %s", got)
	}
	if _, err := env.List(ctx, "missing", false); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("List of a missing folder: %v", err)
	}
	if _, err := env.List(ctx, "a.txt", false); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("List of a file: %v", err)
	}

	if err := env.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := env.Remove(ctx, "a.txt"); err != nil {
		t.Fatal(err)
	}
	if err := env.Remove(ctx, "a"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second Remove: %v", err)
	}
	for _, p := range []string{"", ".", "a/.."} {
		if err := env.Remove(ctx, p); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Fatalf("Remove(%q): %v", p, err)
		}
	}
	list, _ = env.List(ctx, "", false)
	if got := paths(list); got != ".claude/ .git/ a-b emptydir/ node_modules/ src/ z/" {
		t.Fatalf("after Remove: %s", got)
	}
}

// FuzzFilePaths writes and reads arbitrary paths in a workspace seeded
// with escaping symlinks, and checks nothing outside it is ever touched.
func FuzzFilePaths(f *testing.F) {
	for _, s := range []string{"a", "../x", "/etc/passwd", "out/x", "up/x", "in/x", "a/./b/../c", "out", ".", "", "in/../out/y", "abs/z"} {
		f.Add(s)
	}
	base := f.TempDir()
	ws, outside := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		f.Fatal(err)
	}
	e, err := New(Options{}).Create(context.Background(), sandbox.Spec{Workspace: ws})
	if err != nil {
		f.Fatal(err)
	}
	env := e.(*Environment)
	f.Cleanup(func() { env.Terminate(context.Background()) })
	links := map[string]string{"out": outside, "up": "..", "in": ".", "abs": ws}
	f.Fuzz(func(t *testing.T, p string) {
		ctx := context.Background()
		for name, target := range links { // a previous input may have removed them
			_ = os.RemoveAll(filepath.Join(ws, name))
			if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
				t.Fatal(err)
			}
		}
		_ = env.WriteFile(ctx, p, []byte("x"), 0)
		_, _ = env.ReadFile(ctx, p)
		_, _ = env.List(ctx, p, true)
		if ents, _ := os.ReadDir(outside); len(ents) != 0 {
			t.Fatalf("path %q wrote outside the workspace: %s", p, ents[0].Name())
		}
		if ents, _ := os.ReadDir(base); len(ents) != 2 {
			t.Fatalf("path %q wrote beside the workspace", p)
		}
		_ = env.Remove(ctx, p)
		if _, err := os.Stat(outside); err != nil {
			t.Fatalf("path %q removed outside the workspace", p)
		}
	})
}

// TestOpenFileRegularOnly: reads hand out regular files only, refusing a
// FIFO (which would block the reader until a writer comes), a device, a
// folder or a socket before reading anything; ReadFile refuses a file
// over its bound before reading it; OpenFile streams one of any size.
func TestOpenFileRegularOnly(t *testing.T) {
	ws := t.TempDir()
	e, err := New(Options{MaxReadBytes: 1 << 20}).Create(t.Context(), sandbox.Spec{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Terminate(context.Background())
	env := e.(*Environment)
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink("fifo", filepath.Join(ws, "to-fifo"))
	os.Mkdir(filepath.Join(ws, "dir"), 0o755)
	ln, err := net.Listen("unix", filepath.Join(ws, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bad := []string{"fifo", "to-fifo", "dir", "sock", ""}
	if os.Getuid() == 0 {
		if err := syscall.Mknod(filepath.Join(ws, "zero"), syscall.S_IFCHR|0o666, 1<<8|5); err != nil {
			t.Fatal(err)
		}
		bad = append(bad, "zero")
	}
	for _, p := range bad {
		done := make(chan error, 2)
		go func() {
			_, err := env.ReadFile(t.Context(), p)
			done <- err
			_, err = env.OpenFile(t.Context(), p)
			done <- err
		}()
		for range 2 {
			select {
			case err := <-done:
				if !errors.Is(err, sandbox.ErrNotRegular) || !errors.Is(err, sandbox.ErrInvalidPath) {
					t.Fatalf("%q: want ErrNotRegular, got %v", p, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%q: still reading after 5 s", p)
			}
		}
	}
	// Links out stay refused; missing files are not found.
	os.Symlink("/etc/passwd", filepath.Join(ws, "out"))
	if _, err := env.OpenFile(t.Context(), "out"); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("link out: %v", err)
	}
	if _, err := env.OpenFile(t.Context(), "missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}

	// Over MaxReadBytes: ReadFile refuses it without reading it; OpenFile
	// streams it.
	f, err := os.Create(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(1 << 30)
	f.WriteAt([]byte("end"), 1<<30-3)
	f.Close()
	os.Symlink("big", filepath.Join(ws, "to-big"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = env.ReadFile(t.Context(), "to-big")
	runtime.ReadMemStats(&after)
	if !errors.Is(err, sandbox.ErrTooLarge) {
		t.Fatalf("1 GiB file over a 1 MiB bound: %v", err)
	}
	if a := after.TotalAlloc - before.TotalAlloc; a > 1<<20 {
		t.Fatalf("refusing it allocated %d bytes", a)
	}
	r, err := env.OpenFile(t.Context(), "to-big")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if info := r.Info(); info.Size != 1<<30 || !info.Mode.IsRegular() || info.Path != "to-big" {
		t.Fatalf("info %+v", info)
	}
	if _, err := r.Seek(-3, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(r); err != nil || string(b) != "end" {
		t.Fatalf("tail %q %v", b, err)
	}
	// Exactly the bound is read.
	os.WriteFile(filepath.Join(ws, "fits"), make([]byte, 1<<20), 0o644)
	if b, err := env.ReadFile(t.Context(), "fits"); err != nil || len(b) != 1<<20 {
		t.Fatalf("a file of the bound: %d %v", len(b), err)
	}
}
