package claudecode

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentd/agentd/agent"
)

// The control protocol Claude Code speaks on stdin/stdout next to its
// stream-json messages (what the Claude Agent SDKs use):
//
//	→ {"type":"control_request","request_id":"…","request":{"subtype":"initialize",…}}
//	← {"type":"control_response","response":{"subtype":"success","request_id":"…","response":{…}}}
//
// Either side may send requests. agentd sends initialize and interrupt; the
// CLI sends can_use_tool (with --permission-prompt-tool stdio) and, for
// features agentd does not use, hook_callback and mcp_message, which are
// answered with an error. The CLI may withdraw a request it sent with
// control_cancel_request.

// Message types of the control protocol.
const (
	typeControlRequest  = "control_request"
	typeControlResponse = "control_response"
	typeControlCancel   = "control_cancel_request"
)

// controlMessage is any control line, decoded once.
type controlMessage struct {
	Type      string          `json:"type"`
	RequestID string          `json:"request_id"`
	Request   json.RawMessage `json:"request"`
	Response  json.RawMessage `json:"response"`
}

// controlRequestBody is the common head of a request's body.
type controlRequestBody struct {
	Subtype string `json:"subtype"`
}

// canUseTool is the body of the CLI's permission request.
type canUseTool struct {
	Subtype     string          `json:"subtype"`
	ToolName    string          `json:"tool_name"`
	DisplayName string          `json:"display_name"`
	Input       json.RawMessage `json:"input"`
	ToolUseID   string          `json:"tool_use_id"`
	AgentID     string          `json:"agent_id"`
	Description string          `json:"description"`
	BlockedPath string          `json:"blocked_path"`
}

// controlResponseBody is the body of a control_response line.
type controlResponseBody struct {
	Subtype   string          `json:"subtype"` // success or error
	RequestID string          `json:"request_id"`
	Response  json.RawMessage `json:"response,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// errNotControl says a line is not a control message.
var errNotControl = errors.New("not a control message")

// parseControl decodes a control line. It returns errNotControl for other
// message types, and an error for a control line it cannot use.
func parseControl(line []byte) (controlMessage, error) {
	var m controlMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return controlMessage{}, fmt.Errorf("control message: %w", err)
	}
	switch m.Type {
	case typeControlRequest:
		if m.RequestID == "" || len(m.Request) == 0 {
			return controlMessage{}, errors.New("control request without request_id or request")
		}
	case typeControlResponse:
		if len(m.Response) == 0 {
			return controlMessage{}, errors.New("control response without response")
		}
	case typeControlCancel:
		if m.RequestID == "" {
			return controlMessage{}, errors.New("control cancel without request_id")
		}
	default:
		return controlMessage{}, errNotControl
	}
	return m, nil
}

// controlRequestLine builds a request agentd sends.
func controlRequestLine(id string, body any) ([]byte, error) {
	return marshalLine(struct {
		Type      string `json:"type"`
		RequestID string `json:"request_id"`
		Request   any    `json:"request"`
	}{typeControlRequest, id, body})
}

// controlSuccessLine answers a request of the CLI.
func controlSuccessLine(id string, response any) ([]byte, error) {
	return marshalLine(struct {
		Type     string `json:"type"`
		Response any    `json:"response"`
	}{typeControlResponse, struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Response  any    `json:"response"`
	}{"success", id, response}})
}

// controlErrorLine refuses a request of the CLI.
func controlErrorLine(id, msg string) ([]byte, error) {
	return marshalLine(struct {
		Type     string              `json:"type"`
		Response controlResponseBody `json:"response"`
	}{typeControlResponse, controlResponseBody{Subtype: "error", RequestID: id, Error: msg}})
}

// permissionAllow and permissionDeny are the answers to can_use_tool, in
// the shape the SDKs send.
type permissionAllow struct {
	Behavior     string          `json:"behavior"` // "allow"
	UpdatedInput json.RawMessage `json:"updatedInput"`
}

type permissionDeny struct {
	Behavior string `json:"behavior"` // "deny"
	Message  string `json:"message"`
}

// userMessageLine is a user turn on stdin: its text as a string, or, with
// images, a list of content blocks (the images first, then the text), as
// the Agent SDKs send an SDKUserMessage.
func userMessageLine(content string, images []agent.Image) ([]byte, error) {
	type source struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
	}
	type block struct {
		Type   string  `json:"type"`
		Source *source `json:"source,omitempty"`
		Text   *string `json:"text,omitempty"`
	}
	type message struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	}
	var c any = content
	if len(images) > 0 {
		blocks := make([]block, 0, len(images)+1)
		for _, im := range images {
			blocks = append(blocks, block{Type: "image", Source: &source{"base64", im.MediaType, base64.StdEncoding.EncodeToString(im.Data)}})
		}
		if content != "" {
			blocks = append(blocks, block{Type: "text", Text: &content})
		}
		c = blocks
	}
	return marshalLine(struct {
		Type            string  `json:"type"`
		Message         message `json:"message"`
		ParentToolUseID *string `json:"parent_tool_use_id"`
		SessionID       string  `json:"session_id"`
	}{"user", message{"user", c}, nil, "default"})
}

func marshalLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
