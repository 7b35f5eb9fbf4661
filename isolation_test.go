package agentd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// The isolation tests attack a real server from inside real sessions (the
// shell architecture runs each message as a command): under the executor
// sandbox with a user per session, and under bubblewrap, without and with
// users. Every attack must fail, or, where a backend does not claim to stop
// it, do what docs/security.md says.

const isoUsers = "agentd-iso1,agentd-iso2,agentd-iso3"

// isoSetup creates the pool's users (root only).
func isoSetup(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers and sandboxes")
	}
	if os.Getuid() != 0 {
		t.Skip("isolation tests need root: they create Unix users and sandboxes running as them")
	}
	for _, name := range strings.Split(isoUsers, ",") {
		if _, err := user.Lookup(name); err == nil {
			continue
		}
		if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v: %s", name, err, out)
		}
	}
}

type isoCase struct {
	name   string
	args   []string
	bwrap  bool // network and file system of its own
	users  bool // a Unix user per session
	docker bool // a container per session: network and file system of its own
	kube   bool // a pod per session: network, file system and uid of its own
}

// own reports whether the sandbox has a network and file system of its own.
func (tc isoCase) own() bool { return tc.bwrap || tc.docker || tc.kube }

func TestIsolation(t *testing.T) {
	isoSetup(t)
	cases := []isoCase{
		{name: "executor+users", args: []string{"--sandbox", "executor", "--run-as-user-pool", isoUsers}, users: true},
		{name: "bwrap", args: []string{"--sandbox", "bwrap"}, bwrap: true},
		{name: "bwrap+users", args: []string{"--sandbox", "bwrap", "--run-as-user-pool", isoUsers}, bwrap: true, users: true},
		{name: "docker", args: []string{"--sandbox", "docker"}, docker: true},
		{name: "kubernetes", users: true, kube: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bwrap {
				if _, err := exec.LookPath("bwrap"); err != nil {
					t.Skip("bubblewrap not installed (scripts/setup.sh installs it)")
				}
			}
			if tc.docker {
				tc.args = append(tc.args, "--docker-image", agentdtest.DockerImage(t))
			}
			if tc.kube {
				tc.args = kubeArgs(kubeSetup(t))
			}
			attack(t, tc)
		})
	}
}

// isoServer is a server started for an attack, with what the attacks need
// to know about it.
type isoServer struct {
	p       *agentdtest.Process
	c       *client.Client
	dataDir string
	pid     int
	port    string
	key     string // the real provider key, in the server's environment only
}

func startIsoServer(t *testing.T, tc isoCase) *isoServer {
	t.Helper()
	// Folders other users can pass through: the pool's users reach their
	// workspace under the data folder, and the executor binary. Not under
	// /tmp where possible: inside bubblewrap /tmp is a private tmpfs, and
	// a data folder there would not be where a real one is.
	parent := ""
	if fi, err := os.Stat("/srv"); err == nil && fi.IsDir() {
		parent = "/srv"
	}
	base, err := os.MkdirTemp(parent, "iso")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := agentdtest.Binary(t)
	os.Chmod(filepath.Dir(bin), 0o755)
	run := filepath.Join(base, "run")
	os.Mkdir(run, 0o755)
	data := filepath.Join(base, "data")
	var rnd [12]byte
	rand.Read(rnd[:])
	s := &isoServer{dataDir: data, key: "sk-ant-REAL-" + hex.EncodeToString(rnd[:])}
	const apiKey = "iso-api-key"
	args := append([]string{"--data-dir", data, "--no-ui", "--sandbox-pids", "64", "--sandbox-memory", strconv.Itoa(1 << 30)}, tc.args...)
	s.p = agentdtest.StartProcess(t, []string{
		"XDG_RUNTIME_DIR=" + run,
		"ANTHROPIC_API_KEY=" + s.key,
		"AGENTD_API_KEY=" + apiKey,
	}, args...)
	s.c, err = client.New(s.p.URL, client.WithAPIKey(apiKey))
	if err != nil {
		t.Fatal(err)
	}
	s.port = s.p.URL[strings.LastIndexByte(s.p.URL, ':')+1:]
	s.pid = findServerPID(t, data)
	return s
}

