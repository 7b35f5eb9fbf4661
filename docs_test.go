package agentd_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documentation is self-contained: every link in README.md and
// docs/*.md resolves inside the repository (a file or folder that exists,
// and the heading a #fragment names), or is an http(s) link to a public
// page; nothing points at files outside the repository, such as the design
// notes the project started from.
func TestDocLinks(t *testing.T) {
	files, _ := filepath.Glob("docs/*.md")
	files = append([]string{"README.md"}, files...)
	root, _ := filepath.Abs(".")
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, bad := range []string{"DESIGN.md", "../shared", "/work/", "shared/notes"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s mentions %q, which is not part of the repository", file, bad)
			}
		}
		for _, l := range markdownLinks(text) {
			checked++
			if err := checkLink(root, file, l); err != "" {
				t.Errorf("%s: link %q: %s", file, l, err)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links found: the link scanner is broken", checked)
	}
}

var (
	fenced     = regexp.MustCompile("(?s)```.*?```")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	autoLink   = regexp.MustCompile(`<((?:https?|ftp|file|mailto):[^>\s]+)>`)
	bareURL    = regexp.MustCompile(`\b(?:https?|file)://[^\s)>\]]+`)
)

// markdownLinks returns the link targets of a Markdown text, code left out.
func markdownLinks(text string) []string {
	text = fenced.ReplaceAllString(text, "")
	text = codeSpan.ReplaceAllString(text, "")
	var out []string
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, re := range []*regexp.Regexp{inlineLink, refLink, autoLink} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			add(m[1])
		}
	}
	for _, m := range bareURL.FindAllString(text, -1) {
		add(m)
	}
	return out
}

// checkLink says what is wrong with link target l in file, or "".
func checkLink(root, file, l string) string {
	u, err := url.Parse(l)
	if err != nil {
		return "not a URL: " + err.Error()
	}
	switch u.Scheme {
	case "http", "https":
		h := u.Hostname()
		if h == "" || h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1" || h == "0.0.0.0" || !strings.Contains(h, ".") {
			return "not a public page"
		}
		return ""
	case "":
	default:
		return "only http(s) links and paths inside the repository are allowed"
	}
	if u.Host != "" || strings.HasPrefix(u.Path, "/") {
		return "an absolute path"
	}
	target := filepath.Join(filepath.Dir(file), filepath.FromSlash(u.Path))
	if u.Path == "" {
		target = file
	}
	abs, _ := filepath.Abs(target)
	if rel, err := filepath.Rel(root, abs); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "leaves the repository"
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "no such file in the repository"
	}
	if u.Fragment != "" {
		if fi.IsDir() || !strings.HasSuffix(abs, ".md") {
			return "a #fragment of something that is not a Markdown file"
		}
		data, _ := os.ReadFile(abs)
		if !hasAnchor(string(data), u.Fragment) {
			return "no heading #" + u.Fragment
		}
	}
	return ""
}

var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)

// hasAnchor reports whether a heading of text has the anchor GitHub gives
// it: lower case, spaces as hyphens, punctuation but hyphens and
// underscores dropped.
func hasAnchor(text, anchor string) bool {
	text = fenced.ReplaceAllString(text, "")
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		if b.String() == anchor {
			return true
		}
	}
	return false
}

func TestDocLinkChecker(t *testing.T) {
	root, _ := filepath.Abs(".")
	for l, bad := range map[string]bool{
		"docs/api.md": false, "api.md": true, "https://example.com/x": false, "http://localhost:8080": true,
		"../shared/DESIGN.md": true, "file:///etc/passwd": true, "/etc/passwd": true, "docs/benchmarks.md#postgresql": false,
		"docs/benchmarks.md#no-such-heading": true, "examples/embedded": false, "mailto:a@b.c": true,
	} {
		if got := checkLink(root, "README.md", l) != ""; got != bad {
			t.Errorf("%q: bad %v, want %v", l, got, bad)
		}
	}
	links := markdownLinks("see [a](docs/a.md) and [b](<b.md> \"t\") `[no](x.md)`\n```\n[no](y.md)\n```\n[r]: https://example.com/r\n<https://example.org> and http://example.net/z.")
	if got := strings.Join(links, " "); got != "docs/a.md b.md https://example.com/r https://example.org http://example.net/z." {
		t.Errorf("links %q", got)
	}
}
