package sandboxtest

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/sandbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakeProxy(t *testing.T) {
	dir := ShortTempDir(t, "st")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("ShortTempDir: %v %v", fi, err)
	}
	f := &FakeProxy{}
	defer f.Close()
	sock := filepath.Join(dir, "s1")
	tok, err := f.ServeSession(context.Background(), "s1", sock)
	if err != nil || tok != "tok-s1" {
		t.Fatalf("ServeSession = %q, %v", tok, err)
	}
	if _, err := f.ServeSession(context.Background(), "s1", sock); err != nil { // replaces the first
		t.Fatal(err)
	}
	if f.Calls() != 2 || f.Serving() != 1 {
		t.Fatalf("calls %d, serving %d", f.Calls(), f.Serving())
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodGet, "http://proxy/v1/messages", nil)
	req.Header.Set("x-api-key", "k")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "proxy for s1: GET /v1/messages key=k" {
		t.Fatalf("body %q", body)
	}
	c.CloseIdleConnections()
	f.StopSession("s1")
	f.StopSession("unknown")
	if f.Serving() != 0 {
		t.Fatal("still serving")
	}
	if _, err := f.ServeSession(context.Background(), "bad", filepath.Join(dir, "no/such/dir/s")); err == nil {
		t.Fatal("served on a socket in a missing folder")
	}
}

func TestCopyBinary(t *testing.T) {
	dir := t.TempDir()
	bin := UserBinary(t, dir)
	fi, err := os.Stat(bin)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("%v %v", fi, err)
	}
	if again, err := CopyBinary(dir); err != nil || again != bin {
		t.Fatalf("second copy %q %v", again, err)
	}
	if _, err := CopyBinary(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("copied into a missing folder")
	}
}

func TestRun(t *testing.T) {
	env, err := local.New(local.Options{}).Create(context.Background(), sandbox.Spec{SessionID: "st", Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Terminate(context.Background())
	o, e, st := Run(t, env, sandbox.Cmd{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if o != "out\n" || e != "err\n" || st.Code != 3 {
		t.Fatalf("%q %q %+v", o, e, st)
	}
}

func TestCgroupParent(t *testing.T) {
	if CgroupParent() == "" || os.Getenv("AGENTD_TEST_CGROUP_PARENT") != CgroupParent() {
		t.Fatalf("%q, env %q", CgroupParent(), os.Getenv("AGENTD_TEST_CGROUP_PARENT"))
	}
}