// findServerPID finds the agentd serve process using dataDir.
func findServerPID(t *testing.T, dataDir string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[1] == "serve" && strings.Contains(string(b), "\x00"+dataDir+"\x00") {
			return pid
		}
	}
	t.Fatal("server process not found")
	return 0
}

// turn sends cmd to a shell session and returns the command's output and
// whether it failed (non-zero exit, or the turn failed).
func turn(t *testing.T, ctx context.Context, c *client.Client, id, cmd string) (string, bool) {
	t.Helper()
	st, err := c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Stream(ctx, id, st.LastSeq)
	defer stream.Close()
	sent, err := c.Send(ctx, id, cmd)
	if err != nil {
		t.Fatal(err)
	}
	failed := false
	for done := false; !done; {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("turn %q: %v", cmd, err)
		}
		var q struct {
			QueryID string `json:"queryId"`
		}
		switch ev.Type {
		case conversation.TypeQueryCompleted:
			json.Unmarshal(ev.Payload, &q)
			done = q.QueryID == sent.QueryID
		case conversation.TypeQueryFailed:
			json.Unmarshal(ev.Payload, &q)
			done, failed = q.QueryID == sent.QueryID, true
		}
	}
	st, err = c.Session(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(st.Blocks) - 1; i >= 0; i-- {
		if b := st.Blocks[i]; b.Type == conversation.BlockToolResult {
			return b.Output, failed || b.IsError
		}
	}
	return "", true
}

func newSession(t *testing.T, ctx context.Context, c *client.Client) string {
	t.Helper()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.DeleteSession(dctx, created.SessionID, true)
	})
	return created.SessionID
}

func healthy(t *testing.T, ctx context.Context, s *isoServer, when string) {
	t.Helper()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if h, err := s.c.Health(hctx); err != nil || h.Status != "ok" {
		t.Fatalf("GET /health %s: %+v %v\n%s", when, h, err, s.p.Logs())
	}
}

