// Package formattest runs the registered conversion formats (`agentd
// convert`) over an architecture's test data: golden files, determinism,
// the event invariants, and the copies of the shared agent output. It
// imports every architecture (through internal/convert), so only external
// test packages (package codex_test) may use it.
package formattest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentd/agentd/agent/agenttest"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/convert"
)

// Formats maps each format to the glob patterns of the test inputs it must
// convert cleanly (relative to the package folder).
type Formats map[string][]string

// Run converts file through the registered format, as `agentd convert`
// does, and returns the output bytes, the events and the warnings.
func Run(t testing.TB, format, file string) ([]byte, []conversation.Event, []convert.Warning) {
	t.Helper()
	var buf bytes.Buffer
	warns, err := convert.Run(convert.Options{Format: format, Files: []string{file}}, &buf)
	if err != nil {
		t.Fatalf("convert %s %s: %v", format, file, err)
	}
	var events []conversation.Event
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var e conversation.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		events = append(events, e)
	}
	return buf.Bytes(), events, warns
}

// Reduce converts one test input, which must convert without warnings, and
// checks and reduces the events.
func Reduce(t testing.TB, format, file string) (conversation.State, []conversation.Event) {
	t.Helper()
	_, events, warns := Run(t, format, file)
	if len(warns) > 0 {
		t.Fatalf("warnings: %v", warns)
	}
	return agenttest.CheckEvents(t, events), events
}

// CheckCorpus converts every input of formats (each pattern must match):
// no warnings, some events, the invariants, the same bytes twice, and the
// golden file testdata/golden/<format>/<name>.events.jsonl; with update it
// writes the golden files instead.
func CheckCorpus(t *testing.T, formats Formats, update bool) {
	for format, patterns := range formats {
		var files []string
		for _, pattern := range patterns {
			m, err := filepath.Glob(pattern)
			if err != nil || len(m) == 0 {
				t.Fatalf("%s: no test inputs match %s", format, pattern)
			}
			files = append(files, m...)
		}
		for _, file := range files {
			t.Run(format+"/"+filepath.Base(file), func(t *testing.T) {
				checkFile(t, format, file, update)
			})
		}
	}
}

func checkFile(t *testing.T, format, file string, update bool) {
	out, events, warns := Run(t, format, file)
	if len(warns) > 0 {
		t.Fatalf("warnings: %v", warns)
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	agenttest.CheckEvents(t, events)
	again, _, _ := Run(t, format, file)
	if !bytes.Equal(out, again) {
		t.Fatal("converting the same file twice gave different bytes")
	}
	golden := filepath.Join("testdata", "golden", format, strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))+".events.jsonl")
	if update {
		if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("output differs from %s (run go test -update after checking the change)", golden)
	}
}

// SharedRoot is the shared agent output: AGENTD_TESTDATA, by default
// /work/shared/testdata/agent-output.
func SharedRoot() string {
	if root := os.Getenv("AGENTD_TESTDATA"); root != "" {
		return root
	}
	return "/work/shared/testdata/agent-output"
}

// CheckSharedCopies: testdata/agent-output holds byte-for-byte copies of
// the shared agent output of one CLI (SharedRoot()/cli), so the tests run
// without it. When the shared folder is there, every file in it must have
// an identical copy here that some pattern of formats converts; without it
// the test is skipped.
func CheckSharedCopies(t testing.TB, cli string, formats Formats) {
	t.Helper()
	root := SharedRoot()
	shared, _ := filepath.Glob(filepath.Join(root, cli, "*"))
	if len(shared) == 0 {
		t.Skip("no shared test data at " + root)
	}
	covered := map[string]bool{}
	for _, patterns := range formats {
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
