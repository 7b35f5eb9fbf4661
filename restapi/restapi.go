// Package restapi holds the request and response bodies of agentd's HTTP
// API, shared by the server and the Go client. Events and blocks are in
// package conversation.
package restapi

import (
	"encoding/json"
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
	SessionID      string               `json:"sessionId"`
	Runtime        conversation.Runtime `json:"runtime"`
	CreatedAt      time.Time            `json:"createdAt"`
	SessionOptions json.RawMessage      `json:"sessionOptions"`
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
}

// SessionList answers GET /api/sessions.
type SessionList struct {
	Sessions []SessionSummary `json:"sessions"`
}

// SessionState answers GET /api/sessions/{id}.
type SessionState struct {
	SessionID             string                             `json:"sessionId"`
	Type                  string                             `json:"type"`
	AgentProfileReference string                             `json:"agentProfileReference"`
	Name                  string                             `json:"name"`
	Status                conversation.SessionStatus         `json:"status"`
	CreatedAt             time.Time                          `json:"createdAt"`
	LastActivity          time.Time                          `json:"lastActivity"`
	SessionOptions        json.RawMessage                    `json:"sessionOptions"`
	Blocks                []conversation.Block               `json:"blocks"`
	Subagents             []conversation.Subagent            `json:"subagents"`
	WorkspaceFiles        []conversation.WorkspaceFile       `json:"workspaceFiles"`
	Runtime               conversation.Runtime               `json:"runtime"`
	LastSeq               int64                              `json:"lastSeq"`
	Usage                 conversation.Usage                 `json:"usage"`
	CostUSD               float64                            `json:"costUSD"`
	Model                 string                             `json:"model,omitempty"`
	PendingPermissions    []conversation.PermissionRequested `json:"pendingPermissions"`
	ActiveQueryID         string                             `json:"activeQueryId,omitempty"`
	Turns                 []conversation.Turn                `json:"turns"`
}

// Success is the body of calls that only succeed.
type Success struct {
	Success bool `json:"success"`
}

// MessageRequest is the body of POST /api/sessions/{id}/messages.
type MessageRequest struct {
	Content string `json:"content"`
}

// MessageResponse answers it.
type MessageResponse struct {
	Success   bool   `json:"success"`
	SessionID string `json:"sessionId"`
	QueryID   string `json:"queryId"`
}

// PermissionAnswer is the body of POST …/permissions/{requestId}.
type PermissionAnswer struct {
	Behavior     conversation.PermissionBehavior `json:"behavior"`
	Message      string                          `json:"message,omitempty"`
	UpdatedInput json.RawMessage                 `json:"updatedInput,omitempty"`
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
}

// Health answers GET /health.
type Health struct {
	// Status is "ok", or "degraded" (HTTP 503) when the store does not
	// answer or the bus is disconnected.
	Status  string `json:"status"`
	Version string `json:"version,omitempty"`
	// Node is the server's name in session leases (a fleet's nodes each
	// have their own).
	Node  string           `json:"node,omitempty"`
	Store *ComponentHealth `json:"store,omitempty"`
	Bus   *ComponentHealth `json:"bus,omitempty"`
}

// ComponentHealth is the state of a server's store or bus.
type ComponentHealth struct {
	// Kind: "sqlite", "postgres", "custom" (a store); "nats" or "none" (the bus).
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