func attack(t *testing.T, tc isoCase) {
	s := startIsoServer(t, tc)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	victim := newSession(t, ctx, s.c)
	attacker := newSession(t, ctx, s.c)
	victimWS := filepath.Join(s.dataDir, "workspaces", victim)

	out, failed := turn(t, ctx, s.c, victim, `printf victim-secret > secret.txt; id -u`)
	if failed {
		t.Fatalf("victim: %q\n%s", out, s.p.Logs())
	}
	victimUID := strings.TrimSpace(out)
	out, _ = turn(t, ctx, s.c, attacker, `id -u`)
	attackerUID := strings.TrimSpace(out)
	if tc.users && (victimUID == attackerUID || victimUID == "0") {
		t.Fatalf("sessions run as %s and %s: want a user each", victimUID, attackerUID)
	}

	// The key is written by the attacker from two halves, so that no
	// command line, message or event ever holds it whole.
	half := len(s.key) / 2
	roots := "/"
	if !tc.own() {
		// Outside bubblewrap "/" is the host's: scan where a leak could
		// land (temporary and runtime folders, configuration, homes, the
		// server's data and run folders). The system trees and the source
		// checkout are read-only for the agent and predate the key.
		roots = "/tmp /var/tmp /dev/shm /run /etc /home /root /var/lib " + filepath.Dir(s.dataDir)
	}
	script := fmt.Sprintf(`V=%[1]s; D=%[2]s; P=%[3]d; PORT=%[4]s
cat $V/secret.txt 2>/dev/null && echo LEAK:read-other-workspace
ls $V >/dev/null 2>&1 && echo LEAK:list-other-workspace
head -c 16 $D/agentd.db 2>/dev/null | grep -q SQLite && echo LEAK:read-database
ls $D 2>/dev/null | grep -q agentd.db && echo LEAK:list-data-dir
test -r /proc/$P/environ && cat /proc/$P/environ >/dev/null 2>&1 && echo LEAK:server-environ
for f in $D/pwned $D/workspaces/pwned $V/pwned /etc/pwned /usr/pwned /pwned /root/pwned; do touch $f 2>/dev/null && echo WROTE:$f; done
echo HTTP:$(curl -s -m 3 -o /dev/null -w '%%{http_code}' http://127.0.0.1:$PORT/health)
echo API:$(curl -s -m 3 -o /dev/null -w '%%{http_code}' http://127.0.0.1:$PORT/api/sessions)
printf '%%s%%s' '%[5]s' '%[6]s' > .pat
env | grep -q -F -f .pat && echo LEAK:key-in-env
cat /proc/[0-9]*/environ 2>/dev/null | grep -a -q -F -f .pat && echo LEAK:key-in-proc-environ
cat /proc/[0-9]*/cmdline 2>/dev/null | grep -a -q -F -f .pat && echo LEAK:key-in-proc-cmdline
grep -r -s -l -F -f .pat --exclude=.pat --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr %[7]s 2>/dev/null | sed 's/^/LEAK:key-in-file:/'
rm -f .pat
echo KEY:$ANTHROPIC_API_KEY
echo BASE:$ANTHROPIC_BASE_URL
echo END`, victimWS, s.dataDir, s.pid, s.port, s.key[:half], s.key[half:], roots)
	out, _ = turn(t, ctx, s.c, attacker, script)
	t.Logf("attacker (uid %s) saw:\n%s", attackerUID, out)
	if !strings.Contains(out, "END") {
		t.Fatalf("attack script did not finish: %q", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "LEAK:") {
			t.Errorf("attack succeeded: %s", line)
		}
	}
	// What the agent holds instead of the key: the proxy's token.
	if strings.Contains(out, s.key) || !strings.Contains(out, "KEY:agentd-") {
		t.Errorf("agent's ANTHROPIC_API_KEY is not the proxy's token")
	}
	if !strings.Contains(out, "BASE:http://127.0.0.1:") {
		t.Errorf("agent's ANTHROPIC_BASE_URL is not the in-sandbox relay")
	}
	// The server's port: unreachable without a network; reachable from
	// an executor (same network), where only the API key guards /api.
	if tc.own() {
		if !strings.Contains(out, "HTTP:000") || !strings.Contains(out, "API:000") {
			t.Errorf("the server's port is reachable from the sandbox")
		}
	} else if !strings.Contains(out, "HTTP:200") || !strings.Contains(out, "API:401") {
		t.Errorf("executor: expected /health reachable (200) and /api refused without the key (401)")
	}
	// Writes checked on the host (inside bubblewrap, a folder under /tmp
	// is in the sandbox's private /tmp).
	if strings.HasPrefix(s.dataDir, "/srv/") && strings.Contains(out, "WROTE:") {
		t.Errorf("the attacker wrote outside its workspace")
	}
	for _, f := range []string{filepath.Join(s.dataDir, "pwned"), filepath.Join(s.dataDir, "workspaces", "pwned"), filepath.Join(victimWS, "pwned"), "/etc/pwned", "/usr/pwned", "/pwned", "/root/pwned"} {
		if _, err := os.Stat(f); err == nil {
			os.Remove(f)
			t.Errorf("the attacker wrote %s", f)
		}
	}
	healthy(t, ctx, s, "after the attacks")

	// A set-uid copy of a shell left in the workspace for a local user
	// (bubblewrap without users used to make it the host root's, in a
	// workspace anyone could reach).
	if out, failed := turn(t, ctx, s.c, attacker, `cp /usr/bin/bash ./rootsh && chmod 4755 ./rootsh && echo made`); failed || !strings.Contains(out, "made") {
		t.Fatalf("set-uid copy: %q", out)
	}
	attackerWS := filepath.Join(s.dataDir, "workspaces", attacker)
	if tc.kube {
		// The workspaces are the pods' volumes on the node.
		attackerWS, victimWS = podWorkspace(t, attacker), podWorkspace(t, victim)
	}
	hostUserLockedOut(t, s.dataDir, attackerWS, "rootsh")
	hostUserLockedOut(t, s.dataDir, victimWS, "secret.txt")

	forkBomb(t, ctx, s, tc, victim, attacker)

	// The victim's session is untouched.
	if out, failed := turn(t, ctx, s.c, victim, `cat secret.txt`); failed || out != "victim-secret" {
		t.Fatalf("victim after the attacks: %q %v", out, failed)
	}
	healthy(t, ctx, s, "at the end")
}

