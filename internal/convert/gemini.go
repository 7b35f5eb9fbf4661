package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/agentd/agentd/internal/agent/gemini"
)

func init() {
	Register(Format{
		Name:        "gemini-stream-json",
		Description: "`gemini --output-format stream-json` output: init, message, tool_use, tool_result, error, result lines",
		Convert:     jsonLines(func() lineConverter { return gemini.NewStreamJSONConverter() }),
	})
	Register(Format{
		Name:        "gemini-session",
		Description: "Gemini CLI saved chat (~/.gemini/tmp/<project>/chats/session-*.json or .jsonl)",
		Convert:     geminiSessions,
	})
	Register(Format{
		Name:        "gemini-json",
		Description: "`gemini --output-format json` output: one result object",
		Convert:     document(gemini.ConvertJSONOutput),
	})
}

// geminiSessions converts each input as a single-document session when it
// is one JSON object with messages, else as the JSON-lines layout.
func geminiSessions(inputs []Input, sink Sink) error {
	for _, in := range inputs {
		data, err := io.ReadAll(in.R)
		if err != nil {
			return fmt.Errorf("read %s: %w", in.Name, err)
		}
		c := gemini.NewSessionConverter()
		if isSessionDocument(data) {
			if err := convertOne(in.Name, 1, data, c.ConvertDocument, sink); err != nil {
				return err
			}
			continue
		}
		if err := convertLines(Input{Name: in.Name, R: bytes.NewReader(data)}, c, sink); err != nil {
			return err
		}
	}
	return nil
}

func isSessionDocument(data []byte) bool {
	var doc struct {
		Messages json.RawMessage `json:"messages"`
	}
	return json.Unmarshal(data, &doc) == nil && len(doc.Messages) > 0
}
