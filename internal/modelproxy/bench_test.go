package modelproxy_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/modelproxy"
	"github.com/agentd/agentd/store"
	"github.com/agentd/agentd/store/memstore"
)

// sseUpstream answers every request with events SSE deltas and a usage
// report, as fast as it can.
func sseUpstream(b *testing.B, events int) *httptest.Server {
	ev := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + strings.Repeat("x", 200) + "\"}}\n\n"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
		for range events {
			_, _ = io.WriteString(w, ev)
		}
		_, _ = io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5}}\n\n")
	}))
	b.Cleanup(ts.Close)
	return ts
}

func benchProxy(b *testing.B, up string) (url, token string) {
	st := memstore.New()
	_ = st.CreateSession(context.Background(), store.Session{ID: "s1"})
	p, err := modelproxy.New(modelproxy.Config{
		Upstreams: map[modelproxy.Provider]modelproxy.Upstream{modelproxy.Anthropic: {BaseURL: up, Key: "real"}},
		Tokens:    st, Usage: st, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.ListenTCP("127.0.0.1:0"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close(context.Background()) })
	env, err := p.Issue(context.Background(), "s1", map[string]string{"ANTHROPIC_API_KEY": "real"})
	if err != nil {
		b.Fatal(err)
	}
	return env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]
}

func post(b *testing.B, url, token string) int64 {
	req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	req.Header.Set("x-api-key", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("status %d", resp.StatusCode)
	}
	return n
}

// BenchmarkStream: a 2.5 MB streamed answer through the proxy (counting
// its usage on the way) and, for comparison, straight from the upstream.
func BenchmarkStream(b *testing.B) {
	up := sseUpstream(b, 10000)
	url, token := benchProxy(b, up.URL)
	for _, c := range []struct{ name, url string }{{"proxy", url}, {"direct", up.URL}} {
		b.Run(c.name, func(b *testing.B) {
			n := post(b, c.url, token)
			b.SetBytes(n)
			for b.Loop() {
				post(b, c.url, token)
			}
		})
	}
}

// BenchmarkRequest: a small answer; the per-request cost of the proxy
// (token check, rewrite, metering, one more hop) shows as the difference
// of the p50s.
func BenchmarkRequest(b *testing.B) {
	up := sseUpstream(b, 3)
	url, token := benchProxy(b, up.URL)
	for _, c := range []struct{ name, url string }{{"proxy", url}, {"direct", up.URL}} {
		b.Run(c.name, func(b *testing.B) {
			var ds []time.Duration
			for b.Loop() {
				t0 := time.Now()
				post(b, c.url, token)
				ds = append(ds, time.Since(t0))
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
		})
	}
}
