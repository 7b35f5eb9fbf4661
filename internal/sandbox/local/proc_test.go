package local

import (
	"fmt"
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	st, err := parseStat([]byte("1234 (a (weird) name) S 1 1234 99 0 -1 4194560 100 0 0 0 0 0 0 0 20 5 1 0 5 0 0"))
	if err != nil {
		t.Fatal(err)
	}
	if st != (procStat{PID: 1234, PPID: 1, PGID: 1234, SID: 99, Nice: 5, State: 'S'}) {
		t.Fatalf("%+v", st)
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := parseStat(self); err != nil || st.PID != os.Getpid() || st.PPID != os.Getppid() {
		t.Fatalf("own stat: %+v %v", st, err)
	}
	if n, err := Nice(os.Getpid()); err != nil {
		t.Fatal(err)
	} else if own, _ := ownNice(); n != own {
		t.Fatalf("Nice(self) = %d, getpriority says %d", n, own)
	}
	for _, bad := range []string{"", "1234", "(x) S 1 2 3", "x (y) S 1 2 3", "1 (y) S 1 2", "1 (y) SS 1 2 3", "1 (y) S 1 x 3", "1 )y( S 1 2 3", "1 (y) S 1 2 3 0 0 0 0 0 0 0 0 0 0 0 0 x"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0"))
	f.Add([]byte("42 (a) b) c) R 1 42 42"))
	f.Add([]byte("7 () Z 1 2 3"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err != nil {
			return
		}
		// Whatever parsed must print back to a line that parses the same.
		line := fmt.Sprintf("%d (x) %c %d %d %d 0 0 0 0 0 0 0 0 0 0 0 0 %d", st.PID, st.State, st.PPID, st.PGID, st.SID, st.Nice)
		again, err := parseStat([]byte(line))
		if err != nil || again != st {
			t.Fatalf("%q parsed as %+v; its rendering %q gives %+v, %v", b, st, line, again, err)
		}
	})
}
