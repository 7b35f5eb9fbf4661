package conversation

import (
	"encoding/json"
	"fmt"
	"time"
)

// EventType names an event. The set is closed: the constants below are every
// type agentd emits.
type EventType string

const (
	TypeBlockUpsert        EventType = "block:upsert"
	TypeBlockDelta         EventType = "block:delta"
	TypeMetadataUpdate     EventType = "metadata:update"
	TypeStatus             EventType = "status"
	TypeQueryStarted       EventType = "query:started"
	TypeQueryCompleted     EventType = "query:completed"
	TypeQueryFailed        EventType = "query:failed"
	TypePermissionRequest  EventType = "permission:requested"
	TypePermissionResolved EventType = "permission:resolved"
	TypeFileCreated        EventType = "file:created"
	TypeFileModified       EventType = "file:modified"
	TypeFileDeleted        EventType = "file:deleted"
	TypeSubagentSpawned    EventType = "subagent:spawned"
	TypeSubagentCompleted  EventType = "subagent:completed"
	TypeError              EventType = "error"
	TypeLog                EventType = "log"
	TypeSessionIdle        EventType = "session:idle"
	// A message sent while a turn ran waits in the session's queue
	// (queued), until it starts its turn (dequeued) or a client drops it
	// (cancelled).
	TypeMessageQueued    EventType = "message:queued"
	TypeMessageDequeued  EventType = "message:dequeued"
	TypeMessageCancelled EventType = "message:cancelled"
	// The session's options changed (PATCH /api/sessions/{id}/options).
	TypeOptionsUpdate EventType = "options:update"
)

// EventTypes lists every event type, in the order the contract names them.
var EventTypes = []EventType{
	TypeBlockUpsert, TypeBlockDelta, TypeMetadataUpdate, TypeStatus,
	TypeQueryStarted, TypeQueryCompleted, TypeQueryFailed,
	TypePermissionRequest, TypePermissionResolved,
	TypeFileCreated, TypeFileModified, TypeFileDeleted,
	TypeSubagentSpawned, TypeSubagentCompleted,
	TypeError, TypeLog, TypeSessionIdle,
	TypeMessageQueued, TypeMessageDequeued, TypeMessageCancelled,
	TypeOptionsUpdate,
}

// Valid reports whether t is one of the known event types.
func (t EventType) Valid() bool {
	for _, k := range EventTypes {
		if k == t {
			return true
		}
	}
	return false
}

// Source says which side of agentd produced an event.
type Source string

const (
	SourceRunner Source = "runner" // converted from the agent's own output
	SourceServer Source = "server" // produced by agentd itself (status, files, permissions)
	SourceClient Source = "client" // caused directly by a client request (user messages)
)

// MainConversation is the conversationId of the top-level conversation.
// Subagent conversations use the parent tool_use id.
const MainConversation = "main"

// Context is the envelope's context object.
type Context struct {
	SessionID      string    `json:"sessionId"`
	ConversationID string    `json:"conversationId"`
	Source         Source    `json:"source"`
	Timestamp      time.Time `json:"timestamp"`
	// Actor is the authenticated principal on whose behalf the event was
	// produced ("local" when auth is off), or nil for events no principal
	// caused (e.g. an idle timeout).
	Actor *string `json:"actor"`
}

// Event is the envelope carried by every transport and stored in the log.
// Seq is 0 until the event log assigns it on durable append.
type Event struct {
	Seq     int64           `json:"seq"`
	Type    EventType       `json:"type"`
	Payload json.RawMessage `json:"payload"`
	Context Context         `json:"context"`
}

// Payload is implemented by every typed event payload.
type Payload interface {
	EventType() EventType
}

// NewEvent builds an unsequenced event for the main conversation with the
// given payload. The caller (or the event log) fills in the session id,
// timestamp, source and actor it does not set itself.
func NewEvent(p Payload) Event {
	var v any = p
	if u, ok := p.(BlockUpsert); ok {
		// What BlockUpsert.MarshalJSON writes, without the method call and
		// the check of its output that json.Marshal would add (upserts are
		// many).
		v = upsertJSON{partialBlock(u.Block)}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		// Payload types are plain data; a marshal failure is a programming error.
		panic(fmt.Sprintf("conversation: marshal %T: %v", p, err))
	}
	return Event{Type: p.EventType(), Payload: raw, Context: Context{ConversationID: MainConversation}}
}

// In returns a copy of e addressed to conversation id (main when empty).
func (e Event) In(conversationID string) Event {
	if conversationID == "" {
		conversationID = MainConversation
	}
	e.Context.ConversationID = conversationID
	return e
}

// At returns a copy of e stamped with t (used by converters, which take
// timestamps from the agent's output, never from the clock).
func (e Event) At(t time.Time) Event {
	e.Context.Timestamp = t
	return e
}

// From returns a copy of e with the given source.
func (e Event) From(s Source) Event {
	e.Context.Source = s
	return e
}

