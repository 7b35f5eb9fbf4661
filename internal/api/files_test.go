package api_test

import (
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/internal/api"
)

// TestFileServingBounded attacks GET /api/sessions/{id}/files/<path> with
// what an agent can leave in its workspace, with the environment up and
// down (then the server reads the folder itself): a FIFO (whose open used
// to block a goroutine, a thread and three fds for good), a 2 GiB sparse
// file (read whole: 2 GiB of RSS), a folder, a device, symlinks. Only
// regular files are served, streamed, with ranges, and whole only up to
// api.DefaultMaxFileBytes.
func TestFileServingBounded(t *testing.T) {
	e := newEnv(t, "")
	id := e.create()
	script := `mkfifo fifo && ln -s fifo to-fifo && mkdir dir && ln -s /etc/passwd out && ln -s small.txt link.txt &&
printf 'hello world' > small.txt && truncate -s 2G big && printf end >> big`
	if os.Getuid() == 0 {
		script += ` && mknod zero c 1 5`
	}
	e.do("POST", "/api/sessions/"+id+"/messages", `{"content":`+strconv.Quote(script)+`}`)
	evs := e.waitTurn(id, "q1")
	for _, ev := range evs {
		if ev.Type == "query:failed" {
			t.Fatalf("setup failed: %s", ev.Payload)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", e.srv.URL+"/api/sessions/"+id+"/files/"+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return resp
	}
	body := func(resp *http.Response) string {
		t.Helper()
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	for _, phase := range []string{"environment up", "environment down"} {
		if phase == "environment down" {
			if code, _ := e.do("DELETE", "/api/sessions/"+id, ""); code != 200 {
				t.Fatal("delete", code)
			}
		}
		t.Run(phase, func(t *testing.T) {
			// Not regular files: a clear 400, at once, nothing left behind.
			notFiles := []string{"fifo", "to-fifo", "dir"}
			if os.Getuid() == 0 {
				notFiles = append(notFiles, "zero")
			}
			for _, p := range notFiles {
				expectCode(t, get(p), 400, api.CodeNotAFile)
			}
			expectCode(t, get("out"), 400, api.CodeInvalidPath)
			goroutines, fds, threads := runtime.NumGoroutine(), openFDs(t), countThreads(t)
			for range 50 {
				expectCode(t, get("fifo"), 400, api.CodeNotAFile)
			}
			// (Idle runtime threads are kept, never freed: a few more
			// may exist; 50 blocked opens held 50.)
			settled(t, func() bool {
				return runtime.NumGoroutine() <= goroutines+5 && openFDs(t) <= fds+5 && countThreads(t) <= threads+8
			}, func() string {
				return strconv.Itoa(runtime.NumGoroutine()) + " goroutines (were " + strconv.Itoa(goroutines) +
					"), " + strconv.Itoa(openFDs(t)) + " fds (were " + strconv.Itoa(fds) + "), " +
					strconv.Itoa(countThreads(t)) + " threads (were " + strconv.Itoa(threads) + ")"
			})

			// A small file, and through a symlink inside.
			resp := get("link.txt")
			if resp.StatusCode != 200 || resp.Header.Get("Accept-Ranges") != "bytes" ||
				resp.Header.Get("Content-Length") != "11" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
				t.Fatalf("small file: %d %v", resp.StatusCode, resp.Header)
			}
			if b := body(resp); b != "hello world" {
				t.Fatalf("small file %q", b)
			}
			if resp := get("small.txt", "Range", "bytes=6-"); resp.StatusCode != 206 || body(resp) != "world" {
				t.Fatalf("range of a small file: %d", resp.StatusCode)
			}
			expectCode(t, get("small.txt", "Range", "bytes=20-30"), 416, api.CodeRangeNotSatisfiable)

			// The big file: whole, refused before anything is read; its
			// end by range; a range over the bound refused too. The
			// server's memory does not move.
			rss := rssBytes(t)
			expectCode(t, get("big"), 413, api.CodeFileTooLarge)
			resp = get("big", "Range", "bytes=-3")
			if resp.StatusCode != 206 || resp.Header.Get("Content-Range") != "bytes 2147483648-2147483650/2147483651" {
				t.Fatalf("range at the end of the big file: %d %v", resp.StatusCode, resp.Header)
			}
			if b := body(resp); b != "end" {
				t.Fatalf("tail %q", b)
			}
			// 32 MiB from the middle, streamed.
			resp = get("big", "Range", "bytes=1073741824-1107296255")
			if resp.StatusCode != 206 {
				t.Fatalf("32 MiB range: %d", resp.StatusCode)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != 32<<20 {
				t.Fatalf("32 MiB range: %d bytes, %v", n, err)
			}
			expectCode(t, get("big", "Range", "bytes=0-"), 413, api.CodeFileTooLarge)
			expectCode(t, get("big", "Range", "bytes=0-10,0-"), 413, api.CodeFileTooLarge)
			// If-Range that does not match means "the whole file".
			expectCode(t, get("big", "Range", "bytes=-3", "If-Range", "Mon, 02 Jan 2006 15:04:05 GMT"), 413, api.CodeFileTooLarge)
			if grown := rssBytes(t) - rss; grown > 64<<20 {
				t.Fatalf("serving the big file grew the server's RSS by %d MiB", grown>>20)
			}
		})
	}
}

// settled waits (up to 10 s) until ok holds.
func settled(t *testing.T, ok func() bool, state func() string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %s", state())
		}
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc")
	}
	return len(ents)
}

func countThreads(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip("no /proc")
	}
	return len(ents)
}

func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
