package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/agentd/agentd/internal/auth"
	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

// Error codes (docs/api.md).
const (
	CodeBadRequest        = "BAD_REQUEST"
	CodeUnauthorized      = "UNAUTHORIZED"
	CodeSessionNotFound   = "SESSION_NOT_FOUND"
	CodeProfileNotFound   = "PROFILE_NOT_FOUND"
	CodeUnknownArch       = "UNKNOWN_ARCHITECTURE"
	CodeSessionBusy       = "SESSION_BUSY"
	CodeSessionLeased     = "SESSION_LEASED"
	CodePermissionMissing = "PERMISSION_NOT_FOUND"
	CodePermissionDone    = "PERMISSION_ALREADY_RESOLVED"
	CodeNoActiveTurn      = "NO_ACTIVE_TURN"
	CodeInvalidPath       = "INVALID_PATH"
	CodeFileNotFound      = "FILE_NOT_FOUND"
	CodeInvalidCursor     = "INVALID_CURSOR"
	CodeTooLarge          = "PAYLOAD_TOO_LARGE"
	CodeMethodNotAllowed  = "METHOD_NOT_ALLOWED"
	CodeNotFound          = "NOT_FOUND"
	CodeInternal          = "INTERNAL"
	CodeUnavailable       = "UNAVAILABLE"
	CodeSlowConsumer      = "SLOW_CONSUMER"
	CodeUnknownOp         = "UNKNOWN_OP"
	CodeMessageNotFound   = "MESSAGE_NOT_FOUND"
	CodeAgentNotFound     = "AGENT_NOT_FOUND"
	// CodeUnknownOption: a session option the session's architecture does
	// not read; 400.
	CodeUnknownOption = "UNKNOWN_OPTION"
	// CodeHostNotAllowed: the Host header is not one of the server's
	// (DNS rebinding); 403.
	CodeHostNotAllowed = "HOST_NOT_ALLOWED"
	// CodeCrossOrigin: a state-changing request or WebSocket handshake
	// from another origin; 403.
	CodeCrossOrigin = "CROSS_ORIGIN"
	// CodeUnsupportedMediaType: a request body that is not
	// application/json; 415.
	CodeUnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE"
)

// Error codes of identity (docs/api.md, Auth).
const (
	CodeForbidden     = "FORBIDDEN"      // 403: known caller, not allowed
	CodeRateLimited   = "RATE_LIMITED"   // 429 with Retry-After
	CodeQuotaExceeded = "QUOTA_EXCEEDED" // 429: sessions per user, running sessions
	CodeConflict      = "CONFLICT"       // 409: id taken
	CodeNotSupported  = "NOT_SUPPORTED"  // 501: single-user store, no server key
)

// Error codes of the files API (docs/api.md).
const (
	CodeNotAFile            = "NOT_A_FILE"
	CodeFileTooLarge        = "FILE_TOO_LARGE"
	CodeRangeNotSatisfiable = "RANGE_NOT_SATISFIABLE"
)

// apiError is the JSON error body.
type apiError = restapi.Error

// classify maps a domain error to its HTTP status and code; this is the
// one place that does.
func classify(err error) (int, string) {
	var mbe *http.MaxBytesError
	var ce cursorError
	var re rangeError
	switch {
	case errors.As(err, &ce):
		return http.StatusBadRequest, CodeInvalidCursor
	case errors.As(err, &re):
		return http.StatusRequestedRangeNotSatisfiable, CodeRangeNotSatisfiable
	case errors.As(err, &mbe), errors.Is(err, errContentTooLarge):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.As(err, new(contentError)):
		return http.StatusBadRequest, CodeInvalidContent
	case errors.Is(err, session.ErrUnsupportedContent):
		return http.StatusUnprocessableEntity, CodeUnsupportedContent
	case errors.Is(err, session.ErrNotFound):
		return http.StatusNotFound, CodeSessionNotFound
	case errors.Is(err, errArtifactNotFound):
		return http.StatusNotFound, CodeArtifactNotFound
	case errors.Is(err, store.ErrArtifactQuota):
		return http.StatusInsufficientStorage, CodeArtifactQuota
	case errors.Is(err, auth.ErrUnauthenticated):
		return http.StatusUnauthorized, CodeUnauthorized
	case errors.Is(err, auth.ErrForbidden):
		return http.StatusForbidden, CodeForbidden
	case errors.Is(err, auth.ErrRateLimited):
		return http.StatusTooManyRequests, CodeRateLimited
	case errors.Is(err, auth.ErrQuota):
		return http.StatusTooManyRequests, CodeQuotaExceeded
	case errors.Is(err, auth.ErrInvalid):
		return http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, auth.ErrNotFound):
		return http.StatusNotFound, CodeNotFound
	case errors.Is(err, auth.ErrConflict):
		return http.StatusConflict, CodeConflict
	case errors.Is(err, auth.ErrUnsupported):
		return http.StatusNotImplemented, CodeNotSupported
	case errors.Is(err, session.ErrProfileNotFound):
		return http.StatusNotFound, CodeProfileNotFound
	case errors.Is(err, session.ErrUnknownArchitecture):
		return http.StatusBadRequest, CodeUnknownArch
	case errors.Is(err, session.ErrAgentNotFound):
		return http.StatusBadRequest, CodeAgentNotFound
	case errors.Is(err, session.ErrMessageNotFound):
		return http.StatusNotFound, CodeMessageNotFound
	case errors.Is(err, session.ErrBusy):
		return http.StatusConflict, CodeSessionBusy
	case errors.Is(err, session.ErrLeased):
		return http.StatusConflict, CodeSessionLeased
	case errors.Is(err, session.ErrNoActiveTurn):
		return http.StatusConflict, CodeNoActiveTurn
	case errors.Is(err, session.ErrPermissionNotFound):
		return http.StatusNotFound, CodePermissionMissing
	case errors.Is(err, session.ErrPermissionResolved):
		return http.StatusConflict, CodePermissionDone
	case errors.Is(err, session.ErrUnknownOption):
		return http.StatusBadRequest, CodeUnknownOption
	case errors.Is(err, session.ErrInvalidRequest):
		return http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, sandbox.ErrNotRegular):
		return http.StatusBadRequest, CodeNotAFile
	case errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, CodeFileTooLarge
	case errors.Is(err, sandbox.ErrInvalidPath), errors.Is(err, syscall.ENAMETOOLONG):
		return http.StatusBadRequest, CodeInvalidPath
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound, CodeFileNotFound
	case errors.Is(err, session.ErrUnavailable):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, session.ErrClosed), errors.Is(err, eventlog.ErrClosed):
		return http.StatusServiceUnavailable, CodeUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, CodeUnavailable
	}
	return http.StatusInternalServerError, CodeInternal
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{Error: msg, Code: code})
}

