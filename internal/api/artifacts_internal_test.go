package api

import (
	"mime"
	"strings"
	"testing"

	"github.com/agentd/agentd/conversation"
)

// FuzzArtifactHeaders: whatever type and name an artifact was stored
// with (an agent chooses them), the headers served are well formed, carry
// no control character, and show in place only raster images.
func FuzzArtifactHeaders(f *testing.F) {
	for _, seed := range [][2]string{
		{"image/png", "a.png"}, {"image/svg+xml", "x.svg"}, {"text/html", "<script>.html"},
		{"", ""}, {"text/plain; charset=utf-8", "résumé.txt"}, {"image/png; x=\"\r\n\"", "a\r\nb"},
		{"IMAGE/PNG", `..\\..\\x`}, {"multipart/x; boundary=\"", `"quoted"`}, {"a/b", "\x00\x7f"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, ctype, name string) {
		ref := conversation.ArtifactRef{SHA256: strings.Repeat("ab", 32), ContentType: ctype, Name: name}
		gotType, disp := artifactHeaders(ref)
		for _, h := range []string{gotType, disp} {
			if strings.ContainsFunc(h, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("header %q has a control character", h)
			}
		}
		mt, _, err := mime.ParseMediaType(gotType)
		if err != nil {
			t.Fatalf("Content-Type %q: %v", gotType, err)
		}
		kind, params, err := mime.ParseMediaType(disp)
		if err != nil {
			t.Fatalf("Content-Disposition %q: %v", disp, err)
		}
		if kind == "inline" && !inlineArtifactTypes[mt] {
			t.Fatalf("%q shown inline", mt)
		}
		if kind != "inline" && kind != "attachment" {
			t.Fatalf("Content-Disposition %q", disp)
		}
		if fn := params["filename"]; fn == "" || strings.ContainsAny(fn, `/\`) {
			t.Fatalf("file name %q from %q", fn, name)
		}
	})
}
