// Package pgtest gives tests a real PostgreSQL server: the one named by
// $AGENTD_TEST_POSTGRES (a postgres:// URL, set by scripts/test.sh through
// scripts/pg.sh), or else a private server this process starts on first
// use from the installed PostgreSQL binaries (Debian's postgresql package:
// initdb and postgres, found on $PATH or under /usr/lib/postgresql/*/bin),
// in a temporary folder, listening only on a Unix socket there. As root,
// the private server runs as the postgres system user (PostgreSQL refuses
// to run as root).
//
// Without a server a test is skipped, or fails when
// $AGENTD_REQUIRE_POSTGRES is set (as in CI). It is test support only.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvDSN names the variable holding an existing server's URL.
const EnvDSN = "AGENTD_TEST_POSTGRES"

// EnvRequire, when set, makes a missing server fail tests instead of
// skipping them.
const EnvRequire = "AGENTD_REQUIRE_POSTGRES"

var (
	mu      sync.Mutex
	private *Server // started on first use, ended by Stop
	failed  error   // why the private server could not start
)

// DSN returns the URL of the test server (see the package doc), starting
// a private one if needed. Connections as this URL are a superuser's.
func DSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return dsn
	}
	mu.Lock()
	defer mu.Unlock()
	if private == nil && failed == nil {
		private, failed = Start(os.TempDir())
	}
	if failed != nil {
		if os.Getenv(EnvRequire) != "" {
			t.Fatalf("pgtest: no PostgreSQL server: %v (set %s, or install postgresql: scripts/setup.sh)", failed, EnvDSN)
		}
		t.Skipf("pgtest: no PostgreSQL server: %v (set %s, or install postgresql: scripts/setup.sh)", failed, EnvDSN)
	}
	return private.DSN
}

// Stop ends the private server if one was started (call it from TestMain
// after m.Run).
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if private != nil {
		_ = private.Stop()
		private = nil
	}
}

// Schema creates an empty schema on the test server, dropped when t ends,
// and returns a URL whose connections use it (search_path), so each test
// gets its own tables, as with a fresh database but far quicker.
func Schema(t testing.TB) string {
	t.Helper()
	base := DSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "agentd_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := exec1(ctx, base, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec1(ctx, base, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	dsn, err := WithParam(base, "search_path", name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

// WithParam returns dsn with the query parameter key set to value.
func WithParam(dsn, key, value string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", EnvDSN, err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func exec1(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// Server is a PostgreSQL server started by Start.
type Server struct {
	// DSN is its URL: the postgres superuser, database postgres, over
	// the Unix socket in the server's folder.
	DSN string
	dir string
	cmd *exec.Cmd
}

// Start initialises a cluster in a new folder under parent and starts a
// server on it with a Unix socket in that folder (no TCP), waiting until it
// accepts connections. Stop ends it and removes the folder.
func Start(parent string, settings ...string) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := runAs()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "agentd-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir}
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	// C collation: text sorts by bytes, as the store contract says.
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-locale", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	args := []string{"-D", data, "-k", dir, "-p", "5432", "-c", "listen_addresses=",
		"-c", "max_connections=200", "-c", "shared_buffers=128MB"}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	if cred != nil {
		_ = logf.Chown(int(cred.Uid), int(cred.Gid))
	}
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// Its own process group (a terminal's ^C is for the tests), and a fast
	// shutdown should this process die without Stop.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	setDeathSignal(s.cmd.SysProcAttr, syscall.SIGINT)
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	logf.Close()
	s.DSN = "postgres://postgres@/postgres?host=" + url.QueryEscape(dir) + "&port=5432"
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := exec1(ctx, s.DSN, "SELECT 1")
		cancel()
		if err == nil {
			break
		}
		// Exited? (Polled: a goroutine waiting for it would outlive the
		// tests that check for leaked goroutines.)
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(s.cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == s.cmd.Process.Pid {
			s.cmd = nil // reaped
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return nil, fmt.Errorf("postgres exited (status %d)\n%s", ws.ExitStatus(), log)
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return nil, fmt.Errorf("postgres did not accept connections within a minute: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok = true
	return s, nil
}

// Stop shuts the server down (fast shutdown) and removes its folder.
func (s *Server) Stop() error {
	var errs []error
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
	}
	if s.dir != "" {
		errs = append(errs, os.RemoveAll(s.dir))
	}
	return errors.Join(errs...)
}

// BinDir finds the folder of the PostgreSQL server binaries: initdb's on
// $PATH, else the newest /usr/lib/postgresql/<version>/bin.
func BinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin")
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// runAs returns the credential to run the server with: nil for a
// non-root process (the server runs as it), else the postgres system
// user's (or agentd-pg's).
func runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "agentd-pg"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root and no postgres (or agentd-pg) system user to run PostgreSQL as: " +
		"install the postgresql package (it creates the user) or `useradd --system agentd-pg`")
}
