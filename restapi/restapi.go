// Package restapi holds the request and response bodies of agentd's HTTP
// API, shared by the server and the Go client. Events and blocks are in
// package conversation.
package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
)

// Error is every error body: {"error": "...", "code": "UPPER_SNAKE"}.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// CreateSessionRequest is the body of POST /api/sessions.
type CreateSessionRequest struct {
	AgentProfileRef string `json:"agentProfileRef,omitempty"`
	// Architecture may be omitted when the profile names one.
	Architecture   string          `json:"architecture,omitempty"`
	SessionOptions json.RawMessage `json:"sessionOptions,omitempty"`
	Name           string          `json:"name,omitempty"`
}

// CreateSessionResponse answers POST /api/sessions.
type CreateSessionResponse struct {
	SessionID string `json:"sessionId"`
	// Status is the new session's status (created), as runtime.status.
	Status         conversation.SessionStatus `json:"status"`
	Runtime        conversation.Runtime       `json:"runtime"`
	CreatedAt      time.Time                  `json:"createdAt"`
	SessionOptions json.RawMessage            `json:"sessionOptions"`
}

// SessionSummary is a session as listed.
type SessionSummary struct {
	SessionID             string                     `json:"sessionId"`
	Type                  string                     `json:"type"`
	AgentProfileReference string                     `json:"agentProfileReference"`
	Name                  string                     `json:"name"`
	Status                conversation.SessionStatus `json:"status"`
	LastActivity          time.Time                  `json:"lastActivity"`
	CreatedAt             time.Time                  `json:"createdAt"`
	LastSeq               int64                      `json:"lastSeq"`
	Deleted               bool                       `json:"deleted,omitempty"`
	// Owner is the id of the user who created the session, Tenant that
	// user's tenant (absent on servers without users).
	Owner  string `json:"owner,omitempty"`
	Tenant string `json:"tenant,omitempty"`
}

// SessionList answers GET /api/sessions.
type SessionList struct {
	Sessions []SessionSummary `json:"sessions"`
}

// SessionState answers GET /api/sessions/{id}.
type SessionState struct {
	SessionID             string                     `json:"sessionId"`
	Type                  string                     `json:"type"`
	AgentProfileReference string                     `json:"agentProfileReference"`
	Name                  string                     `json:"name"`
	Status                conversation.SessionStatus `json:"status"`
	CreatedAt             time.Time                  `json:"createdAt"`
	LastActivity          time.Time                  `json:"lastActivity"`
	SessionOptions        json.RawMessage            `json:"sessionOptions"`
	// Blocks are the main conversation's last blocks (a page: see
	// BlockOffset and HasMore); their texts are bounded (Block.Truncated).
	Blocks []conversation.Block `json:"blocks"`
	// BlockOffset is the index of Blocks[0] in the main conversation
	// (turns' afterBlock counts from its start).
	BlockOffset int `json:"blockOffset"`
	// TotalBlocks is the number of blocks of the main conversation.
	TotalBlocks int `json:"totalBlocks"`
	// HasMore says blocks come before Blocks[0]: ask with
	// before=Blocks[0].id for the page before.
	HasMore            bool                               `json:"hasMore"`
	Subagents          []conversation.Subagent            `json:"subagents"`
	WorkspaceFiles     []SessionFile                      `json:"workspaceFiles"`
	Runtime            conversation.Runtime               `json:"runtime"`
	LastSeq            int64                              `json:"lastSeq"`
	Usage              conversation.Usage                 `json:"usage"`
	CostUSD            float64                            `json:"costUSD"`
	Model              string                             `json:"model,omitempty"`
	PendingPermissions []conversation.PermissionRequested `json:"pendingPermissions"`
	ActiveQueryID      string                             `json:"activeQueryId,omitempty"`
	Turns              []conversation.Turn                `json:"turns"`
	// QueuedMessages wait for their turn, in order.
	QueuedMessages []conversation.QueuedMessage `json:"queuedMessages"`
	// PermissionRules are the session's "allow for this session" rules.
	PermissionRules []conversation.PermissionRule `json:"permissionRules"`
}

// SessionFile is a workspace file of GET /api/sessions/{id}: what the log
// says of it, and with ?include=content its content when it is text within
// the bounds (ContentOmitted says why not otherwise: "too_large",
// "binary", "total_limit", "unreadable").
type SessionFile struct {
	Path           string  `json:"path"`
	Size           *int64  `json:"size,omitempty"`
	SHA256         string  `json:"sha256,omitempty"`
	Content        *string `json:"content,omitempty"`
	ContentOmitted string  `json:"contentOmitted,omitempty"`
}

