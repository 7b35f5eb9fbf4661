// Package client is the Go client of agentd's API: REST calls, and an event
// stream over the WebSocket that resumes by itself from its last seq after
// a dropped connection or a server restart, never delivering an event twice.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/restapi"
)

// Client talks to one agentd server. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	apiKey string
	http   *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithAPIKey sends the key as a bearer token.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// WithHTTPClient replaces http.DefaultClient.
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// New returns a client for the server at baseURL (e.g. http://127.0.0.1:8080).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: bad server URL %q", baseURL)
	}
	c := &Client{base: u, http: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Error is an API error response.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("agentd: %s (%d %s)", e.Message, e.Status, e.Code)
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

func (c *Client) url(path string, q url.Values) string {
	u := *c.base
	u.Path = c.base.Path + path
	if q != nil {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ctype := "application/json"
	if raw, ok := in.(rawBody); ok {
		body, ctype = bytes.NewReader(raw), "application/octet-stream"
	} else if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), body)
	if err != nil {
		return err
	}
	if in != nil || (method != http.MethodGet && method != http.MethodHead) {
		// Every state-changing request says JSON, also without a body.
		req.Header.Set("Content-Type", ctype)
	}
	c.auth(req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e restapi.Error
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			e = restapi.Error{Error: strings.TrimSpace(string(data)), Code: "HTTP_" + strconv.Itoa(resp.StatusCode)}
		}
		return &Error{Status: resp.StatusCode, Code: e.Code, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("agentd: decode %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) auth(h http.Header) {
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
}

// Health checks the server.
func (c *Client) Health(ctx context.Context) (restapi.Health, error) {
	var h restapi.Health
	return h, c.do(ctx, "GET", "/health", nil, nil, &h)
}

// Profiles lists agent profiles.
func (c *Client) Profiles(ctx context.Context) ([]profile.Summary, error) {
	var out restapi.ProfileList
	return out.Profiles, c.do(ctx, "GET", "/api/agent-profiles", nil, nil, &out)
}

// Architectures lists architectures and their availability.
func (c *Client) Architectures(ctx context.Context) ([]restapi.ArchitectureInfo, error) {
	var out restapi.ArchitectureList
	return out.Architectures, c.do(ctx, "GET", "/api/architectures", nil, nil, &out)
}

// Sandboxes lists the server's sandbox backends: what each isolates, its
// limits and warm pools.
func (c *Client) Sandboxes(ctx context.Context) ([]restapi.SandboxInfo, error) {
	var out restapi.SandboxList
	return out.Sandboxes, c.do(ctx, "GET", "/api/sandboxes", nil, nil, &out)
}

// CreateSession creates a session.
func (c *Client) CreateSession(ctx context.Context, req restapi.CreateSessionRequest) (restapi.CreateSessionResponse, error) {
	var out restapi.CreateSessionResponse
	return out, c.do(ctx, "POST", "/api/sessions", nil, req, &out)
}

// Sessions lists sessions, newest first.
func (c *Client) Sessions(ctx context.Context) ([]restapi.SessionSummary, error) {
	var out restapi.SessionList
	return out.Sessions, c.do(ctx, "GET", "/api/sessions", nil, nil, &out)
}

// Session returns a session's state, with the main conversation's last
// blocks (the server's default page: SessionState.HasMore says whether
// blocks come before; SessionPage reads them).
func (c *Client) Session(ctx context.Context, id string) (restapi.SessionState, error) {
	var out restapi.SessionState
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id), nil, nil, &out)
}

// SessionPage returns a session's state with at most limit blocks (0: the
// server's default) of the main conversation, those before block id
// before ("": the last ones).
func (c *Client) SessionPage(ctx context.Context, id string, limit int, before string) (restapi.SessionState, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if before != "" {
		q.Set("before", before)
	}
	var out restapi.SessionState
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id), q, nil, &out)
}

// Send sends a user message: it starts a turn, or, while one runs, waits
// in the session's queue (the answer then has Queued and MessageID).
func (c *Client) Send(ctx context.Context, id, content string) (restapi.MessageResponse, error) {
	var out restapi.MessageResponse
	return out, c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/messages", nil, restapi.MessageRequest{Content: content}, &out)
}

// SendMessage sends a user message with content parts (text, images,
// files: restapi.MessageRequest's Parts), queued as Send's.
func (c *Client) SendMessage(ctx context.Context, id string, msg restapi.MessageRequest) (restapi.MessageResponse, error) {
	var out restapi.MessageResponse
	return out, c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/messages", nil, msg, &out)
}

// SendNow sends a user message that must start a turn now: while a turn
// runs it fails with code SESSION_BUSY instead of queueing.
func (c *Client) SendNow(ctx context.Context, id, content string) (restapi.MessageResponse, error) {
	var out restapi.MessageResponse
	no := false
	return out, c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/messages", nil, restapi.MessageRequest{Content: content, Queue: &no}, &out)
}

// Queue lists the messages waiting for their turn.
func (c *Client) Queue(ctx context.Context, id string) ([]conversation.QueuedMessage, error) {
	var out restapi.QueuedMessageList
	return out.Messages, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/queue", nil, nil, &out)
}

