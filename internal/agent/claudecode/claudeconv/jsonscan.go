package claudeconv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// scanner is a small pull parser for the converter's hot path: every line
// is walked here, the keys the converter needs decoded, everything else
// validated and skipped, in one pass.
//
// Why not encoding/json (measured 2026-11-25, BenchmarkDecoders: the 50 MB
// transcript of docs/benchmarks.md converted to blocks end to end, one
// core, CPU time on a shared machine): with this scanner 175–233 MB/s;
// with json.Unmarshal filling the same fields (decodeStd in
// wire_std_test.go) 46–52 MB/s, 4.5× slower; with GOEXPERIMENT=jsonv2,
// 69–77 MB/s through encoding/json and 90–92 MB/s through the json/v2 API,
// against 175–189 for the scanner in the same runs, 2× slower. Unmarshal
// validates each line whole before decoding it, goes through reflection,
// and needs a json.RawMessage copy and another Unmarshal for every value
// that is kept raw or has two shapes (content, input, toolUseResult).
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
// opening quote is at b[i], whether it contains escapes, and whether all
// its bytes are ASCII (false may also mean unsure). It checks the escapes
// and refuses control characters, as JSON requires.
func (s *scanner) stringEnd(i int) (end int, escaped, ascii bool) {
	b := s.b
	i++
	var seen uint64
	for {
		var more uint64
		i, more = nextSpecial(b, i)
		seen |= more
		if i >= len(b) {
			s.fail("%v", errTruncated)
			return len(b), false, false
		}
		switch b[i] {
		case '"':
			return i, escaped, seen&msb == 0
		case '\\':
			escaped = true
			if i+1 >= len(b) {
				s.fail("%v", errTruncated)
				return len(b), false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if getu4(b[i:]) < 0 {
					s.i = i
					s.fail("invalid \\u escape")
					return len(b), false, false
				}
				i += 6
			default:
				s.i = i
				s.fail("invalid escape %q", b[i+1])
				return len(b), false, false
			}
		default:
			s.i = i
			s.fail("control character %#x in string", b[i])
			return len(b), false, false
		}
	}
}

// nextSpecial returns the index of the first byte at or after i that
// isSpecial (len(b) if none), eight bytes at a time, and the OR of the bytes
// before it (in words), whose top bits say whether any was not ASCII.
func nextSpecial(b []byte, i int) (int, uint64) {
	var seen uint64
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if m := specialMask(w); m != 0 {
			n := bits.TrailingZeros64(m) >> 3
			return i + n, seen | w&(1<<(8*n)-1)
		}
		seen |= w
	}
	for ; i < len(b); i++ {
		if isSpecial(b[i]) {
			return i, seen
		}
		seen |= uint64(b[i])
	}
	return i, seen
}

func isSpecial(c byte) bool { return c < 0x20 || c == '"' || c == '\\' }

// SWAR (SIMD within a register) byte tests on eight bytes at once, the
// first byte in the low bits. Each mask has the top bit set in the bytes
// that match; the lowest set bit is always a true match (a borrow can only
// flag bytes above a true match), so bits.TrailingZeros64(m)/8 is the index
// of the first matching byte.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// eqMask flags the bytes of w equal to c.
func eqMask(w uint64, c byte) uint64 {
	x := w ^ (lsb * uint64(c))
	return (x - lsb) &^ x & msb
}

// belowMask flags the bytes of w below c (c <= 0x80).
func belowMask(w uint64, c byte) uint64 { return (w - lsb*uint64(c)) &^ w & msb }

// specialMask flags what ends a run inside a JSON string: a quote, a
// backslash or a control character.
func specialMask(w uint64) uint64 {
	return belowMask(w, 0x20) | eqMask(w, '"') | eqMask(w, '\\')
}