// Decode returns the typed payload of e.
func (e Event) Decode() (Payload, error) {
	var p Payload
	switch e.Type {
	case TypeBlockUpsert:
		p = &BlockUpsert{}
	case TypeBlockDelta:
		p = &BlockDelta{}
	case TypeMetadataUpdate:
		p = &MetadataUpdate{}
	case TypeStatus:
		p = &StatusChange{}
	case TypeQueryStarted:
		p = &QueryStarted{}
	case TypeQueryCompleted:
		p = &QueryCompleted{}
	case TypeQueryFailed:
		p = &QueryFailed{}
	case TypePermissionRequest:
		p = &PermissionRequested{}
	case TypePermissionResolved:
		p = &PermissionResolved{}
	case TypeFileCreated, TypeFileModified, TypeFileDeleted:
		p = &FileChange{Kind: e.Type}
	case TypeSubagentSpawned:
		p = &SubagentSpawned{}
	case TypeSubagentCompleted:
		p = &SubagentCompleted{}
	case TypeError:
		p = &ErrorEvent{}
	case TypeLog:
		p = &LogEvent{}
	case TypeSessionIdle:
		p = &SessionIdleEvent{}
	case TypeMessageQueued:
		p = &MessageQueued{}
	case TypeMessageDequeued:
		p = &MessageDequeued{}
	case TypeMessageCancelled:
		p = &MessageCancelled{}
	case TypeOptionsUpdate:
		p = &OptionsUpdate{}
	default:
		return nil, fmt.Errorf("unknown event type %q", e.Type)
	}
	if len(e.Payload) > 0 && string(e.Payload) != "null" {
		if err := json.Unmarshal(e.Payload, p); err != nil {
			return nil, fmt.Errorf("decode %s payload: %w", e.Type, err)
		}
	}
	return p, nil
}

// BlockUpsert creates a block, or shallow-merges the fields present in Block
// into the existing block with the same id.
type BlockUpsert struct {
	Block Block `json:"block"`
}

// BlockDelta appends Delta to the block's text: Content, or Output for
// tool_result blocks.
type BlockDelta struct {
	BlockID string `json:"blockId"`
	Delta   string `json:"delta"`
}

// Usage counts tokens. In metadata:update it is an increment; the reducer
// sums increments into the session's totals.
type Usage struct {
	InputTokens              int64 `json:"inputTokens"`
	OutputTokens             int64 `json:"outputTokens"`
	CacheReadInputTokens     int64 `json:"cacheReadInputTokens,omitempty"`
	CacheCreationInputTokens int64 `json:"cacheCreationInputTokens,omitempty"`
}

// Add returns u + o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		InputTokens:              u.InputTokens + o.InputTokens,
		OutputTokens:             u.OutputTokens + o.OutputTokens,
		CacheReadInputTokens:     u.CacheReadInputTokens + o.CacheReadInputTokens,
		CacheCreationInputTokens: u.CacheCreationInputTokens + o.CacheCreationInputTokens,
	}
}

// MetadataUpdate reports usage and cost increments, and the model in use.
type MetadataUpdate struct {
	Usage   *Usage   `json:"usage,omitempty"`
	CostUSD *float64 `json:"costUSD,omitempty"`
	Model   string   `json:"model,omitempty"`
}

// StatusChange reports a session lifecycle transition.
type StatusChange struct {
	Status  SessionStatus `json:"status"`
	Runtime Runtime       `json:"runtime"`
	Reason  string        `json:"reason,omitempty"`
}

// QueryStarted opens a turn.
type QueryStarted struct {
	QueryID string `json:"queryId"`
	Content string `json:"content,omitempty"`
}

// QueryCompleted ends a turn that finished (possibly by interrupt).
type QueryCompleted struct {
	QueryID     string `json:"queryId"`
	Interrupted bool   `json:"interrupted,omitempty"`
	DurationMs  int64  `json:"durationMs,omitempty"`
	// Result is the agent's final answer when its protocol reports one.
	Result string `json:"result,omitempty"`
}

// QueryFailed ends a turn that failed. Error names the cause.
type QueryFailed struct {
	QueryID     string `json:"queryId"`
	Error       string `json:"error"`
	Code        string `json:"code,omitempty"`
	Interrupted bool   `json:"interrupted,omitempty"`
	DurationMs  int64  `json:"durationMs,omitempty"`
}

// PermissionRequested asks a client to allow or deny a tool call.
type PermissionRequested struct {
	RequestID string          `json:"requestId"`
	ToolName  string          `json:"toolName"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"toolUseId,omitempty"`
	ExpiresAt time.Time       `json:"expiresAt"`
}

// PermissionBehavior is a permission decision.
type PermissionBehavior string

const (
	Allow PermissionBehavior = "allow"
	Deny  PermissionBehavior = "deny"
)

// ResolvedBy says who decided a permission request.
type ResolvedBy string

const (
	ByUser      ResolvedBy = "user"      // a client answered through the API
	ByPolicy    ResolvedBy = "policy"    // the profile's allowed/disallowed tools decided
	ByTimeout   ResolvedBy = "timeout"   // nobody answered in time; denied
	ByInterrupt ResolvedBy = "interrupt" // the turn ended first; denied
	ByRule      ResolvedBy = "rule"      // a session rule (an earlier "allow for this session") decided
)

