// Package store defines agentd's persistence interface. Any implementation
// that passes the conformance suite in store/storetest can back a server:
// store/sqlite is the embedded default; applications embedding agentd may
// supply their own.
//
// All methods are safe for concurrent use.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
)

var (
	// ErrNotFound: no such session, profile, transcript or file.
	ErrNotFound = errors.New("store: not found")
	// ErrExists: CreateSession with an id already taken.
	ErrExists = errors.New("store: already exists")
	// ErrSeqConflict: AppendEvents with a (session, seq) already stored. The
	// whole batch is rejected.
	ErrSeqConflict = errors.New("store: event seq already stored")
	// ErrLeaseHeld: another holder owns an unexpired lease on the session.
	ErrLeaseHeld = errors.New("store: lease held by another owner")
	// ErrFenced: a fenced write (see Fence) carried a lease generation that
	// is no longer the session's: another holder has taken the lease since.
	// Nothing of the call was stored. The error may be a *FencedError.
	ErrFenced = errors.New("store: stale lease generation (fenced)")
)

// Fence makes a write conditional on the writer still holding the
// session's lease: the store applies the write, in the same transaction,
// only if SessionID's lease generation is still Generation (what
// AcquireLease returned to the writer), and otherwise stores nothing of
// the call and fails with ErrFenced. A server that lost a lease (its
// renewals stalled past the ttl and another server took the session over)
// therefore cannot write into the session any more, whatever it still has
// in flight. Writes made for the API (create, delete) carry no fence.
type Fence struct {
	SessionID string
	// Generation is > 0.
	Generation int64
}

// FencedError is the error of a fenced call refused for stale fences. It
// matches ErrFenced.
type FencedError struct {
	// Sessions lists, once each, every session of the call whose fence was
	// stale: a group commit drops their events and stores the rest again.
	Sessions []string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("store: stale lease generation (fenced) for session(s) %s", strings.Join(e.Sessions, ", "))
}

// Is makes a *FencedError match ErrFenced.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Session is a session's record. Events are stored separately.
type Session struct {
	ID              string                     `json:"sessionId"`
	Architecture    string                     `json:"architecture"`
	AgentProfileRef string                     `json:"agentProfileReference"`
	Name            string                     `json:"name,omitempty"`
	Status          conversation.SessionStatus `json:"status"`
	SessionOptions  json.RawMessage            `json:"sessionOptions,omitempty"`
	Runtime         conversation.Runtime       `json:"runtime"`
	CreatedAt       time.Time                  `json:"createdAt"`
	LastActivity    time.Time                  `json:"lastActivity"`
	// Turns counts the turns started so far; turn n has query id "q<n>".
	Turns int64 `json:"turns"`
	// SandboxState is the sandbox backend's opaque handle for re-attaching to
	// the session's environment after a restart (socket path, pid, …).
	SandboxState json.RawMessage `json:"sandboxState,omitempty"`
	// AgentState is the architecture's opaque resume state (e.g. the agent
	// CLI's own session id).
	AgentState json.RawMessage `json:"agentState,omitempty"`
	// Owner is the id of the user who created the session ("" for sessions
	// made without users: single-user servers, or before users existed)
	// and Tenant that user's tenant. They never change.
	Owner  string `json:"owner,omitempty"`
	Tenant string `json:"tenant,omitempty"`
}

