package agentd_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/restapi"
)

// The container image of agentd itself (scripts/agentd-image.sh), run by
// the test daemon (scripts/dockerd.sh) as an operator runs it: a named
// volume at /data, the image's own user, entrypoint and health check.
// The test daemon has no bridge network, so the container shares the
// host's network and listens on a loopback port (AGENTD_ADDR) instead of
// `-p 8080:8080`; everything else is the README's command. Skips without a
// daemon unless AGENTD_REQUIRE_DOCKER is set.
func TestContainerImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image and runs containers")
	}
	imageDocker(t)
	archive, tag := agentdtest.ServerImage(t, "image-test")
	agentdtest.DockerCLI(t, "load", "-i", archive)
	t.Cleanup(func() { _, _ = agentdtest.DockerCLIErr("rmi", "-f", tag) })

	// What is in the image: the user, the data volume, the version.
	cfg := agentdtest.DockerCLI(t, "image", "inspect", "--format", "{{.Config.User}} {{json .Config.Volumes}} {{json .Config.Healthcheck.Test}}", tag)
	if !strings.HasPrefix(cfg, "65532:65532 ") || !strings.Contains(cfg, `"/data"`) || !strings.Contains(cfg, "/health") {
		t.Fatalf("image config: %s", cfg)
	}
	if out := agentdtest.DockerCLI(t, "run", "--rm", "--network", "none", tag, "version"); !strings.Contains(out, "agentd image-test") {
		t.Fatalf("agentd version in the image: %q", out)
	}

	volume := fmt.Sprintf("agentd-test-data-%d", time.Now().UnixNano())
	t.Cleanup(func() { _, _ = agentdtest.DockerCLIErr("volume", "rm", "-f", volume) })
	port := freeLoopbackPort(t)
	name := fmt.Sprintf("agentd-image-test-%d", time.Now().UnixNano())
	run := func() *client.Client {
		t.Helper()
		agentdtest.DockerCLI(t, "run", "-d", "--name", name, "--network", "host",
			"-e", fmt.Sprintf("AGENTD_ADDR=127.0.0.1:%d", port), "--health-interval", "1s",
			"-v", volume+":/data", tag)
		t.Cleanup(func() { _, _ = agentdtest.DockerCLIErr("rm", "-f", name) })
		c, err := client.New(fmt.Sprintf("http://127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		// The image's health check (wget of /health in the container)
		// passes, which also says the server answers.
		deadline := time.Now().Add(60 * time.Second)
		for {
			status, _ := agentdtest.DockerCLIErr("inspect", "--format", "{{.State.Health.Status}}", name)
			if status == "healthy" {
				break
			}
			if time.Now().After(deadline) {
				logs, _ := agentdtest.DockerCLIErr("logs", name)
				t.Fatalf("container health %q after 60s; logs:\n%s", status, logs)
			}
			time.Sleep(200 * time.Millisecond)
		}
		h, err := c.Health(context.Background())
		if err != nil || h.Status != "ok" || h.Version != "image-test" || h.Store == nil || h.Store.Kind != "sqlite" {
			t.Fatalf("GET /health: %+v %v", h, err)
		}
		return c
	}

	c := run()
	ctx := t.Context()
	created, err := c.CreateSession(ctx, restapi.CreateSessionRequest{Architecture: "shell", Name: "in a container"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.SessionID
	sent, err := c.Send(ctx, id, "echo kept > kept.txt && id -u && pwd")
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, c, id, sent.QueryID)
	if out := turnOutput(ctx, t, c, id); !strings.HasPrefix(out, "65532\n/data/") {
		t.Fatalf("the shell in the container: %q (want uid 65532, a workspace under /data)", out)
	}
	before, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	// docker stop (SIGTERM) + docker rm, then a new container on the same
	// volume: the session, its events and its workspace are there.
	agentdtest.DockerCLI(t, "stop", name)
	agentdtest.DockerCLI(t, "rm", name)
	c = run()
	after, err := c.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Events) < len(before.Events) || !reflect.DeepEqual(after.Events[:len(before.Events)], before.Events) {
		t.Fatalf("events after docker rm + run: %d, before: %d (or they differ)", len(after.Events), len(before.Events))
	}
	sent, err = c.Send(ctx, id, "cat kept.txt")
	if err != nil {
		t.Fatal(err)
	}
	waitTurn(t, c, id, sent.QueryID)
	if out := turnOutput(ctx, t, c, id); out != "kept\n" {
		t.Fatalf("the workspace after docker rm + run: %q", out)
	}
}

// imageDocker skips (or fails, with AGENTD_REQUIRE_DOCKER) without a
// Docker daemon or root; unlike agentdtest.Docker it needs no sandbox
// image.
func imageDocker(t *testing.T) {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("AGENTD_REQUIRE_DOCKER") != "" {
		skip = t.Fatalf
	}
	if os.Getuid() != 0 {
		skip("the image tests run containers: they need root")
	}
	if _, err := agentdtest.DockerCLIErr("version", "--format", "{{.Server.Version}}"); err != nil {
		skip("no Docker daemon at DOCKER_HOST=%q (scripts/dockerd.sh): %v", os.Getenv("DOCKER_HOST"), err)
	}
}

// freeLoopbackPort is a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
