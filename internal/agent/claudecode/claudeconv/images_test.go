package claudeconv_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
)

// A tool result's base64 image becomes an attachment of the tool_result
// block and its bytes are handed out (TakeImages), never put in an event;
// without KeepImages it is only noted in the output.
func TestToolResultImages(t *testing.T) {
	img := []byte("\x89PNG\r\n\x1a\nsome picture bytes")
	b64 := base64.StdEncoding.EncodeToString(img)
	sum := sha256.Sum256(img)
	lines := []string{
		`{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"/w/p.png"}}]},"uuid":"u1"}`,
		`{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + b64 + `"}}]}]},"uuid":"u2"}`,
	}
	for _, keep := range []bool{true, false} {
		sc := claudeconv.NewStreamConverter()
		if keep {
			sc.KeepImages()
		}
		var evs []conversation.Event
		for _, l := range lines {
			out, err := sc.Convert([]byte(l))
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, out...)
		}
		ims := sc.TakeImages()
		var res *conversation.Block
		for _, e := range evs {
			if strings.Contains(string(e.Payload), b64[:24]) {
				t.Fatalf("an event holds the image's bytes: %s", e.Payload)
			}
			if e.Type == conversation.TypeBlockUpsert {
				var p conversation.BlockUpsert
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					t.Fatal(err)
				}
				if p.Block.Type == conversation.BlockToolResult {
					res = &p.Block
				}
			}
		}
		if res == nil || res.Output != "[image: image/png]" {
			t.Fatalf("keep=%v: tool_result %+v", keep, res)
		}
		if !keep {
			if len(res.Attachments) != 0 || len(ims) != 0 {
				t.Fatalf("without KeepImages: %+v, %d images", res.Attachments, len(ims))
			}
			continue
		}
		want := conversation.ArtifactRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(img)), ContentType: "image/png"}
		if len(res.Attachments) != 1 || res.Attachments[0] != want {
			t.Fatalf("attachments %+v, want %+v", res.Attachments, want)
		}
		if len(ims) != 1 || ims[0].Ref != want || !bytes.Equal(ims[0].Data, img) {
			t.Fatalf("images %+v", ims)
		}
		if again := sc.TakeImages(); len(again) != 0 {
			t.Fatalf("taken twice: %d", len(again))
		}
	}
}
