package mockllm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAdminEndpoints(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{reply: {text: "one"}}]`)
	post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("a")))
	post(t, ts.URL+"/v1/messages", map[string]any{"model": "m", "system": "You are a title generator", "messages": []any{userText("b")}})

	var log struct{ Requests []RecordedRequest }
	req, _ := newGet(ts.URL + "/_mockllm/requests")
	getJSON(t, req, &log)
	if len(log.Requests) != 2 || log.Requests[0].Body != nil {
		t.Fatalf("requests without body: %+v", log.Requests)
	}
	req, _ = newGet(ts.URL + "/_mockllm/requests?body=1&kind=title")
	getJSON(t, req, &log)
	if len(log.Requests) != 1 || log.Requests[0].Kind != KindTitle || !bytes.Contains(log.Requests[0].Body, []byte("title generator")) {
		t.Fatalf("filtered requests with body: %+v", log.Requests)
	}

	// Replace the script; counters and log start over.
	put := func(body string) (*http.Response, []byte) {
		r, _ := http.NewRequest(http.MethodPut, ts.URL+"/_mockllm/script", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	if resp, b := put(`rules: [{reply: {text: "two"}}]`); resp.StatusCode != 200 {
		t.Fatalf("put script: %d %s", resp.StatusCode, b)
	}
	if _, b := post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("a"))); !bytes.Contains(b, []byte(`"two"`)) {
		t.Fatalf("new script not used: %s", b)
	}
	if resp, b := put(`rules: [{reply: {}}]`); resp.StatusCode != 400 || !bytes.Contains(b, []byte("invalid script")) {
		t.Fatalf("bad script accepted: %d %s", resp.StatusCode, b)
	}
	if resp, _ := post(t, ts.URL+"/_mockllm/reset", ""); resp.StatusCode != 200 {
		t.Fatal("reset failed")
	}
	req, _ = newGet(ts.URL + "/_mockllm/requests")
	getJSON(t, req, &log)
	if len(log.Requests) != 0 {
		t.Fatalf("log after reset: %+v", log.Requests)
	}
}

func TestProbesAndUnknownRoutes(t *testing.T) {
	s, ts := newTestServer(t, `rules: []`)
	req, _ := http.NewRequest(http.MethodHead, ts.URL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HEAD /: %v %v", err, resp)
	}
	resp.Body.Close()
	resp, body := post(t, ts.URL+"/v1/unknown", `{}`, "anthropic-version", "2023-06-01")
	var ae anthropicError
	if resp.StatusCode != 404 || json.Unmarshal(body, &ae) != nil || ae.Error.Type != "not_found_error" {
		t.Errorf("anthropic 404: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts.URL+"/v1/nothing", `{}`)
	var oe openAIError
	if resp.StatusCode != 404 || json.Unmarshal(body, &oe) != nil || oe.Error.Message == "" {
		t.Errorf("openai 404: %d %s", resp.StatusCode, body)
	}
	// Codex's Responses-over-WebSocket attempt gets 426, its cue to use HTTP.
	wreq, _ := newGet(ts.URL+"/v1/responses", "Upgrade", "websocket", "Connection", "Upgrade")
	if resp, err := http.DefaultClient.Do(wreq); err != nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Errorf("websocket attempt: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	greq, _ := newGet(ts.URL + "/v1/messages")
	resp, err = http.DefaultClient.Do(greq)
	if err != nil || resp.StatusCode != 404 {
		t.Errorf("GET /v1/messages: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	var paths []string
	for _, r := range s.Requests() {
		paths = append(paths, r.Method+" "+r.Path)
	}
	if strings.Join(paths, ",") != "HEAD /,POST /v1/unknown,POST /v1/nothing,GET /v1/responses,GET /v1/messages" {
		t.Errorf("logged %v", paths)
	}
}

func TestBodyEncodings(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{reply: {text: "unzipped"}}]`)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_ = json.NewEncoder(zw).Encode(anthropicBody(false, userText("x")))
	_ = zw.Close()
	resp, body := post(t, ts.URL+"/v1/messages", buf.Bytes(), "Content-Encoding", "gzip")
	if resp.StatusCode != 200 || !bytes.Contains(body, []byte("unzipped")) {
		t.Errorf("gzip: %d %s", resp.StatusCode, body)
	}
	resp, _ = post(t, ts.URL+"/v1/messages", []byte("not gzip"), "Content-Encoding", "gzip")
	if resp.StatusCode != 400 {
		t.Errorf("bad gzip: %d", resp.StatusCode)
	}
	resp, _ = post(t, ts.URL+"/v1/messages", []byte("{}"), "Content-Encoding", "br")
	if resp.StatusCode != 415 {
		t.Errorf("brotli: %d", resp.StatusCode)
	}
}

