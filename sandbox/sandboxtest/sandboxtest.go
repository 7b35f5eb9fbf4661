// Package sandboxtest is the conformance suite of sandbox backends: Run
// drives a sandbox.Provider through the primitives the server uses (exec,
// files, watch, terminate) and the optional abilities it implements, with
// the semantics the built-in backends keep. A program embedding agentd runs
// it on the backend it adds (agentd.Config.Sandboxes), as the built-ins do.
//
// The environments must offer a POSIX sh (with cat and sleep on PATH): the
// suite's processes are shell scripts.
package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// Suite describes a backend for Run.
type Suite struct {
	// NewProvider returns the provider under test; it is called once per
	// sub-test.
	NewProvider func(t testing.TB) sandbox.Provider
	// Spec, when set, adjusts each environment's spec (an image, limits);
	// by default it has a session id and a new temporary workspace folder.
	Spec func(t testing.TB, spec *sandbox.Spec)
	// Timeout bounds each wait (default 20s).
	Timeout time.Duration
}

// Run runs the suite as sub-tests of t. Every environment it creates is
// terminated by the end of its sub-test; the test binary should check for
// leaked goroutines (goleak) in its TestMain.
func Run(t *testing.T, s Suite) {
	if s.NewProvider == nil {
		t.Fatal("sandboxtest: Suite.NewProvider is nil")
	}
	if s.Timeout <= 0 {
		s.Timeout = 20 * time.Second
	}
	t.Run("Name", s.testName)
	t.Run("Files", s.testFiles)
	t.Run("Paths", s.testPaths)
	t.Run("Exec", s.testExec)
	t.Run("Stdin", s.testStdin)
	t.Run("Kill", s.testKill)
	t.Run("Concurrent", s.testConcurrent)
	t.Run("Watch", s.testWatch)
	t.Run("WatchSync", s.testWatchSync)
	t.Run("OpenFile", s.testOpenFile)
	t.Run("Terminate", s.testTerminate)
}

// create makes an environment of a new provider, terminated when the test
// ends, and returns it with its spec.
func (s Suite) create(t *testing.T) (sandbox.Provider, sandbox.Environment, sandbox.Spec) {
	t.Helper()
	p := s.NewProvider(t)
	spec := sandbox.Spec{
		SessionID: "sandboxtest-" + strings.NewReplacer("/", "-", " ", "-").Replace(strings.ToLower(t.Name())),
		Workspace: filepath.Join(t.TempDir(), "ws"),
		Env:       map[string]string{"SANDBOXTEST_SPEC": "spec-value"},
	}
	if s.Spec != nil {
		s.Spec(t, &spec)
	}
	env := s.createSpec(t, p, spec)
	return p, env, spec
}

func (s Suite) createSpec(t *testing.T, p sandbox.Provider, spec sandbox.Spec) sandbox.Environment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	env, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
		defer cancel()
		if err := env.Terminate(ctx); err != nil && !errors.Is(err, sandbox.ErrTerminated) {
			t.Errorf("terminate: %v", err)
		}
	})
	return env
}

