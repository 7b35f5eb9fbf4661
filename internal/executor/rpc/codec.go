package rpc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/agentd/agentd/sandbox"
)

// DefaultMaxLine bounds one JSON-RPC message (one line) in bytes.
const DefaultMaxLine = 16 << 20

// errLineTooLong reports a line over the limit; the line was discarded.
var errLineTooLong = errors.New("executor: message too large")

// lineReader splits a stream into lines without their '\n'. A line longer
// than max is discarded as it streams in (at most max bytes are buffered)
// and reported as errLineTooLong; reading then goes on with the next line.
// A last line without '\n' before EOF is returned as a line.
type lineReader struct {
	r          io.Reader
	max        int
	buf        []byte
	start, end int // unread bytes are buf[start:end]
	scanned    int // bytes from start already known to hold no '\n'
	err        error
}

const (
	readChunk  = 256 << 10
	initialBuf = 512 << 10
)

func newLineReader(r io.Reader, max int) *lineReader {
	if max <= 0 {
		max = DefaultMaxLine
	}
	return &lineReader{r: r, max: max}
}

// next returns the next line. The slice is valid until the following call.
func (lr *lineReader) next() ([]byte, error) {
	for {
		if i := bytes.IndexByte(lr.buf[lr.start+lr.scanned:lr.end], '\n'); i >= 0 {
			e := lr.start + lr.scanned + i
			line := lr.buf[lr.start:e]
			lr.start, lr.scanned = e+1, 0
			if len(line) > lr.max {
				return nil, errLineTooLong
			}
			return line, nil
		}
		lr.scanned = lr.end - lr.start
		if lr.scanned > lr.max {
			lr.discard()
			return nil, errLineTooLong
		}
		if lr.err != nil {
			if lr.end > lr.start {
				line := lr.buf[lr.start:lr.end]
				lr.start, lr.scanned = lr.end, 0
				return line, nil
			}
			return nil, lr.err
		}
		lr.fill()
	}
}

// fill reads more bytes, making room first.
func (lr *lineReader) fill() {
	unread := lr.end - lr.start
	if lr.start > 0 && (lr.end+readChunk > cap(lr.buf) || lr.start > cap(lr.buf)/2) {
		copy(lr.buf[:cap(lr.buf)], lr.buf[lr.start:lr.end])
		lr.start, lr.end = 0, unread
	}
	if unread == 0 && cap(lr.buf) > 4*initialBuf {
		lr.buf = nil // give back the memory of a huge line
		lr.start, lr.end = 0, 0
	}
	if lr.end+readChunk > cap(lr.buf) {
		n := max(2*cap(lr.buf), initialBuf, lr.end+readChunk)
		nb := make([]byte, n)
		copy(nb, lr.buf[lr.start:lr.end])
		lr.buf, lr.start, lr.end = nb, 0, unread
	}
	lr.buf = lr.buf[:cap(lr.buf)]
	n, err := lr.r.Read(lr.buf[lr.end:])
	lr.end += n
	if err != nil {
		lr.err = err
	} else if n == 0 {
		lr.err = io.ErrNoProgress
	}
}

// readN returns the next n bytes as a new slice (binary frame data).
func (lr *lineReader) readN(n int) ([]byte, error) {
	out := make([]byte, n)
	k := copy(out, lr.buf[lr.start:lr.end])
	lr.start += k
	lr.scanned = 0
	if k == n {
		return out, nil
	}
	if lr.err != nil {
		return nil, lr.err
	}
	if _, err := io.ReadFull(lr.r, out[k:]); err != nil {
		lr.err = err
		return nil, err
	}
	return out, nil
}

// discard drops bytes up to and including the next '\n' (or to the end
// of the input).
func (lr *lineReader) discard() {
	lr.start, lr.end, lr.scanned = 0, 0, 0
	for lr.err == nil {
		if cap(lr.buf) < readChunk {
			lr.buf = make([]byte, readChunk)
		}
		lr.buf = lr.buf[:cap(lr.buf)]
		n, err := lr.r.Read(lr.buf)
		if err != nil {
			lr.err = err
		} else if n == 0 {
			lr.err = io.ErrNoProgress
		}
		if i := bytes.IndexByte(lr.buf[:n], '\n'); i >= 0 {
			lr.start, lr.end = i+1, n
			return
		}
	}
}

// msgKind classifies an incoming message.
type msgKind int

const (
	kindRequest msgKind = iota + 1
	kindNotification
	kindResponse
)

// message is a decoded, validated JSON-RPC 2.0 message.
type message struct {
	kind   msgKind
	id     json.RawMessage // request or response id (a string or number; "null" in some error responses)
	method string
	params json.RawMessage
	result json.RawMessage
	err    *Error
}

