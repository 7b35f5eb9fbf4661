package sandbox

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// CleanPath is the one place that decides whether a path stays in the
// workspace (the package doc): every way out is refused here, not only a
// leading "..", whatever later layers (the local backend's os.Root) would
// also catch.
func TestCleanPath(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen)
	ok := []struct{ in, want string }{
		{"a", "a"},
		{"./a", "a"},
		{"a/b/", "a/b"},
		{"a//b", "a/b"},
		{"a/./b", "a/b"},
		{".", "."},
		{"", "."},
		{"./", "."},
		{"..a/b..", "..a/b.."}, // names that only start or end with dots
		{"a/...", "a/..."},
		{long, long},
		{strings.Repeat("a/", (MaxPathLen-1)/2) + "a", strings.Repeat("a/", (MaxPathLen-1)/2) + "a"},
	}
	for _, c := range ok {
		got, err := CleanPath(c.in)
		if err != nil || got != c.want {
			t.Errorf("CleanPath(%.40q) = %.40q, %v; want %.40q", c.in, got, err, c.want)
		}
	}
	bad := []string{
		"..",
		"../x",
		"a/..",           // the workspace root by a detour: refused, not cleaned to "."
		"a/../..",        // out, after a step in
		"a/../../x",      // out and back down
		"a/b/../../../x", // deeper
		"./..",
		"a/./../..",
		"/",
		"/etc/passwd",
		"//x",
		"a\x00b",
		"\x00",
		`a\b`,
		`..\x`,
		`\x`,
		long + "a",        // a name over NAME_MAX
		"x/" + long + "a", // not the first name
		strings.Repeat("a/", MaxPathLen/2) + "abc", // over PATH_MAX
	}
	for _, in := range bad {
		got, err := CleanPath(in)
		if !errors.Is(err, ErrInvalidPath) {
			t.Errorf("CleanPath(%.40q) = %.40q, %v; want ErrInvalidPath", in, got, err)
		}
		if err != nil && got != "" {
			t.Errorf("CleanPath(%.40q) returned %.40q with its error", in, got)
		}
	}
}

// The longest accepted path is exactly MaxPathLen bytes; one more is refused.
func TestCleanPathLimits(t *testing.T) {
	p := strings.Repeat("a/", MaxPathLen/2) // 4094 bytes
	p += "b"                                // 4095
	if _, err := CleanPath(p); err != nil {
		t.Errorf("a path of %d bytes: %v", len(p), err)
	}
	if _, err := CleanPath(p + "c"); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("a path of %d bytes: %v, want ErrInvalidPath", len(p)+1, err)
	}
	name := strings.Repeat("n", MaxNameLen)
	if _, err := CleanPath("d/" + name); err != nil {
		t.Errorf("a name of %d bytes: %v", len(name), err)
	}
	if _, err := CleanPath("d/" + name + "n"); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("a name of %d bytes: %v, want ErrInvalidPath", len(name)+1, err)
	}
}
