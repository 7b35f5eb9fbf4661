package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/shell"
	"github.com/agentd/agentd/internal/api"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox/local"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/store/memstore"
)

// seer is an architecture that takes images: its runner hands every turn
// to the test (turns) and waits for release before it ends.
type seer struct {
	turns   chan agent.Turn
	release chan struct{}
}

func (a *seer) Name() string        { return "seer" }
func (a *seer) AcceptsImages() bool { return true }
func (a *seer) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	return &seerRunner{a: a}, nil
}

type seerRunner struct{ a *seer }

func (r *seerRunner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	r.a.turns <- t
	select {
	case <-r.a.release:
	case <-ctx.Done():
		return agent.TurnResult{}, ctx.Err()
	}
	return agent.TurnResult{Result: "seen"}, nil
}
func (r *seerRunner) Interrupt(ctx context.Context) error { return nil }
func (r *seerRunner) Close(ctx context.Context) error     { return nil }

// contentEnv is an API over a memstore with artifacts, the shell and seer
// architectures, and small content limits.
func newContentEnv(t *testing.T) (*env, *seer, *memstore.Store) {
	t.Helper()
	st := memstore.New()
	lg := eventlog.New(st, eventlog.Options{QueueSize: 64})
	archs := agent.NewRegistry()
	archs.Register(shell.Architecture{})
	sr := &seer{turns: make(chan agent.Turn, 4), release: make(chan struct{}, 4)}
	archs.Register(sr)
	dataDir := t.TempDir()
	mgr, err := session.New(session.Config{Store: st, Log: lg, Sandbox: local.New(local.Options{}), Architectures: archs,
		DataDir: dataDir, Artifacts: st, PersistFilesMax: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Sessions: mgr, Log: lg, Profiles: session.NewProfiles(st, nil), Architectures: archs, DataDir: dataDir,
		MaxImageBytes: 2048, MaxMessageBody: 16 << 10, MaxUploadBytes: 1024}
	a, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, api: a, mgr: mgr, log: lg, dataDir: dataDir, cfg: cfg}
	e.srv = httptest.NewServer(a)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// A turn still waiting ends.
		for range 4 {
			select {
			case sr.release <- struct{}{}:
			default:
			}
		}
		mgr.Close(ctx)
		lg.Close()
		a.Shutdown(ctx)
		e.srv.Close()
	})
	return e, sr, st
}

func (e *env) createArch(arch string) string {
	e.t.Helper()
	code, out := e.do("POST", "/api/sessions", `{"architecture":"`+arch+`"}`)
	if code != 201 {
		e.t.Fatalf("create: %d %v", code, out)
	}
	return out["sessionId"].(string)
}

