package agentdtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"
)

// The Docker tests need a daemon (DOCKER_HOST; scripts/dockerd.sh starts
// one) and the sandbox image (scripts/sandbox-image.sh). Without them they
// skip, unless AGENTD_REQUIRE_DOCKER is set: then they fail.

// SandboxImage is the image the Docker tests build theirs from
// (AGENTD_DOCKER_IMAGE, default agentd-sandbox:latest).
func SandboxImage() string {
	if v := os.Getenv("AGENTD_DOCKER_IMAGE"); v != "" {
		return v
	}
	return "agentd-sandbox:latest"
}

func dockerSkip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("AGENTD_REQUIRE_DOCKER") != "" {
		t.Fatalf("agentdtest: "+format, args...)
	}
	t.Skipf("agentdtest: "+format+" (scripts/dockerd.sh and scripts/sandbox-image.sh; AGENTD_REQUIRE_DOCKER=1 fails instead)", args...)
}

// Docker returns a client of the test daemon, skipping the test when none
// answers or the sandbox image is missing. The client is closed at the
// test's end.
func Docker(t testing.TB) *client.Client {
	t.Helper()
	if os.Getuid() != 0 {
		dockerSkip(t, "the docker sandbox needs root")
	}
	c, err := client.New(client.FromEnv)
	if err != nil {
		dockerSkip(t, "docker client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Ping(ctx, client.PingOptions{}); err != nil {
		dockerSkip(t, "no Docker daemon at DOCKER_HOST=%q: %v", os.Getenv("DOCKER_HOST"), err)
	}
	if _, err := c.ImageInspect(ctx, SandboxImage()); err != nil {
		dockerSkip(t, "sandbox image %s: %v", SandboxImage(), err)
	}
	return c
}

var (
	imageMu    sync.Mutex
	imageBuilt = map[string]string{} // binary path → image
)

// DockerImage returns an image made of the sandbox image with this
// source's agentd (Binary) as its executor, built once per test binary
// and kept in the daemon under a tag naming the binary's hash.
func DockerImage(t testing.TB) string {
	t.Helper()
	c := Docker(t)
	bin := Binary(t)
	imageMu.Lock()
	defer imageMu.Unlock()
	if img, ok := imageBuilt[bin]; ok {
		return img
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append(data, SandboxImage()...))
	img := "agentd-sandbox-test:" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.ImageInspect(ctx, img); err == nil {
		imageBuilt[bin] = img
		return img
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dockerfile := fmt.Sprintf("FROM %s\nCOPY agentd /usr/local/bin/agentd\n", SandboxImage())
	for _, f := range []struct {
		name string
		data []byte
		mode int64
	}{{"Dockerfile", []byte(dockerfile), 0o644}, {"agentd", data, 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	res, err := c.ImageBuild(ctx, &buf, client.ImageBuildOptions{
		Tags: []string{img}, Remove: true, ForceRemove: true, Version: build.BuilderV1,
		Labels: map[string]string{"agentd.test": "true"},
	})
	if err != nil {
		t.Fatalf("agentdtest: build %s: %v", img, err)
	}
	defer res.Body.Close()
	if err := readBuild(res.Body); err != nil {
		t.Fatalf("agentdtest: build %s: %v", img, err)
	}
	imageBuilt[bin] = img
	return img
}

// readBuild reads a build's progress stream to its end and returns the
// error it reports, if any.
func readBuild(r io.Reader) error {
	dec := json.NewDecoder(r)
	var last strings.Builder
	for {
		var m struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
		}
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if m.Error != "" {
			return fmt.Errorf("%s (%s)", m.Error, strings.TrimSpace(last.String()))
		}
		last.Reset()
		last.WriteString(m.Stream)
	}
}

// DockerContainers lists the containers of node (label agentd.node; every
// agentd container when node is empty), running or not.
func DockerContainers(t testing.TB, c *client.Client, node string) []string {
	t.Helper()
	f := client.Filters{}.Add("label", "agentd.managed=true")
	if node != "" {
		f.Add("label", "agentd.node="+node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range list.Items {
		name := it.ID
		if len(it.Names) > 0 {
			name = strings.TrimPrefix(it.Names[0], "/")
		}
		out = append(out, name)
	}
	return out
}
