package claudeconv

import (
	"fmt"
	"strings"
)

// wireLine is one line of Claude Code output, stream-json or transcript: the
// fields the converter reads. Both spellings of a field (stream-json uses
// snake_case, transcripts camelCase) land in the same place. Lines of rare
// types (system, result) are decoded again with encoding/json by their
// handlers; only the hot lines are decoded fully here.
type wireLine struct {
	Type            string
	Subtype         string
	UUID            string
	ParentUUID      string
	SessionID       string
	Timestamp       string
	ParentToolUseID string
	AgentID         string
	SourceToolUseID string
	Error           string // the assistant line's error code, e.g. "rate_limit"
	APIErrorStatus  int64

	IsSidechain       bool
	IsMeta            bool
	IsSynthetic       bool
	IsCompactSummary  bool
	IsAPIErrorMessage bool

	HasMessage bool
	Message    wireMessage

	// ToolUseResult is toolUseResult / tool_use_result, the structured form
	// of the line's tool result (zero when absent or not an object).
	ToolUseResult toolUseResult
	// Event is the raw event of a stream_event line.
	Event []byte
}

// wireMessage is the Anthropic message a user or assistant line carries.
type wireMessage struct {
	ID    string
	Model string
	Role  string
	// ContentString is set when content is a plain string.
	ContentString string
	IsString      bool
	Content       []wirePart
	Usage         wireUsage
	HasUsage      bool
}

// wireUsage is a message's token usage.
type wireUsage struct {
	InputTokens              int64
	OutputTokens             int64
	CacheReadInputTokens     int64
	CacheCreationInputTokens int64
}

func decodeUsage(s *scanner, u *wireUsage) bool {
	if !s.enter('{') {
		s.skip()
		return false
	}
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "input_tokens":
			u.InputTokens = s.int()
		case "output_tokens":
			u.OutputTokens = s.int()
		case "cache_read_input_tokens":
			u.CacheReadInputTokens = s.int()
		case "cache_creation_input_tokens":
			u.CacheCreationInputTokens = s.int()
		default:
			s.skip()
		}
	}
	return true
}

// wirePart is one content block of a message.
type wirePart struct {
	Type string
	Text string // text, or thinking for thinking blocks
	// tool_use and friends
	ID    string
	Name  string
	Input []byte // raw, valid JSON
	// InputSpaced says Input has whitespace between tokens.
	InputSpaced bool
	// Tool is what the converter reads from Input.
	Tool toolInput
	// tool_result
	ToolUseID string
	IsError   bool
	// Output is a tool_result's content as text: the string, or the text
	// parts of the array joined, images noted.
	Output string
	// Images are a tool_result's image parts (base64 data as sent).
	Images []wireImage
	// image
	MediaType string
	// Raw is the whole part, for unknown types.
	Raw []byte
}

// decodeLine decodes one line into l (reset first). It returns an error for
// input that is not one JSON object.
func decodeLine(s *scanner, line []byte, l *wireLine) error {
	*l = wireLine{Message: wireMessage{Content: l.Message.Content[:0]}}
	s.reset(line)
	if !s.enter('{') {
		if s.err != nil {
			return s.err
		}
		return fmt.Errorf("not a JSON object")
	}
	for first := true; s.next('}', &first); {
		k := s.key()
		switch string(k) {
		case "type":
			l.Type = s.str()
		case "subtype":
			l.Subtype = s.str()
		case "uuid":
			l.UUID = s.str()
		case "parentUuid":
			l.ParentUUID = s.str()
		case "session_id", "sessionId":
			l.SessionID = s.str()
		case "timestamp":
			if s.peek() == '"' {
				l.Timestamp = s.str()
			} else {
				s.skip()
			}
		case "parent_tool_use_id":
			l.ParentToolUseID = s.str()
		case "agentId":
			if s.peek() == '"' {
				l.AgentID = s.str()
			} else {
				s.skip()
			}
		case "sourceToolUseID":
			l.SourceToolUseID = s.str()
		case "error":
			if s.peek() == '"' {
				l.Error = s.str()
			} else {
				s.skip()
			}
		case "apiErrorStatus":
			l.APIErrorStatus = s.int()
		case "isSidechain":
			l.IsSidechain = s.boolean()
		case "isMeta":
			l.IsMeta = s.boolean()
		case "isSynthetic":
			l.IsSynthetic = s.boolean()
		case "isCompactSummary":
			l.IsCompactSummary = s.boolean()
		case "isApiErrorMessage":
			l.IsAPIErrorMessage = s.boolean()
		case "message":
			if s.peek() == '{' {
				l.HasMessage = true
				decodeMessage(s, &l.Message)
			} else {
				s.skip()
			}
		case "toolUseResult", "tool_use_result":
			decodeToolUseResult(s, &l.ToolUseResult)
		case "event":
			l.Event = s.raw()
		default:
			s.skip()
		}
	}
	s.end()
	return s.err
}

