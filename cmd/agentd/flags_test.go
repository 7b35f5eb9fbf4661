package main

import (
	"slices"
	"testing"

	"github.com/alecthomas/kong"
)

// TestMain (goleak) is in main_test.go.

func parse(t *testing.T, args ...string) *cli {
	t.Helper()
	var c cli
	p, err := kong.New(&c, kong.Name("agentd"), kong.Exit(func(int) { t.Fatal("kong exited") }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestAllowedHostsFlagAndEnv(t *testing.T) {
	if got := parse(t, "serve").Serve.AllowedHosts; len(got) != 0 {
		t.Fatalf("default --allowed-hosts %q, want none", got)
	}
	if got := parse(t, "serve", "--allowed-hosts", "a.example,*.corp.example", "--allowed-hosts", "b.example").Serve.AllowedHosts; !slices.Equal(got, []string{"a.example", "*.corp.example", "b.example"}) {
		t.Fatalf("--allowed-hosts parsed as %q", got)
	}
	t.Setenv("AGENTD_ALLOWED_HOSTS", "box.lan,proxy.example")
	if got := parse(t, "serve").Serve.AllowedHosts; !slices.Equal(got, []string{"box.lan", "proxy.example"}) {
		t.Fatalf("AGENTD_ALLOWED_HOSTS parsed as %q", got)
	}
}

func TestArtifactQuotaFlagsAndEnv(t *testing.T) {
	c := parse(t, "serve").Serve
	if c.ArtifactQuotaSession != 1<<30 || c.ArtifactQuotaTotal != 0 {
		t.Fatalf("default artifact quotas %d, %d; want 1 GiB and none", c.ArtifactQuotaSession, c.ArtifactQuotaTotal)
	}
	c = parse(t, "serve", "--artifact-quota-session", "1000", "--artifact-quota-total", "5000").Serve
	if c.ArtifactQuotaSession != 1000 || c.ArtifactQuotaTotal != 5000 {
		t.Fatalf("artifact quotas parsed as %d, %d", c.ArtifactQuotaSession, c.ArtifactQuotaTotal)
	}
	t.Setenv("AGENTD_ARTIFACT_QUOTA_SESSION", "0")
	t.Setenv("AGENTD_ARTIFACT_QUOTA_TOTAL", "7")
	if c = parse(t, "serve").Serve; c.ArtifactQuotaSession != 0 || c.ArtifactQuotaTotal != 7 {
		t.Fatalf("artifact quotas from the environment: %d, %d", c.ArtifactQuotaSession, c.ArtifactQuotaTotal)
	}
}

func TestArtifactsFlagAndEnv(t *testing.T) {
	if c := parse(t, "serve").Serve; c.Artifacts != "" {
		t.Fatalf("default --artifacts %q, want none (in the store)", c.Artifacts)
	}
	if c := parse(t, "serve", "--artifacts", "s3://b/p?endpoint=http://127.0.0.1:9000").Serve; c.Artifacts != "s3://b/p?endpoint=http://127.0.0.1:9000" {
		t.Fatalf("--artifacts parsed as %q", c.Artifacts)
	}
	t.Setenv("AGENTD_ARTIFACTS", "s3://env-bucket")
	if c := parse(t, "serve").Serve; c.Artifacts != "s3://env-bucket" {
		t.Fatalf("--artifacts from the environment: %q", c.Artifacts)
	}
}

func TestParseOutputLimit(t *testing.T) {
	for in, want := range map[string]int{"64KiB": 64 << 10, "1MiB": 1 << 20, "4096": 4096, "2k": 2048, "1 GiB": 1 << 30, "off": -1, "OFF": -1} {
		if got, err := parseOutputLimit(in); err != nil || got != want {
			t.Errorf("parseOutputLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-5", "64XB", "KiB", "3GiB", "1.5MiB"} {
		if got, err := parseOutputLimit(in); err == nil {
			t.Errorf("parseOutputLimit(%q) = %d, want an error", in, got)
		}
	}
	if c := parse(t, "serve"); c.Serve.OutputLimit != "64KiB" {
		t.Errorf("default --output-limit %q", c.Serve.OutputLimit)
	}
}
