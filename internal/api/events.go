package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

const (
	defaultPage = 1000
	maxPage     = 10000
	ssePing     = 15 * time.Second
)

// parseCursor reads a non-negative seq from a query value or header.
func parseCursor(name, v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, cursorError(fmt.Sprintf("%s must be a non-negative integer, got %q", name, v))
	}
	return n, nil
}

type cursorError string

func (e cursorError) Error() string { return string(e) }

func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.cfg.Sessions.Get(id); err != nil {
		s.fail(w, r, err)
		return
	}
	after, err := parseCursor("after", r.URL.Query().Get("after"))
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidCursor, err.Error())
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if v := r.Header.Get("Last-Event-ID"); v != "" {
			if after, err = parseCursor("Last-Event-ID", v); err != nil {
				writeError(w, http.StatusBadRequest, CodeInvalidCursor, err.Error())
				return
			}
		}
		s.serveSSE(w, r, id, after)
		return
	}
	limit := defaultPage
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, CodeInvalidCursor, fmt.Sprintf("limit must be a positive integer, got %q", v))
			return
		}
		limit = min(n, maxPage)
	}
	evs, err := s.cfg.Log.Read(r.Context(), id, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	last, err := s.cfg.Log.LastSeq(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The log publishes a batch just after storing it: a page read in
	// between holds events beyond the last published seq.
	if n := len(evs); n > 0 {
		last = max(last, evs[n-1].Seq)
	}
	if evs == nil {
		evs = []conversation.Event{}
	}
	writeJSON(w, http.StatusOK, restapi.EventPage{Events: evs, LastSeq: last})
}

// serveSSE streams events after a seq until the client goes away, the
// subscriber falls behind (an error event, then the stream ends; the
// client resumes with Last-Event-ID) or the server shuts down. A client
// that takes nothing written to it for WriteTimeout fell behind too; it
// gets the rest of the write in flight and the error event if it reads
// within CloseTimeout, else the connection is cut.
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request, id string, after int64) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.closeCtx, func() { cancel(nil) })
	defer stop()
	s.connWG.Add(1)
	defer s.connWG.Done()
	defer s.live.track(r.Context(), func() { cancel(errCredentialGone) })()

	sub, err := s.cfg.Log.Subscribe(ctx, id, after)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer sub.Close()
	rc := http.NewResponseController(w)
	guard := newStallGuard(s.cfg.WriteTimeout, s.cfg.CloseTimeout, rc.SetWriteDeadline)
	defer guard.stop()
	guard.notify(sub.FellBehind)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(guardedWriter{w: w, g: guard}, 32<<10)
	flush := func() bool {
		if bw.Flush() != nil {
			return false
		}
		guard.arm()
		err := rc.Flush()
		guard.disarm()
		return err == nil && !guard.stalled()
	}
	told := false // the error event was written
	defer func() {
		if guard.stalled() && !told {
			// The client took the write in flight within CloseTimeout (or
			// not): tell it why it is cut off, then make sure the
			// connection is not reused with the deadline set.
			writeSlowSSE(bw)
			_ = bw.Flush()
			_ = rc.Flush()
			_ = rc.SetWriteDeadline(time.Now())
		}
	}()
	_, _ = bw.WriteString("retry: 1000\n\n")
	if !flush() {
		return
	}
	// goodbye tells a client whose credential went why its stream ends.
	goodbye := func() {
		if errors.Is(context.Cause(ctx), errCredentialGone) {
			fmt.Fprintf(bw, "event: error\ndata: {\"code\":%q,\"error\":\"credential no longer valid\"}\n\n", CodeUnauthorized)
			_ = bw.Flush()
			_ = rc.Flush()
		}
	}
	var pacer pacer
	defer pacer.stop()
	for {
		// Wait for the next event at most ssePing, then send a keep-alive.
		nctx, ncancel := context.WithTimeout(ctx, ssePing)
		rec, err := sub.Next(nctx)
		ncancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				_, _ = bw.WriteString(": ping\n\n")
				if !flush() {
					return
				}
				continue
			}
			if errors.Is(err, eventlog.ErrSlowConsumer) && !guard.stalled() {
				writeSlowSSE(bw)
				told = true
				flush()
			}
			goodbye()
			return
		}
		writeSSE(bw, rec)
		// Drain what is ready before flushing: one flush per burst. Large
		// events go through bw unbuffered, so a stall shows here too.
		for drained := 0; drained < 256 && !guard.stalled(); drained++ {
			rec, ok, err := sub.TryNext(ctx)
			if err != nil || !ok {
				break
			}
			writeSSE(bw, rec)
		}
		if !flush() {
			return
		}
		if !pacer.pause(ctx, s.flushInterval) {
			goodbye()
			return
		}
	}
}

func writeSlowSSE(bw *bufio.Writer) {
	fmt.Fprintf(bw, "event: error\ndata: {\"code\":%q,\"error\":\"subscriber fell behind; reconnect with Last-Event-ID\"}\n\n", CodeSlowConsumer)
}

func writeSSE(bw *bufio.Writer, rec eventlog.Record) {
	bw.WriteString("id: ")
	bw.WriteString(strconv.FormatInt(rec.Event.Seq, 10))
	bw.WriteString("\nevent: ")
	bw.WriteString(string(rec.Event.Type))
	bw.WriteString("\ndata: ")
	bw.Write(rec.JSON) // compact JSON: no newlines
	bw.WriteString("\n\n")
}

// checkFilesPath rejects paths the mux would otherwise clean or redirect:
// the files API answers INVALID_PATH for them.
func checkFilesPath(urlPath string) error {
	_, rest, ok := strings.Cut(urlPath, "/files/")
	if !ok {
		return nil
	}
	if strings.HasPrefix(rest, "/") {
		return fmt.Errorf("%w: %q is absolute", sandbox.ErrInvalidPath, rest)
	}
	_, err := sandbox.CleanPath(rest)
	return err
}
