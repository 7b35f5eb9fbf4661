package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/textproto"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// DefaultMaxFileBytes bounds one GET of a workspace file (Config.MaxFileBytes).
const DefaultMaxFileBytes = 64 << 20

const (
	// fileOpenTimeout bounds finding and opening the file (the session's
	// owner answers, the environment opens it).
	fileOpenTimeout = 10 * time.Second
	// fileWriteTimeout is how long one write of the body may wait for the
	// client: a client that stops reading does not hold the file open.
	fileWriteTimeout = 30 * time.Second
)

// handleFile serves a workspace file's bytes: regular files only (a FIFO,
// device or folder is NOT_A_FILE; nothing waits on it), streamed from the
// open file with http.ServeContent (ranges, If-Modified-Since, HEAD), the
// whole file up to Config.MaxFileBytes and larger ones by ranges totalling
// no more (FILE_TOO_LARGE otherwise).
func (s *Server) handleFile(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("path")
	if _, err := sandbox.CleanPath(p); err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), fileOpenTimeout)
	f, err := s.cfg.Sessions.OpenFile(ctx, r.PathValue("id"), p, s.cfg.MaxFileBytes)
	cancel()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	info := f.Info()
	if err := checkRanges(r, info, s.cfg.MaxFileBytes); err != nil {
		var re rangeError
		if errors.As(err, &re) && re.noOverlap {
			w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(info.Size, 10))
		}
		s.fail(w, r, err)
		return
	}
	ctype, err := fileContentType(p, f, info.Size)
	if err != nil {
		s.fail(w, r, fmt.Errorf("read %s: %w", p, err))
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rc := http.NewResponseController(w)
	// The connection may serve more requests: no deadline left on it.
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	// The budget only backs up checkRanges: ServeContent never sends more.
	body := &budgetReader{ReadSeeker: f, left: s.cfg.MaxFileBytes}
	http.ServeContent(deadlineWriter{ResponseWriter: w, rc: rc}, r, "", info.ModTime, body)
}

// handlePutFile writes a workspace file from the raw request body
// (bounded by MaxUploadBytes: 413 beyond), with the path rules of reads.
func (s *Server) handlePutFile(w http.ResponseWriter, r *http.Request) {
	p := r.PathValue("path")
	if _, err := sandbox.CleanPath(p); err != nil {
		s.fail(w, r, err)
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), fileOpenTimeout)
	defer cancel()
	info, err := s.cfg.Sessions.WriteFile(ctx, r.PathValue("id"), p, data)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.FileEntry{Path: info.Path, Size: info.Size, Mode: info.Mode, ModTime: info.ModTime})
}

// rangeError is a Range header that selects nothing of the file (416).
type rangeError struct {
	msg       string
	noOverlap bool
}

func (e rangeError) Error() string { return e.msg }

// checkRanges refuses a request that would send more than max bytes: the
// whole file (no Range, a Range ServeContent would ignore, an If-Range that
// does not match) when it is larger, or ranges totalling more. A Range that
// cannot be satisfied is a rangeError, as ServeContent would answer.
func checkRanges(r *http.Request, info sandbox.FileInfo, max int64) error {
	size := info.Size
	total := size
	if h := r.Header.Get("Range"); h != "" && ifRangeMatches(r, info.ModTime) {
		ranges, err := parseRange(h, size)
		if err != nil {
			return err
		}
		if sum := sumRanges(ranges); len(ranges) > 0 && sum <= size {
			total = sum
		}
	}
	if total > max {
		if total == size {
			return fmt.Errorf("%s: %w: %d bytes, more than the %d one request sends: ask for ranges (Range: bytes=first-last)", info.Path, sandbox.ErrTooLarge, size, max)
		}
		return fmt.Errorf("%s: %w: the ranges asked for total %d bytes, more than the %d one request sends", info.Path, sandbox.ErrTooLarge, total, max)
	}
	return nil
}

// ifRangeMatches reports whether the ranges apply (ServeContent's rule: no
// If-Range, or an If-Range date equal to the file's modification time; we
// send no ETag, so an entity tag never matches).
func ifRangeMatches(r *http.Request, mod time.Time) bool {
	ir := r.Header.Get("If-Range")
	if ir == "" {
		return true
	}
	if strings.HasPrefix(ir, `"`) || strings.HasPrefix(ir, "W/") {
		return false
	}
	t, err := http.ParseTime(ir)
	return err == nil && !mod.IsZero() && t.Unix() == mod.Unix()
}

type httpRange struct{ start, length int64 }

// parseRange parses a Range header as net/http's ServeContent does.
func parseRange(s string, size int64) ([]httpRange, error) {
	const prefix = "bytes="
	invalid := rangeError{msg: "invalid range " + strconv.Quote(s)}
	if !strings.HasPrefix(s, prefix) {
		return nil, invalid
	}
	var ranges []httpRange
	noOverlap := false
	for _, ra := range strings.Split(s[len(prefix):], ",") {
		ra = textproto.TrimString(ra)
		if ra == "" {
			continue
		}
		start, end, ok := strings.Cut(ra, "-")
		if !ok {
			return nil, invalid
		}
		start, end = textproto.TrimString(start), textproto.TrimString(end)
		var r httpRange
		if start == "" {
			// A suffix: the last end bytes.
			if end == "" || end[0] == '-' {
				return nil, invalid
			}
			n, err := strconv.ParseInt(end, 10, 64)
			if err != nil || n < 0 {
				return nil, invalid
			}
			r.start = size - min(n, size)
			r.length = size - r.start
		} else {
			first, err := strconv.ParseInt(start, 10, 64)
			if err != nil || first < 0 {
				return nil, invalid
			}
			if first >= size {
				noOverlap = true
				continue
			}
			r.start = first
			if end == "" {
				r.length = size - first
			} else {
				last, err := strconv.ParseInt(end, 10, 64)
				if err != nil || first > last {
					return nil, invalid
				}
				r.length = min(last, size-1) - first + 1
			}
		}
		ranges = append(ranges, r)
	}
	if noOverlap && len(ranges) == 0 {
		return nil, rangeError{msg: fmt.Sprintf("range %q starts beyond the file's %d bytes", s, size), noOverlap: true}
	}
	return ranges, nil
}

func sumRanges(rs []httpRange) int64 {
	var n int64
	for _, r := range rs {
		n += r.length
	}
	return n
}

// fileContentType is the file's type by extension, else text/plain when its
// first 512 bytes are UTF-8 (a character cut at that limit does not count),
// else application/octet-stream. It leaves f at its start.
func fileContentType(p string, f io.ReadSeeker, size int64) (string, error) {
	if t := mime.TypeByExtension(path.Ext(p)); t != "" {
		return t, nil
	}
	var buf [512]byte
	n, err := io.ReadFull(f, buf[:])
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	b := buf[:n]
	if int64(n) < size {
		// The sample ends mid-file: drop a character it cuts.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	if utf8.Valid(b) {
		return "text/plain; charset=utf-8", nil
	}
	return "application/octet-stream", nil
}

// budgetReader fails reads beyond left bytes.
type budgetReader struct {
	io.ReadSeeker
	left int64
}

func (b *budgetReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("files: response over its size bound")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadSeeker.Read(p)
	b.left -= int64(n)
	return n, err
}

// deadlineWriter gives every write of a response fileWriteTimeout to
// complete.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(fileWriteTimeout))
	return w.ResponseWriter.Write(p)
}