// Success is the body of calls that only succeed.
type Success struct {
	Success bool `json:"success"`
}

// SessionSuccess answers calls on one session that only succeed (DELETE).
type SessionSuccess struct {
	Success   bool   `json:"success"`
	SessionID string `json:"sessionId"`
}

// UpdateOptionsRequest is the body of PATCH /api/sessions/{id}/options:
// the keys to set (a null value removes its key).
type UpdateOptionsRequest struct {
	SessionOptions json.RawMessage `json:"sessionOptions"`
}

// UpdateOptionsResponse answers it with the session's options after the
// change.
type UpdateOptionsResponse struct {
	Success        bool            `json:"success"`
	SessionID      string          `json:"sessionId"`
	SessionOptions json.RawMessage `json:"sessionOptions"`
}

// SyncFiles counts what POST /api/sessions/{id}/sync did with the
// workspace's copies in the store.
type SyncFiles struct {
	Saved     int `json:"saved"`
	Deleted   int `json:"deleted"`
	Unchanged int `json:"unchanged"`
	// Skipped: files larger than the server's copy bound (not copied).
	Skipped int `json:"skipped"`
}

// SyncResponse answers POST /api/sessions/{id}/sync.
type SyncResponse struct {
	Success   bool      `json:"success"`
	SessionID string    `json:"sessionId"`
	Files     SyncFiles `json:"files"`
	// Transcripts names the agent transcripts the store holds.
	Transcripts []string `json:"transcripts"`
}

// TerminateEnvironmentResponse answers POST
// /api/sessions/{id}/environment/terminate.
type TerminateEnvironmentResponse struct {
	Success   bool                 `json:"success"`
	SessionID string               `json:"sessionId"`
	Runtime   conversation.Runtime `json:"runtime"`
}

// MessageRequest is the body of POST /api/sessions/{id}/messages. Its
// "content" is either a string (Content) or a list of content parts
// (Parts): text, images and files.
type MessageRequest struct {
	// Content is the message's text when "content" is a string.
	Content string `json:"content"`
	// Parts is "content" when it is a list; MarshalJSON then sends it in
	// place of Content.
	Parts []ContentPart `json:"-"`
	// Queue false refuses the message with 409 SESSION_BUSY while a turn
	// runs; by default (absent or true) it waits in the session's queue.
	Queue *bool `json:"queue,omitempty"`
}

// ContentPart is one part of a message's content. Type "text" has Text;
// "image" has exactly one of Source (base64 data), URL (a data: URL) and
// Artifact (the SHA-256 of an artifact the session holds); "file" has Name
// (a workspace path) and Data (base64), or Artifact.
type ContentPart struct {
	Type     string         `json:"type"`
	Text     string         `json:"text,omitempty"`
	Source   *ContentSource `json:"source,omitempty"`
	URL      string         `json:"url,omitempty"`
	Artifact string         `json:"artifact,omitempty"`
	Name     string         `json:"name,omitempty"`
	Data     string         `json:"data,omitempty"`
	// MediaType is a file's media type (default: from its name).
	MediaType string `json:"mediaType,omitempty"`
}

// ContentSource is an image's bytes, as Anthropic's Messages API has them:
// type "base64", the media type (mediaType, or media_type) and the data.
type ContentSource struct {
	Type           string `json:"type"`
	MediaType      string `json:"mediaType,omitempty"`
	MediaTypeSnake string `json:"media_type,omitempty"`
	Data           string `json:"data"`
}

// ContentMediaType is the source's media type, whichever spelling set it.
func (c ContentSource) ContentMediaType() string {
	if c.MediaType != "" {
		return c.MediaType
	}
	return c.MediaTypeSnake
}

type messageRequestJSON struct {
	Content json.RawMessage `json:"content"`
	Queue   *bool           `json:"queue,omitempty"`
}

// UnmarshalJSON takes "content" as a string or as a list of parts.
func (m *MessageRequest) UnmarshalJSON(data []byte) error {
	var raw messageRequestJSON
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	*m = MessageRequest{Queue: raw.Queue}
	c := bytes.TrimSpace(raw.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
	case c[0] == '"':
		return json.Unmarshal(c, &m.Content)
	case c[0] == '[':
		if err := json.Unmarshal(c, &m.Parts); err != nil {
			return fmt.Errorf("content: %w", err)
		}
	default:
		return errors.New("content must be a string or a list of content parts")
	}
	return nil
}

