package convert

import (
	"bufio"
	"bytes"
	"encoding/json"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
)

// The output of Run is written by hand where the bytes are many: the block
// events a claudeconv.BlockSink receives and the blocks of --blocks. What
// it writes is byte for byte what json.Encoder writes for the same values
// (TestOutputMatchesEncodingJSON), at a fraction of the cost: on the 50 MB
// transcript of docs/benchmarks.md, json.Encoder took about as long as the
// whole conversion. Everything else goes through json.Encoder.

// eventSink writes each event as a JSON line (Run without Blocks).
type eventSink struct {
	w        *bufio.Writer
	enc      *json.Encoder
	warnings []Warning
	count    int // events other than log events (Options.RequireEvents)
}

func newEventSink(w *bufio.Writer) *eventSink {
	return &eventSink{w: w, enc: json.NewEncoder(w)}
}

func (s *eventSink) Emit(e conversation.Event) error {
	if e.Type != conversation.TypeLog {
		s.count++
	}
	return s.enc.Encode(e)
}

func (s *eventSink) Warn(file string, line int, err error) {
	s.warnings = append(s.warnings, Warning{File: file, Line: line, Err: err})
}

// EmitBlock writes the event conversation.Upsert(*b) with context ctx.
func (s *eventSink) EmitBlock(ctx conversation.Context, b *conversation.Block) error {
	s.count++
	buf := append(s.w.AvailableBuffer(), `{"seq":0,"type":"block:upsert","payload":{"block":`...)
	buf = claudeconv.AppendBlockJSON(buf, b)
	buf, ok := appendEventEnd(append(buf, '}'), &ctx)
	if !ok {
		e := conversation.Upsert(*b)
		e.Context = ctx
		return s.enc.Encode(e) // and its error
	}
	_, err := s.w.Write(buf)
	return err
}

// EmitDelta writes the event conversation.Delta(id, text) with context ctx.
func (s *eventSink) EmitDelta(ctx conversation.Context, id, text string) error {
	s.count++
	buf := append(s.w.AvailableBuffer(), `{"seq":0,"type":"block:delta","payload":{"blockId":`...)
	buf = claudeconv.AppendJSONString(buf, id)
	buf = append(buf, `,"delta":`...)
	buf = claudeconv.AppendJSONString(buf, text)
	buf, ok := appendEventEnd(append(buf, '}'), &ctx)
	if !ok {
		e := conversation.Delta(id, text)
		e.Context = ctx
		return s.enc.Encode(e)
	}
	_, err := s.w.Write(buf)
	return err
}

// appendEventEnd appends an event's context, its closing brace and the
// newline. It reports false for a timestamp json.Marshal refuses (a year
// outside 0–9999), which the caller leaves to json.Encoder.
func appendEventEnd(buf []byte, ctx *conversation.Context) ([]byte, bool) {
	buf = append(buf, `,"context":{"sessionId":`...)
	buf = claudeconv.AppendJSONString(buf, ctx.SessionID)
	buf = append(buf, `,"conversationId":`...)
	buf = claudeconv.AppendJSONString(buf, ctx.ConversationID)
	buf = append(buf, `,"source":`...)
	buf = claudeconv.AppendJSONString(buf, string(ctx.Source))
	buf = append(buf, `,"timestamp":"`...)
	buf, err := ctx.Timestamp.AppendText(buf) // what Time.MarshalJSON writes, unquoted
	if err != nil {
		return buf, false
	}
	buf = append(buf, `","actor":`...)
	if ctx.Actor == nil {
		buf = append(buf, "null"...)
	} else {
		buf = claudeconv.AppendJSONString(buf, *ctx.Actor)
	}
	return append(buf, "}}\n"...), true
}

// blocksSink reduces the events as they come (Run with Blocks). Only the
// events that can change what it prints are reduced: blocks, and the
// subagent events that can add a subagent's conversation before its first
// block. The others (usage, turns, logs: a metadata:update for every
// assistant line of a transcript) cost a json.Unmarshal each for nothing.
type blocksSink struct {
	r        *conversation.Reducer
	warnings []Warning
	count    int // events other than log events (Options.RequireEvents)
}

func (s *blocksSink) Emit(e conversation.Event) error {
	if e.Type != conversation.TypeLog {
		s.count++
	}
	switch e.Type {
	case conversation.TypeBlockUpsert, conversation.TypeBlockDelta,
		conversation.TypeSubagentSpawned, conversation.TypeSubagentCompleted:
		_ = s.r.Apply(e) // a bad event changes nothing; the others still count
	}
	return nil
}

func (s *blocksSink) Warn(file string, line int, err error) {
	s.warnings = append(s.warnings, Warning{File: file, Line: line, Err: err})
}

func (s *blocksSink) EmitBlock(ctx conversation.Context, b *conversation.Block) error {
	s.count++
	blk := *b
	blk.Input = bytes.Clone(b.Input) // b's may point into the input
	_ = s.r.ApplyBlockAt(ctx.ConversationID, blk, ctx.Timestamp)
	return nil
}

func (s *blocksSink) EmitDelta(ctx conversation.Context, id, text string) error {
	s.count++
	_ = s.r.ApplyDelta(ctx.ConversationID, id, text)
	return nil
}

// writeBlocks writes one line {"conversationId":…,"block":{…}} per block,
// main conversation first.
func (s *blocksSink) writeBlocks(w *bufio.Writer) error {
	for conv, b := range s.r.Blocks() {
		buf := append(w.AvailableBuffer(), `{"conversationId":`...)
		buf = claudeconv.AppendJSONString(buf, conv)
		buf = append(buf, `,"block":`...)
		buf = conversation.AppendRequired(claudeconv.AppendBlockJSON(buf, &b), &b)
		if _, err := w.Write(append(buf, "}\n"...)); err != nil {
			return err
		}
	}
	return nil
}