func (s Suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func (s Suite) testName(t *testing.T) {
	p, env, _ := s.create(t)
	if p.Name() == "" {
		t.Fatal("Name() is empty")
	}
	if !env.Running() {
		t.Fatal("a new environment is not Running")
	}
	if env.WorkDir() == "" {
		t.Fatal("WorkDir() is empty")
	}
}

func (s Suite) testFiles(t *testing.T) {
	_, env, _ := s.create(t)
	ctx := s.ctx(t)
	if err := env.WriteFile(ctx, "a.txt", []byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := env.ReadFile(ctx, "a.txt"); err != nil || string(b) != "one" {
		t.Fatalf("ReadFile = %q, %v; want one", b, err)
	}
	if err := env.WriteFile(ctx, "a.txt", []byte("two"), 0); err != nil {
		t.Fatal(err)
	}
	if b, err := env.ReadFile(ctx, "a.txt"); err != nil || string(b) != "two" {
		t.Fatalf("ReadFile after overwrite = %q, %v; want two", b, err)
	}
	if err := env.WriteFiles(ctx, []sandbox.File{
		{Path: "d/e/f.txt", Content: []byte("f")}, {Path: "d/g.txt"}, {Path: "run.sh", Content: []byte("echo ran\n"), Mode: 0o755},
	}); err != nil {
		t.Fatal(err)
	}
	if b, err := env.ReadFile(ctx, "d/g.txt"); err != nil || len(b) != 0 {
		t.Fatalf("empty file = %q, %v", b, err)
	}
	list, err := env.List(ctx, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := listing(list), "a.txt d/ d/e/ d/e/f.txt d/g.txt run.sh"; got != want {
		t.Fatalf("recursive listing %q, want %q", got, want)
	}
	for _, fi := range list {
		if fi.Path == "d/e/f.txt" && fi.Size != 1 {
			t.Fatalf("d/e/f.txt listed with size %d", fi.Size)
		}
		if fi.Path == "run.sh" && fi.Mode.Perm()&0o100 == 0 {
			t.Fatalf("run.sh written with mode 0755 is listed as %v", fi.Mode)
		}
	}
	if list, err = env.List(ctx, ".", false); err != nil {
		t.Fatal(err)
	}
	if got, want := listing(list), "a.txt d/ run.sh"; got != want {
		t.Fatalf("top listing %q, want %q", got, want)
	}
	if list, err = env.List(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if got, want := listing(list), "d/e/ d/e/f.txt d/g.txt"; got != want {
		t.Fatalf("listing of d %q, want %q", got, want)
	}
	if _, err := env.List(ctx, "missing", false); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("List of a missing folder: %v, want ErrNotFound", err)
	}
	if err := env.Remove(ctx, "d"); err != nil {
		t.Fatalf("remove a folder: %v", err)
	}
	if err := env.Remove(ctx, "a.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.ReadFile(ctx, "a.txt"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("ReadFile of a removed file: %v, want ErrNotFound", err)
	}
	if err := env.Remove(ctx, "d"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second Remove: %v, want ErrNotFound", err)
	}
	if list, err = env.List(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	if got := listing(list); got != "run.sh" {
		t.Fatalf("after Remove: %q", got)
	}
}

func (s Suite) testPaths(t *testing.T) {
	_, env, _ := s.create(t)
	ctx := s.ctx(t)
	for _, p := range []string{"../x", "/etc/passwd", "a/../../x", "a\x00b"} {
		if err := env.WriteFile(ctx, p, []byte("x"), 0); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("WriteFile(%q): %v, want ErrInvalidPath", p, err)
		}
		if _, err := env.ReadFile(ctx, p); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("ReadFile(%q): %v, want ErrInvalidPath", p, err)
		}
		if err := env.Remove(ctx, p); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("Remove(%q): %v, want ErrInvalidPath", p, err)
		}
	}
	for _, p := range []string{"", "."} {
		if err := env.Remove(ctx, p); !errors.Is(err, sandbox.ErrInvalidPath) {
			t.Errorf("Remove(%q) of the root: %v, want ErrInvalidPath", p, err)
		}
	}
	if _, err := env.ReadFile(ctx, "missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("ReadFile of a missing file: %v, want ErrNotFound", err)
	}
}

func (s Suite) testExec(t *testing.T) {
	_, env, _ := s.create(t)
	ctx := s.ctx(t)
	if err := env.WriteFile(ctx, "sub/in.txt", []byte("from the API"), 0); err != nil {
		t.Fatal(err)
	}
	out, errOut, st := s.run(t, env, sandbox.Cmd{
		Argv: []string{"sh", "-c", `echo "out $SANDBOXTEST_SPEC $SANDBOXTEST_CMD"; cat in.txt; echo; echo err >&2; echo made > made.txt; exit 3`},
		Dir:  "sub", Env: map[string]string{"SANDBOXTEST_CMD": "cmd-value"},
	})
	if want := "out spec-value cmd-value\nfrom the API\n"; out != want {
		t.Errorf("stdout %q, want %q", out, want)
	}
	if errOut != "err\n" {
		t.Errorf("stderr %q, want %q", errOut, "err\n")
	}
	if st.Code != 3 || st.Signal != "" || st.Success() {
		t.Errorf("exit status %+v, want code 3", st)
	}
	if b, err := env.ReadFile(ctx, "sub/made.txt"); err != nil || string(b) != "made\n" {
		t.Errorf("file made by the process: %q, %v", b, err)
	}
	if _, _, st := s.run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "exit 0"}}); !st.Success() {
		t.Errorf("exit 0: %+v", st)
	}
	// Large output arrives whole and in order.
	out, _, _ = s.run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `i=0; while [ $i -lt 20000 ]; do echo "line $i"; i=$((i+1)); done`}})
	var want strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if out != want.String() {
		t.Errorf("large output: %d bytes, want %d", len(out), want.Len())
	}
	if _, err := env.Exec(ctx, sandbox.Cmd{}); err == nil {
		t.Error("Exec of an empty command line: no error")
	}
}

