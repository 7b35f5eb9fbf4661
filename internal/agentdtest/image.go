package agentdtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	serverImageMu sync.Mutex
	serverImages  = map[string]string{} // version → archive
)

// ServerImage builds the container image of the agentd server itself
// (scripts/agentd-image.sh) from this source, static, with version
// stamped as its version and in its tag (agentd-test:<version>), and
// returns the archive (both an OCI layout and a `docker save` tar) and the
// tag. The archive is in the calling test's TempDir; later callers in the
// same test binary reuse it while it exists and rebuild it otherwise (the
// go build is cached).
func ServerImage(t testing.TB, version string) (archive, tag string) {
	t.Helper()
	tag = "agentd-test:" + version
	serverImageMu.Lock()
	defer serverImageMu.Unlock()
	if a, ok := serverImages[version]; ok {
		if _, err := os.Stat(a); err == nil {
			return a, tag
		}
	}
	root := RepoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentd")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Static, as the image needs (no C library in it).
	build := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-X github.com/agentd/agentd.Version="+version, "-o", bin, "./cmd/agentd")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("agentdtest: static agentd: %v\n%s", err, out)
	}
	archive = filepath.Join(dir, "agentd-image.tar")
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "agentd-image.sh"),
		"--agentd", bin, "--version", version, "--tag", tag, "--out", archive)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("agentdtest: agentd-image.sh: %v\n%s", err, out)
	}
	os.Remove(bin)
	serverImages[version] = archive
	return archive, tag
}

// DockerCLI runs the docker CLI (at DOCKER_HOST) and returns its standard
// output, trimmed; a failure fails the test.
func DockerCLI(t testing.TB, args ...string) string {
	t.Helper()
	out, err := DockerCLIErr(args...)
	if err != nil {
		t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// DockerCLIErr is DockerCLI returning the error (with the standard error
// output) instead of failing.
func DockerCLIErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return strings.TrimSpace(string(out)), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