func decodeMessage(s *scanner, m *wireMessage) {
	if !s.enter('{') {
		s.skip()
		return
	}
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "id":
			m.ID = s.str()
		case "model":
			m.Model = s.str()
		case "role":
			m.Role = s.str()
		case "usage":
			m.HasUsage = decodeUsage(s, &m.Usage)
		case "content":
			switch s.peek() {
			case '"':
				m.IsString = true
				m.ContentString = s.str()
			case '[':
				s.enter('[')
				for first := true; s.next(']', &first); {
					m.Content = append(m.Content, wirePart{})
					decodePart(s, &m.Content[len(m.Content)-1])
				}
			default:
				s.skip()
			}
		default:
			s.skip()
		}
	}
}

func decodePart(s *scanner, p *wirePart) {
	s.ws()
	start := s.i
	if !s.enter('{') {
		p.Raw = s.raw()
		return
	}
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "type":
			p.Type = s.str()
		case "text":
			p.Text = s.str()
		case "thinking":
			if p.Text == "" {
				p.Text = s.str()
			} else {
				s.skip()
			}
		case "id":
			p.ID = s.str()
		case "name":
			p.Name = s.str()
		case "input":
			// Read in the same pass that takes it raw.
			before := s.spaces
			s.ws()
			start := s.i
			decodeToolInput(s, &p.Tool)
			if s.err == nil {
				p.Input = s.b[start:s.i]
			}
			p.InputSpaced = s.spaces != before
		case "tool_use_id":
			p.ToolUseID = s.str()
		case "is_error":
			p.IsError = s.boolean()
		case "content":
			p.Output, p.Images = decodeResultContent(s, nil)
		case "source":
			p.MediaType = decodeImageSource(s)
		default:
			s.skip()
		}
	}
	if s.err == nil {
		p.Raw = s.b[start:s.i]
	}
}

// toolInput is what the converter reads from a tool call's input: the
// string values of a few keys (for "skill" and "command" the first one).
type toolInput struct {
	prompt, subagentType, description, skill string
}

// decodeToolInput validates and skips a tool call's input, reading ti from
// it when it is an object.
func decodeToolInput(s *scanner, ti *toolInput) {
	if !s.enter('{') {
		s.skip()
		return
	}
	for first := true; s.next('}', &first); {
		k := s.key()
		if s.peek() != '"' {
			s.skip()
			continue
		}
		switch string(k) {
		case "prompt":
			ti.prompt = s.str()
		case "subagent_type":
			ti.subagentType = s.str()
		case "description":
			ti.description = s.str()
		case "skill", "command":
			if ti.skill == "" {
				ti.skill = s.str()
			} else {
				s.skip()
			}
		default:
			s.skip()
		}
	}
}

// decodeResultContent reads a tool_result's content: a string, or an array
// of parts whose text parts are joined with newlines and whose images are
// noted as [image: media/type].
func decodeResultContent(s *scanner, images []wireImage) (string, []wireImage) {
	switch s.peek() {
	case '"':
		return s.str(), images
	case '[':
	default:
		s.skip()
		return "", images
	}
	s.enter('[')
	var only string
	var joined strings.Builder
	n := 0
	for first := true; s.next(']', &first); {
		var typ, text string
		var img wireImage
		if !s.enter('{') {
			s.skip()
			continue
		}
		for first := true; s.next('}', &first); {
			switch string(s.key()) {
			case "type":
				typ = s.str()
			case "text":
				text = s.str()
			case "source":
				img = decodeImageData(s)
			default:
				s.skip()
			}
		}
		switch typ {
		case "text":
		case "image":
			text = imageNote(img.MediaType)
			if img.Data != "" {
				images = append(images, img)
			}
		default:
			continue
		}
		// One part (the usual case) is returned as it is.
		switch n {
		case 0:
			only = text
		case 1:
			joined.WriteString(only)
			fallthrough
		default:
			joined.WriteByte('\n')
			joined.WriteString(text)
		}
		n++
	}
	if n <= 1 {
		return only, images
	}
	return joined.String(), images
}

