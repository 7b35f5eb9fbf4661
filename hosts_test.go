package agentd_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentd/agentd"
	"github.com/agentd/agentd/internal/agentdtest"
	"github.com/agentd/agentd/internal/wiring"
)

func TestAllowedHostsFollowTheListenAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:1": true, "[::1]:8080": true, "localhost:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "192.168.1.5:8080": false, "box.lan:8080": false,
	} {
		if got := wiring.LoopbackAddr(addr); got != want {
			t.Errorf("LoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}

	srv := agentdtest.Start(t, agentd.Config{AllowedHosts: []string{"box.lan"}})
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	for host, want := range map[string]int{
		"127.0.0.1:" + port: 200, "localhost:" + port: 200, "box.lan:" + port: 200,
		// Bound to loopback: neither other names nor addresses.
		"evil.example:" + port: 403, "192.168.1.5:" + port: 403,
	} {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/api/sessions", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %q: %d, want %d", host, resp.StatusCode, want)
		}
	}

	// A bad entry is a configuration error, not a silently open server.
	if _, err := agentd.New(context.Background(), agentd.Config{DataDir: t.TempDir(), AllowedHosts: []string{"box.lan:8080"}}); err == nil || !strings.Contains(err.Error(), "box.lan:8080") {
		t.Fatalf("AllowedHosts with a port: %v", err)
	}
}
