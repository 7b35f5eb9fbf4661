package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// Message content parts (docs/api.md, Messages): images and files sent
// with a user message are stored in the session's artifact store here,
// so the message travels (to the lease holder, through the queue, to the
// runner) as artifact refs only.

// Error codes of message content.
const (
	// CodeInvalidContent: a content part is malformed (unknown type, bad
	// base64, an image type not allowed, an unknown artifact).
	CodeInvalidContent = "INVALID_CONTENT"
	// CodeUnsupportedContent: the session's agent takes no images (or the
	// store keeps no artifacts).
	CodeUnsupportedContent = "UNSUPPORTED_CONTENT"
)

// Defaults of the content limits.
const (
	DefaultMaxMessageBody = 24 << 20 // a message body with its base64 parts
	DefaultMaxImageBytes  = 5 << 20  // one image, decoded (Anthropic's limit)
	DefaultMaxUploadBytes = 32 << 20 // one PUT of a workspace file
	maxContentParts       = 100
)

// imageTypes are the image media types a message may carry: those the
// model APIs take.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// contentError is a malformed content part (400 INVALID_CONTENT).
type contentError struct{ msg string }

func (e contentError) Error() string { return e.msg }

func invalidContent(format string, args ...any) error {
	return contentError{fmt.Sprintf(format, args...)}
}

// messageOf turns a request's content into a session message, storing
// its images and files as artifacts of session id.
func (s *Server) messageOf(ctx context.Context, id string, req restapi.MessageRequest) (session.Message, error) {
	if req.Parts == nil {
		if req.Content == "" {
			return session.Message{}, badRequest("content must be a non-empty string or list of content parts")
		}
		return session.Message{Content: req.Content}, nil
	}
	if len(req.Parts) == 0 {
		return session.Message{}, badRequest("content must be a non-empty string or list of content parts")
	}
	if len(req.Parts) > maxContentParts {
		return session.Message{}, invalidContent("content: at most %d parts", maxContentParts)
	}
	type blob struct {
		data []byte
		ref  conversation.ArtifactRef
		file bool
	}
	var (
		texts []string
		blobs []blob
		msg   session.Message
	)
	// Everything is checked before anything is stored: a bad part stores
	// nothing.
	for i, p := range req.Parts {
		switch p.Type {
		case "text":
			if p.Text == "" {
				continue
			}
			texts = append(texts, p.Text)
		case "image":
			b, err := s.imagePart(i, p)
			if err != nil {
				return msg, err
			}
			blobs = append(blobs, blob{data: b.data, ref: b.ref})
		case "file":
			name, err := sandbox.CleanPath(p.Name)
			if err != nil || name == "." {
				return msg, invalidContent("content[%d]: a file needs a valid workspace path as name", i)
			}
			if (p.Data == "") == (p.Artifact == "") {
				return msg, invalidContent("content[%d]: a file has data or artifact", i)
			}
			ct := p.MediaType
			if ct == "" {
				ct = mime.TypeByExtension(path.Ext(name))
			}
			ref := conversation.ArtifactRef{SHA256: p.Artifact, Name: name, ContentType: ct}
			var data []byte
			if p.Data != "" {
				data, err = base64.StdEncoding.DecodeString(p.Data)
				if err != nil {
					return msg, invalidContent("content[%d]: data is not base64", i)
				}
			}
			blobs = append(blobs, blob{data: data, ref: ref, file: true})
		default:
			return msg, invalidContent("content[%d]: type must be text, image or file", i)
		}
	}
	msg.Content = strings.Join(texts, "\n\n")
	if msg.Content == "" && len(blobs) == 0 {
		return msg, badRequest("content must be a non-empty string or list of content parts")
	}
	if len(blobs) == 0 {
		return msg, nil
	}
	sess, err := s.cfg.Sessions.Get(id)
	if err != nil {
		return msg, err
	}
	hasImages := false
	for _, b := range blobs {
		hasImages = hasImages || !b.file
	}
	if hasImages {
		// Refused before anything is stored.
		if err := sess.CheckContent(session.Message{Images: []conversation.ArtifactRef{{}}}); err != nil {
			return msg, err
		}
	}
	as, err := s.cfg.Sessions.ArtifactsOrErr()
	if err != nil {
		return msg, err
	}
	for i, b := range blobs {
		var ref conversation.ArtifactRef
		if b.data == nil {
			ref, err = as.StatArtifact(ctx, id, b.ref.SHA256)
			if errors.Is(err, store.ErrNotFound) {
				return msg, invalidContent("content: artifact %q not found in this session", b.ref.SHA256)
			}
			if err != nil {
				return msg, fmt.Errorf("stat artifact: %w", err)
			}
			if !b.file && !imageTypes[ref.ContentType] {
				return msg, invalidContent("content: artifact %q is not an image (png, jpeg, gif, webp)", b.ref.SHA256)
			}
			if !b.file && ref.Size > s.cfg.MaxImageBytes {
				return msg, fmt.Errorf("%w: image larger than %d bytes", errContentTooLarge, s.cfg.MaxImageBytes)
			}
			ref.Name = b.ref.Name
			if b.ref.ContentType != "" {
				ref.ContentType = b.ref.ContentType
			}
		} else {
			ref, err = as.PutArtifact(ctx, id, b.ref, bytes.NewReader(b.data))
			if err != nil {
				return msg, fmt.Errorf("store content part %d: %w", i, err)
			}
			ref.Name = b.ref.Name
		}
		if b.file {
			msg.Files = append(msg.Files, ref)
		} else {
			ref.Name = ""
			msg.Images = append(msg.Images, ref)
		}
	}
	return msg, nil
}

