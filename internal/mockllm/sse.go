package mockllm

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
	"unicode/utf8"
)

// sseWriter writes one event stream. It stops writing after the first
// error (the client went away) and honours the plan's delay and drop
// controls. Not safe for concurrent use; one handler goroutine owns it.
type sseWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	ctx       context.Context
	delay     time.Duration
	dropAfter int
	n         int
	failed    bool
}

func newSSE(w http.ResponseWriter, r *http.Request, p *plan) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), ctx: r.Context(), delay: p.delay, dropAfter: p.dropAfter}
	_ = s.rc.Flush()
	return s
}

// event writes "event: name" (omitted when name is empty) and one data
// line holding v as JSON.
func (s *sseWriter) event(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Only our own response types get here; a failure is a bug.
		panic("mockllm: marshal event: " + err.Error())
	}
	s.write(name, data)
}

func (s *sseWriter) write(name string, data []byte) {
	if s.failed {
		return
	}
	if s.dropAfter > 0 && s.n >= s.dropAfter {
		s.drop()
	}
	if s.n > 0 && s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			s.failed = true
			return
		}
	}
	buf := make([]byte, 0, len(name)+len(data)+16)
	if name != "" {
		buf = append(buf, "event: "...)
		buf = append(buf, name...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := s.w.Write(buf); err != nil {
		s.failed = true
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
		return
	}
	s.n++
}

// end finishes the stream; a plan that asked to drop the connection drops
// it here if the stream was shorter than dropAfterEvents.
func (s *sseWriter) end() {
	if s.dropAfter > 0 && !s.failed {
		s.drop()
	}
}

// drop aborts the connection without the chunked terminator, as a network
// failure would. http.ErrAbortHandler is the server's sanctioned way.
func (s *sseWriter) drop() {
	_ = s.rc.Flush()
	panic(http.ErrAbortHandler)
}

// chunks splits s into pieces of at most n runes (n <= 0 means 16).
func chunks(s string, n int) []string {
	if n <= 0 {
		n = 16
	}
	var out []string
	for len(s) > 0 {
		i, count := 0, 0
		for i < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[i:])
			i += size
			count++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic("mockllm: marshal response: " + err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
