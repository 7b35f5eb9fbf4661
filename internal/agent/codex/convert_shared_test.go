package codex_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCopiesMatchSharedTestdata: testdata/agent-output holds byte-for-byte
// copies of the shared agent output for this CLI (AGENTD_TESTDATA, default
// /work/shared/testdata/agent-output), so the tests run without it. When
// the shared folder is there, every file in it must have an identical copy
// here, which TestFormatsConvertTestdata converts.
func TestCopiesMatchSharedTestdata(t *testing.T) {
	root := os.Getenv("AGENTD_TESTDATA")
	if root == "" {
		root = "/work/shared/testdata/agent-output"
	}
	shared, _ := filepath.Glob(filepath.Join(root, "codex", "*"))
	if len(shared) == 0 {
		t.Skip("no shared test data at " + root)
	}
	covered := map[string]bool{}
	for _, patterns := range formatFiles {
		for _, pattern := range patterns {
			m, _ := filepath.Glob(pattern)
			for _, f := range m {
				covered[filepath.Base(f)] = true
			}
		}
	}
	for _, f := range shared {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("testdata", "agent-output", filepath.Base(f)))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: no identical copy in testdata/agent-output (%v)", f, err)
		}
		if !covered[filepath.Base(f)] {
			t.Fatalf("%s: no format test converts it", f)
		}
	}
}
