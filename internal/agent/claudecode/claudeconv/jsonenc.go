package claudeconv

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/conversation"
)

// The converter's two hot payloads (block:upsert and block:delta), and
// agentd convert's output lines, are encoded by hand. The output is
// byte-for-byte what json.Marshal produces for the same value
// (TestEncodeMatchesMarshal checks it, TestBlockFieldsKnown fails when
// conversation.Block gains a field this encoder does not know, and
// convert's TestOutputMatchesEncodingJSON compares whole outputs).
//
// Why not json.Marshal (measured 2026-11-25, convert's
// BenchmarkClaudeTranscript: the 50 MB transcript of docs/benchmarks.md,
// one core, CPU time on a shared machine): agentd convert to events
// 205–223 MB/s with this encoder, 95–102 MB/s with json.Encoder (2.1×
// slower; 142 MB/s with GOEXPERIMENT=jsonv2); to blocks 176–213 against
// 134–170 MB/s (1.25× slower; about 1.1× with jsonv2). json.Encoder walks
// Block by reflection and validates and compacts every json.RawMessage it
// writes again: each event's payload, each tool's input.

// AppendBlockJSON appends the JSON of b: byte for byte what json.Marshal
// writes for it when b.Input is already as json.Marshal writes a
// json.RawMessage (valid, compact, <, > and & escaped), as it is in every
// block the converters make (BlockSink) and in blocks reduced from their
// events. agentd convert writes its output with it.
func AppendBlockJSON(dst []byte, b *conversation.Block) []byte { return appendBlock(dst, b) }

// AppendJSONString appends s as a JSON string exactly as json.Marshal
// writes it.
func AppendJSONString(dst []byte, s string) []byte { return appendString(dst, s) }

// appendUpsertPayload appends the JSON of conversation.BlockUpsert{Block: *b}.
func appendUpsertPayload(dst []byte, b *conversation.Block) []byte {
	dst = append(dst, `{"block":`...)
	dst = appendBlock(dst, b)
	return append(dst, '}')
}

// appendDeltaPayload appends the JSON of conversation.BlockDelta.
func appendDeltaPayload(dst []byte, id, delta string) []byte {
	dst = append(dst, `{"blockId":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"delta":`...)
	dst = appendString(dst, delta)
	return append(dst, '}')
}

// appendBlock appends the JSON of b, in conversation.Block's field order with
// its omitempty rules. b.Input must already be compact JSON as json.Marshal
// would write it (see compactJSON).
func appendBlock(dst []byte, b *conversation.Block) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, b.ID)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, string(b.Type))
	if !b.Timestamp.IsZero() {
		dst = append(dst, `,"timestamp":"`...)
		dst = b.Timestamp.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
	}
	dst = appendField(dst, "status", string(b.Status))
	if len(b.Metadata) > 0 {
		if m, err := json.Marshal(b.Metadata); err == nil {
			dst = append(dst, `,"metadata":`...)
			dst = append(dst, m...)
		}
	}
	dst = appendField(dst, "content", b.Content)
	dst = appendField(dst, "model", b.Model)
	dst = appendField(dst, "summary", b.Summary)
	dst = appendField(dst, "toolName", b.ToolName)
	dst = appendField(dst, "toolUseId", b.ToolUseID)
	if len(b.Input) > 0 {
		dst = append(dst, `,"input":`...)
		dst = append(dst, b.Input...)
	}
	dst = appendField(dst, "displayName", b.DisplayName)
	dst = appendField(dst, "description", b.Description)
	dst = appendField(dst, "output", b.Output)
	if b.IsError {
		dst = append(dst, `,"isError":true`...)
	}
	if b.DurationMs != 0 {
		dst = append(dst, `,"durationMs":`...)
		dst = strconv.AppendInt(dst, b.DurationMs, 10)
	}
	dst = appendField(dst, "subtype", b.Subtype)
	dst = appendField(dst, "message", b.Message)
	dst = appendField(dst, "code", b.Code)
	dst = appendField(dst, "subagentId", b.SubagentID)
	dst = appendField(dst, "name", b.Name)
	dst = appendField(dst, "skillName", b.SkillName)
	// Rare: encoded by encoding/json.
	if b.Truncated != nil {
		if m, err := json.Marshal(b.Truncated); err == nil {
			dst = append(dst, `,"truncated":`...)
			dst = append(dst, m...)
		}
	}
	if len(b.Attachments) > 0 {
		if m, err := json.Marshal(b.Attachments); err == nil {
			dst = append(dst, `,"attachments":`...)
			dst = append(dst, m...)
		}
	}
	return append(dst, '}')
}

