package local

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentd/agentd/sandbox"
)

// niceScript prints the niceness of a child of the command's shell (field
// 19 of /proc/self/stat as cut sees it), started after the command's own
// start has been reniced.
const niceScript = "sleep 0.5; cut -d' ' -f19 /proc/self/stat"

func TestNiceLowersTheCommandsPriority(t *testing.T) {
	own, err := ownNice()
	if err != nil {
		t.Fatal(err)
	}
	if own >= MaxNice {
		t.Skipf("this test runs at niceness %d already", own)
	}
	for _, tc := range []struct {
		nice int
		pty  bool
		want int
	}{
		{0, false, own},
		{5, false, min(own+5, MaxNice)},
		{10, true, min(own+10, MaxNice)},
		{100, false, MaxNice},
	} {
		env := testEnv(t, Options{Nice: tc.nice})
		c := sh(niceScript)
		if tc.pty {
			c.PTY = &sandbox.WindowSize{Rows: 24, Cols: 80}
		}
		r := run(t, env, c)
		got, err := strconv.Atoi(strings.TrimSpace(string(r.stdout)))
		if err != nil || r.status.Code != 0 {
			t.Fatalf("nice %d: output %q, exit %d", tc.nice, r.stdout, r.status.Code)
		}
		if got != tc.want {
			t.Errorf("Options.Nice %d (pty %v): a command's child runs at niceness %d, want %d", tc.nice, tc.pty, got, tc.want)
		}
	}
	// This process keeps its own priority.
	if now, _ := ownNice(); now != own {
		t.Fatalf("the server's niceness changed from %d to %d", own, now)
	}
}