// MarshalJSON sends Parts as "content" when there are any.
func (m MessageRequest) MarshalJSON() ([]byte, error) {
	var c any = m.Content
	if len(m.Parts) > 0 {
		c = m.Parts
	}
	return json.Marshal(struct {
		Content any   `json:"content"`
		Queue   *bool `json:"queue,omitempty"`
	}{c, m.Queue})
}

// MessageResponse answers it: the turn the message started (queryId), or
// its place in the queue (queued, messageId).
type MessageResponse struct {
	Success   bool   `json:"success"`
	SessionID string `json:"sessionId"`
	QueryID   string `json:"queryId,omitempty"`
	Queued    bool   `json:"queued,omitempty"`
	MessageID string `json:"messageId,omitempty"`
}

// QueuedMessageList answers GET /api/sessions/{id}/queue.
type QueuedMessageList struct {
	Messages []conversation.QueuedMessage `json:"messages"`
}

// RenameSessionRequest is the body of PATCH /api/sessions/{id}.
type RenameSessionRequest struct {
	// Name is the new name; "" clears it.
	Name *string `json:"name"`
}

// PermissionAnswer is the body of POST …/permissions/{requestId}.
type PermissionAnswer struct {
	Behavior     conversation.PermissionBehavior `json:"behavior"`
	Message      string                          `json:"message,omitempty"`
	UpdatedInput json.RawMessage                 `json:"updatedInput,omitempty"`
	// Scope "session" (with allow) also allows every later request for the
	// same tool in the session; "once" (the default) answers this one.
	Scope conversation.PermissionScope `json:"scope,omitempty"`
}

// FileVersion is a file's content in a workspace snapshot: its sha256
// (absent when the content was not kept, e.g. larger than 1 MiB) and size.
type FileVersion struct {
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size"`
}

// ChangedFile is a file a turn (or the session) changed. Fetch contents
// with GET /api/sessions/{id}/changes/content/{sha256}.
type ChangedFile struct {
	Path string `json:"path"`
	// Change is "added", "modified" or "deleted".
	Change string       `json:"change"`
	Before *FileVersion `json:"before,omitempty"`
	After  *FileVersion `json:"after,omitempty"`
}

// TurnChanges are the changes made while a turn ran.
type TurnChanges struct {
	QueryID string        `json:"queryId"`
	Files   []ChangedFile `json:"files"`
}

// SessionChanges answers GET /api/sessions/{id}/changes.
type SessionChanges struct {
	Turns   []TurnChanges `json:"turns"`
	Overall []ChangedFile `json:"overall"`
}

// FileEntry is a workspace entry.
type FileEntry struct {
	Path    string      `json:"path"`
	Size    int64       `json:"size"`
	Mode    fs.FileMode `json:"mode"`
	IsDir   bool        `json:"isDir"`
	ModTime time.Time   `json:"modTime"`
}

// FileList answers GET /api/sessions/{id}/files.
type FileList struct {
	Files []FileEntry `json:"files"`
}

// EventPage answers GET /api/sessions/{id}/events as JSON.
type EventPage struct {
	Events  []conversation.Event `json:"events"`
	LastSeq int64                `json:"lastSeq"`
}

// ProfileList answers GET /api/agent-profiles.
type ProfileList struct {
	Profiles []profile.Summary `json:"profiles"`
}

// ArchitectureInfo describes an architecture.
type ArchitectureInfo struct {
	Name      string   `json:"name"`
	Aliases   []string `json:"aliases"`
	Available bool     `json:"available"`
	Version   string   `json:"version,omitempty"`
	Problem   string   `json:"problem,omitempty"`
}

// ArchitectureList answers GET /api/architectures.
type ArchitectureList struct {
	Architectures []ArchitectureInfo `json:"architectures"`
}

// SandboxList answers GET /api/sandboxes: the sandbox backends this
// server has, what each keeps an agent from (docs/security.md's table, as
// data), its limits and its warm pools.
type SandboxList struct {
	Sandboxes []SandboxInfo `json:"sandboxes"`
}

// SandboxInfo describes one sandbox backend.
type SandboxInfo struct {
	Name string `json:"name"`
	// Default: new sessions run in this backend (--sandbox).
	Default bool `json:"default"`
	// SurvivesRestart: environments keep running across a server restart
	// and are re-attached.
	SurvivesRestart bool              `json:"survivesRestart"`
	Limits          SandboxLimits     `json:"limits"`
	Protections     []SandboxProtects `json:"protections"`
	Pools           []WarmPool        `json:"pools"`
}