// wireMessage is the union of request and response members.
type wireMessage struct {
	JSONRPC json.RawMessage `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  json.RawMessage `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

var nullID = json.RawMessage("null")

// decodeMessage parses one line strictly. On failure it returns the error
// to answer with and the id to answer to (null when it could not be
// determined).
func decodeMessage(line []byte) (message, json.RawMessage, *Error) {
	var w wireMessage
	if err := json.Unmarshal(line, &w); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(line) {
			return message{}, nullID, &Error{Code: CodeParseError, Message: "parse error: " + err.Error()}
		}
		return message{}, nullID, &Error{Code: CodeInvalidRequest, Message: "invalid request: not a JSON-RPC 2.0 object"}
	}
	id := nullID
	idOK := validID(w.ID)
	if idOK {
		id = w.ID
	}
	var version string
	if w.JSONRPC == nil || json.Unmarshal(w.JSONRPC, &version) != nil || version != "2.0" {
		return message{}, id, &Error{Code: CodeInvalidRequest, Message: `invalid request: "jsonrpc" must be "2.0"`}
	}
	if w.Method != nil {
		var m message
		if json.Unmarshal(w.Method, &m.method) != nil || m.method == "" {
			return message{}, id, &Error{Code: CodeInvalidRequest, Message: `invalid request: "method" must be a non-empty string`}
		}
		if w.Result != nil || w.Error != nil {
			return message{}, id, &Error{Code: CodeInvalidRequest, Message: "invalid request: a request cannot carry result or error"}
		}
		if w.Params != nil {
			if c := firstByte(w.Params); c != '{' && c != '[' {
				return message{}, id, &Error{Code: CodeInvalidRequest, Message: `invalid request: "params" must be an object or an array`}
			}
			m.params = w.Params
		}
		switch {
		case w.ID == nil:
			m.kind = kindNotification
		case idOK:
			m.kind, m.id = kindRequest, w.ID
		default:
			return message{}, nullID, &Error{Code: CodeInvalidRequest, Message: `invalid request: "id" must be a string or a number`}
		}
		return m, nil, nil
	}
	if w.Result == nil && w.Error == nil {
		return message{}, id, &Error{Code: CodeInvalidRequest, Message: "invalid request: neither a request nor a response"}
	}
	// Invalid responses are reported with kind kindResponse: they are
	// logged, never answered, so two peers cannot bounce errors forever.
	bad := message{kind: kindResponse}
	if w.Result != nil && w.Error != nil {
		return bad, id, &Error{Code: CodeInvalidRequest, Message: "invalid response: both result and error"}
	}
	m := message{kind: kindResponse, result: w.Result}
	switch {
	case idOK:
		m.id = w.ID
	case w.ID != nil && string(w.ID) == "null" && w.Error != nil:
		m.id = nullID // an error the peer could not tie to a request
	default:
		return bad, nullID, &Error{Code: CodeInvalidRequest, Message: `invalid response: bad "id"`}
	}
	if w.Error != nil {
		var e Error
		if err := json.Unmarshal(w.Error, &e); err != nil || e.Message == "" && e.Code == 0 {
			return bad, id, &Error{Code: CodeInvalidRequest, Message: "invalid response: bad error object"}
		}
		m.err = &e
	}
	return m, nil, nil
}

// validID reports whether raw is a JSON string or number.
func validID(raw json.RawMessage) bool {
	switch c := firstByte(raw); {
	case c == '"':
		var s string
		return json.Unmarshal(raw, &s) == nil
	case c == '-' || c >= '0' && c <= '9':
		var n json.Number
		return json.Unmarshal(raw, &n) == nil
	}
	return false
}

func firstByte(raw []byte) byte {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c
	}
	return 0
}

// appendRequest encodes a request (id != nil) or notification line,
// including the trailing '\n'.
func appendRequest(dst []byte, id json.RawMessage, method string, params any) ([]byte, error) {
	dst = append(dst, `{"jsonrpc":"2.0",`...)
	if id != nil {
		dst = append(dst, `"id":`...)
		dst = append(dst, id...)
		dst = append(dst, ',')
	}
	dst = append(dst, `"method":`...)
	dst = appendString(dst, method)
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, err
		}
		dst = append(dst, `,"params":`...)
		dst = append(dst, p...)
	}
	return append(dst, "}\n"...), nil
}

