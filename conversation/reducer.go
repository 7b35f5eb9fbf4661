package conversation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sort"
	"time"
	"unicode/utf8"
)

// Subagent is a subagent's conversation: its own blocks plus what the
// spawning and completing events said about it. ID is the conversationId of
// its events (the parent tool_use id).
type Subagent struct {
	ID           string      `json:"id"`
	ToolUseID    string      `json:"toolUseId"`
	AgentID      string      `json:"agentId,omitempty"`
	SubagentType string      `json:"subagentType,omitempty"`
	Description  string      `json:"description,omitempty"`
	Prompt       string      `json:"prompt,omitempty"`
	Status       BlockStatus `json:"status"`
	Output       string      `json:"output,omitempty"`
	DurationMs   int64       `json:"durationMs,omitempty"`
	Blocks       []Block     `json:"blocks"`
}

// WorkspaceFile is a file the log says exists in the workspace.
type WorkspaceFile struct {
	Path   string `json:"path"`
	Size   *int64 `json:"size,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// TurnStatus is where a turn stands.
type TurnStatus string

const (
	TurnRunning   TurnStatus = "running"
	TurnCompleted TurnStatus = "completed"
	TurnFailed    TurnStatus = "failed"
)

// TurnStatuses lists every turn status.
var TurnStatuses = []TurnStatus{TurnRunning, TurnCompleted, TurnFailed}

// Turn is one query:started and how it ended, so a client that loads the
// reduced state (rather than following the log) still knows which turns
// failed or were interrupted. The outcome fields come from the turn's
// query:completed or query:failed payload; a running turn has none.
type Turn struct {
	QueryID     string     `json:"queryId"`
	Status      TurnStatus `json:"status"`
	Interrupted bool       `json:"interrupted,omitempty"`
	Error       string     `json:"error,omitempty"`
	Code        string     `json:"code,omitempty"`
	DurationMs  int64      `json:"durationMs,omitempty"`
	Result      string     `json:"result,omitempty"`
	// StartedAt is the timestamp of the turn's query:started event.
	StartedAt time.Time `json:"startedAt,omitzero"`
	// Usage sums the metadata:update usage increments that arrived while
	// the turn was the active one (absent when none did).
	Usage *Usage `json:"usage,omitempty"`
	// AfterBlock is the number of main-conversation blocks when the turn
	// ended: a UI shows the outcome after that many blocks, where it
	// happened. Blocks are only ever appended, so the position stays right.
	AfterBlock int `json:"afterBlock,omitempty"`
}

// State is a conversation reduced from its events.
type State struct {
	Status             SessionStatus         `json:"status"`
	Runtime            Runtime               `json:"runtime"`
	Blocks             []Block               `json:"blocks"`
	Subagents          []Subagent            `json:"subagents"`
	Usage              Usage                 `json:"usage"`
	CostUSD            float64               `json:"costUSD"`
	Model              string                `json:"model,omitempty"`
	PendingPermissions []PermissionRequested `json:"pendingPermissions"`
	WorkspaceFiles     []WorkspaceFile       `json:"workspaceFiles"`
	ActiveQueryID      string                `json:"activeQueryId,omitempty"`
	// Turns holds one entry per query:started, in log order.
	Turns []Turn `json:"turns"`
	// QueuedMessages are the messages waiting for their turn, in order.
	QueuedMessages []QueuedMessage `json:"queuedMessages"`
	// PermissionRules are the session's "allow for this session" rules.
	PermissionRules []PermissionRule `json:"permissionRules"`
	// SessionOptions are the options the last options:update set (absent
	// when none did: the options given at creation are the session's).
	SessionOptions json.RawMessage `json:"sessionOptions,omitempty"`
	LastSeq        int64           `json:"lastSeq"`
}

// QueuedMessage is a message waiting in the session's queue.
type QueuedMessage struct {
	ID       string    `json:"id"`
	Content  string    `json:"content"`
	QueuedAt time.Time `json:"queuedAt,omitzero"`
	// Actor is the principal who sent it (the event's context actor).
	Actor string `json:"actor,omitempty"`
	// Attachments are the message's images and files (message:queued's).
	Attachments []ArtifactRef `json:"attachments,omitempty"`
}

// PermissionRule allows every later request for ToolName in the session.
type PermissionRule struct {
	ToolName string             `json:"toolName"`
	Behavior PermissionBehavior `json:"behavior"`
}

// ErrDuplicate is returned by Apply for an event whose seq was already
// applied; the event is ignored, so replaying an overlap is harmless.
var ErrDuplicate = errors.New("conversation: event already applied")

// thread is one conversation's ordered blocks with an index by id.
type thread struct {
	blocks []Block
	index  map[string]int
}

// upsert applies a block:upsert's block; ts is the event's time, the
// block's timestamp when it has none.
func (t *thread) upsert(raw json.RawMessage, ts time.Time) error {
	var head struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return err
	}
	if head.ID == "" {
		return errors.New("block without id")
	}
	if i, ok := t.index[head.ID]; ok {
		b := t.blocks[i]
		// Unmarshalling onto the existing block sets exactly the fields present
		// in raw: the contract's shallow merge. Clone the metadata map and the
		// input first (json.Unmarshal reuses a RawMessage's array) so earlier
		// State copies never see the change.
		b.Metadata = maps.Clone(b.Metadata)
		b.Input = bytes.Clone(b.Input)
		// truncated and attachments are values an upsert replaces whole
		// (decoding onto the old ones would merge into them, and change
		// earlier State copies): decode onto none, keep the old when absent.
		oldTrunc, oldAtt := b.Truncated, b.Attachments
		b.Truncated, b.Attachments = nil, nil
		if err := json.Unmarshal(raw, &b); err != nil {
			return err
		}
		if b.Truncated == nil {
			b.Truncated = oldTrunc
		}
		if b.Attachments == nil {
			b.Attachments = oldAtt
		}
		fillRequired(&b, ts)
		t.blocks[i] = b
		return nil
	}
	var b Block
	if err := json.Unmarshal(raw, &b); err != nil {
		return err
	}
	fillRequired(&b, ts)
	if t.index == nil {
		t.index = make(map[string]int)
	}
	t.index[b.ID] = len(t.blocks)
	t.blocks = append(t.blocks, b)
	return nil
}

func (t *thread) delta(id, text string) bool {
	i, ok := t.index[id]
	if !ok {
		return false
	}
	t.blocks[i].appendText(text)
	return true
}

// Reducer folds events into a State. The zero value is not usable; call
// NewReducer. A Reducer is not safe for concurrent use.
type Reducer struct {
	st        State
	main      thread
	subs      map[string]*thread
	subOrder  []string
	subMeta   map[string]*Subagent
	pending   map[string]PermissionRequested
	pendOrder []string
	files     map[string]WorkspaceFile
	turns     []Turn
	turnIndex map[string]int // queryId → its last entry in turns
	queue     []QueuedMessage
	rules     []PermissionRule
}

// NewReducer returns an empty reducer.
func NewReducer() *Reducer {
	return &Reducer{
		subs:      make(map[string]*thread),
		subMeta:   make(map[string]*Subagent),
		pending:   make(map[string]PermissionRequested),
		files:     make(map[string]WorkspaceFile),
		turnIndex: make(map[string]int),
	}
}

// Reduce folds events into a fresh State.
func Reduce(events []Event) (State, error) {
	r := NewReducer()
	var firstErr error
	for _, e := range events {
		if err := r.Apply(e); err != nil && firstErr == nil && !errors.Is(err, ErrDuplicate) {
			firstErr = err
		}
	}
	return r.State(), firstErr
}

// LastSeq is the seq of the last applied event.
func (r *Reducer) LastSeq() int64 { return r.st.LastSeq }

// Apply folds one event. Events with a seq at or below the last applied seq
// return ErrDuplicate and change nothing; unsequenced events (seq 0, e.g. from
// a converter) always apply. A malformed payload returns an error and changes
// nothing else; the reducer stays usable.
func (r *Reducer) Apply(e Event) error {
	if e.Seq != 0 {
		if e.Seq <= r.st.LastSeq {
			return ErrDuplicate
		}
		r.st.LastSeq = e.Seq
	}
	conv := e.Context.ConversationID
	switch e.Type {
	case TypeBlockUpsert:
		var p struct {
			Block json.RawMessage `json:"block"`
		}
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return fmt.Errorf("seq %d: %s: %w", e.Seq, e.Type, err)
		}
		if err := r.thread(conv).upsert(p.Block, e.Context.Timestamp); err != nil {
			return fmt.Errorf("seq %d: %s: %w", e.Seq, e.Type, err)
		}
		return nil
	case TypeBlockDelta:
		var p BlockDelta
		if err := json.Unmarshal(e.Payload, &p); err != nil {
			return fmt.Errorf("seq %d: %s: %w", e.Seq, e.Type, err)
		}
		if !r.thread(conv).delta(p.BlockID, p.Delta) {
			return fmt.Errorf("seq %d: delta for unknown block %q", e.Seq, p.BlockID)
		}
		return nil
	}

	p, err := e.Decode()
	if err != nil {
		return fmt.Errorf("seq %d: %w", e.Seq, err)
	}
	switch p := p.(type) {
	case *MetadataUpdate:
		if p.Usage != nil {
			r.st.Usage = r.st.Usage.Add(*p.Usage)
			if i, ok := r.turnIndex[r.st.ActiveQueryID]; ok && r.st.ActiveQueryID != "" {
				u := p.Usage.Add(Usage{})
				if r.turns[i].Usage != nil {
					u = r.turns[i].Usage.Add(*p.Usage)
				}
				r.turns[i].Usage = &u
			}
		}
		if p.CostUSD != nil {
			r.st.CostUSD += *p.CostUSD
		}
		if p.Model != "" {
			r.st.Model = p.Model
		}
	case *StatusChange:
		r.st.Status = p.Status
		r.st.Runtime = p.Runtime
	case *QueryStarted:
		r.st.ActiveQueryID = p.QueryID
		r.turnIndex[p.QueryID] = len(r.turns)
		r.turns = append(r.turns, Turn{QueryID: p.QueryID, Status: TurnRunning, StartedAt: e.Context.Timestamp})
	case *QueryCompleted:
		r.endQuery(p.QueryID)
		r.endTurn(Turn{QueryID: p.QueryID, Status: TurnCompleted, Interrupted: p.Interrupted,
			DurationMs: p.DurationMs, Result: p.Result})
	case *QueryFailed:
		r.endQuery(p.QueryID)
		r.endTurn(Turn{QueryID: p.QueryID, Status: TurnFailed, Interrupted: p.Interrupted,
			Error: p.Error, Code: p.Code, DurationMs: p.DurationMs})
	case *PermissionRequested:
		if _, ok := r.pending[p.RequestID]; !ok {
			r.pendOrder = append(r.pendOrder, p.RequestID)
		}
		r.pending[p.RequestID] = *p
	case *PermissionResolved:
		delete(r.pending, p.RequestID)
		r.pendOrder = slices.DeleteFunc(r.pendOrder, func(id string) bool { return id == p.RequestID })
		if p.Scope == ScopeSession && p.ToolName != "" && p.Behavior == Allow &&
			!slices.ContainsFunc(r.rules, func(x PermissionRule) bool { return x.ToolName == p.ToolName }) {
			r.rules = append(r.rules, PermissionRule{ToolName: p.ToolName, Behavior: p.Behavior})
		}
	case *MessageQueued:
		q := QueuedMessage{ID: p.MessageID, Content: p.Content, QueuedAt: e.Context.Timestamp, Attachments: p.Attachments}
		if e.Context.Actor != nil {
			q.Actor = *e.Context.Actor
		}
		if i := slices.IndexFunc(r.queue, func(x QueuedMessage) bool { return x.ID == p.MessageID }); i >= 0 {
			r.queue[i] = q
		} else {
			r.queue = append(r.queue, q)
		}
	case *MessageDequeued:
		r.unqueue(p.MessageID)
	case *MessageCancelled:
		r.unqueue(p.MessageID)
	case *OptionsUpdate:
		if t := bytes.TrimSpace(p.SessionOptions); len(t) > 0 && t[0] == '{' {
			r.st.SessionOptions = p.SessionOptions
		}
	case *FileChange:
		if p.Kind == TypeFileDeleted {
			delete(r.files, p.Path)
		} else {
			r.files[p.Path] = WorkspaceFile{Path: p.Path, Size: p.Size, SHA256: p.SHA256}
		}
	case *SubagentSpawned:
		s := r.subagent(p.ToolUseID)
		s.ToolUseID = p.ToolUseID
		s.AgentID = firstNonEmpty(p.AgentID, s.AgentID)
		s.Prompt = p.Prompt
		s.SubagentType = p.SubagentType
		s.Description = p.Description
		s.Status = StatusPending
	case *SubagentCompleted:
		s := r.subagent(p.ToolUseID)
		s.AgentID = firstNonEmpty(p.AgentID, s.AgentID)
		s.Status = p.Status
		s.Output = p.Output
		s.DurationMs = p.DurationMs
	}
	return nil
}

// ApplyBlock folds a block:upsert of b into conversation conv (main when
// empty) without encoding b and decoding it again: the state is the one
// Apply gives for the unsequenced event Upsert(b).In(conv), field for field
// (the fields Upsert's JSON carries are b's non-empty ones; strings, the
// timestamp and the metadata come out as that JSON decodes), except that
// b.Input is kept as given, where the event carries it as json.Marshal
// writes a json.RawMessage: the same when b.Input is valid JSON, compact,
// with <, >, & and U+2028/U+2029 escaped, as the converters write it.
// `agentd convert --blocks` reduces a converter's blocks this way (with
// ApplyBlockAt).
func (r *Reducer) ApplyBlock(conv string, b Block) error {
	return r.ApplyBlockAt(conv, b, time.Time{})
}

// ApplyBlockAt is ApplyBlock for the event Upsert(b).In(conv).At(ts): a
// block that has no timestamp gets ts (as Apply gives it the event's).
func (r *Reducer) ApplyBlockAt(conv string, b Block, ts time.Time) error {
	if err := jsonBlock(&b); err != nil {
		return fmt.Errorf("seq 0: %s: %w", TypeBlockUpsert, err)
	}
	t := r.thread(conv)
	if b.ID == "" {
		return fmt.Errorf("seq 0: %s: block without id", TypeBlockUpsert)
	}
	if i, ok := t.index[b.ID]; ok {
		m := mergeBlock(t.blocks[i], &b)
		fillRequired(&m, jsonTime(ts))
		t.blocks[i] = m
		return nil
	}
	if len(b.Metadata) > 0 {
		b.Metadata = mergeMetadata(nil, b.Metadata)
	}
	fillRequired(&b, jsonTime(ts))
	if t.index == nil {
		t.index = make(map[string]int)
	}
	t.index[b.ID] = len(t.blocks)
	t.blocks = append(t.blocks, b)
	return nil
}

// ApplyDelta folds a block:delta appending text to block id in
// conversation conv (main when empty): what Apply does with the
// unsequenced event Delta(id, text).In(conv).
func (r *Reducer) ApplyDelta(conv, id, text string) error {
	id, text = jsonString(id), jsonString(text)
	if !r.thread(conv).delta(id, text) {
		return fmt.Errorf("seq 0: delta for unknown block %q", id)
	}
	return nil
}

// jsonBlock makes b what decoding json.Marshal's output for it gives:
// strings with invalid UTF-8 bytes replaced, a timestamp as parsed back, the
// metadata as JSON values (merged later). It fails where json.Marshal would.
func jsonBlock(b *Block) error {
	for _, s := range []*string{&b.ID, (*string)(&b.Type), (*string)(&b.Status), &b.Content, &b.Model,
		&b.Summary, &b.ToolName, &b.ToolUseID, &b.DisplayName, &b.Description, &b.Output,
		&b.Subtype, &b.Message, &b.Code, &b.SubagentID, &b.Name, &b.SkillName} {
		*s = jsonString(*s)
	}
	if b.Timestamp.IsZero() {
		b.Timestamp = time.Time{}
	} else if _, off := b.Timestamp.Zone(); off == 0 && b.Timestamp.Year() >= 0 && b.Timestamp.Year() <= 9999 {
		// Written with "Z", parsed back in UTC.
		b.Timestamp = b.Timestamp.UTC()
	} else {
		raw, err := b.Timestamp.MarshalJSON()
		if err != nil {
			return err
		}
		var t time.Time
		if err := t.UnmarshalJSON(raw); err != nil {
			return err
		}
		b.Timestamp = t
	}
	if len(b.Metadata) == 0 {
		b.Metadata = nil
	} else if _, err := json.Marshal(b.Metadata); err != nil {
		return err
	}
	if len(b.Input) == 0 {
		b.Input = nil
	}
	if t := b.Truncated; t != nil {
		c := *t
		c.Field, c.Tail, c.ArtifactError = jsonString(c.Field), jsonString(c.Tail), jsonString(c.ArtifactError)
		if c.Artifact != nil {
			a := jsonRef(*c.Artifact)
			c.Artifact = &a
		}
		b.Truncated = &c
	}
	if len(b.Attachments) == 0 {
		b.Attachments = nil
	} else {
		att := make([]ArtifactRef, len(b.Attachments))
		for i, a := range b.Attachments {
			att[i] = jsonRef(a)
		}
		b.Attachments = att
	}
	return nil
}

// jsonRef is a after a JSON round trip.
func jsonRef(a ArtifactRef) ArtifactRef {
	a.SHA256, a.ContentType, a.Name = jsonString(a.SHA256), jsonString(a.ContentType), jsonString(a.Name)
	return a
}

// jsonTime is t after a JSON round trip (zero when JSON cannot carry it).
func jsonTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	raw, err := t.MarshalJSON()
	if err != nil {
		return time.Time{}
	}
	var out time.Time
	if out.UnmarshalJSON(raw) != nil {
		return time.Time{}
	}
	return out
}

// jsonString is s after a JSON round trip: each byte that is not part of
// valid UTF-8 becomes U+FFFD, as encoding/json writes it.
func jsonString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

// mergeBlock sets on old the fields b's JSON carries (jsonBlock made b):
// the shallow merge Apply does by decoding onto the stored block.
func mergeBlock(old Block, b *Block) Block {
	old.ID, old.Type = b.ID, b.Type
	if !b.Timestamp.IsZero() {
		old.Timestamp = b.Timestamp
	}
	if len(b.Metadata) > 0 {
		old.Metadata = mergeMetadata(maps.Clone(old.Metadata), b.Metadata)
	}
	if len(b.Input) > 0 {
		old.Input = b.Input
	}
	if b.IsError {
		old.IsError = true
	}
	if b.DurationMs != 0 {
		old.DurationMs = b.DurationMs
	}
	if b.Truncated != nil {
		old.Truncated = b.Truncated
	}
	if b.Attachments != nil {
		old.Attachments = b.Attachments
	}
	for _, f := range []struct{ dst, src *string }{
		{(*string)(&old.Status), (*string)(&b.Status)}, {&old.Content, &b.Content}, {&old.Model, &b.Model},
		{&old.Summary, &b.Summary}, {&old.ToolName, &b.ToolName}, {&old.ToolUseID, &b.ToolUseID},
		{&old.DisplayName, &b.DisplayName}, {&old.Description, &b.Description}, {&old.Output, &b.Output},
		{&old.Subtype, &b.Subtype}, {&old.Message, &b.Message}, {&old.Code, &b.Code},
		{&old.SubagentID, &b.SubagentID}, {&old.Name, &b.Name}, {&old.SkillName, &b.SkillName},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	return old
}

// mergeMetadata decodes the JSON of m onto dst, as Apply decodes an
// upsert's metadata onto the stored block's (a copy of it): keys replaced,
// values as JSON gives them. jsonBlock checked that m encodes.
func mergeMetadata(dst, m map[string]any) map[string]any {
	raw, _ := json.Marshal(m)
	_ = json.Unmarshal(raw, &dst)
	return dst
}

func (r *Reducer) unqueue(id string) {
	r.queue = slices.DeleteFunc(r.queue, func(x QueuedMessage) bool { return x.ID == id })
}

func (r *Reducer) endQuery(id string) {
	if r.st.ActiveQueryID == id || id == "" {
		r.st.ActiveQueryID = ""
	}
}

// endTurn records how a turn ended on the latest turn with its queryId,
// replacing any earlier outcome (the last end event wins). An end without a
// query:started for its queryId records nothing: turns are one per start.
func (r *Reducer) endTurn(t Turn) {
	i, ok := r.turnIndex[t.QueryID]
	if !ok {
		return
	}
	t.AfterBlock = len(r.main.blocks)
	t.StartedAt = r.turns[i].StartedAt
	t.Usage = r.turns[i].Usage
	r.turns[i] = t
}

func (r *Reducer) thread(conv string) *thread {
	if conv == "" || conv == MainConversation {
		return &r.main
	}
	r.subagent(conv)
	return r.subs[conv]
}

func (r *Reducer) subagent(id string) *Subagent {
	if s, ok := r.subMeta[id]; ok {
		return s
	}
	s := &Subagent{ID: id, ToolUseID: id, Status: StatusPending}
	r.subMeta[id] = s
	r.subs[id] = &thread{}
	r.subOrder = append(r.subOrder, id)
	return s
}

// State returns a copy of the reduced state; later Apply calls do not change it.
func (r *Reducer) State() State {
	st := r.st
	st.Blocks = slices.Clone(r.main.blocks)
	if st.Blocks == nil {
		st.Blocks = []Block{}
	}
	st.Subagents = make([]Subagent, 0, len(r.subOrder))
	for _, id := range r.subOrder {
		s := *r.subMeta[id]
		s.Blocks = slices.Clone(r.subs[id].blocks)
		if s.Blocks == nil {
			s.Blocks = []Block{}
		}
		st.Subagents = append(st.Subagents, s)
	}
	st.PendingPermissions = make([]PermissionRequested, 0, len(r.pending))
	for _, id := range r.pendOrder {
		if p, ok := r.pending[id]; ok {
			st.PendingPermissions = append(st.PendingPermissions, p)
		}
	}
	st.WorkspaceFiles = make([]WorkspaceFile, 0, len(r.files))
	for _, f := range r.files {
		st.WorkspaceFiles = append(st.WorkspaceFiles, f)
	}
	sort.Slice(st.WorkspaceFiles, func(i, j int) bool { return st.WorkspaceFiles[i].Path < st.WorkspaceFiles[j].Path })
	st.Turns = slices.Clone(r.turns)
	if st.Turns == nil {
		st.Turns = []Turn{}
	}
	st.QueuedMessages = slices.Clone(r.queue)
	if st.QueuedMessages == nil {
		st.QueuedMessages = []QueuedMessage{}
	}
	st.PermissionRules = slices.Clone(r.rules)
	if st.PermissionRules == nil {
		st.PermissionRules = []PermissionRule{}
	}
	return st
}

// Block returns block id of conversation conv (main when empty) as State
// would list it.
func (r *Reducer) Block(conv, id string) (Block, bool) {
	var t *thread
	if conv == "" || conv == MainConversation {
		t = &r.main
	} else if t = r.subs[conv]; t == nil {
		return Block{}, false
	}
	i, ok := t.index[id]
	if !ok {
		return Block{}, false
	}
	return t.blocks[i], true
}

// Blocks yields the blocks State would list, without copying them all
// first: the main conversation's (with MainConversation), then each
// subagent's, in State's order, with the conversation's id. The reducer
// must not be changed while the sequence is being read.
func (r *Reducer) Blocks() iter.Seq2[string, Block] {
	return func(yield func(string, Block) bool) {
		for _, b := range r.main.blocks {
			if !yield(MainConversation, b) {
				return
			}
		}
		for _, id := range r.subOrder {
			for _, b := range r.subs[id].blocks {
				if !yield(id, b) {
					return
				}
			}
		}
	}
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