func (s Suite) testStdin(t *testing.T) {
	_, env, _ := s.create(t)
	ctx := s.ctx(t)
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", `while read l; do echo "got $l"; done; echo eof`}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tag() == "" {
		t.Error("a process without a Cmd.Tag got no tag")
	}
	if _, err := p.Write([]byte("a\nb\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	out, _, st := s.collect(t, p)
	if out != "got a\ngot b\neof\n" || !st.Success() {
		t.Fatalf("stdin echo: %q %+v", out, st)
	}
	// Without Stdin the process reads end of file at once.
	out, _, _ = s.run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", `cat; echo done`}})
	if out != "done\n" {
		t.Fatalf("no stdin: %q", out)
	}
}

func (s Suite) testKill(t *testing.T) {
	_, env, _ := s.create(t)
	ctx := s.ctx(t)
	p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", `echo up; sleep 600 & exec sleep 600`}, Tag: "sleeper"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tag() != "sleeper" {
		t.Errorf("tag %q, want sleeper", p.Tag())
	}
	// Kill once it is up.
	select {
	case c := <-p.Output():
		if string(c.Data) != "up\n" {
			t.Fatalf("first output %q", c.Data)
		}
	case <-ctx.Done():
		t.Fatal("no output from the sleeper")
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	_, _, st := s.collect(t, p)
	if st.Success() {
		t.Fatalf("killed process exited %+v", st)
	}
}

func (s Suite) testConcurrent(t *testing.T) {
	_, env, _ := s.create(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
			defer cancel()
			name := fmt.Sprintf("c%d.txt", i)
			if err := env.WriteFile(ctx, name, []byte(name), 0); err != nil {
				errs <- err
				return
			}
			p, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", "cat " + name}})
			if err != nil {
				errs <- err
				return
			}
			var out []byte
			for c := range p.Output() {
				out = append(out, c.Data...)
			}
			if _, err := p.Wait(ctx); err != nil {
				errs <- err
				return
			}
			if string(out) != name {
				errs <- fmt.Errorf("process %d read %q", i, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func (s Suite) testWatch(t *testing.T) {
	_, env, _ := s.create(t)
	wctx, stop := context.WithCancel(s.ctx(t))
	defer stop()
	ch, err := env.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx := s.ctx(t)
	if err := env.WriteFile(ctx, "w.txt", []byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	e := s.waitEvent(t, ch, "w.txt")
	if e.Op != sandbox.Created || e.Size != 3 {
		t.Fatalf("after WriteFile: %+v, want created w.txt of 3 bytes", e)
	}
	s.run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "echo more >> w.txt"}})
	if e := s.waitEvent(t, ch, "w.txt"); e.Op != sandbox.Modified || e.Size != 8 {
		t.Fatalf("after a process appended: %+v, want modified w.txt of 8 bytes", e)
	}
	s.run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "mkdir -p x/y && echo z > x/y/z.txt"}})
	if e := s.waitEvent(t, ch, "x/y/z.txt"); e.Op != sandbox.Created {
		t.Fatalf("file made in a new folder: %+v", e)
	}
	if err := env.Remove(ctx, "w.txt"); err != nil {
		t.Fatal(err)
	}
	if e := s.waitEvent(t, ch, "w.txt"); e.Op != sandbox.Deleted {
		t.Fatalf("after Remove: %+v, want deleted w.txt", e)
	}
	stop()
	s.waitClosed(t, ch, "the watch channel after its context ended")
}

func (s Suite) testWatchSync(t *testing.T) {
	_, env, _ := s.create(t)
	ws, ok := env.(sandbox.WatchSyncer)
	if !ok {
		t.Skip("the environment is no sandbox.WatchSyncer")
	}
	wctx, stop := context.WithCancel(s.ctx(t))
	defer stop()
	ch, err := env.Watch(wctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx := s.ctx(t)
	s.run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "echo a > synced.txt"}})
	if err := ws.SyncWatch(ctx, "marker-1"); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatal("watch closed before the marker")
			}
			if e.Op == sandbox.Sync {
				if e.Path != "marker-1" {
					t.Fatalf("marker %q, want marker-1", e.Path)
				}
				if !slices.Contains(seen, "synced.txt") {
					t.Fatalf("marker before the change it must follow (seen %v)", seen)
				}
				return
			}
			seen = append(seen, e.Path)
		case <-ctx.Done():
			t.Fatal("no sync marker")
		}
	}
}

