package claudecode

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small pull parser for the converter's hot path. encoding/json
// with typed structs tops out near the converter's whole throughput budget on
// large transcripts (it validates every byte, then decodes, then skips again),
// so the lines that dominate (assistant, user, stream_event) are walked here
// instead: keys the converter needs are decoded, everything else is skipped
// with bytes.IndexByte.
//
// It is deliberately lenient inside skipped values (it checks bracket
// nesting and string ends, not commas or number syntax), strict about what it
// decodes, and never panics. Raw values the converter passes through to its
// output (tool inputs) are validated separately with json.Compact, so the
// converter never emits invalid JSON.
//
// Errors are sticky: after the first one every method returns zero values and
// the caller checks err once.
type scanner struct {
	b   []byte
	i   int
	err error
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
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
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
// opening quote is at b[i], and whether it contains escapes.
func (s *scanner) stringEnd(i int) (int, bool) {
	b := s.b
	i++
	q := -1
	escaped := false
	for {
		if q < i {
			q = bytes.IndexByte(b[i:], '"')
			if q < 0 {
				s.fail("%v", errTruncated)
				return len(b), false
			}
			q += i
		}
		bs := bytes.IndexByte(b[i:q], '\\')
		if bs < 0 {
			return q, escaped
		}
		escaped = true
		i += bs + 2
		if i > len(b) {
			s.fail("%v", errTruncated)
			return len(b), false
		}
	}
}

// strBytes decodes a string value. The result aliases the input when the
// string needs no unescaping; callers copy it (string(...)) to keep it.
// A JSON null gives nil, like encoding/json leaves a string unset.
func (s *scanner) strBytes() []byte {
	c := s.peek()
	if c == 'n' {
		s.literal("null")
		return nil
	}
	if c != '"' {
		if s.err == nil {
			s.fail("expected a string")
		}
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
// anything else.
func (s *scanner) number() []byte {
	c := s.peek()
	if c != '-' && (c < '0' || c > '9') {
		s.skip()
		return nil
	}
	start := s.i
	for s.i < len(s.b) && isNumberByte(s.b[s.i]) {
		s.i++
	}
	return s.b[start:s.i]
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}

// float decodes a number; other values give 0. ok is false when the value
// was not a number.
func (s *scanner) float() (float64, bool) {
	n := s.number()
	if n == nil || s.err != nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		s.fail("invalid number %q", n)
		return 0, false
	}
	return f, true
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

// skip skips one value. Containers are skipped by counting brackets outside
// strings, without checking what is between them.
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

func (s *scanner) skipContainer() {
	// A fixed-size stack of expected closers; deeper nesting than this is
	// refused (encoding/json refuses beyond 10000 too).
	var stack [512]byte
	depth := 0
	b := s.b
	for i := s.i; i < len(b); {
		c := b[i]
		switch c {
		case '"':
			end, _ := s.stringEnd(i)
			if s.err != nil {
				return
			}
			i = end + 1
			continue
		case '{', '[':
			if depth == len(stack) {
				s.i = i
				s.fail("nesting too deep")
				return
			}
			if c == '{' {
				stack[depth] = '}'
			} else {
				stack[depth] = ']'
			}
			depth++
		case '}', ']':
			if depth == 0 || stack[depth-1] != c {
				s.i = i
				s.fail("mismatched %q", c)
				return
			}
			depth--
			if depth == 0 {
				s.i = i + 1
				return
			}
		}
		i++
	}
	s.fail("%v", errTruncated)
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