// testPNG is a small real PNG (w×h, one colour).
func testPNG(t *testing.T, w, h int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, color.RGBA{R: 200, G: uint8(x * 10), B: 40, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (e *env) waitSeerTurn(sr *seer) agent.Turn {
	e.t.Helper()
	select {
	case t := <-sr.turns:
		return t
	case <-time.After(20 * time.Second):
		e.t.Fatal("no turn reached the runner")
	}
	return agent.Turn{}
}

func TestMessageContentParts(t *testing.T) {
	e, sr, st := newContentEnv(t)
	id := e.createArch("seer")
	img1, img2 := testPNG(t, 4, 3), testPNG(t, 5, 5)
	body := mustJSON(map[string]any{"content": []any{
		map[string]any{"type": "text", "text": "what is in these?"},
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "mediaType": "image/png", "data": base64.StdEncoding.EncodeToString(img1)}},
		map[string]any{"type": "image", "url": "data:image/png;base64," + base64.StdEncoding.EncodeToString(img2)},
		map[string]any{"type": "file", "name": "in/notes.txt", "data": base64.StdEncoding.EncodeToString([]byte("a note\n"))},
	}})
	code, out := e.do("POST", "/api/sessions/"+id+"/messages", body)
	if code != 202 {
		t.Fatalf("send: %d %v", code, out)
	}
	turn := e.waitSeerTurn(sr)
	if turn.Content != "what is in these?" || len(turn.Images) != 2 ||
		!bytes.Equal(turn.Images[0].Data, img1) || !bytes.Equal(turn.Images[1].Data, img2) ||
		turn.Images[0].MediaType != "image/png" || turn.Images[1].SHA256 != hexSum(img2) {
		t.Fatalf("the runner got %q with %d images", turn.Content, len(turn.Images))
	}
	// The file is in the workspace before the turn runs.
	if data, err := os.ReadFile(filepath.Join(e.dataDir, "workspaces", id, "in", "notes.txt")); err != nil || string(data) != "a note\n" {
		t.Fatalf("workspace file: %q %v", data, err)
	}
	sr.release <- struct{}{}
	e.waitTurn(id, out["queryId"].(string))
	// The user_message block holds refs, the log no bytes.
	var state struct{ Blocks []conversation.Block }
	resp := e.request("GET", "/api/sessions/"+id, "")
	if err := json.NewDecoder(resp.Body).Decode(&state); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	u := state.Blocks[0]
	if u.Type != conversation.BlockUserMessage || len(u.Attachments) != 3 {
		t.Fatalf("user block %+v", u)
	}
	want := []conversation.ArtifactRef{
		{SHA256: hexSum(img1), Size: int64(len(img1)), ContentType: "image/png"},
		{SHA256: hexSum(img2), Size: int64(len(img2)), ContentType: "image/png"},
		{SHA256: hexSum([]byte("a note\n")), Size: 7, ContentType: "text/plain; charset=utf-8", Name: "in/notes.txt"},
	}
	for i, w := range want {
		if u.Attachments[i] != w {
			t.Errorf("attachment %d: %+v, want %+v", i, u.Attachments[i], w)
		}
	}
	for _, ev := range e.events(id, 0) {
		if strings.Contains(string(ev.Payload), base64.StdEncoding.EncodeToString(img1)[:40]) {
			t.Fatalf("the log holds the image's bytes: %s", ev.Type)
		}
	}
	// An image already stored is sent again by its sha256.
	code, out = e.do("POST", "/api/sessions/"+id+"/messages", mustJSON(map[string]any{"content": []any{
		map[string]any{"type": "image", "artifact": hexSum(img1)}, map[string]any{"type": "text", "text": "again"}}}))
	if code != 202 {
		t.Fatalf("send by artifact: %d %v", code, out)
	}
	if turn := e.waitSeerTurn(sr); len(turn.Images) != 1 || !bytes.Equal(turn.Images[0].Data, img1) {
		t.Fatalf("by artifact: %d images", len(turn.Images))
	}
	// While that turn runs, a message with an image waits in the queue
	// with its attachments, and its turn gets the image.
	code, out = e.do("POST", "/api/sessions/"+id+"/messages", mustJSON(map[string]any{"content": []any{
		map[string]any{"type": "text", "text": "queued"},
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": base64.StdEncoding.EncodeToString(img2)}}}}))
	if code != 202 || out["queued"] != true {
		t.Fatalf("queue: %d %v", code, out)
	}
	var q struct{ Messages []conversation.QueuedMessage }
	resp = e.request("GET", "/api/sessions/"+id+"/queue", "")
	_ = json.NewDecoder(resp.Body).Decode(&q)
	resp.Body.Close()
	if len(q.Messages) != 1 || len(q.Messages[0].Attachments) != 1 || q.Messages[0].Attachments[0].SHA256 != hexSum(img2) {
		t.Fatalf("queue %+v", q.Messages)
	}
	sr.release <- struct{}{}
	if turn := e.waitSeerTurn(sr); turn.Content != "queued" || len(turn.Images) != 1 || !bytes.Equal(turn.Images[0].Data, img2) {
		t.Fatalf("dequeued turn: %q, %d images", turn.Content, len(turn.Images))
	}
	sr.release <- struct{}{}
	if n, err := st.ArtifactUsage(context.Background(), id); err != nil || n != int64(len(img1)+len(img2)+7) {
		t.Fatalf("artifact usage %d %v", n, err)
	}
}

func TestMessageContentRefused(t *testing.T) {
	e, _, st := newContentEnv(t)
	id := e.createArch("seer")
	shellID := e.createArch("shell")
	pngB64 := base64.StdEncoding.EncodeToString(testPNG(t, 3, 3))
	img := func(src map[string]any) map[string]any { return map[string]any{"type": "image", "source": src} }
	big := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, 4096))
	for _, c := range []struct {
		name    string
		session string
		content any
		status  int
		code    string
	}{
		{"number", id, 42, 400, "BAD_REQUEST"},
		{"empty list", id, []any{}, 400, "BAD_REQUEST"},
		{"only empty text", id, []any{map[string]any{"type": "text", "text": ""}}, 400, "BAD_REQUEST"},
		{"unknown part", id, []any{map[string]any{"type": "video"}}, 400, "INVALID_CONTENT"},
		{"bad base64", id, []any{img(map[string]any{"type": "base64", "mediaType": "image/png", "data": "!!!not base64"})}, 400, "INVALID_CONTENT"},
		{"bmp", id, []any{img(map[string]any{"type": "base64", "mediaType": "image/bmp", "data": pngB64})}, 400, "INVALID_CONTENT"},
		{"jpeg that is a png", id, []any{img(map[string]any{"type": "base64", "mediaType": "image/jpeg", "data": pngB64})}, 400, "INVALID_CONTENT"},
		{"url source", id, []any{img(map[string]any{"type": "url", "mediaType": "image/png", "data": pngB64})}, 400, "INVALID_CONTENT"},
		{"two sources", id, []any{map[string]any{"type": "image", "url": "data:image/png;base64," + pngB64,
			"source": map[string]any{"type": "base64", "mediaType": "image/png", "data": pngB64}}}, 400, "INVALID_CONTENT"},
		{"http url", id, []any{map[string]any{"type": "image", "url": "https://example.com/a.png"}}, 400, "INVALID_CONTENT"},
		{"unknown artifact", id, []any{map[string]any{"type": "image", "artifact": strings.Repeat("ab", 32)}}, 400, "INVALID_CONTENT"},
		{"bad artifact", id, []any{map[string]any{"type": "image", "artifact": "../x"}}, 400, "INVALID_CONTENT"},
		{"file outside", id, []any{map[string]any{"type": "file", "name": "../x", "data": "eA=="}}, 400, "INVALID_CONTENT"},
		{"file without data", id, []any{map[string]any{"type": "file", "name": "x"}}, 400, "INVALID_CONTENT"},
		{"image too large", id, []any{img(map[string]any{"type": "base64", "mediaType": "image/png", "data": big})}, 413, "PAYLOAD_TOO_LARGE"},
		{"body too large", id, []any{map[string]any{"type": "text", "text": strings.Repeat("x", 20<<10)}}, 413, "PAYLOAD_TOO_LARGE"},
		{"shell takes no images", shellID, []any{map[string]any{"type": "text", "text": "echo hi"}, img(map[string]any{"type": "base64", "mediaType": "image/png", "data": pngB64})}, 422, "UNSUPPORTED_CONTENT"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := e.request("POST", "/api/sessions/"+c.session+"/messages", mustJSON(map[string]any{"content": c.content}))
			expectCode(t, resp, c.status, c.code)
		})
	}
	// Nothing was stored, nothing started.
	for _, s := range []string{id, shellID} {
		if n, err := st.ArtifactUsage(context.Background(), s); err != nil || n != 0 {
			t.Errorf("session %s holds %d bytes of artifacts (%v)", s, n, err)
		}
		for _, ev := range e.events(s, 0) {
			if ev.Type == conversation.TypeQueryStarted || ev.Type == conversation.TypeMessageQueued {
				t.Errorf("session %s: a refused message left %s", s, ev.Type)
			}
		}
	}
	// A file part is fine for the shell: it goes into the workspace.
	code, out := e.do("POST", "/api/sessions/"+shellID+"/messages", mustJSON(map[string]any{"content": []any{
		map[string]any{"type": "text", "text": "cat given.txt"},
		map[string]any{"type": "file", "name": "given.txt", "data": base64.StdEncoding.EncodeToString([]byte("from the user"))}}}))
	if code != 202 {
		t.Fatalf("shell with a file: %d %v", code, out)
	}
	evs := e.waitTurn(shellID, out["queryId"].(string))
	if !strings.Contains(fmt.Sprint(blockOutputs(evs)), "from the user") {
		t.Fatalf("the shell did not read the file: %v", blockOutputs(evs))
	}
}

// blockOutputs are the tool_result outputs the events set.
func blockOutputs(evs []conversation.Event) []string {
	var out []string
	for _, ev := range evs {
		switch ev.Type {
		case conversation.TypeBlockUpsert:
			var p struct{ Block conversation.Block }
			_ = json.Unmarshal(ev.Payload, &p)
			out = append(out, p.Block.Output)
		case conversation.TypeBlockDelta:
			var p struct{ Delta string }
			_ = json.Unmarshal(ev.Payload, &p)
			out = append(out, p.Delta)
		}
	}
	return out
}

func TestPutFile(t *testing.T) {
	e, _, st := newContentEnv(t)
	id := e.createArch("shell")
	put := func(path, body string) *http.Response {
		req, _ := http.NewRequest("PUT", e.srv.URL+"/api/sessions/"+id+"/files/"+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The environment is down: the folder is written, and the store's copy.
	resp := put("dir/a.txt", "hello")
	var entry struct {
		Path string
		Size int64
	}
	_ = json.NewDecoder(resp.Body).Decode(&entry)
	resp.Body.Close()
	if resp.StatusCode != 200 || entry.Path != "dir/a.txt" || entry.Size != 5 {
		t.Fatalf("put: %d %+v", resp.StatusCode, entry)
	}
	if code, _ := e.do("GET", "/api/sessions/"+id+"/files/dir/a.txt", ""); code != 200 {
		t.Fatalf("get after put: %d", code)
	}
	if files, err := st.ListWorkspaceFiles(context.Background(), id); err != nil || len(files) != 1 || string(files[0].Content) != "hello" {
		t.Fatalf("store copy: %+v %v", files, err)
	}
	// With the environment up (after a turn), through it; the watcher
	// reports the file.
	code, out := e.do("POST", "/api/sessions/"+id+"/messages", `{"content":"true"}`)
	if code != 202 {
		t.Fatalf("send: %d %v", code, out)
	}
	e.waitTurn(id, out["queryId"].(string))
	if resp := put("b.txt", "live"); resp.StatusCode != 200 {
		t.Fatalf("put live: %d", resp.StatusCode)
	} else {
		resp.Body.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !hasFileEvent(e.events(id, 0), "b.txt") {
		if time.Now().After(deadline) {
			t.Fatal("no file event for b.txt")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Refused: bad paths, the root, too large, unknown session, a JSON
	// Content-Type is fine but needs no JSON.
	expectCode(t, put("../x", "x"), 400, "INVALID_PATH")
	expectCode(t, put("a/../../x", "x"), 400, "INVALID_PATH")
	expectCode(t, put("big.bin", strings.Repeat("x", 2048)), 413, "PAYLOAD_TOO_LARGE")
	req, _ := http.NewRequest("PUT", e.srv.URL+"/api/sessions/nope/files/x.txt", strings.NewReader("x"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	expectCode(t, resp, 404, "SESSION_NOT_FOUND")
	if _, err := os.Stat(filepath.Join(e.dataDir, "workspaces", id, "big.bin")); err == nil {
		t.Fatal("a refused upload left a file")
	}
}

func hasFileEvent(evs []conversation.Event, path string) bool {
	for _, ev := range evs {
		if strings.HasPrefix(string(ev.Type), "file:") && strings.Contains(string(ev.Payload), `"`+path+`"`) {
			return true
		}
	}
	return false
}