// fail writes err as an API error.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var rl *auth.RateLimitError
	if errors.As(err, &rl) {
		w.Header().Set("Retry-After", strconv.Itoa(rl.RetryAfterSeconds()))
	}
	status, e := s.describe(err, "method", r.Method, "path", r.URL.Path)
	writeJSON(w, status, e)
}

// describe maps err to what a client is told: its status, code and
// message. An internal error's message stays in the server's log, under a
// reference the client gets; any other message is told without host
// paths (errorText). logArgs describe the request in the log.
func (s *Server) describe(err error, logArgs ...any) (int, apiError) {
	status, code := classify(err)
	if status == http.StatusInternalServerError {
		ref := errorRef()
		s.log.Error("request failed", append(logArgs, "ref", ref, "err", err)...)
		return status, apiError{Code: code, Error: "internal error (the server log has it as ref " + ref + ")"}
	}
	return status, apiError{Code: code, Error: s.errorText(err)}
}

// errorRef is a short random id tying an error answer to its log line.
func errorRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errorText is err's message without the server's filesystem layout: a
// path in a session's workspace (<data>/workspaces/<id>/a/b) is told
// workspace-relative (a/b), any other path under the data folder as
// <data-dir>/…, and an absolute path an *fs.PathError names elsewhere by
// its last element.
func (s *Server) errorText(err error) string {
	msg := err.Error()
	for _, root := range s.hidden {
		msg = hideRoot(msg, root)
	}
	var pe *fs.PathError
	for e := err; errors.As(e, &pe); e = pe.Err {
		if filepath.IsAbs(pe.Path) && pe.Path != "/" {
			msg = strings.ReplaceAll(msg, pe.Path, filepath.Base(pe.Path))
		}
	}
	return msg
}

// hideRoot rewrites the paths under root in msg.
func hideRoot(msg, root string) string {
	ws := root + "/workspaces/"
	for {
		i := strings.Index(msg, ws)
		if i < 0 {
			break
		}
		// The session id runs to the next slash (the path goes on inside
		// the workspace) or to whatever ends a path in a message.
		k := i + len(ws)
		end := strings.IndexAny(msg[k:], pathEnd)
		switch {
		case end < 0:
			msg = msg[:i] + "."
		case msg[k+end] == '/':
			msg = msg[:i] + msg[k+end+1:]
		default:
			msg = msg[:i] + "." + msg[k+end:]
		}
	}
	// The folder itself, where a path ends or goes on inside it (not a
	// sibling that shares its prefix, /data-old).
	var b strings.Builder
	for {
		i := strings.Index(msg, root)
		if i < 0 {
			break
		}
		j := i + len(root)
		b.WriteString(msg[:i])
		if !continuesName(msg[j:]) {
			b.WriteString("<data-dir>")
		} else {
			b.WriteString(root)
		}
		msg = msg[j:]
	}
	b.WriteString(msg)
	return b.String()
}

// continuesName reports whether rest (what follows a path in a message)
// makes it a longer name: data-old, data.bak, but not "data." ending a
// sentence.
func continuesName(rest string) bool {
	isName := func(c byte) bool {
		return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	switch {
	case rest == "":
		return false
	case isName(rest[0]):
		return true
	case rest[0] == '.' && len(rest) > 1:
		return isName(rest[1]) || rest[1] == '.'
	}
	return false
}

// pathEnd are the bytes that may follow a path in an error message, or go
// on with it ('/').
const pathEnd = "/ \t\n\"':,;)"

// hiddenRoots are the forms of the data folder an error may name: as
// configured and with symbolic links resolved.
func hiddenRoots(dataDir string) []string {
	if dataDir == "" {
		return nil
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil || abs == "/" {
		return nil
	}
	roots := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs && real != "/" {
		roots = append(roots, real)
	}
	// The longer first, so that one is not rewritten as part of the other.
	slices.SortFunc(roots, func(a, b string) int { return len(b) - len(a) })
	return roots
}
