package watch

import (
	"strings"
	"testing"
)

func TestIgnoreMatch(t *testing.T) {
	ig := NewIgnore(append([]string{"*.pyc", "", ".", "build/out/", "[bad"}, DefaultIgnore...))
	cases := []struct {
		path string
		want bool
	}{
		{".git", true},
		{".git/config", true},
		{"sub/.git/HEAD", true},
		{"a/node_modules/x/y.js", true},
		{"node_modulesX/a", false},
		{"src/main.go", false},
		{"pkg/__pycache__/m.cpython.pyc", true},
		{"m.pyc", true},
		{"m.py", false},
		{".claude/projects", true},
		{".claude/projects/-w/1.jsonl", true},
		{".claude/projectsX", false},
		{".claude/settings.json", false},
		{"x/.claude/projects/a", false}, // anchored
		{".cache/pip/x", true},
		{"src/.cache/x", false}, // "/.cache" is anchored at the root
		{"build/out/a.o", true},
		{"build/outer", false},
		{"build", false},
		{"[bad", true}, // malformed wildcard compared literally
		{"", false},
		{".", false},
	}
	for _, c := range cases {
		if got := ig.Match(c.path); got != c.want {
			t.Errorf("Match(%q) = %v, want %v", c.path, got, c.want)
		}
	}
	var nilIg *Ignore
	if nilIg.Match(".git") {
		t.Error("nil Ignore matched")
	}
	if NewIgnore(nil).Match(".git") {
		t.Error("empty Ignore matched")
	}
}

// FuzzIgnore checks that matching never panics and that everything below
// an ignored path is ignored too (the watcher and List rely on it to skip
// whole folders).
func FuzzIgnore(f *testing.F) {
	f.Add(".git", "a/.git/b")
	f.Add(".claude/projects", ".claude/projects/x")
	f.Add("/x/", "x")
	f.Add("*", "")
	f.Add("[", "[")
	f.Fuzz(func(t *testing.T, pattern, p string) {
		ig := NewIgnore(strings.Split(pattern, ","))
		if ig.Match(p) && p != "" && !ig.Match(p+"/child") {
			t.Fatalf("pattern %q matches %q but not %q", pattern, p, p+"/child")
		}
	})
}
