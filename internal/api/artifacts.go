package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/store"
)

// Error codes of artifacts (docs/api.md).
const (
	// CodeArtifactNotFound: the session holds no artifact with that
	// sha256 (or the server keeps none); 404.
	CodeArtifactNotFound = "ARTIFACT_NOT_FOUND"
	// CodeArtifactQuota: storing an artifact would pass the session's or
	// the store's artifact quota; nothing was stored; 507.
	CodeArtifactQuota = "ARTIFACT_QUOTA_EXCEEDED"
)

// errArtifactNotFound is classified ARTIFACT_NOT_FOUND.
var errArtifactNotFound = errors.New("artifact not found")

// inlineArtifactTypes are the media types a browser may show in place:
// raster images, which run nothing. Anything else (SVG, HTML, text, PDF)
// is an attachment, so that no artifact, which an agent may have written,
// ever runs as a page of the API's origin.
var inlineArtifactTypes = map[string]bool{
	"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true, "image/avif": true,
}

// handleArtifact serves an artifact of a session by its sha256, streamed
// from the store a chunk at a time with http.ServeContent's semantics: the
// ETag is the quoted sha256 (If-None-Match: 304; If-Range), one or more
// byte ranges (206; an unsatisfiable one is a JSON 416 with
// Content-Range), HEAD. The session access check ran before (identity.go).
func (s *Server) handleArtifact(w http.ResponseWriter, r *http.Request) {
	id, sha := r.PathValue("id"), r.PathValue("sha256")
	if !store.ValidSHA256(sha) {
		s.fail(w, r, badRequest("sha256 must be 64 lowercase hexadecimal digits"))
		return
	}
	as := s.cfg.Sessions.Artifacts()
	if as == nil {
		s.fail(w, r, fmt.Errorf("%w: this server keeps no artifacts", errArtifactNotFound))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), fileOpenTimeout)
	ref, err := as.StatArtifact(ctx, id, sha)
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		err = fmt.Errorf("%w: session %s holds no artifact %s", errArtifactNotFound, id, sha)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	etag := `"` + sha + `"`
	if h := r.Header.Get("Range"); h != "" && r.Header.Get("If-None-Match") != etag {
		if ir := r.Header.Get("If-Range"); ir == "" || ir == etag {
			if _, err := parseRange(h, ref.Size); err != nil {
				var re rangeError
				if errors.As(err, &re) && re.noOverlap {
					w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(ref.Size, 10))
				}
				s.fail(w, r, err)
				return
			}
		}
	}
	ctype, disposition := artifactHeaders(ref)
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Disposition", disposition)
	h.Set("ETag", etag)
	h.Set("X-Content-Type-Options", "nosniff")
	// Opened by itself, nothing of it runs (an attachment type a browser
	// shows anyway, an image viewer's document).
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	// Content addressed: it never changes.
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	body := &artifactBody{ctx: r.Context(), as: as, session: id, sha: sha, size: ref.Size}
	defer body.Close()
	http.ServeContent(deadlineWriter{ResponseWriter: w, rc: rc}, r, "", time.Time{}, body)
}

// artifactHeaders returns the Content-Type and Content-Disposition to
// serve ref with: its type when well formed (else
// application/octet-stream), inline only for inlineArtifactTypes, and its
// name (else artifact-<sha256 prefix>) as the file name.
func artifactHeaders(ref conversation.ArtifactRef) (ctype, disposition string) {
	ctype = "application/octet-stream"
	mt := ""
	if t, params, err := mime.ParseMediaType(ref.ContentType); err == nil {
		if f := mime.FormatMediaType(t, params); f != "" {
			ctype, mt = f, t
		}
	}
	kind := "attachment"
	if inlineArtifactTypes[mt] {
		kind = "inline"
	}
	name := artifactFileName(ref.Name)
	if name == "" {
		name = "artifact-" + ref.SHA256[:12]
		if exts, _ := mime.ExtensionsByType(mt); len(exts) > 0 && mt != "application/octet-stream" {
			name += exts[0]
		}
	}
	disposition = mime.FormatMediaType(kind, map[string]string{"filename": name})
	if disposition == "" {
		disposition = kind
	}
	return ctype, disposition
}

// artifactFileName is the last element of name without control
// characters, "" when nothing is left.
func artifactFileName(name string) string {
	name = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name)
	name = path.Base(strings.ReplaceAll(name, `\`, "/"))
	if name == "." || name == "/" || name == ".." {
		return ""
	}
	return name
}

// artifactBody is the io.ReadSeeker http.ServeContent reads: it opens the
// artifact at the position asked for, lazily, so a range reads only the
// chunks it covers.
type artifactBody struct {
	ctx          context.Context
	as           store.ArtifactStore
	session, sha string
	size, pos    int64
	rc           io.ReadCloser // nil until a read, and after a seek
}

func (b *artifactBody) Seek(off int64, whence int) (int64, error) {
	abs := off
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		abs += b.pos
	case io.SeekEnd:
		abs += b.size
	default:
		return 0, errors.New("artifact: bad whence")
	}
	if abs < 0 {
		return 0, errors.New("artifact: negative position")
	}
	if abs != b.pos {
		b.Close()
		b.pos = abs
	}
	return abs, nil
}

func (b *artifactBody) Read(p []byte) (int, error) {
	if b.pos >= b.size {
		return 0, io.EOF
	}
	if b.rc == nil {
		rc, err := b.as.OpenArtifact(b.ctx, b.session, b.sha, b.pos, -1)
		if err != nil {
			return 0, err
		}
		b.rc = rc
	}
	n, err := b.rc.Read(p)
	b.pos += int64(n)
	return n, err
}

func (b *artifactBody) Close() {
	if b.rc != nil {
		_ = b.rc.Close()
		b.rc = nil
	}
}