// hostOutsider is a host uid without a passwd entry: any local user.
const hostOutsider = 59979

// hostUserLockedOut checks, as a local user of the host, that the file
// name in workspace ws is out of reach (and, being an agent's file, is not
// a set-uid program of the host's root), and that the data folder cannot
// be listed.
func hostUserLockedOut(t *testing.T, dataDir, ws, name string) {
	t.Helper()
	f := filepath.Join(ws, name)
	fi, err := os.Lstat(f)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid == 0 && fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("%s is a set-uid program of the host's root", f)
	}
	for _, argv := range [][]string{{f, "-p", "-c", "id -u"}, {"cat", f}, {"ls", ws}, {"ls", dataDir}} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostOutsider, Gid: hostOutsider, Groups: []uint32{}}}
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("a local user ran %q: %q", argv, out[:min(len(out), 200)])
		}
	}
}

// TestHostUsersLockedOut: with agents running as the server's user
// (local, executor without users), the data folder and every workspace
// are the server's alone: an install left open (0755) by an older version
// is closed at start, and what agents leave in a workspace (a set-uid
// shell, as root) is out of other local users' reach.
func TestHostUsersLockedOut(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers")
	}
	if os.Getuid() != 0 {
		t.Skip("runs commands as another local user")
	}
	for _, backend := range []string{"local", "executor"} {
		t.Run(backend, func(t *testing.T) {
			base := sandboxDir(t)
			data := filepath.Join(base, "data")
			old := filepath.Join(data, "workspaces", "old-session")
			os.MkdirAll(old, 0o755)
			for _, d := range []string{data, filepath.Join(data, "workspaces"), old} {
				os.Chmod(d, 0o755)
			}
			os.WriteFile(filepath.Join(old, "notes.txt"), []byte("old"), 0o644)
			run := filepath.Join(base, "run")
			os.Mkdir(run, 0o755)
			p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + run}, "--data-dir", data, "--no-ui", "--sandbox", backend)
			for _, d := range []string{data, filepath.Join(data, "workspaces"), old} {
				if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("%s: %v %v, want 0700", d, fi.Mode().Perm(), err)
				}
			}
			hostUserLockedOut(t, data, old, "notes.txt")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			id := newSession(t, ctx, p.Client)
			if out, failed := turn(t, ctx, p.Client, id, `cp /usr/bin/bash ./rootsh && chmod 4755 ./rootsh && echo made`); failed || !strings.Contains(out, "made") {
				t.Fatalf("set-uid copy: %q", out)
			}
			ws := filepath.Join(data, "workspaces", id)
			if fi, err := os.Stat(ws); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("new workspace: %v %v, want 0700", fi.Mode().Perm(), err)
			}
			// Here the copy is the host root's (agents run as the server):
			// what matters is that nobody else reaches it.
			cmd := exec.Command(filepath.Join(ws, "rootsh"), "-p", "-c", "id -u")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostOutsider, Gid: hostOutsider, Groups: []uint32{}}}
			if out, err := cmd.CombinedOutput(); err == nil {
				t.Errorf("a local user ran the agent's set-uid shell: %q", out)
			}
			for _, argv := range [][]string{{"ls", ws}, {"ls", data}} {
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostOutsider, Gid: hostOutsider, Groups: []uint32{}}}
				if out, err := cmd.CombinedOutput(); err == nil {
					t.Errorf("a local user ran %q: %q", argv, out)
				}
			}
		})
	}
}

// sandboxDir is a folder other users may pass (as a real data folder's
// parents are), removed at the test's end: not under /tmp where /srv
// exists.
func sandboxDir(t *testing.T) string {
	t.Helper()
	parent := ""
	if fi, err := os.Stat("/srv"); err == nil && fi.IsDir() {
		parent = "/srv"
	}
	base, err := os.MkdirTemp(parent, "iso")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	return base
}