// WorkspaceFile is a workspace file saved so a session's workspace can be
// restored into a new environment.
type WorkspaceFile struct {
	Path      string    `json:"path"`
	Content   []byte    `json:"content"`
	Mode      uint32    `json:"mode,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// SessionStore holds session records.
type SessionStore interface {
	// ListSessions returns every session, newest first.
	ListSessions(ctx context.Context) ([]Session, error)
	// LoadSession returns the record or ErrNotFound.
	LoadSession(ctx context.Context, id string) (Session, error)
	// CreateSession stores a new record or returns ErrExists.
	CreateSession(ctx context.Context, s Session) error
	// UpdateSession replaces an existing record or returns ErrNotFound.
	// With a fence (which must name s.ID) the record is replaced only while
	// the writer holds the lease; otherwise it fails with ErrFenced.
	UpdateSession(ctx context.Context, s Session, fence ...Fence) error
	// DeleteSession removes the record and everything stored for the
	// session: events, transcripts, files, lease. ErrNotFound if absent.
	DeleteSession(ctx context.Context, id string) error
}

// EventStore is the durable per-session event log.
type EventStore interface {
	// AppendEvents stores events atomically: all or none. Every event must
	// carry its session id and a seq > 0; a (session, seq) pair that is
	// already stored fails the whole batch with ErrSeqConflict. Events of
	// several sessions may share one call (group commit).
	//
	// Fences (any number, of any sessions) are checked in the same
	// transaction, before seqs: when one or more is stale nothing is stored
	// and the call fails with a *FencedError naming every such session (not
	// ErrSeqConflict, though a stale writer's seqs usually conflict too), so
	// a group commit can store the other sessions' events in a second call.
	// A fence of a session without a lease (never leased, or deleted) is
	// stale.
	AppendEvents(ctx context.Context, events []conversation.Event, fence ...Fence) error
	// ReadEvents returns the session's events with seq > after, in seq order,
	// at most limit of them (limit <= 0: all).
	ReadEvents(ctx context.Context, sessionID string, after int64, limit int) ([]conversation.Event, error)
	// LastSeq returns the highest stored seq of the session, 0 if none.
	LastSeq(ctx context.Context, sessionID string) (int64, error)
}

// FileStore holds agent transcripts and workspace files.
type FileStore interface {
	// SaveTranscript stores (replaces) the agent-native transcript called
	// name (e.g. a Claude Code session .jsonl) for the session.
	SaveTranscript(ctx context.Context, sessionID, name string, data []byte) error
	// LoadTranscript returns a saved transcript or ErrNotFound.
	LoadTranscript(ctx context.Context, sessionID, name string) ([]byte, error)
	// ListTranscripts names the session's saved transcripts, sorted.
	ListTranscripts(ctx context.Context, sessionID string) ([]string, error)
	// SaveWorkspaceFile upserts a workspace file by path.
	SaveWorkspaceFile(ctx context.Context, sessionID string, f WorkspaceFile) error
	// DeleteSessionFile deletes a workspace file; deleting a missing file is
	// not an error.
	DeleteSessionFile(ctx context.Context, sessionID, path string) error
	// ListWorkspaceFiles returns the session's saved files, sorted by path.
	ListWorkspaceFiles(ctx context.Context, sessionID string) ([]WorkspaceFile, error)
}

// ProfileStore holds agent profiles kept in the store (in addition to the
// profiles folder and the built-in default).
type ProfileStore interface {
	// ListAgentProfiles returns every stored profile, sorted by id.
	ListAgentProfiles(ctx context.Context) ([]profile.Profile, error)
	// LoadAgentProfile returns a profile or ErrNotFound.
	LoadAgentProfile(ctx context.Context, id string) (profile.Profile, error)
	// SaveAgentProfile upserts a profile by id.
	SaveAgentProfile(ctx context.Context, p profile.Profile) error
}

// LeaseStore grants the right to run a session's agent: at most one holder
// per session at a time, so two servers sharing a store never run the same
// session twice. The lease's generation is its fencing token: a holder
// passes it with its writes (Fence), and the store refuses them once
// another holder has taken the lease, so a server that lost a lease
// without noticing cannot write into the session either.
type LeaseStore interface {
	// AcquireLease takes or renews the lease on sessionID for holder until
	// now+ttl and returns its generation (> 0). It fails with ErrLeaseHeld
	// while another holder's lease is unexpired.
	//
	// The generation grows (by at least one) every time the lease passes
	// to a holder other than the previous one, whether that one's lease
	// expired or was released; a renewal keeps it, and so does the same
	// holder taking the lease again after it expired or released it (no
	// one else can have written in between). Generations of a session never
	// repeat while the session exists.
	AcquireLease(ctx context.Context, sessionID, holder string, ttl time.Duration) (generation int64, err error)
	// ReleaseLease gives the lease up if holder has it; otherwise no-op.
	// The generation is kept: the next other holder's is higher.
	ReleaseLease(ctx context.Context, sessionID, holder string) error
}

// OrphanLister is implemented by stores that can list in one query the
// sessions a fleet must take over: those whose status is active
// (starting, ready, running or idle) while no holder has an unexpired
// lease on them (the server running them died, or handed them over when
// it stopped). Servers use it to find such sessions; with a store without
// it they list every session and try the active ones' leases.
type OrphanLister interface {
	OrphanedSessions(ctx context.Context) ([]string, error)
}

// Pinger is implemented by stores that can check their connection (for a
// server's health report).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Store is everything a server needs from persistence.
type Store interface {
	SessionStore
	EventStore
	FileStore
	ProfileStore
	LeaseStore
	// Close releases the store's resources.
	Close() error
}

// ValidateFences reports the first malformed fence (no session id, or a
// generation <= 0). Stores call it before writing; a malformed fence is a
// caller's bug, not ErrFenced.
func ValidateFences(fences []Fence) error {
	for _, f := range fences {
		if f.SessionID == "" {
			return errors.New("store: fence without a session id")
		}
		if f.Generation <= 0 {
			return fmt.Errorf("store: fence of session %q has generation %d, want > 0", f.SessionID, f.Generation)
		}
	}
	return nil
}

// ValidateSessionFences is ValidateFences for UpdateSession's fences, which
// must name the session being updated.
func ValidateSessionFences(sessionID string, fences []Fence) error {
	for _, f := range fences {
		if f.SessionID != sessionID {
			return fmt.Errorf("store: fence of session %q given to an update of session %q", f.SessionID, sessionID)
		}
	}
	return ValidateFences(fences)
}
