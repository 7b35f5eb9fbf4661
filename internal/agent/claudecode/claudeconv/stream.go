// Package claudeconv is the Claude Code converter: Claude Code's
// stream-json output and its saved transcripts turned into conversation
// events (stream.go, transcript.go; core.go and system.go convert a line,
// subagent.go maps subagent ids, wire.go decodes a line with the
// hand-written scanner of jsonscan.go, jsonenc.go encodes the hot
// payloads). The converter is pure: no processes, no clock, no randomness,
// no I/O beyond the io.Readers it is given; the same input gives the same
// events, byte for byte. live.go and payload.go are what the runtime
// (package claudecode, which runs the CLI) reads besides events.
//
// Block ids follow the contract: a tool call's blocks use its tool_use id
// (the result conversation.ToolResultID of it); every other block is
// <message id>-<n>, n counting the message's content blocks across all the
// lines that carry the message (Claude Code writes one content block per
// line). User-side lines have no message id; their uuid stands in for it.
package claudeconv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/agentd/agentd/conversation"
)

// StreamConverter converts the lines Claude Code writes with
// `--output-format stream-json --verbose [--include-partial-messages]` into
// events. Text and thinking stream as block:delta into a block opened
// pending at content_block_start; the complete assistant line then upserts
// the block whole with status complete, so a consumer with or without
// partial messages ends with the same blocks.
//
// Events carry the line's timestamp when it has one (stream-json lines
// usually do not; the event log stamps them) and leave QueryID and
// SessionID empty for the caller to fill in.
//
// Use one StreamConverter per Claude Code process: total_cost_usd counts
// from the start of the process, and the converter turns it into
// increments. User prompts are converted when Claude Code echoes them (it
// does not unless asked to replay them); the live runner appends its own
// user_message block for a turn and should not feed the echo too.
//
// A StreamConverter is not safe for concurrent use.
type StreamConverter struct {
	c *core
	l wireLine
}

// NewStreamConverter returns a converter for one Claude Code process.
func NewStreamConverter() *StreamConverter {
	return &StreamConverter{c: newCore()}
}

// Convert converts one line. An error means the line was skipped (it wraps
// ErrMalformed or ErrIgnored); the converter stays usable. Blank lines give
// nothing. The returned events are the caller's.
func (sc *StreamConverter) Convert(line []byte) ([]conversation.Event, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return nil, nil
	}
	if err := decodeLine(&sc.c.sc, line, &sc.l); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return sc.c.convert(&sc.l, line, sc.l.ParentToolUseID)
}

// streamEvent handles a stream_event line: the raw Messages API stream of
// the message being generated.
func (c *core) streamEvent(l *wireLine, lc lineCtx) {
	var e streamEvent
	if err := decodeStreamEvent(&c.sc2, l.Event, &e); err != nil {
		c.log(lc, conversation.LevelWarn, "unreadable stream event: "+err.Error(), nil)
		return
	}
	switch e.Type {
	case "message_start":
		c.partial[lc.conv] = &partialMessage{msgID: e.MessageID, model: e.Model}
		c.noteModel(e.Model, lc)
	case "content_block_start":
		c.blockStart(&e, lc)
	case "content_block_delta":
		pb := c.streamed(&e, lc)
		if pb == nil {
			return
		}
		switch e.DeltaType {
		case "text_delta":
			if pb.kind == kindText && e.DeltaText != "" {
				c.delta(pb.id, e.DeltaText, lc)
			}
		case "thinking_delta":
			if pb.kind == kindThinking && e.DeltaText != "" {
				c.delta(pb.id, e.DeltaText, lc)
			}
		case "input_json_delta":
			if pb.kind == kindTool {
				pb.json = append(pb.json, e.DeltaText...)
			}
		}
	case "content_block_stop":
		pb := c.streamed(&e, lc)
		if pb == nil || pb.kind != kindTool || pb.subagent || len(pb.json) == 0 {
			return
		}
		// The complete line normally arrives first; if it did not (the
		// turn was cut short), show the input the stream gave.
		if input := compactJSON(pb.json); input != nil {
			b := conversation.Block{ID: pb.id, Type: conversation.BlockToolUse, ToolName: pb.toolName,
				ToolUseID: pb.id, Input: input}
			c.upsert(&b, lc)
		}
		pb.json = nil
	case "error":
		c.emit(conversation.ErrorEvent{Message: orElse(e.ErrorDetail, "stream error"), Code: e.ErrorType}, lc)
	}
	// message_delta, message_stop, ping: usage and stop reasons arrive
	// complete in the assistant and result lines.
}

