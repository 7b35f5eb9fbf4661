package claudecode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small pull parser for the converter's hot path. encoding/json
// with typed structs costs about as much as the converter's whole throughput
// budget on large transcripts (it checks every byte, decodes, then skips
// again through reflection), so the lines that dominate (assistant, user,
// stream_event) are walked here instead: keys the converter needs are
// decoded, everything else is validated and skipped.
//
// It is strict: it accepts exactly the JSON that json.Valid accepts (tested
// by FuzzScannerValid), so a raw value the converter passes through to its
// output (a tool's input) is always valid JSON. Like encoding/json it does
// not check UTF-8 in values it skips; strings it decodes get invalid bytes
// replaced with U+FFFD, as encoding/json does. It never panics.
//
// Errors are sticky: after the first one every method returns zero values and
// the caller checks err once.
type scanner struct {
	b   []byte
	i   int
	err error
	// spaces counts whitespace runs skipped between tokens, so a caller can
	// tell whether a value it took raw was already compact.
	spaces int
}

var errTruncated = errors.New("unexpected end of JSON input")

func (s *scanner) reset(b []byte) {
	s.b, s.i, s.err = b, 0, nil
}

func (s *scanner) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("offset %d: "+format, append([]any{s.i}, args...)...)
	}
	s.i = len(s.b)
}

func (s *scanner) ws() {
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			if s.i != start {
				s.spaces++
			}
			return
		}
	}
	if s.i != start {
		s.spaces++
	}
}

// peek returns the next non-space byte, or 0 at the end (or after an error).
func (s *scanner) peek() byte {
	s.ws()
	if s.err != nil || s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// end checks that only whitespace is left.
func (s *scanner) end() {
	if s.err != nil {
		return
	}
	s.ws()
	if s.i < len(s.b) {
		s.fail("invalid character %q after top-level value", s.b[s.i])
	}
}

// enter consumes the opening bracket c ('{' or '['). It reports false, and
// leaves the value unconsumed, when the next value is something else (null
// included), so callers can skip it.
func (s *scanner) enter(c byte) bool {
	if s.peek() != c {
		if s.err == nil && s.i >= len(s.b) {
			s.fail("%v", errTruncated)
		}
		return false
	}
	s.i++
	return true
}

// next advances to the next element of the object or array just entered:
// it consumes the separating comma, or the closing bracket (and reports
// false). first must start true for each container.
func (s *scanner) next(closer byte, first *bool) bool {
	c := s.peek()
	if s.err != nil {
		return false
	}
	if c == 0 {
		s.fail("%v", errTruncated)
		return false
	}
	if c == closer {
		s.i++
		return false
	}
	if *first {
		*first = false
		return true
	}
	if c != ',' {
		s.fail("invalid character %q, want ',' or %q", c, closer)
		return false
	}
	s.i++
	return true
}

// key reads an object key and the colon after it. The result aliases the
// input when the key has no escapes.
func (s *scanner) key() []byte {
	if s.peek() != '"' {
		if s.err == nil {
			s.fail("invalid object key")
		}
		return nil
	}
	k := s.strBytes()
	if s.peek() != ':' {
		if s.err == nil {
			s.fail("missing ':' after object key")
		}
		return nil
	}
	s.i++
	return k
}

// stringEnd returns the index of the closing quote of the string whose
// opening quote is at b[i], and whether it contains escapes. It checks the
// escapes and refuses control characters, as JSON requires.
func (s *scanner) stringEnd(i int) (int, bool) {
	b := s.b
	i++
	escaped := false
	for {
		// Eight bytes at a time while none is special.
		for i+8 <= len(b) && !hasSpecial(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) && !isSpecial(b[i]) {
			i++
		}
		if i >= len(b) {
			s.fail("%v", errTruncated)
			return len(b), false
		}
		switch b[i] {
		case '"':
			return i, escaped
		case '\\':
			escaped = true
			if i+1 >= len(b) {
				s.fail("%v", errTruncated)
				return len(b), false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if getu4(b[i:]) < 0 {
					s.i = i
					s.fail("invalid \\u escape")
					return len(b), false
				}
				i += 6
			default:
				s.i = i
				s.fail("invalid escape %q", b[i+1])
				return len(b), false
			}
		default:
			s.i = i
			s.fail("control character %#x in string", b[i])
			return len(b), false
		}
	}
}

func isSpecial(c byte) bool { return c < 0x20 || c == '"' || c == '\\' }

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasSpecial reports whether any byte of w is a quote, a backslash or a
// control character (classic SWAR tests; false positives only cost time).
func hasSpecial(w uint64) bool {
	ctl := (w - 0x20*lsb) &^ w
	quote := w ^ ('"' * lsb)
	quote = (quote - lsb) &^ quote
	bslash := w ^ ('\\' * lsb)
	bslash = (bslash - lsb) &^ bslash
	return (ctl|quote|bslash)&msb != 0
}

// strBytes decodes a string value. The result aliases the input when the
// string needs no unescaping; callers copy it (string(...)) to keep it.
// Any other value (null, a number where a string was expected) is
// validated, skipped and gives nil: a field of an unexpected type is
// treated as absent rather than failing the line.
func (s *scanner) strBytes() []byte {
	if s.peek() != '"' {
		s.skip()
		return nil
	}
	end, escaped := s.stringEnd(s.i)
	if s.err != nil {
		return nil
	}
	raw := s.b[s.i+1 : end]
	s.i = end + 1
	if !escaped && utf8.Valid(raw) {
		return raw
	}
	out, ok := unescape(raw)
	if !ok {
		s.i = end
		s.fail("invalid string escape")
		return nil
	}
	return out
}

// str decodes a string value (null gives "").
func (s *scanner) str() string {
	return string(s.strBytes())
}

// literal consumes the literal word w (true, false, null).
func (s *scanner) literal(w string) {
	if len(s.b)-s.i < len(w) {
		s.fail("%v", errTruncated)
		return
	}
	if string(s.b[s.i:s.i+len(w)]) != w {
		s.fail("invalid literal")
		return
	}
	s.i += len(w)
}

// boolean decodes true or false; null and anything that is not a boolean
// (skipped) give false.
func (s *scanner) boolean() bool {
	switch s.peek() {
	case 't':
		s.literal("true")
		return s.err == nil
	case 'f':
		s.literal("false")
	default:
		s.skip()
	}
	return false
}

// number returns the raw bytes of a number value, or nil (value skipped) for
// anything else. The number must follow JSON's grammar.
func (s *scanner) number() []byte {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		s.skip()
		return nil
	}
	start := s.i
	b := s.b
	i := s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		s.i = i
		s.fail("invalid number")
		return nil
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			s.i = i
			s.fail("invalid number")
			return nil
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			s.i = i
			s.fail("invalid number")
			return nil
		}
	}
	s.i = i
	return b[start:i]
}