func (s Suite) testOpenFile(t *testing.T) {
	_, env, _ := s.create(t)
	o, ok := env.(sandbox.FileOpener)
	if !ok {
		t.Skip("the environment is no sandbox.FileOpener")
	}
	ctx := s.ctx(t)
	if err := env.WriteFiles(ctx, []sandbox.File{{Path: "big.bin", Content: bytes.Repeat([]byte("0123456789"), 10000)}, {Path: "dir/x"}}); err != nil {
		t.Fatal(err)
	}
	f, err := o.OpenFile(ctx, "big.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Info().Size != 100000 {
		t.Errorf("Info().Size = %d", f.Info().Size)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil || b.Len() != 100000 {
		t.Errorf("read %d bytes, %v", b.Len(), err)
	}
	if _, err := o.OpenFile(ctx, "dir"); !errors.Is(err, sandbox.ErrNotRegular) {
		t.Errorf("OpenFile of a folder: %v, want ErrNotRegular", err)
	}
	if _, err := o.OpenFile(ctx, "../x"); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Errorf("OpenFile(../x): %v, want ErrInvalidPath", err)
	}
	if _, err := sandbox.ReadFileLimit(ctx, env, "big.bin", 1000); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Errorf("ReadFileLimit over the limit: %v, want ErrTooLarge", err)
	}
}

func (s Suite) testTerminate(t *testing.T) {
	p, env, spec := s.create(t)
	ctx := s.ctx(t)
	if err := env.WriteFile(ctx, "kept.txt", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	ch, err := env.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"sh", "-c", "exec sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	if env.Running() {
		t.Error("Running after Terminate")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range proc.Output() {
		}
		_, _ = proc.Wait(ctx)
	}()
	select {
	case <-done:
	case <-time.After(s.Timeout):
		t.Fatal("a process outlived Terminate")
	}
	s.waitClosed(t, ch, "the watch channel after Terminate")
	if _, err := env.Exec(ctx, sandbox.Cmd{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrTerminated) {
		t.Errorf("Exec after Terminate: %v, want ErrTerminated", err)
	}
	if err := env.Terminate(ctx); err != nil && !errors.Is(err, sandbox.ErrTerminated) {
		t.Errorf("second Terminate: %v", err)
	}
	// The workspace outlives its environment: a new one on the same spec
	// finds its files.
	again := s.createSpec(t, p, spec)
	if b, err := again.ReadFile(ctx, "kept.txt"); err != nil || string(b) != "kept" {
		t.Fatalf("workspace after Terminate: %q, %v", b, err)
	}
}

// run runs cmd to its end and returns its output.
func (s Suite) run(t *testing.T, env sandbox.Environment, cmd sandbox.Cmd) (stdout, stderr string, st sandbox.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	p, err := env.Exec(ctx, cmd)
	if err != nil {
		t.Fatalf("exec %q: %v", cmd.Argv, err)
	}
	return s.collect(t, p)
}

// collect reads p's output to its end, checking that each stream's chunks
// are contiguous, and waits for it.
func (s Suite) collect(t *testing.T, p sandbox.Process) (stdout, stderr string, st sandbox.ExitStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.Timeout)
	defer cancel()
	var out, errOut []byte
	for {
		select {
		case c, ok := <-p.Output():
			if !ok {
				st, err := p.Wait(ctx)
				if err != nil {
					t.Fatalf("wait: %v", err)
				}
				return string(out), string(errOut), st
			}
			dst := &out
			switch c.Stream {
			case sandbox.Stdout:
			case sandbox.Stderr:
				dst = &errOut
			default:
				t.Fatalf("chunk of stream %q", c.Stream)
			}
			if c.Offset != int64(len(*dst)) {
				t.Fatalf("%s chunk at offset %d, want %d", c.Stream, c.Offset, len(*dst))
			}
			*dst = append(*dst, c.Data...)
		case <-ctx.Done():
			t.Fatalf("output not closed within %v; stdout so far %q", s.Timeout, out)
		}
	}
}

// waitEvent returns the next event of path (markers and other paths
// skipped).
func (s Suite) waitEvent(t *testing.T, ch <-chan sandbox.FileEvent, path string) sandbox.FileEvent {
	t.Helper()
	timeout := time.After(s.Timeout)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed while waiting for %s", path)
			}
			if e.Op != sandbox.Sync && e.Path == path {
				return e
			}
		case <-timeout:
			t.Fatalf("no event of %s within %v", path, s.Timeout)
		}
	}
}

func (s Suite) waitClosed(t *testing.T, ch <-chan sandbox.FileEvent, what string) {
	t.Helper()
	timeout := time.After(s.Timeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("%s is not closed within %v", what, s.Timeout)
		}
	}
}

// listing is a listing's paths, folders with a trailing slash.
func listing(list []sandbox.FileInfo) string {
	var b strings.Builder
	for i, fi := range list {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(fi.Path)
		if fi.IsDir {
			b.WriteByte('/')
		}
	}
	return b.String()
}
