package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/agentd/agentd/internal/eventlog"
	"github.com/agentd/agentd/internal/sandbox"
	"github.com/agentd/agentd/internal/session"
	"github.com/agentd/agentd/restapi"
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
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, CodeTooLarge
	case errors.Is(err, session.ErrNotFound):
		return http.StatusNotFound, CodeSessionNotFound
	case errors.Is(err, session.ErrProfileNotFound):
		return http.StatusNotFound, CodeProfileNotFound
	case errors.Is(err, session.ErrUnknownArchitecture):
		return http.StatusBadRequest, CodeUnknownArch
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
	case errors.Is(err, session.ErrInvalidRequest):
		return http.StatusBadRequest, CodeBadRequest
	case errors.Is(err, sandbox.ErrNotRegular):
		return http.StatusBadRequest, CodeNotAFile
	case errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, CodeFileTooLarge
	case errors.Is(err, sandbox.ErrInvalidPath):
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
	status, code := classify(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error: " + msg
	}
	writeError(w, status, code, msg)
}