// int decodes a number as an int64, truncating fractions (durations are
// sometimes written as floats).
func (s *scanner) int() int64 {
	n := s.number()
	if n == nil || s.err != nil {
		return 0
	}
	if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		return v
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		s.fail("invalid number %q", n)
		return 0
	}
	if f > 1<<62 || f < -(1<<62) {
		return 0
	}
	return int64(f)
}

// raw skips a value and returns its bytes.
func (s *scanner) raw() []byte {
	s.ws()
	start := s.i
	s.skip()
	if s.err != nil {
		return nil
	}
	return s.b[start:s.i]
}

// skip validates and skips one value.
func (s *scanner) skip() {
	c := s.peek()
	if s.err != nil {
		return
	}
	switch {
	case c == 0:
		s.fail("%v", errTruncated)
	case c == '"':
		end, _ := s.stringEnd(s.i)
		if s.err == nil {
			s.i = end + 1
		}
	case c == '{' || c == '[':
		s.skipContainer()
	case c == 't':
		s.literal("true")
	case c == 'f':
		s.literal("false")
	case c == 'n':
		s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		s.number()
	default:
		s.fail("invalid character %q looking for a value", c)
	}
}

// maxDepth bounds nesting (encoding/json refuses beyond 10000).
const maxDepth = 1000

// skipContainer validates and skips an object or array without recursion.
func (s *scanner) skipContainer() {
	var stack [maxDepth]byte // open brackets
	depth := 0
	for s.err == nil {
		// A value starts here.
		switch c := s.peek(); c {
		case '{', '[':
			if depth == maxDepth {
				s.fail("nesting too deep")
				return
			}
			stack[depth] = c
			depth++
			s.i++
			closer := byte('}')
			if c == '[' {
				closer = ']'
			}
			if s.peek() == closer {
				s.i++
				depth--
				break // an empty container is a complete value
			}
			if c == '{' {
				s.objectKey()
			}
			continue
		default:
			s.skip()
		}
		// A value ended: a comma, or closing brackets.
		for s.err == nil {
			if depth == 0 {
				return
			}
			c := s.peek()
			open := stack[depth-1]
			if c == ',' {
				s.i++
				if open == '{' {
					s.objectKey()
				}
				break
			}
			if (open == '{' && c == '}') || (open == '[' && c == ']') {
				s.i++
				depth--
				continue
			}
			if c == 0 {
				s.fail("%v", errTruncated)
			} else {
				s.fail("invalid character %q after a value", c)
			}
		}
	}
}

// objectKey validates and skips a key and its colon.
func (s *scanner) objectKey() {
	if s.peek() != '"' {
		if s.err == nil {
			if s.i >= len(s.b) {
				s.fail("%v", errTruncated)
			} else {
				s.fail("invalid character %q looking for an object key", s.b[s.i])
			}
		}
		return
	}
	end, _ := s.stringEnd(s.i)
	if s.err != nil {
		return
	}
	s.i = end + 1
	if s.peek() != ':' {
		if s.err == nil {
			s.fail("missing ':' after object key")
		}
		return
	}
	s.i++
}

// unescape decodes the body of a JSON string (without quotes) exactly as
// encoding/json does: escapes resolved, invalid UTF-8 and unpaired
// surrogates replaced with U+FFFD. ok is false for a malformed escape.
func unescape(s []byte) ([]byte, bool) {
	b := make([]byte, 0, len(s)+utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\':
			r++
			if r >= len(s) {
				return nil, false
			}
			switch s[r] {
			case '"', '\\', '/':
				b = append(b, s[r])
				r++
			case 'b':
				b = append(b, '\b')
				r++
			case 'f':
				b = append(b, '\f')
				r++
			case 'n':
				b = append(b, '\n')
				r++
			case 'r':
				b = append(b, '\r')
				r++
			case 't':
				b = append(b, '\t')
				r++
			case 'u':
				r--
				rr := getu4(s[r:])
				if rr < 0 {
					return nil, false
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					rr1 := getu4(s[r:])
					if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
						r += 6
						b = utf8.AppendRune(b, dec)
						break
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
			default:
				return nil, false
			}
		case c < utf8.RuneSelf:
			// Copy the run of plain ASCII up to the next escape at once.
			j := r + 1
			for j < len(s) && s[j] != '\\' && s[j] < utf8.RuneSelf {
				j++
			}
			b = append(b, s[r:j]...)
			r = j
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr)
		}
	}
	return b, true
}

// getu4 decodes \uXXXX from the beginning of s, returning the hex value,
// or -1 (as encoding/json does).
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c = c - '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