// blockFields lists the JSON names appendBlock writes, in order.
var blockFields = []string{
	"id", "type", "timestamp", "status", "metadata", "content", "model", "summary",
	"toolName", "toolUseId", "input", "displayName", "description", "output",
	"isError", "durationMs", "subtype", "message", "code", "subagentId", "name", "skillName",
	"truncated", "attachments",
}

// appendField appends ,"name":"value" unless value is empty (omitempty).
func appendField(dst []byte, name, value string) []byte {
	if value == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return appendString(dst, value)
}

const hexDigits = "0123456789abcdef"

// safeASCII marks the ASCII bytes encoding/json writes unescaped (with its
// default HTML escaping: <, > and & are escaped).
var safeASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendString appends s as a JSON string exactly as encoding/json does.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Skip eight safe bytes at a time.
		for i+8 <= len(s) {
			if m := escapeMask(load64(s, i)); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if safeASCII[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// escapeMask flags the bytes appendString cannot copy as they are (see
// eqMask): control characters, ", \\, <, >, & and every non-ASCII byte.
func escapeMask(w uint64) uint64 {
	return belowMask(w, 0x20) | eqMask(w, '"') | eqMask(w, '\\') |
		eqMask(w, '<') | eqMask(w, '>') | eqMask(w, '&') | w&msb
}

// load64 reads s[i:i+8] as a little-endian word (one load once compiled).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// passthroughJSON returns a raw value the scanner validated, as json.Marshal
// writes a json.RawMessage. Claude Code writes compact JSON, so the common
// case is the input itself; spaced says whitespace was seen between tokens.
func passthroughJSON(raw []byte, spaced bool) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	if spaced {
		return compactJSON(raw)
	}
	if !needsHTMLEscape(raw) {
		return raw
	}
	return htmlEscape(raw)
}

// htmlEscape returns what json.HTMLEscape writes for src: <, >, & and
// U+2028/U+2029 as \\u escapes.
func htmlEscape(src []byte) []byte {
	dst := make([]byte, 0, len(src)+len(src)/16+16)
	start := 0
	for i := 0; i < len(src); i++ {
		// Skip eight bytes at a time to the next candidate.
		for i+8 <= len(src) {
			w := binary.LittleEndian.Uint64(src[i:])
			if m := eqMask(w, '<') | eqMask(w, '>') | eqMask(w, '&') | eqMask(w, 0xE2); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(src) {
			break
		}
		switch c := src[i]; {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[src[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}

// needsHTMLEscape reports whether raw has a byte json.Marshal escapes in a
// RawMessage: <, >, &, or U+2028/U+2029 (which start with 0xE2).
func needsHTMLEscape(raw []byte) bool {
	return bytes.IndexByte(raw, '<') >= 0 || bytes.IndexByte(raw, '>') >= 0 ||
		bytes.IndexByte(raw, '&') >= 0 ||
		(bytes.IndexByte(raw, 0xE2) >= 0 && (bytes.Contains(raw, []byte("\u2028")) ||
			bytes.Contains(raw, []byte("\u2029"))))
}

// compactJSON returns raw as json.Marshal writes a json.RawMessage: compact,
// with <, > and & escaped. It returns nil when raw is not valid JSON, so a
// malformed value is dropped rather than corrupting the output.
func compactJSON(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := json.Compact(&buf, raw); err != nil {
		return nil
	}
	out := buf.Bytes()
	if !bytes.ContainsAny(out, "<>&\u2028\u2029") {
		return out
	}
	var esc bytes.Buffer
	esc.Grow(len(out) + 16)
	json.HTMLEscape(&esc, out)
	return esc.Bytes()
}
