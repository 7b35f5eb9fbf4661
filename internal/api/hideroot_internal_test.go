package api

import "testing"

// A path at the very start of a message is hidden like one inside it.
func TestHideRootAtTheStart(t *testing.T) {
	const root = "/srv/d"
	for in, want := range map[string]string{
		root + "/workspaces/s1/a.txt: denied": "a.txt: denied",
		root + "/workspaces/s1":               ".",
		root + "/x.db is locked":              "<data-dir>/x.db is locked",
		root:                                  "<data-dir>",
	} {
		if got := hideRoot(in, root); got != want {
			t.Errorf("hideRoot(%q) = %q, want %q", in, got, want)
		}
	}
}

// continuesName: letters, digits, '_' and '-' go on a name, and so does a
// '.' followed by one of them or another '.'; nothing else does, including
// the bytes next to each range.
func TestContinuesName(t *testing.T) {
	for _, c := range "_-09azAZ5mM" {
		if !continuesName(string(c)) {
			t.Errorf("%q does not continue a name", c)
		}
		if !continuesName("." + string(c)) {
			t.Errorf(".%q does not continue a name", c)
		}
	}
	for _, c := range "/:@[`{ ./\x00\x7f" {
		if c == '.' {
			continue
		}
		if continuesName(string(c)) {
			t.Errorf("%q continues a name", c)
		}
		if continuesName("." + string(c)) {
			t.Errorf(".%q continues a name", c)
		}
	}
	for rest, want := range map[string]bool{"": false, ".": false, "..": true, ". ": false, ".x": true} {
		if got := continuesName(rest); got != want {
			t.Errorf("continuesName(%q) = %v, want %v", rest, got, want)
		}
	}
}
