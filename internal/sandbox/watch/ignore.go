package watch

import (
	"path"
	"strings"
)

// DefaultIgnore is the ignore list environments use unless told otherwise:
// version-control and dependency folders, caches, and the state the agent
// CLIs keep under $HOME (which is the workspace in the local backend).
var DefaultIgnore = []string{
	".git",
	"node_modules",
	".venv",
	"__pycache__",
	".DS_Store",
	".claude/projects",
	".claude/statsig",
	".claude/todos",
	".claude/shell-snapshots",
	".codex/sessions",
	".codex/log",
	".gemini/tmp",
	".local/share",
	".local/state",
	"/.cache",
	"/.npm",
}

// Ignore is a compiled ignore list. The zero value and nil ignore nothing.
// It is immutable and safe for concurrent use.
//
// Pattern semantics: a pattern without "/" matches any single path
// component ("node_modules" ignores a/node_modules/b). A pattern containing
// "/" is anchored at the workspace root and matches a path prefix made of
// whole components (".claude/projects" ignores .claude/projects and
// everything below it, not .claude/projectsX nor x/.claude/projects); a
// leading or trailing "/" only anchors ("/.cache" ignores the root's .cache
// only). Components may use path.Match wildcards ("*.pyc"); a malformed
// wildcard is compared literally.
type Ignore struct {
	anywhere []string   // single-component patterns
	prefixes [][]string // anchored multi-component patterns
}

// NewIgnore compiles patterns. Empty patterns and "." are skipped.
func NewIgnore(patterns []string) *Ignore {
	ig := &Ignore{}
	for _, p := range patterns {
		p = strings.TrimSpace(p)
		anchored := strings.Contains(p, "/")
		var parts []string
		for _, c := range strings.Split(p, "/") {
			if c != "" && c != "." {
				parts = append(parts, c)
			}
		}
		switch {
		case len(parts) == 0:
		case anchored:
			ig.prefixes = append(ig.prefixes, parts)
		default:
			ig.anywhere = append(ig.anywhere, parts[0])
		}
	}
	return ig
}

// Match reports whether the workspace-relative slash path rel is ignored.
// Everything below an ignored path is ignored too.
func (ig *Ignore) Match(rel string) bool {
	if ig == nil || rel == "" || rel == "." {
		return false
	}
	comps := strings.Split(rel, "/")
	for _, c := range comps {
		for _, p := range ig.anywhere {
			if matchComponent(p, c) {
				return true
			}
		}
	}
	for _, pre := range ig.prefixes {
		if len(pre) > len(comps) {
			continue
		}
		ok := true
		for i, p := range pre {
			if !matchComponent(p, comps[i]) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func matchComponent(pattern, name string) bool {
	if pattern == name {
		return true
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}