// PermissionScope says how far an answer reaches: this request only, or
// every later request for the same tool in the session.
type PermissionScope string

const (
	ScopeOnce    PermissionScope = "once"
	ScopeSession PermissionScope = "session"
)

// PermissionResolved closes a permission request.
type PermissionResolved struct {
	RequestID    string             `json:"requestId"`
	Behavior     PermissionBehavior `json:"behavior"`
	By           ResolvedBy         `json:"by"`
	Message      string             `json:"message,omitempty"`
	UpdatedInput json.RawMessage    `json:"updatedInput,omitempty"`
	// ToolName is the requested tool (set on answers that add a rule and
	// on decisions by a rule).
	ToolName string `json:"toolName,omitempty"`
	// Scope "session" on an allow adds a session rule: later requests for
	// ToolName are allowed without asking (resolved by "rule").
	Scope PermissionScope `json:"scope,omitempty"`
}

// FileChange reports a workspace change. Kind is the event type and is not
// serialised.
type FileChange struct {
	Kind   EventType `json:"-"`
	Path   string    `json:"path"`
	Size   *int64    `json:"size,omitempty"`
	SHA256 string    `json:"sha256,omitempty"`
}

// EventType implements Payload.
func (f FileChange) EventType() EventType {
	if f.Kind == "" {
		return TypeFileModified
	}
	return f.Kind
}

// SubagentSpawned opens a subagent conversation (conversationId = ToolUseID).
type SubagentSpawned struct {
	ToolUseID    string `json:"toolUseId"`
	AgentID      string `json:"agentId,omitempty"`
	Prompt       string `json:"prompt"`
	SubagentType string `json:"subagentType,omitempty"`
	Description  string `json:"description,omitempty"`
}

// SubagentCompleted closes a subagent conversation.
type SubagentCompleted struct {
	ToolUseID  string      `json:"toolUseId"`
	AgentID    string      `json:"agentId,omitempty"`
	Status     BlockStatus `json:"status"`
	Output     string      `json:"output,omitempty"`
	DurationMs int64       `json:"durationMs,omitempty"`
}

// ErrorEvent reports an error to clients (a model error, a budget stop, …).
type ErrorEvent struct {
	Message string `json:"message"`
	Code    string `json:"code,omitempty"`
}

// LogLevel is a log event's level.
type LogLevel string

const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// LogEvent carries a diagnostic line, e.g. an agent message agentd does not
// understand (kept verbatim in Data so nothing is lost).
type LogEvent struct {
	Level   LogLevel        `json:"level"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// SessionIdleEvent says the session finished its work and waits for input.
type SessionIdleEvent struct{}

// MessageQueued puts a user message in the session's queue: it was sent
// while a turn ran and starts its own turn, in order, when the turns before
// it have ended.
type MessageQueued struct {
	MessageID string `json:"messageId"`
	Content   string `json:"content"`
	// Attachments are the message's images (no name) and files (named),
	// as its user_message block will carry them.
	Attachments []ArtifactRef `json:"attachments,omitempty"`
}

// MessageDequeued takes a message out of the queue to start turn QueryID.
type MessageDequeued struct {
	MessageID string `json:"messageId"`
	QueryID   string `json:"queryId,omitempty"`
}

// MessageCancelled drops a queued message without running it.
type MessageCancelled struct {
	MessageID string `json:"messageId"`
	Reason    string `json:"reason,omitempty"`
}

// OptionsUpdate records new session options: SessionOptions is the whole
// set after the change (a JSON object), Changed the keys the change set or
// removed. The session's agent gets them at its next start, or at once
// where its CLI reads them per turn.
type OptionsUpdate struct {
	SessionOptions json.RawMessage `json:"sessionOptions"`
	Changed        []string        `json:"changed,omitempty"`
}

func (BlockUpsert) EventType() EventType         { return TypeBlockUpsert }
func (BlockDelta) EventType() EventType          { return TypeBlockDelta }
func (MetadataUpdate) EventType() EventType      { return TypeMetadataUpdate }
func (StatusChange) EventType() EventType        { return TypeStatus }
func (QueryStarted) EventType() EventType        { return TypeQueryStarted }
func (QueryCompleted) EventType() EventType      { return TypeQueryCompleted }
func (QueryFailed) EventType() EventType         { return TypeQueryFailed }
func (PermissionRequested) EventType() EventType { return TypePermissionRequest }
func (PermissionResolved) EventType() EventType  { return TypePermissionResolved }
func (SubagentSpawned) EventType() EventType     { return TypeSubagentSpawned }
func (SubagentCompleted) EventType() EventType   { return TypeSubagentCompleted }
func (ErrorEvent) EventType() EventType          { return TypeError }
func (LogEvent) EventType() EventType            { return TypeLog }
func (SessionIdleEvent) EventType() EventType    { return TypeSessionIdle }
func (MessageQueued) EventType() EventType       { return TypeMessageQueued }
func (MessageDequeued) EventType() EventType     { return TypeMessageDequeued }
func (MessageCancelled) EventType() EventType    { return TypeMessageCancelled }
func (OptionsUpdate) EventType() EventType       { return TypeOptionsUpdate }
