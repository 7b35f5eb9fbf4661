package formattest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatal and Skip end only the goroutine
// they run in, so a test can check that a helper fails, and why.
type recorder struct {
	testing.TB
	outcome string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.outcome = "fail: " + fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) {
	r.outcome = "fail: " + fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) {
	r.outcome = "skip: " + fmt.Sprint(args...)
	runtime.Goexit()
}

func outcome(t *testing.T, fn func(tb testing.TB)) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(r)
	}()
	<-done
	return r.outcome
}

func write(t *testing.T, name, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckSharedCopies(t *testing.T) {
	shared, pkg := t.TempDir(), t.TempDir()
	t.Setenv("AGENTD_TESTDATA", shared)
	t.Chdir(pkg)
	formats := Formats{"x-json": {"testdata/agent-output/*.jsonl"}}

	if got := outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); !strings.HasPrefix(got, "skip: no shared test data") {
		t.Fatalf("no shared data: %q", got)
	}
	write(t, filepath.Join(shared, "x", "a.jsonl"), "one\n")
	if got := outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); !strings.Contains(got, "no identical copy") {
		t.Fatalf("no copy: %q", got)
	}
	write(t, filepath.Join(pkg, "testdata", "agent-output", "a.jsonl"), "two\n")
	if got := outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); !strings.Contains(got, "no identical copy") {
		t.Fatalf("a different copy: %q", got)
	}
	write(t, filepath.Join(pkg, "testdata", "agent-output", "a.jsonl"), "one\n")
	if got := outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); got != "" {
		t.Fatalf("an identical, converted copy: %q", got)
	}
	if got := outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", Formats{"x-json": {"testdata/other/*"}}) }); !strings.Contains(got, "no format test converts it") {
		t.Fatalf("a copy no format converts: %q", got)
	}
}

func TestRunMissingFile(t *testing.T) {
	got := outcome(t, func(tb testing.TB) { Run(tb, "codex-rollout", filepath.Join(t.TempDir(), "missing.jsonl")) })
	if !strings.HasPrefix(got, "fail: convert codex-rollout") {
		t.Fatalf("a missing file: %q", got)
	}
}
