package sqlite

import (
	"strings"
	"testing"
	"time"
)

func TestParseDSN(t *testing.T) {
	cases := []struct {
		in   string
		path string
		sync Synchronous
		busy time.Duration
		set  paramSet
	}{
		{in: "sqlite:///abs/path.db", path: "/abs/path.db"},
		{in: "sqlite://relative.db", path: "relative.db"},
		{in: "sqlite://data/agentd.db", path: "data/agentd.db"},
		{in: "sqlite:relative.db", path: "relative.db"},
		{in: "plain/path.db", path: "plain/path.db"},
		{in: "/abs/plain.db", path: "/abs/plain.db"},
		{in: ":memory:", path: ":memory:"},
		{in: "sqlite://:memory:", path: ":memory:"},
		{in: "sqlite:///abs/x.db?synchronous=full", path: "/abs/x.db", sync: SyncFull, set: paramSet{synchronous: true}},
		{in: "x.db?synchronous=NORMAL", path: "x.db", sync: SyncNormal, set: paramSet{synchronous: true}},
		{in: "x.db?busy_timeout=250", path: "x.db", busy: 250 * time.Millisecond, set: paramSet{busyTimeout: true}},
		{in: "x.db?busy_timeout=2s&synchronous=full", path: "x.db", sync: SyncFull, busy: 2 * time.Second,
			set: paramSet{synchronous: true, busyTimeout: true}},
		{in: "x.db?", path: "x.db"},
	}
	for _, c := range cases {
		d, err := parseDSN(c.in)
		if err != nil {
			t.Errorf("parseDSN(%q): %v", c.in, err)
			continue
		}
		if d.path != c.path || d.set != c.set || d.params.synchronous != c.sync || d.params.busyTimeout != c.busy {
			t.Errorf("parseDSN(%q) = path %q sync %v busy %v set %+v; want %q %v %v %+v",
				c.in, d.path, d.params.synchronous, d.params.busyTimeout, d.set, c.path, c.sync, c.busy, c.set)
		}
	}
}

func TestParseDSNRejects(t *testing.T) {
	cases := map[string]string{
		"":                        "no database path",
		"sqlite://":               "no database path",
		"sqlite:":                 "no database path",
		"?synchronous=full":       "no database path",
		"postgres://user@host/db": "not sqlite",
		"x.db?synchronous=off":    "want normal or full",
		"x.db?synchronous=full&synchronous=normal": "given 2 times",
		"x.db?busy_timeout=-5":                     "negative",
		"x.db?busy_timeout=soon":                   "neither",
		"x.db?busy_timeout=99999999999999":         "too long",
		"x.db?busy_timeout=2h":                     "too long",
		"x.db?journal_mode=delete":                 "unknown parameter",
		"x.db?%zz":                                 "invalid URL escape",
		"file:x.db":                                "file: URIs",
		"sqlite:file:x.db?mode=ro":                 "file: URIs",
		"x\x00.db":                                 "NUL",
	}
	for in, want := range cases {
		_, err := parseDSN(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseDSN(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func FuzzParseDSN(f *testing.F) {
	for _, s := range []string{"sqlite:///a/b.db?synchronous=full&busy_timeout=5s", "sqlite://x", ":memory:", "a?b=c", "postgres://x", "x.db?busy_timeout=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDSN(s)
		if err != nil {
			return
		}
		if d.path == "" || strings.ContainsAny(d.path, "?\x00") || strings.HasPrefix(d.path, "file:") {
			t.Fatalf("parseDSN(%q) accepted path %q", s, d.path)
		}
		if d.params.busyTimeout < 0 || d.params.busyTimeout > maxBusyTimeout {
			t.Fatalf("parseDSN(%q) accepted busy timeout %v", s, d.params.busyTimeout)
		}
		if d.params.synchronous != SyncNormal && d.params.synchronous != SyncFull {
			t.Fatalf("parseDSN(%q) accepted synchronous %d", s, d.params.synchronous)
		}
	})
}
