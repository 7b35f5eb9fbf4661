package local

import (
	"bytes"
	"errors"
	"os"
	"strconv"
)

// procStat holds the fields of /proc/<pid>/stat this package uses.
type procStat struct {
	PID, PPID, PGID, SID int
	Nice                 int // 0 when the line stops before it
	State                byte
}

// parseStat parses the contents of /proc/<pid>/stat. The command name is
// in parentheses and may itself contain spaces and parentheses, so the
// fields are counted from the last ")".
func parseStat(b []byte) (procStat, error) {
	var st procStat
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return st, errors.New("proc stat: no command name")
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return st, errors.New("proc stat: bad pid")
	}
	fields := bytes.Fields(b[end+1:])
	if len(fields) < 4 {
		return st, errors.New("proc stat: too few fields")
	}
	if s := fields[0]; len(s) != 1 || !('A' <= s[0] && s[0] <= 'Z' || 'a' <= s[0] && s[0] <= 'z') {
		return st, errors.New("proc stat: bad state")
	}
	st.PID, st.State = pid, fields[0][0]
	ints := []*int{&st.PPID, &st.PGID, &st.SID}
	for i, dst := range ints {
		if *dst, err = strconv.Atoi(string(fields[i+1])); err != nil {
			return st, errors.New("proc stat: bad number")
		}
	}
	// fields[0] is the stat's field 3 (state); nice is field 19, which a
	// short line (only in tests) leaves at 0.
	if len(fields) >= 17 {
		if st.Nice, err = strconv.Atoi(string(fields[16])); err != nil {
			return st, errors.New("proc stat: bad nice")
		}
	}
	return st, nil
}

// Nice returns the niceness of process pid, as /proc shows it.
func Nice(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	st, err := parseStat(b)
	if err != nil {
		return 0, err
	}
	return st.Nice, nil
}

// processes lists the live processes (zombies excluded) for which keep
// returns true. Processes that vanish while being read are skipped.
func processes(keep func(procStat) bool) []procStat {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procStat
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		st, err := parseStat(b)
		if err != nil || st.State == 'Z' || st.State == 'X' {
			continue
		}
		if keep(st) {
			out = append(out, st)
		}
	}
	return out
}