// streamed returns the open, not yet completed streamed block e refers to.
func (c *core) streamed(e *streamEvent, lc lineCtx) *partialBlock {
	p := c.partial[lc.conv]
	if p == nil || !e.HasIndex || e.Index < 0 || e.Index >= int64(len(p.blocks)) {
		return nil
	}
	pb := &p.blocks[e.Index]
	if !pb.open || pb.done {
		return nil
	}
	return pb
}

func (c *core) blockStart(e *streamEvent, lc lineCtx) {
	p := c.partial[lc.conv]
	if p == nil || p.msgID == "" || !e.HasIndex || e.Index < 0 || e.Index >= maxStreamIndex {
		return
	}
	i := int(e.Index)
	for len(p.blocks) <= i {
		p.blocks = append(p.blocks, partialBlock{})
	}
	pb := &p.blocks[i]
	if pb.open {
		return
	}
	part := &e.Block
	*pb = partialBlock{open: true, kind: partKindOf(part.Type), id: blockID(p.msgID, i)}
	if c.msgCount[p.msgID] > i {
		// The complete line for this block already came.
		pb.done = true
		return
	}
	b := conversation.Block{ID: pb.id, Status: conversation.StatusPending}
	switch pb.kind {
	case kindText:
		b.Type = conversation.BlockAssistantText
		b.Content = part.Text
		b.Model = p.model
	case kindThinking:
		b.Type = conversation.BlockThinking
		b.Content = part.Text
		if part.Type == "redacted_thinking" {
			b.Metadata = map[string]any{"redacted": true}
		}
	case kindTool:
		if part.ID != "" {
			pb.id = part.ID
		}
		pb.toolName = part.Name
		b.ID = pb.id
		if isSubagentTool(part.Name) && part.Type == "tool_use" {
			pb.subagent = true
			b.Type = conversation.BlockSubagent
			b.SubagentID = pb.id
			b.ToolUseID = pb.id
		} else {
			b.Type = conversation.BlockToolUse
			b.ToolName = part.Name
			b.ToolUseID = pb.id
		}
	default:
		// Unknown block types are reported when the complete line arrives.
		return
	}
	c.upsert(&b, lc)
}

// Input is one file to convert.
type Input struct {
	Name string
	R    io.Reader
}

// Sink receives a conversion's output (convert.Sink has this shape).
type Sink interface {
	// Emit receives events in order; an error stops the conversion.
	Emit(e conversation.Event) error
	// Warn reports a skipped line.
	Warn(file string, line int, err error)
}

// BlockSink is a Sink that takes block:upsert and block:delta events
// unencoded: ConvertStream and ConvertTranscript(s) call EmitBlock and
// EmitDelta for them, in order with the other events, instead of Emit, so a
// consumer that reduces them (agentd convert --blocks) or writes them out
// itself skips encoding and decoding their payloads. EmitBlock(ctx, b) stands
// for the event conversation.Upsert(*b) with context ctx, EmitDelta for
// conversation.Delta(id, text); b.Input is what json.Marshal writes for it
// (compact, HTML characters escaped). b and the bytes it points to (its
// Input may be part of the line being read) are only valid during the call.
type BlockSink interface {
	Sink
	EmitBlock(ctx conversation.Context, b *conversation.Block) error
	EmitDelta(ctx conversation.Context, id, text string) error
}

// ConvertStream converts a file of stream-json lines (or one JSON document,
// or a JSON array of messages) as the output of one process. It reads the
// input as it goes and does not hold it.
func ConvertStream(in Input, sink Sink) error {
	sc := NewStreamConverter()
	lr := newLineReader(in.R)
	for {
		ln, ok := lr.next()
		if !ok {
			break
		}
		if err := decodeLine(&sc.c.sc, ln.b, &sc.l); err != nil {
			sink.Warn(in.Name, ln.no, fmt.Errorf("%w: %v", ErrMalformed, err))
			continue
		}
		if err := sc.c.convertLine(&sc.l, ln.b, sc.l.ParentToolUseID); err != nil {
			sink.Warn(in.Name, ln.no, err)
		}
		if err := sc.c.emitTo(sink); err != nil {
			return err
		}
	}
	if lr.err != nil {
		return fmt.Errorf("read %s: %w", in.Name, lr.err)
	}
	return nil
}