// wireImage is an image part of a tool result: its media type and base64
// data.
type wireImage struct {
	MediaType, Data string
}

// decodeImageData reads an image's source: its media type, and its data
// when it is base64.
func decodeImageData(s *scanner) wireImage {
	var img wireImage
	if !s.enter('{') {
		s.skip()
		return img
	}
	base64 := false
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "media_type":
			img.MediaType = s.str()
		case "type":
			base64 = s.str() == "base64"
		case "data":
			img.Data = s.str()
		default:
			s.skip()
		}
	}
	if !base64 {
		img.Data = ""
	}
	return img
}

func decodeImageSource(s *scanner) string {
	if !s.enter('{') {
		s.skip()
		return ""
	}
	var mt string
	for first := true; s.next('}', &first); {
		if string(s.key()) == "media_type" {
			mt = s.str()
		} else {
			s.skip()
		}
	}
	return mt
}

func imageNote(mediaType string) string {
	if mediaType == "" {
		return "[image]"
	}
	return "[image: " + mediaType + "]"
}

// toolUseResult is what the converter reads from a tool result's
// toolUseResult: subagent results carry agentId, content and
// totalDurationMs; some tools report durationMs.
type toolUseResult struct {
	AgentID         string
	Status          string
	IsAsync         bool
	TotalDurationMs int64
	DurationMs      int64
	CommandName     string
	// ContentRaw is the content array, decoded only for subagent results
	// (other tools put whole files there).
	ContentRaw []byte
}

// decodeToolUseResult reads the value at s into r. Values that are not
// objects (a failed call's result is a string) leave r zero.
func decodeToolUseResult(s *scanner, r *toolUseResult) {
	if !s.enter('{') {
		s.skip()
		return
	}
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "agentId":
			r.AgentID = s.str()
		case "status":
			r.Status = s.str()
		case "isAsync":
			r.IsAsync = s.boolean()
		case "content":
			if s.peek() == '[' {
				r.ContentRaw = s.raw()
			} else {
				s.skip()
			}
		case "totalDurationMs":
			r.TotalDurationMs = s.int()
		case "durationMs":
			r.DurationMs = s.int()
		case "commandName":
			r.CommandName = s.str()
		default:
			s.skip()
		}
	}
}

// content decodes the result's content array as text.
func (r *toolUseResult) content(s *scanner) (string, bool) {
	if r.ContentRaw == nil {
		return "", false
	}
	s.reset(r.ContentRaw)
	text, _ := decodeResultContent(s, nil)
	return text, s.err == nil
}

// streamEvent is the event of a stream_event line (an Anthropic Messages API
// stream event).
type streamEvent struct {
	Type  string
	Index int64
	// message_start
	MessageID string
	Model     string
	// content_block_start
	Block wirePart
	// content_block_delta
	DeltaType   string
	DeltaText   string // text, thinking or partial_json
	HasIndex    bool
	ErrorType   string
	ErrorDetail string
}

func decodeStreamEvent(s *scanner, raw []byte, e *streamEvent) error {
	*e = streamEvent{}
	s.reset(raw)
	if !s.enter('{') {
		if s.err != nil {
			return s.err
		}
		return fmt.Errorf("stream event is not an object")
	}
	for first := true; s.next('}', &first); {
		switch string(s.key()) {
		case "type":
			e.Type = s.str()
		case "index":
			e.Index = s.int()
			e.HasIndex = true
		case "message":
			if !s.enter('{') {
				s.skip()
				continue
			}
			for first := true; s.next('}', &first); {
				switch string(s.key()) {
				case "id":
					e.MessageID = s.str()
				case "model":
					e.Model = s.str()
				default:
					s.skip()
				}
			}
		case "content_block":
			decodePart(s, &e.Block)
		case "delta":
			if !s.enter('{') {
				s.skip()
				continue
			}
			for first := true; s.next('}', &first); {
				switch string(s.key()) {
				case "type":
					e.DeltaType = s.str()
				case "text", "thinking", "partial_json":
					e.DeltaText = s.str()
				default:
					s.skip()
				}
			}
		case "error":
			if !s.enter('{') {
				s.skip()
				continue
			}
			for first := true; s.next('}', &first); {
				switch string(s.key()) {
				case "type":
					e.ErrorType = s.str()
				case "message":
					e.ErrorDetail = s.str()
				default:
					s.skip()
				}
			}
		default:
			s.skip()
		}
	}
	return s.err
}
