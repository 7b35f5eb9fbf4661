//go:build linux

package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a process of the run other than the server: an executor, or
// something running in a workspace.
type proc struct {
	pid      int
	argv     []string
	state    string
	executor bool
}

// ours lists the processes whose command line names the data or run
// folder, or whose working directory is inside one, except the server
// (pid server) and this test.
func ours(data, run string, server int) []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == server || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		hit := under(cwd, data) || under(cwd, run)
		for _, a := range argv {
			if strings.Contains(a, data) || strings.Contains(a, run) {
				hit = true
			}
		}
		if !hit {
			continue
		}
		out = append(out, proc{pid: pid, argv: argv, state: procState(pid),
			executor: len(argv) > 1 && argv[1] == "executor"})
	}
	return out
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// procState is the state letter of /proc/<pid>/stat (R, S, Z…).
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "?"
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2 : i+3]
	}
	return "?"
}

// executors are the live executor processes of the run.
func executors(run string) []proc {
	var out []proc
	for _, p := range ours("\x00never", run, 0) {
		if p.executor && p.state != "Z" {
			out = append(out, p)
		}
	}
	return out
}

// noteCgroups remembers the cgroup folders of process pid that agentd
// made (their path has an "agentd" element).
func (h *harness) noteCgroups(pid int) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || !slices.Contains(strings.Split(parts[2], "/"), "agentd") {
			continue
		}
		var roots []string
		if parts[1] == "" {
			roots = []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}
		} else {
			roots = append(roots, "/sys/fs/cgroup/"+parts[1])
			for _, c := range strings.Split(parts[1], ",") {
				roots = append(roots, "/sys/fs/cgroup/"+strings.TrimPrefix(c, "name="))
			}
		}
		for _, r := range roots {
			if dir := filepath.Join(r, parts[2]); exists(dir) {
				h.cgroups[dir] = true
			}
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// mountsUnder lists the mount points below data or run (not data itself,
// our tmpfs).
func mountsUnder(data, run string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := f[4]
		if (under(mp, data) && mp != data) || under(mp, run) {
			out = append(out, mp)
		}
	}
	return out
}

// serverFDs lists what the server's descriptors point to, except its
// database files (the read pool opens and closes connections as it sees
// fit).
func serverFDs(pid int, skipRemotePort int) []string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	skip := map[string]bool{}
	if skipRemotePort > 0 {
		skip = socketsTo(pid, skipRemotePort)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		base := filepath.Base(target)
		if strings.HasPrefix(base, "agentd.db") || skip[target] {
			continue
		}
		// Socket and pipe inode numbers change; what matters is how many.
		if i := strings.IndexByte(target, '['); i > 0 {
			target = target[:i]
		}
		out = append(out, target)
	}
	slices.Sort(out)
	return out
}

// socketsTo returns the descriptor targets ("socket:[inode]") of pid's TCP
// connections to port, from its /proc/PID/net/tcp and tcp6.
func socketsTo(pid, port int) map[string]bool {
	out := map[string]bool{}
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/" + f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			// sl local_address rem_address st … uid timeout inode
			fields := strings.Fields(line)
			if len(fields) > 9 && strings.HasSuffix(fields[2], want) {
				out["socket:["+fields[9]+"]"] = true
			}
		}
	}
	return out
}

// killOurs kills whatever of the run is still running (executors the
// killed server left behind) and waits for it to go.
func killOurs(t *testing.T, data, run string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := ours(data, run, 0)
		alive := 0
		for _, p := range ps {
			if p.state == "Z" {
				continue
			}
			alive++
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		if alive == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("chaos: processes still running at the end: %v", ps)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