// appendResult encodes a success response line.
func appendResult(dst []byte, id json.RawMessage, result json.RawMessage) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"result":`...)
	if result == nil {
		result = json.RawMessage("null")
	}
	dst = append(dst, result...)
	return append(dst, "}\n"...)
}

// appendError encodes an error response line.
func appendError(dst []byte, id json.RawMessage, e *Error) []byte {
	if id == nil {
		id = nullID
	}
	b, err := json.Marshal(e)
	if err != nil { // Data was not valid JSON
		b, _ = json.Marshal(&Error{Code: e.Code, Message: e.Message})
	}
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = append(dst, id...)
	dst = append(dst, `,"error":`...)
	dst = append(dst, b...)
	return append(dst, "}\n"...)
}

// EncodeError returns the line of an error response tied to no request
// (id null): what an end that refuses a connection before serving it
// writes to tell the peer why.
func EncodeError(e *Error) []byte { return appendError(nil, nullID, e) }

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	if plainString(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// plainString reports whether s can be written between quotes as is:
// printable ASCII without '"', '\\' and the characters encoding/json
// escapes for HTML.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// The exec.output fast path. Output is most of the traffic, so it is
// written in one canonical shape without reflection, and a reader that
// sees exactly that shape decodes it without a generic JSON pass. Any other
// spelling of the same notification goes through the generic decoder.
//
// Binary output frames (opt-in per connection, see MethodConnOptions)
// replace "data" by "size":N and put the N raw bytes right after the
// line's '\n', saving the base64 both ways. Only this exact header shape is
// a binary frame.
const (
	outputPrefix = `{"jsonrpc":"2.0","method":"exec.output","params":{"tag":`
	outStream    = `,"stream":"`
	outOffset    = `","offset":`
	outData      = `,"data":"`
	outSuffix    = `"}}`
	outSize      = `,"size":`
	outSizeEnd   = `}}`
)

func appendOutputHead(dst []byte, tag string, stream sandbox.Stream, offset int64) []byte {
	dst = append(dst, outputPrefix...)
	dst = appendString(dst, tag)
	dst = append(dst, outStream...)
	dst = append(dst, stream...)
	dst = append(dst, outOffset...)
	return strconv.AppendInt(dst, offset, 10)
}

// appendOutput encodes an exec.output notification line.
func appendOutput(dst []byte, tag string, stream sandbox.Stream, offset int64, data []byte) []byte {
	dst = appendOutputHead(dst, tag, stream, offset)
	dst = append(dst, outData...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	dst = append(dst, outSuffix...)
	return append(dst, '\n')
}

// appendOutputFrame encodes a binary output frame: the header line, then
// the raw data.
func appendOutputFrame(dst []byte, tag string, stream sandbox.Stream, offset int64, data []byte) []byte {
	dst = appendOutputHead(dst, tag, stream, offset)
	dst = append(dst, outSize...)
	dst = strconv.AppendInt(dst, int64(len(data)), 10)
	dst = append(dst, outSizeEnd...)
	dst = append(dst, '\n')
	return append(dst, data...)
}

// parseDecimal reads a non-negative JSON integer at the start of b.
func parseDecimal(b []byte) (v int64, n int, ok bool) {
	for n < len(b) && n < 19 && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || n > 1 && b[0] == '0' || n < len(b) && b[n] >= '0' && b[n] <= '9' {
		return 0, 0, false
	}
	v, err := strconv.ParseInt(string(b[:n]), 10, 64)
	return v, n, err == nil
}

// parseOutputHead parses the canonical start of an exec.output line, up
// to the offset; rest is what follows.
func parseOutputHead(line []byte) (p ExecOutputParams, rest []byte, ok bool) {
	rest, ok = bytes.CutPrefix(line, []byte(outputPrefix+`"`))
	if !ok {
		return p, nil, false
	}
	i := bytes.IndexByte(rest, '"')
	if i < 0 || !plainString(string(rest[:i])) {
		return p, nil, false
	}
	p.Tag = string(rest[:i])
	if rest, ok = bytes.CutPrefix(rest[i+1:], []byte(outStream)); !ok {
		return p, nil, false
	}
	switch {
	case bytes.HasPrefix(rest, []byte(sandbox.Stdout)):
		p.Stream = sandbox.Stdout
	case bytes.HasPrefix(rest, []byte(sandbox.Stderr)):
		p.Stream = sandbox.Stderr
	default:
		return p, nil, false
	}
	if rest, ok = bytes.CutPrefix(rest[len(p.Stream):], []byte(outOffset)); !ok {
		return p, nil, false
	}
	off, n, ok := parseDecimal(rest)
	if !ok {
		return p, nil, false
	}
	p.Offset = off
	return p, rest[n:], true
}

// parseOutput decodes a line in appendOutput's exact shape; ok is false for
// anything else (the caller then decodes generically).
func parseOutput(line []byte) (p ExecOutputParams, ok bool) {
	p, rest, ok := parseOutputHead(line)
	if !ok {
		return p, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(outData)); !ok {
		return p, false
	}
	enc, ok := bytes.CutSuffix(rest, []byte(outSuffix))
	if !ok || bytes.IndexByte(enc, '\r') >= 0 { // base64 would skip '\r'; JSON forbids it
		return p, false
	}
	data := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	m, err := base64.StdEncoding.Decode(data, enc)
	if err != nil {
		return p, false
	}
	p.Data = data[:m]
	return p, true
}

// parseOutputFrame recognises a binary frame's header line and returns the
// size of the raw data that follows it.
func parseOutputFrame(line []byte) (p ExecOutputParams, size int64, ok bool) {
	p, rest, ok := parseOutputHead(line)
	if !ok {
		return p, 0, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(outSize)); !ok {
		return p, 0, false
	}
	size, n, ok := parseDecimal(rest)
	if !ok || string(rest[n:]) != outSizeEnd {
		return p, 0, false
	}
	return p, size, true
}
