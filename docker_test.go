package agentd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/agentdtest"
)

// The docker sandbox end to end: real servers, a real Docker daemon
// (DOCKER_HOST), the sandbox image with this source's agentd
// (agentdtest.DockerImage). They skip without a daemon or image unless
// AGENTD_REQUIRE_DOCKER is set. The scenarios are containers_test.go's.

func dockerSetup(t testing.TB) (*client.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real servers and containers")
	}
	cli := agentdtest.Docker(t)
	return cli, agentdtest.DockerImage(t)
}

// dockerBackend is the docker sandbox of containers_test.go's scenarios.
func dockerBackend(t testing.TB) containerBackend {
	t.Helper()
	cli, image := dockerSetup(t)
	return containerBackend{
		name: "docker", noun: "container", enforcement: "cgroup",
		config:     agentd.Config{Sandbox: "docker", DockerImage: image},
		args:       []string{"--sandbox", "docker", "--docker-image", image},
		runPrefix:  "dkr",
		containers: func(t testing.TB, node string) []string { return agentdtest.DockerContainers(t, cli, node) },
		clean: func(t *testing.T) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			vols, err := cli.VolumeList(ctx, client.VolumeListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(vols.Items) > 0 {
				t.Fatalf("docker volumes left: %d", len(vols.Items))
			}
		},
	}
}

// A shell session in a container: output, a file written by the agent
// (its event, its bytes through the API), GET /api/sandboxes, and a
// purge that leaves no container, volume or workspace.
func TestDockerShell(t *testing.T) {
	b := dockerBackend(t)
	srv := b.server(t, 0, map[string]string{})
	id, node := containerShell(t, b, srv, `echo made-in-docker > made.txt; cat made.txt; id -u; ls /sys/class/net`,
		"made-in-docker\n10001\nlo\n", "made-in-docker\n")
	if err := srv.Client.DeleteSession(context.Background(), id, true); err != nil {
		t.Fatal(err)
	}
	b.noneLeft(t, node)
	if _, err := os.Stat(filepath.Join(srv.Config.DataDir, "workspaces", id)); !os.IsNotExist(err) {
		t.Fatalf("workspace after purge: %v", err)
	}
}

// TestDockerClaudeCode: containerClaudeCode in a container.
func TestDockerClaudeCode(t *testing.T) { containerClaudeCode(t, dockerBackend(t)) }

// TestDockerTurnSurvivesKill9: containerTurnSurvivesKill9, re-attached to
// the container.
func TestDockerTurnSurvivesKill9(t *testing.T) { containerTurnSurvivesKill9(t, dockerBackend(t)) }

// TestDockerCollectsDeletedWhileDown: containerCollectsDeletedWhileDown;
// the container of the deleted session is removed before the server
// serves.
func TestDockerCollectsDeletedWhileDown(t *testing.T) {
	containerCollectsDeletedWhileDown(t, dockerBackend(t))
}

// BenchmarkDockerSessionReady: benchSessionReady in containers. Targets:
// cold p50 < 1 s, warm p50 < 100 ms.
func BenchmarkDockerSessionReady(b *testing.B) { benchSessionReady(b, dockerBackend(b)) }