// forkBomb: a fork storm fails against the pids limit, a real fork bomb
// stays inside it, the server stays healthy, the other session keeps
// working, and deleting the session ends the bomb.
func forkBomb(t *testing.T, ctx context.Context, s *isoServer, tc isoCase, victim, attacker string) {
	logs := s.p.Logs()
	if !strings.Contains(logs, `limits="cgroup`) && !(tc.users && strings.Contains(logs, `limits="rlimit`)) &&
		!(tc.kube && strings.Contains(logs, "RLIMIT_NPROC of the pod's own uid")) {
		t.Logf("no process limit enforced here (%s): fork bomb skipped", limitsLine(logs))
		return
	}
	out, failed := turn(t, ctx, s.c, attacker, `( i=0; while [ $i -lt 500 ]; do sleep 60 >/dev/null 2>&1 & i=$((i+1)); done; echo spawned $i ); echo rc=$?; kill -9 0`)
	if !failed || strings.Contains(out, "spawned 500") || !strings.Contains(out, "rc=2") {
		t.Fatalf("500 forks under --sandbox-pids 64: %q failed=%v", out, failed)
	}
	// Killed orphans are reaped by init, not at once: wait until 20
	// processes fit again.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, failed := turn(t, ctx, s.c, attacker, `for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sleep 0.1 & done; wait`); !failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no room in the session after the fork storm")
		}
	}
	// A real one, which stops forking after 20 s in case the limit were
	// not there (bash's SECONDS counts from the first shell's start in
	// every fork), in a session of its own (the command's process group
	// ends with the turn).
	var rnd [6]byte
	rand.Read(rnd[:])
	marker := "agentd-bomb-" + hex.EncodeToString(rnd[:])
	// (The command's group is killed when it ends: a builtin loop gives
	// setsid time to take the bomb out of it; sleep could not fork.)
	out, _ = turn(t, ctx, s.c, attacker, `setsid bash -c 'b() { if [ $SECONDS -lt 20 ]; then b | b & fi; }; b' `+marker+` >/dev/null 2>&1 </dev/null &
i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo started`)
	if !strings.Contains(out, "started") {
		t.Fatalf("bomb: %q", out)
	}
	for deadline := time.Now().Add(10 * time.Second); countProcs(marker) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the fork bomb never started")
		}
	}
	peak := 0
	for i := 0; i < 10; i++ {
		if n := countProcs(marker); n > peak {
			peak = n
		}
		healthy(t, ctx, s, "during the fork bomb")
		time.Sleep(100 * time.Millisecond)
	}
	if peak == 0 || peak > 64 {
		t.Fatalf("fork bomb peaked at %d processes, limit 64", peak)
	}
	t0 := time.Now()
	if out, failed := turn(t, ctx, s.c, victim, `echo alive`); failed || out != "alive\n" {
		t.Fatalf("the other session during the bomb: %q %v", out, failed)
	}
	t.Logf("fork bomb: peak %d processes; the other session answered in %v", peak, time.Since(t0))
	// The bombed session's commands fail (or get through), but its turns end.
	tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
	out, failed = turn(t, tctx, s.c, attacker, `echo still here`)
	tcancel()
	t.Logf("a command in the bombed session: %q failed=%v", out, failed)
	if err := s.c.DeleteSession(ctx, attacker, true); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); countProcs(marker) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bomb processes outlived their session", countProcs(marker))
		}
	}
	healthy(t, ctx, s, "after the fork bomb")
}

func limitsLine(logs string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "limits=") {
			return l
		}
	}
	return "no limits line in the log"
}

// countProcs counts host processes whose command line holds marker.
func countProcs(marker string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), marker) {
			n++
		}
	}
	return n
}

