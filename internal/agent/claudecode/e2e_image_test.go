package claudecode_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentd/agentd/client"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/restapi"
)

func pngOf(t *testing.T, w, h int, c color.RGBA) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for x := range w {
		for y := range h {
			img.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestE2EUserImageReachesModel: a user message with an image reaches the
// model as an image block of the request (the real CLI, stream-json
// input), and the user block holds the image as an artifact.
func TestE2EUserImageReachesModel(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("auto")
	img := pngOf(t, 8, 6, color.RGBA{R: 255, A: 255})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := e.state(id)
	stream := e.c.Stream(ctx, id, st.LastSeq)
	defer stream.Close()
	sent, err := e.c.SendMessage(ctx, id, restapi.MessageRequest{Parts: []restapi.ContentPart{
		{Type: "image", Source: &restapi.ContentSource{Type: "base64", MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(img)}},
		{Type: "text", Text: "please describe the images"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	end, evs := waitQuery(t, ctx, stream, sent.QueryID)
	done := mustComplete(t, end, evs)
	want := fmt.Sprintf("I see image image/png %d bytes sha256:%s", len(img), sha(img))
	if done.Result != want {
		t.Fatalf("result %q, want %q", done.Result, want)
	}
	main := e.mock.ModelRequests("")
	var seen bool
	for _, r := range main {
		for _, im := range r.Images {
			seen = seen || (im.SHA256 == sha(img) && im.MediaType == "image/png" && !im.InToolResult)
		}
	}
	if !seen {
		t.Fatal("no model request carried the image")
	}
	user := e.state(id).Blocks[0]
	if user.Type != conversation.BlockUserMessage || user.Content != "please describe the images" ||
		len(user.Attachments) != 1 || user.Attachments[0].SHA256 != sha(img) {
		t.Fatalf("user block %+v", user)
	}
}

// TestE2EToolResultImageBecomesArtifact: Claude Code reads a PNG with its
// Read tool; the tool result's image reaches the model, and the
// tool_result block gets it as an attachment stored in the artifact
// store, while no event holds its bytes.
func TestE2EToolResultImageBecomesArtifact(t *testing.T) {
	e := newE2E(t, "", nil)
	id := e.session("auto")
	img := pngOf(t, 12, 9, color.RGBA{G: 200, B: 90, A: 255})
	pic := filepath.Join(e.workspace(id), "pic.png")
	if err := os.MkdirAll(filepath.Dir(pic), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pic, img, 0o644); err != nil {
		t.Fatal(err)
	}
	end, evs := e.turn(id, "read the picture "+pic, nil)
	done := mustComplete(t, end, evs)
	if !strings.Contains(done.Result, "image/png") || !strings.Contains(done.Result, "(tool result)") {
		t.Fatalf("result %q: the model saw no image in the tool result", done.Result)
	}
	var res *conversation.Block
	st := e.state(id)
	for i := range st.Blocks {
		if st.Blocks[i].Type == conversation.BlockToolResult {
			res = &st.Blocks[i]
		}
	}
	if res == nil || len(res.Attachments) != 1 || res.Attachments[0].ContentType != "image/png" {
		t.Fatalf("tool_result block %+v", res)
	}
	ref := res.Attachments[0]
	// Claude Code may re-encode the picture; what it sent is stored.
	data, err := e.c.Artifact(context.Background(), id, ref.SHA256)
	if err != nil {
		t.Fatalf("artifact: %v", err)
	}
	if sha(data) != ref.SHA256 || int64(len(data)) != ref.Size || http.DetectContentType(data) != "image/png" {
		t.Fatalf("artifact: %d bytes, %s", len(data), http.DetectContentType(data))
	}
	b64 := base64.StdEncoding.EncodeToString(data)
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), b64[:32]) {
			t.Fatalf("event %s holds the image's bytes", ev.Type)
		}
	}
}

// waitQuery follows stream until turn queryID ends; it returns the end
// event and the events on the way.
func waitQuery(t *testing.T, ctx context.Context, stream *client.Stream, queryID string) (conversation.Event, []conversation.Event) {
	t.Helper()
	var evs []conversation.Event
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			t.Fatalf("turn %s: %v (events so far: %s)", queryID, err, types(evs))
		}
		evs = append(evs, ev)
		if ev.Type != conversation.TypeQueryCompleted && ev.Type != conversation.TypeQueryFailed {
			continue
		}
		if q := payload[struct{ QueryID string }](t, ev); q.QueryID == queryID {
			return ev, evs
		}
	}
}
