package conversation

// ArtifactRef names content stored once, by its SHA-256, in the session's
// artifact store (GET /api/sessions/{id}/artifacts/{sha256}): an output too
// large to keep in the conversation, an image a user sent or an agent
// produced, a file. Refs are values; the same content referenced twice is
// stored once.
type ArtifactRef struct {
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
	// Size is the content's length in bytes.
	Size int64 `json:"size"`
	// ContentType is the content's media type ("image/png", "text/plain; charset=utf-8").
	ContentType string `json:"contentType,omitempty"`
	// Name is a file name to offer when the content is downloaded.
	Name string `json:"name,omitempty"`
}

// Truncation says that a block's text field (Field: "output" or "content")
// was longer than the server keeps in a conversation: the field holds the
// first bytes, Tail the last ones, TotalBytes the full length, and
// Artifact the full text once the block is complete (absent while it still
// streams, or when the artifact could not be stored: see ArtifactError).
// For a tool_use block's input (Field: "input") the input holds a bounded
// JSON of the same shape, TotalBytes is the full input JSON's length, Tail
// is empty and Artifact the full input JSON (application/json).
type Truncation struct {
	Field         string       `json:"field"`
	TotalBytes    int64        `json:"totalBytes"`
	Tail          string       `json:"tail"`
	Artifact      *ArtifactRef `json:"artifact,omitempty"`
	ArtifactError string       `json:"artifactError,omitempty"`
}