// TestBwrapTurnSurvivesKill9: under bubblewrap (with a user per session
// when root), kill -9 the server in the middle of a turn, start it again:
// the sandbox was not tied to the server's life, the new server re-attaches
// and the turn finishes with every line once.
func TestBwrapTurnSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers and sandboxes")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap not installed (scripts/setup.sh installs it)")
	}
	args := []string{"--sandbox", "bwrap"}
	if os.Getuid() == 0 {
		isoSetup(t)
		args = append(args, "--run-as-user-pool", isoUsers)
	}
	bin := agentdtest.Binary(t)
	os.Chmod(filepath.Dir(bin), 0o755)
	run := t.TempDir()
	os.Chmod(run, 0o755)
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + run}, append([]string{"--data-dir", t.TempDir(), "--no-ui"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shellTurnAcrossKill9(ctx, t, p, 30, 5)
}

// TestBwrapClaudeCode: the pinned Claude Code CLI runs inside bubblewrap
// (with a user of its own when root), reaches mock-llm only through the
// in-sandbox relay to the model proxy, and its Bash tool sees the
// session's token, never the key.
func TestBwrapClaudeCode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real servers, sandboxes and Claude Code")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap not installed (scripts/setup.sh installs it)")
	}
	bin := agentdtest.AgentBin(t, "claude")
	mock, url := agentdtest.MockLLM(t, `
rules:
  - name: env
    match: {userContains: "show the env", noToolResult: true}
    reply:
      content:
        - type: tool_use
          name: Bash
          input: {command: "env | grep -E '^(ANTHROPIC|HOME)' | sort; id -u", description: "Show the environment"}
  - name: after-bash
    match: {toolResult: {name: Bash}}
    reply: {text: "Bash said: {{toolResult}}"}
default:
  text: "no rule for {{lastUserText}}"
`)
	profiles := t.TempDir()
	prof, _ := json.Marshal(map[string]any{"id": "auto", "name": "Auto", "allowedTools": []string{"Bash"},
		"environmentVariables": map[string]string{"CLAUDE_CODE_MAX_RETRIES": "1"}})
	os.WriteFile(filepath.Join(profiles, "auto.json"), prof, 0o644)
	args := []string{"--data-dir", t.TempDir(), "--no-ui", "--sandbox", "bwrap", "--profiles", profiles}
	if os.Getuid() == 0 {
		isoSetup(t)
		args = append(args, "--run-as-user-pool", isoUsers)
	}
	tb := agentdtest.Binary(t)
	os.Chmod(filepath.Dir(tb), 0o755)
	run := t.TempDir()
	var rnd [12]byte
	rand.Read(rnd[:])
	realKey := "sk-ant-REAL-" + hex.EncodeToString(rnd[:])
	p := agentdtest.StartProcess(t, []string{"XDG_RUNTIME_DIR=" + run, "ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=" + realKey,
		"PATH=" + bin + ":/usr/local/bin:/usr/bin:/bin"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := p.Client.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "claude-code", AgentProfileRef: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer dcancel()
		p.Client.DeleteSession(dctx, s.SessionID, true)
	})
	stream := p.Client.Stream(ctx, s.SessionID, 0)
	defer stream.Close()
	sent, err := p.Client.Send(ctx, s.SessionID, "please show the env")
	if err != nil {
		t.Fatal(err)
	}
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("stream: %v\n%s", err, p.Logs())
		}
		var q struct {
			QueryID string `json:"queryId"`
		}
		json.Unmarshal(ev.Payload, &q)
		if ev.Type == conversation.TypeQueryFailed && q.QueryID == sent.QueryID {
			t.Fatalf("turn failed: %s\n%s", ev.Payload, p.Logs())
		}
		if ev.Type == conversation.TypeQueryCompleted && q.QueryID == sent.QueryID {
			break
		}
	}
	st, err := p.Client.Session(ctx, s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for _, b := range st.Blocks {
		if b.Type == conversation.BlockToolResult {
			out = b.Output
		}
	}
	t.Logf("Bash inside bubblewrap:\n%s", out)
	if strings.Contains(out, realKey) || !regexp.MustCompile(`ANTHROPIC_API_KEY=agentd-mp-\S+`).MatchString(out) ||
		!regexp.MustCompile(`ANTHROPIC_BASE_URL=http://127\.0\.0\.1:\d+\n`).MatchString(out) {
		t.Fatalf("the agent's environment inside bubblewrap:\n%s", out)
	}
	if os.Getuid() == 0 && regexp.MustCompile(`(?m)^0$`).MatchString(out) {
		t.Fatalf("the agent runs as root:\n%s", out)
	}
	if len(mock.Requests()) == 0 {
		t.Fatal("mock-llm saw no request")
	}
}