// strRaw reads a string value: its body as it is in the input, and whether
// that is already the decoded string (no escapes, valid UTF-8). Any other
// value (null, a number where a string was expected) is validated and
// skipped, and ok is false: a field of an unexpected type is treated as
// absent rather than failing the line.
func (s *scanner) strRaw() (raw []byte, plain, ok bool) {
	if s.peek() != '"' {
		s.skip()
		return nil, false, false
	}
	end, escaped, ascii := s.stringEnd(s.i)
	if s.err != nil {
		return nil, false, false
	}
	raw = s.b[s.i+1 : end]
	s.i = end + 1
	return raw, !escaped && (ascii || utf8.Valid(raw)), true
}

// strBytes decodes a string value (see strRaw; nil when it is not a
// string). The result aliases the input when the string needs no
// unescaping; callers copy it (string(...)) to keep it.
func (s *scanner) strBytes() []byte {
	raw, plain, ok := s.strRaw()
	if !ok || plain {
		return raw
	}
	var b bytes.Buffer
	b.Grow(len(raw) + utf8.UTFMax)
	if !unescapeTo(&b, raw) {
		s.i-- // at the closing quote
		s.fail("invalid string escape")
		return nil
	}
	return b.Bytes()
}

// str decodes a string value ("" when it is not a string) into a string
// of its own, in one allocation.
func (s *scanner) str() string {
	raw, plain, ok := s.strRaw()
	if !ok {
		return ""
	}
	if plain {
		return string(raw)
	}
	var b strings.Builder
	b.Grow(len(raw) + utf8.UTFMax)
	if !unescapeTo(&b, raw) {
		s.i--
		s.fail("invalid string escape")
		return ""
	}
	return b.String()
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
		end, _, _ := s.stringEnd(s.i)
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
	end, _, _ := s.stringEnd(s.i)
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
	var b bytes.Buffer
	b.Grow(len(s) + utf8.UTFMax)
	ok := unescapeTo(&b, s)
	return b.Bytes(), ok
}

// byteWriter is what unescapeTo writes to: a bytes.Buffer, or a
// strings.Builder for a string without a second copy.
type byteWriter interface {
	Write([]byte) (int, error)
	WriteByte(byte) error
	WriteRune(rune) (int, error)
}

// unescapeTo writes unescape's result to w; false for a malformed escape.
func unescapeTo(w byteWriter, s []byte) bool {
	for r := 0; r < len(s); {
		if s[r] != '\\' {
			// Copy the run of valid UTF-8 up to the next escape at once;
			// an invalid byte becomes U+FFFD.
			j := r
			for {
				j = nextEscapeOrHigh(s, j)
				if j >= len(s) || s[j] == '\\' {
					break
				}
				rr, size := utf8.DecodeRune(s[j:])
				if rr == utf8.RuneError && size == 1 {
					break
				}
				j += size
			}
			w.Write(s[r:j])
			r = j
			if r < len(s) && s[r] != '\\' {
				w.WriteRune(utf8.RuneError)
				r++
			}
			continue
		}
		r++
		if r >= len(s) {
			return false
		}
		switch s[r] {
		case '"', '\\', '/':
			w.WriteByte(s[r])
			r++
		case 'b':
			w.WriteByte('\b')
			r++
		case 'f':
			w.WriteByte('\f')
			r++
		case 'n':
			w.WriteByte('\n')
			r++
		case 'r':
			w.WriteByte('\r')
			r++
		case 't':
			w.WriteByte('\t')
			r++
		case 'u':
			r--
			rr := getu4(s[r:])
			if rr < 0 {
				return false
			}
			r += 6
			if utf16.IsSurrogate(rr) {
				rr1 := getu4(s[r:])
				if dec := utf16.DecodeRune(rr, rr1); dec != unicode.ReplacementChar {
					r += 6
					w.WriteRune(dec)
					break
				}
				rr = unicode.ReplacementChar
			}
			w.WriteRune(rr)
		default:
			return false
		}
	}
	return true
}

// nextEscapeOrHigh returns the index of the first backslash or non-ASCII
// byte at or after i, len(s) if none.
func nextEscapeOrHigh(s []byte, i int) int {
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64(s[i:])
		if m := eqMask(w, '\\') | w&msb; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for ; i < len(s); i++ {
		if s[i] == '\\' || s[i] >= utf8.RuneSelf {
			return i
		}
	}
	return i
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