// A client that goes away mid-stream stops the handler (goleak in
// TestMain would catch a stuck one), and it saw only part of the stream.
func TestClientCancelMidStream(t *testing.T) {
	s, ts := newTestServer(t, `rules: [{reply: {text: "abcdefghijklmnopqrstuvwxyz", chunkSize: 1, delayMs: 20}}]`)
	for _, api := range []API{APIMessages, APIResponses, APIChat, APIGemini} {
		path, body := minimalBody(api, "hi", true)
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, bytes.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// Read three events, then hang up.
		sc := bufio.NewScanner(resp.Body)
		events := 0
		for events < 3 && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				events++
			}
		}
		cancel()
		rest, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(rest, []byte("xyz")) {
			t.Errorf("%s: stream ran to the end after cancel", api)
		}
	}
	ts.Close() // waits for the handlers
	if n := len(s.Requests()); n != 4 {
		t.Errorf("logged %d requests", n)
	}
}

func TestDropAfterEvents(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{reply: {text: "a long answer that will be cut", chunkSize: 2, dropAfterEvents: 3}}]`)
	for _, api := range []API{APIMessages, APIResponses, APIChat, APIGemini} {
		path, body := minimalBody(api, "hi", true)
		resp, err := http.Post(ts.URL+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("%s: body ended cleanly, want a broken connection", api)
		}
		if n := bytes.Count(got, []byte("data:")); n != 3 {
			t.Errorf("%s: %d events before the drop, want 3", api, n)
		}
	}
}

func TestLatencyCancelled(t *testing.T) {
	_, ts := newTestServer(t, `rules: [{reply: {text: "late", latencyMs: 60000}}]`)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	path, body := minimalBody(APIMessages, "hi", true)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+path, bytes.NewReader(body))
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("expected the client deadline to hit during the scripted latency")
	}
	ts.Close() // returns only when the handler has given up waiting
}

func TestServeAndShutdown(t *testing.T) {
	sc := mustParse(t, `rules: [{reply: {text: "served", chunkSize: 1, delayMs: 50}}]`)
	s := New(sc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.ServeListener(ctx, ln) }()
	url := "http://" + ln.Addr().String()

	_, body := post(t, url+"/v1/messages", anthropicBody(false, userText("x")))
	if !bytes.Contains(body, []byte("served")) {
		t.Fatalf("body %s", body)
	}
	// Start a slow stream, then shut down: Serve returns and the stream is cut.
	path, rb := minimalBody(APIMessages, "hi", true)
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(rb))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()

	if err := New(nil).Serve(context.Background(), "256.0.0.1:bad"); err == nil {
		t.Fatal("Serve on a bad address succeeded")
	}
}

func TestRequestLogOptions(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s, ts := newTestServer(t, `rules: [{reply: {text: "x"}}]`, WithRequestLog(w), WithLogLimit(2), WithClock(func() time.Time { return fixed }))
	for i := 0; i < 3; i++ {
		post(t, ts.URL+"/v1/chat/completions", chatBody(false, map[string]any{"role": "user", "content": "hi"}))
	}
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[0].Seq != 2 || reqs[1].Seq != 3 || !reqs[0].Time.Equal(fixed) {
		t.Fatalf("log limit: %+v", reqs)
	}
	mu.Lock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	mu.Unlock()
	if len(lines) != 3 {
		t.Fatalf("jsonl lines %d", len(lines))
	}
	var rec RecordedRequest
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec.Body != nil || rec.API != APIChat {
		t.Fatalf("jsonl line %s: %v", lines[0], err)
	}
	if !strings.Contains(lines[0], `"time":"2026-01-02T03:04:05Z"`) {
		t.Errorf("clock not used: %s", lines[0])
	}
	_, body := post(t, ts.URL+"/v1/chat/completions", chatBody(false, map[string]any{"role": "user", "content": "hi"}))
	var c struct{ Created int64 }
	if json.Unmarshal(body, &c) != nil || c.Created != fixed.Unix() {
		t.Errorf("created %d", c.Created)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestModelRequestsFilter(t *testing.T) {
	s, ts := newTestServer(t, `rules: []`)
	req, _ := http.NewRequest(http.MethodHead, ts.URL+"/", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	post(t, ts.URL+"/v1/messages", anthropicBody(false, userText("x")))
	if n := len(s.ModelRequests("")); n != 1 {
		t.Fatalf("model requests %d", n)
	}
	if n := len(s.ModelRequests(KindTitle)); n != 0 {
		t.Fatalf("title requests %d", n)
	}
}
