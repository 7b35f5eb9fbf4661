package formattest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
)

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

	if got := agenttest.Outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); !strings.HasPrefix(got, "skip: no shared test data") {
		t.Fatalf("no shared data: %q", got)
	}
	write(t, filepath.Join(shared, "x", "a.jsonl"), "one\n")
	if got := agenttest.Outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); !strings.Contains(got, "no identical copy") {
		t.Fatalf("no copy: %q", got)
	}
	write(t, filepath.Join(pkg, "testdata", "agent-output", "a.jsonl"), "two\n")
	if got := agenttest.Outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); !strings.Contains(got, "no identical copy") {
		t.Fatalf("a different copy: %q", got)
	}
	write(t, filepath.Join(pkg, "testdata", "agent-output", "a.jsonl"), "one\n")
	if got := agenttest.Outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", formats) }); got != "" {
		t.Fatalf("an identical, converted copy: %q", got)
	}
	if got := agenttest.Outcome(t, func(tb testing.TB) { CheckSharedCopies(tb, "x", Formats{"x-json": {"testdata/other/*"}}) }); !strings.Contains(got, "no format test converts it") {
		t.Fatalf("a copy no format converts: %q", got)
	}
}

func TestRunMissingFile(t *testing.T) {
	got := agenttest.Outcome(t, func(tb testing.TB) { Run(tb, "codex-rollout", filepath.Join(t.TempDir(), "missing.jsonl")) })
	if !strings.HasPrefix(got, "convert codex-rollout") {
		t.Fatalf("a missing file: %q", got)
	}
}
