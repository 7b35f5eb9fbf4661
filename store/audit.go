package store

import (
	"context"
	"time"

	"github.com/agentd/agentd/conversation"
)

// AuditKind says what an audit record describes.
type AuditKind string

const (
	// AuditExecutor is one call the server made to a session's executor
	// (exec.start, fs.read, …). Output notifications are not calls.
	AuditExecutor AuditKind = "executor"
	// AuditModel is one model-API request an agent made through the model
	// proxy.
	AuditModel AuditKind = "model"
)

// AuditOutcome is how an audited action ended.
type AuditOutcome string

const (
	AuditOK      AuditOutcome = "ok"      // done (a model request: a 2xx/3xx answer read to its end)
	AuditError   AuditOutcome = "error"   // failed (an error from the executor, a 4xx/5xx answer, no upstream)
	AuditRefused AuditOutcome = "refused" // refused by agentd before reaching the upstream (budget)
	AuditAborted AuditOutcome = "aborted" // the client went away before the answer ended
)

// AuditRecord is one audited action of a session.
type AuditRecord struct {
	// ID is assigned by the store when the record is appended: it rises
	// with every record (across sessions), so it is a read cursor.
	ID        int64     `json:"id"`
	SessionID string    `json:"sessionId"`
	Time      time.Time `json:"time"` // when the action started
	Kind      AuditKind `json:"kind"`
	// Method is the executor method, or the HTTP method of a model request.
	Method string `json:"method"`
	// Path is a model request's upstream path without its query (which may
	// carry a key); empty for executor calls.
	Path string `json:"path,omitempty"`
	// Provider is a model request's provider (anthropic, openai, gemini).
	Provider string `json:"provider,omitempty"`
	// Model is the model a model request's answer named, when it did.
	Model string `json:"model,omitempty"`
	// Actor is the principal whose turn caused the action, when known.
	Actor   string       `json:"actor,omitempty"`
	Outcome AuditOutcome `json:"outcome"`
	// Status is a model request's HTTP status.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// BytesIn is what was sent (the request body, an executor call's
	// params); BytesOut what came back (a model answer's body).
	BytesIn    int64 `json:"bytesIn"`
	BytesOut   int64 `json:"bytesOut"`
	DurationMs int64 `json:"durationMs"`
	// Usage is the token usage a model answer reported.
	Usage *conversation.Usage `json:"usage,omitempty"`
}

// AuditStore keeps the audit log. It is optional: a Store that implements
// it gets its executor calls and model requests recorded and served by
// GET /api/sessions/{id}/audit. Methods are safe for concurrent use.
type AuditStore interface {
	// AppendAudit stores records atomically (all or none), assigning each
	// its ID in slice order. Records of a session that does not exist (any
	// more) are dropped without error: a session may be purged while its
	// last records wait in a batch.
	AppendAudit(ctx context.Context, records []AuditRecord) error
	// ReadAudit returns the session's records with ID > after, in ID order,
	// at most limit of them (limit <= 0: all).
	ReadAudit(ctx context.Context, sessionID string, after int64, limit int) ([]AuditRecord, error)
	// AuditUsage sums the Usage of the session's records.
	AuditUsage(ctx context.Context, sessionID string) (conversation.Usage, error)
}