// CancelQueued drops a queued message.
func (c *Client) CancelQueued(ctx context.Context, id, messageID string) error {
	return c.do(ctx, "DELETE", "/api/sessions/"+url.PathEscape(id)+"/queue/"+url.PathEscape(messageID), nil, nil, nil)
}

// Rename sets a session's name.
func (c *Client) Rename(ctx context.Context, id, name string) (restapi.SessionSummary, error) {
	var out restapi.SessionSummary
	return out, c.do(ctx, "PATCH", "/api/sessions/"+url.PathEscape(id), nil, restapi.RenameSessionRequest{Name: &name}, &out)
}

// Changes returns what each turn, and the session, changed in the workspace.
func (c *Client) Changes(ctx context.Context, id string) (restapi.SessionChanges, error) {
	var out restapi.SessionChanges
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/changes", nil, nil, &out)
}

// ChangedContent returns a file content of the changes view by its sha256.
func (c *Client) ChangedContent(ctx context.Context, id, sha256 string) ([]byte, error) {
	var out []byte
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/changes/content/"+url.PathEscape(sha256), nil, nil, &out)
}

// Artifact returns an artifact's bytes by its sha256 (a large output kept
// whole, an image, a file: the ref's SHA256). The whole artifact is read
// into memory; for ranges, GET the route with a Range header.
func (c *Client) Artifact(ctx context.Context, id, sha256 string) ([]byte, error) {
	var out []byte
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/artifacts/"+url.PathEscape(sha256), nil, nil, &out)
}

// Archive returns the workspace as an archive, format "zip" or "tar.gz".
func (c *Client) Archive(ctx context.Context, id, format string) ([]byte, error) {
	var out []byte
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/archive", url.Values{"format": {format}}, nil, &out)
}

// Interrupt stops the running turn.
func (c *Client) Interrupt(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/interrupt", nil, struct{}{}, nil)
}

// AnswerPermission allows or denies a permission request.
func (c *Client) AnswerPermission(ctx context.Context, id, requestID string, a restapi.PermissionAnswer) error {
	return c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/permissions/"+url.PathEscape(requestID), nil, a, nil)
}

// DeleteSession terminates a session; purge also deletes its history.
func (c *Client) DeleteSession(ctx context.Context, id string, purge bool) error {
	q := url.Values{}
	if purge {
		q.Set("purge", "true")
	}
	return c.do(ctx, "DELETE", "/api/sessions/"+url.PathEscape(id), q, nil, nil)
}

// UpdateOptions changes a session's options (opts is a JSON object; a null
// value removes its key) and returns them after the change. Keys the
// session's architecture does not read fail with code UNKNOWN_OPTION.
func (c *Client) UpdateOptions(ctx context.Context, id string, opts json.RawMessage) (json.RawMessage, error) {
	var out restapi.UpdateOptionsResponse
	err := c.do(ctx, "PATCH", "/api/sessions/"+url.PathEscape(id)+"/options", nil, restapi.UpdateOptionsRequest{SessionOptions: opts}, &out)
	return out.SessionOptions, err
}

// Sync persists the session's workspace and agent transcript to the
// server's store now.
func (c *Client) Sync(ctx context.Context, id string) (restapi.SyncResponse, error) {
	var out restapi.SyncResponse
	return out, c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/sync", nil, nil, &out)
}

// TerminateEnvironment stops the session's environment and keeps the
// session; the next message starts a new one.
func (c *Client) TerminateEnvironment(ctx context.Context, id string) (conversation.Runtime, error) {
	var out restapi.TerminateEnvironmentResponse
	return out.Runtime, c.do(ctx, "POST", "/api/sessions/"+url.PathEscape(id)+"/environment/terminate", nil, nil, &out)
}

// Files lists a session's workspace.
func (c *Client) Files(ctx context.Context, id string) ([]restapi.FileEntry, error) {
	var out restapi.FileList
	return out.Files, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/files", nil, nil, &out)
}

// File returns a workspace file's bytes.
func (c *Client) File(ctx context.Context, id, path string) ([]byte, error) {
	var out []byte
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/files/"+path, nil, nil, &out)
}

// PutFile writes a workspace file (created or replaced, folders made).
func (c *Client) PutFile(ctx context.Context, id, path string, data []byte) (restapi.FileEntry, error) {
	var out restapi.FileEntry
	return out, c.do(ctx, "PUT", "/api/sessions/"+url.PathEscape(id)+"/files/"+path, nil, rawBody(data), &out)
}

// rawBody is a request body sent as it is (application/octet-stream).
type rawBody []byte

// Events returns a page of events after a seq.
func (c *Client) Events(ctx context.Context, id string, after int64, limit int) (restapi.EventPage, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out restapi.EventPage
	return out, c.do(ctx, "GET", "/api/sessions/"+url.PathEscape(id)+"/events", q, nil, &out)
}

// Reduce fetches every event of a session and reduces them.
func (c *Client) Reduce(ctx context.Context, id string) (conversation.State, error) {
	r := conversation.NewReducer()
	for {
		page, err := c.Events(ctx, id, r.LastSeq(), 10000)
		if err != nil {
			return conversation.State{}, err
		}
		for _, e := range page.Events {
			_ = r.Apply(e)
		}
		if len(page.Events) == 0 || r.LastSeq() >= page.LastSeq {
			return r.State(), nil
		}
	}
}