// SandboxLimits are each environment's default limits (0: none) and how
// they are enforced.
type SandboxLimits struct {
	MemoryBytes int64  `json:"memoryBytes"`
	Pids        int64  `json:"pids"`
	CPUPercent  int    `json:"cpuPercent"`
	Enforcement string `json:"enforcement"`
}

// SandboxProtects says whether a backend keeps an agent from a threat:
// otherWorkspaces, hostFiles, serverEnvironment, writeOutside,
// serverPort, network, providerKey, exhaustion, leftovers, signal.
type SandboxProtects struct {
	Threat    string `json:"threat"`
	Protected bool   `json:"protected"`
	Detail    string `json:"detail"`
}

// WarmPool is the state of a warm pool: environments of one kind (image
// and limits) started ahead, which new sessions claim instead of waiting
// for a start.
type WarmPool struct {
	Key         string   `json:"key"`
	Image       string   `json:"image,omitempty"`
	Profiles    []string `json:"profiles"`
	Size        int      `json:"size"`
	Ready       int      `json:"ready"`
	Starting    bool     `json:"starting"`
	Claims      int64    `json:"claims"`
	Misses      int64    `json:"misses"`
	Failures    int64    `json:"failures"`
	LastError   string   `json:"lastError,omitempty"`
	LastStartMS int64    `json:"lastStartMs"`
}

// AuthInfo answers GET /api/auth.
type AuthInfo struct {
	Required bool `json:"required"`
	// Methods are the ways to authenticate: "token" (an API token or the
	// server's --api-key, pasted) and "oidc" (sign in at the provider:
	// authorization code with PKCE).
	Methods []string `json:"methods,omitempty"`
	// OIDC describes the provider when "oidc" is a method.
	OIDC *OIDCInfo `json:"oidc,omitempty"`
	// MultiUser is true when the server keeps users (tokens, ownership,
	// shares, per-user keys and budgets).
	MultiUser bool `json:"multiUser,omitempty"`
}

// OIDCInfo is what a UI needs to sign in at the OpenID Connect provider:
// it sends the browser to AuthorizationEndpoint (code flow with PKCE) and
// hands the code to POST /api/auth/oidc/token.
type OIDCInfo struct {
	Issuer                string   `json:"issuer"`
	ClientID              string   `json:"clientId"`
	AuthorizationEndpoint string   `json:"authorizationEndpoint,omitempty"`
	Scopes                []string `json:"scopes"`
}

// Health answers GET /health.
type Health struct {
	// Status is "ok", or "degraded" (HTTP 503) when the store or the
	// artifacts' object store does not answer or the bus is disconnected.
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
	// Node is the server's name in session leases (a fleet's nodes each
	// have their own).
	Node  string           `json:"node,omitempty"`
	Store *ComponentHealth `json:"store,omitempty"`
	Bus   *ComponentHealth `json:"bus,omitempty"`
	// Artifacts is where artifact content is kept: kind "store" (in the
	// store's database), "s3" (an object store, url without credentials),
	// or "none" (the store keeps no artifacts).
	Artifacts *ComponentHealth `json:"artifacts,omitempty"`
}

// ComponentHealth is the state of a server's store or bus.
type ComponentHealth struct {
	// Kind: "sqlite", "postgres", "custom" (a store); "nats" or "none" (the
	// bus); "store", "s3" or "none" (artifacts).
	Kind string `json:"kind"`
	// Status: "ok", "error", "disconnected", "off".
	Status string `json:"status"`
	URL    string `json:"url,omitempty"`
	Error  string `json:"error,omitempty"`
}

// WebSocket frames of /api/ws.

// ClientFrame is a client → server frame.
type ClientFrame struct {
	Op        string          `json:"op"`
	SessionID string          `json:"sessionId,omitempty"`
	After     *int64          `json:"after,omitempty"`
	ID        json.RawMessage `json:"id,omitempty"`
}

// ServerFrame is a server → client frame: ack, event, error, pong or
// sessions.
type ServerFrame struct {
	Op      string              `json:"op"`
	ID      json.RawMessage     `json:"id,omitempty"`
	OK      bool                `json:"ok,omitempty"`
	Error   *Error              `json:"error,omitempty"`
	LastSeq *int64              `json:"lastSeq,omitempty"`
	Event   *conversation.Event `json:"event,omitempty"`
	Session *SessionSummary     `json:"session,omitempty"`
}
