// Package convkit holds what the converters of agent CLI output (codex,
// gemini, opencode) share: the events of one input line stamped with its
// time, blocks tracked by id so later states of an object become deltas or
// upserts of the changed fields, block id allocation, and small JSON and
// time helpers. Nothing in it is safe for concurrent use: a converter owns
// its state and is fed one line at a time.
package convkit

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/agentd/agentd/conversation"
)

// Out collects the events of one input line, stamped with the line's time.
type Out struct {
	Events []conversation.Event
	TS     time.Time
}

// Emit appends an event of conversation conv ("" for the main one).
func (o *Out) Emit(conv string, p conversation.Payload) {
	o.Events = append(o.Events, conversation.NewEvent(p).In(conv).At(o.TS).From(conversation.SourceRunner))
}

// Log emits a log event keeping raw, which must be valid JSON: callers pass
// the line they decoded.
func (o *Out) Log(level conversation.LogLevel, msg string, raw []byte) {
	o.Emit("", conversation.LogEvent{Level: level, Message: msg, Data: append(json.RawMessage(nil), raw...)})
}

// MsTime converts Unix milliseconds; zero or less is the zero time.
func MsTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// ParseTime reads an RFC 3339 time in UTC; the zero time when s is not one.
func ParseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// MustJSON marshals plain data (JSON null when it cannot).
func MustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// ObjectInput returns raw when it is a JSON object, else wraps it as
// {"input": raw} so a tool_use input is always an object.
func ObjectInput(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return append(json.RawMessage(nil), t...)
	}
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage(`{}`)
	}
	if !json.Valid(t) {
		return MustJSON(map[string]string{"input": string(raw)})
	}
	return MustJSON(map[string]json.RawMessage{"input": t})
}

// StatusOf is the status of a block whose object is done or failed (failed
// wins), else pending.
func StatusOf(done, failed bool) conversation.BlockStatus {
	switch {
	case failed:
		return conversation.StatusError
	case done:
		return conversation.StatusComplete
	}
	return conversation.StatusPending
}