// lineReader reads an input's lines as splitLines splits them (numbered,
// trimmed, blank ones skipped) without holding the input: a line's bytes
// are valid until the next call. Input whose first line is not a complete
// JSON value (a pretty-printed document, an array of messages) is read
// whole and split by splitLines.
type lineReader struct {
	br      *bufio.Reader
	no      int    // number of the last line read
	long    []byte // a line longer than br's buffer
	started bool   // a non-blank line was seen
	whole   []numberedLine
	err     error // a read error; the lines stop there
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 256<<10)}
}

// next returns the next non-blank line; false at the end of the input or
// at a read error (err).
func (lr *lineReader) next() (numberedLine, bool) {
	if lr.whole != nil {
		if len(lr.whole) == 0 {
			return numberedLine{}, false
		}
		ln := lr.whole[0]
		lr.whole = lr.whole[1:]
		return ln, true
	}
	for {
		raw, last := lr.readLine()
		if raw == nil && last {
			return numberedLine{}, false
		}
		lr.no++
		ln := bytes.TrimSpace(raw)
		if len(ln) == 0 {
			if last {
				return numberedLine{}, false
			}
			continue
		}
		if !lr.started {
			lr.started = true
			if ln[0] == '[' || (ln[0] == '{' && !firstLineComplete(ln)) {
				return lr.readWhole(raw, last)
			}
		}
		return numberedLine{lr.no, ln}, true
	}
}

// readLine returns the next line without its newline; last is true when
// the input ended (raw is then the final line without a newline, or nil).
func (lr *lineReader) readLine() (raw []byte, last bool) {
	if lr.err != nil {
		return nil, true
	}
	line, err := lr.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		lr.long = append(lr.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = lr.br.ReadSlice('\n')
			lr.long = append(lr.long, line...)
		}
		line = lr.long
	} else if cap(lr.long) > 16<<20 {
		lr.long = nil // do not keep a huge line's buffer
	}
	if err != nil && err != io.EOF {
		lr.err = err
		return nil, true
	}
	if n := len(line); n > 0 && line[n-1] == '\n' {
		return line[:n-1], false
	}
	if len(line) == 0 {
		return nil, true
	}
	return line, true
}

// readWhole reads the rest of the input and splits it all with splitLines,
// from the first non-blank line (raw) on; the blank lines before it keep
// their numbers.
func (lr *lineReader) readWhole(raw []byte, last bool) (numberedLine, bool) {
	data := bytes.Repeat([]byte{'\n'}, lr.no-1)
	data = append(data, raw...)
	if !last {
		data = append(data, '\n')
		rest, err := io.ReadAll(lr.br)
		if err != nil {
			lr.err = err
			return numberedLine{}, false
		}
		data = append(data, rest...)
	}
	lr.whole = splitLines(data)
	return lr.next()
}

// numberedLine is one input line and its 1-based number.
type numberedLine struct {
	no int
	b  []byte
}

// splitLines splits input into JSON lines. Input that is one JSON document
// spread over several lines (a pretty-printed message) is one line; a JSON
// array of messages gives one line per element, all numbered 1.
func splitLines(data []byte) []numberedLine {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) > 0 && (trimmed[0] == '[' || (trimmed[0] == '{' && !firstLineComplete(trimmed))) && json.Valid(trimmed) {
		if trimmed[0] == '{' {
			return []numberedLine{{1, trimmed}}
		}
		var s scanner
		s.reset(trimmed)
		s.enter('[')
		var out []numberedLine
		for first := true; s.next(']', &first); {
			if v := s.raw(); v != nil {
				out = append(out, numberedLine{1, v})
			}
		}
		return out
	}
	var out []numberedLine
	for no := 1; len(data) > 0; no++ {
		i := bytes.IndexByte(data, '\n')
		var ln []byte
		if i < 0 {
			ln, data = data, nil
		} else {
			ln, data = data[:i], data[i+1:]
		}
		ln = bytes.TrimSpace(ln)
		if len(ln) > 0 {
			out = append(out, numberedLine{no, ln})
		}
	}
	return out
}

// firstLineComplete reports whether the first line of data is a complete
// JSON value on its own (the JSON-lines case).
func firstLineComplete(data []byte) bool {
	first := data
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		first = data[:i]
	}
	var s scanner
	s.reset(first)
	s.skip()
	s.end()
	return s.err == nil
}
