package main

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestServePprof(t *testing.T) {
	addr, stop, err := servePprof("127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("index: %d %.200q", code, body)
	}
	if code, body := get("/debug/pprof/goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("goroutines: %d %.200q", code, body)
	}
	// Only the profiles: nothing of the API on this listener.
	if code, _ := get("/api/sessions"); code != http.StatusNotFound {
		t.Fatalf("/api/sessions on the pprof listener: %d", code)
	}
	stop()
	if _, err := http.Get("http://" + addr + "/debug/pprof/"); err == nil {
		t.Fatal("the listener still answers after stop")
	}
	// A bad address is the flag's error.
	if _, _, err := servePprof("not-an-address", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "--pprof-addr") {
		t.Fatalf("bad address: %v", err)
	}
}