// errContentTooLarge: an image above MaxImageBytes (413).
var errContentTooLarge = errors.New("content too large")

type imageBlob struct {
	data []byte
	ref  conversation.ArtifactRef
}

// imagePart checks image part i and decodes its bytes (nil data for an
// artifact).
func (s *Server) imagePart(i int, p restapi.ContentPart) (imageBlob, error) {
	n := 0
	for _, set := range []bool{p.Source != nil, p.URL != "", p.Artifact != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return imageBlob{}, invalidContent("content[%d]: an image has exactly one of source, url and artifact", i)
	}
	var mediaType, data string
	switch {
	case p.Artifact != "":
		if !store.ValidSHA256(p.Artifact) {
			return imageBlob{}, invalidContent("content[%d]: artifact must be a lowercase hex SHA-256", i)
		}
		return imageBlob{ref: conversation.ArtifactRef{SHA256: p.Artifact}}, nil
	case p.Source != nil:
		if p.Source.Type != "base64" {
			return imageBlob{}, invalidContent("content[%d]: source.type must be base64", i)
		}
		mediaType, data = p.Source.ContentMediaType(), p.Source.Data
	default:
		rest, ok := strings.CutPrefix(p.URL, "data:")
		meta, payload, ok2 := strings.Cut(rest, ",")
		mt, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !ok2 || !isB64 {
			return imageBlob{}, invalidContent("content[%d]: url must be a base64 data: URL", i)
		}
		mediaType, data = mt, payload
	}
	if !imageTypes[mediaType] {
		return imageBlob{}, invalidContent("content[%d]: image media type must be image/png, image/jpeg, image/gif or image/webp", i)
	}
	if int64(base64.StdEncoding.DecodedLen(len(data))) > s.cfg.MaxImageBytes+2 {
		return imageBlob{}, fmt.Errorf("%w: content[%d]: image larger than %d bytes", errContentTooLarge, i, s.cfg.MaxImageBytes)
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return imageBlob{}, invalidContent("content[%d]: image data is not base64", i)
	}
	if len(b) == 0 {
		return imageBlob{}, invalidContent("content[%d]: image is empty", i)
	}
	if int64(len(b)) > s.cfg.MaxImageBytes {
		return imageBlob{}, fmt.Errorf("%w: content[%d]: image larger than %d bytes", errContentTooLarge, i, s.cfg.MaxImageBytes)
	}
	if got := http.DetectContentType(b); strings.HasPrefix(got, "image/") && got != mediaType {
		return imageBlob{}, invalidContent("content[%d]: the data is %s, not %s", i, got, mediaType)
	}
	return imageBlob{data: b, ref: conversation.ArtifactRef{ContentType: mediaType}}, nil
}
