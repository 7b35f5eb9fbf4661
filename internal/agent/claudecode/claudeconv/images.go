package claudeconv

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"

	"github.com/agentd/agentd/conversation"
)

// Image is an image a tool result carried (a Read of a picture, an MCP
// tool's screenshot): its ref, which the tool_result block's attachments
// hold, and its bytes, which the caller stores as the artifact. The event
// never holds the bytes, so the log does not either.
type Image struct {
	Ref  conversation.ArtifactRef
	Data []byte
}

// KeepImages makes tool results' base64 images attachments of their
// tool_result blocks; TakeImages hands out their bytes. Without it (the
// default, and what transcripts get) an image is only noted in the output
// text ("[image: image/png]").
func (sc *StreamConverter) KeepImages() { sc.c.keepImages = true }

// TakeImages returns the images of the lines converted since the last
// call, to be stored before the events that reference them are.
func (sc *StreamConverter) TakeImages() []Image {
	out := sc.c.images
	sc.c.images = nil
	return out
}

// attach decodes a tool result's images into c.images and returns their
// refs; nil unless keepImages. Data that is not base64 is skipped (the
// output text notes the image anyway).
func (c *core) attach(images []wireImage) []conversation.ArtifactRef {
	if !c.keepImages || len(images) == 0 {
		return nil
	}
	var refs []conversation.ArtifactRef
	for _, im := range images {
		data, err := base64.StdEncoding.DecodeString(im.Data)
		if err != nil || len(data) == 0 {
			continue
		}
		sum := sha256.Sum256(data)
		ref := conversation.ArtifactRef{SHA256: hex.EncodeToString(sum[:]), Size: int64(len(data)), ContentType: im.MediaType}
		refs = append(refs, ref)
		c.images = append(c.images, Image{Ref: ref, Data: data})
	}
	return refs
}

// KeepImages is StreamConverter.KeepImages for a subagent's transcript.
func (t *SubagentConverter) KeepImages() { t.c.keepImages = true }

// TakeImages is StreamConverter.TakeImages for a subagent's transcript.
func (t *SubagentConverter) TakeImages() []Image {
	out := t.c.images
	t.c.images = nil
	return out
}
