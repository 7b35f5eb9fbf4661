package opencode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agentcli"
)

// State is what the runner saves with host.SaveAgentState: the OpenCode
// session a later runner continues.
type State struct {
	SessionID string `json:"sessionId"`
}

// runner drives one agentd session's OpenCode server. Turn, Interrupt and
// Close follow agent.Runner's rules; the server's event-stream goroutine
// converts and emits what OpenCode reports.
type runner struct {
	arch   Architecture
	host   agent.Host
	system string

	// mu and convMu are never held together. What the converter returns
	// is emitted while convMu is held, so the log's order is the
	// converter's: a turn's settled blocks cannot be overtaken by a late
	// update of the same block converted just before.
	convMu   sync.Mutex       // guards conv and turnOpen
	conv     *EventsConverter // for the current server's session; nil before it is known
	turnOpen bool             // a Turn runs; cleared before its pending blocks settle

	mu        sync.Mutex // guards the fields below
	srv       *server
	sessionID string
	cur       *turnState
	closed    bool

	wg sync.WaitGroup // permission goroutines
}

// turnState is one running turn; fields other than end (a channel) are
// guarded by runner.mu.
type turnState struct {
	ctx         context.Context
	end         chan conversation.Payload
	interrupted bool
	asked       map[string]bool // tool call ids a permission was requested for
}

func newRunner(a Architecture, h agent.Host) *runner {
	return &runner{arch: a, host: h, system: agentcli.Instructions(h.Profile())}
}

// Turn implements agent.Runner.
func (r *runner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	tr := &turnState{ctx: ctx, end: make(chan conversation.Payload, 1), asked: map[string]bool{}}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return agent.TurnResult{}, agent.Fail(agent.CodeInternal, "opencode runner is closed")
	}
	r.cur = tr
	r.mu.Unlock()
	r.convMu.Lock()
	r.turnOpen = true
	r.convMu.Unlock()
	defer r.endTurn()

	srv, err := r.ensureServer(ctx)
	if err != nil {
		if r.interrupted(tr) {
			return agent.TurnResult{}, agent.ErrInterrupted
		}
		return agent.TurnResult{}, err
	}
	r.mu.Lock()
	sid := r.sessionID
	intr := tr.interrupted
	r.mu.Unlock()
	if intr {
		return agent.TurnResult{}, agent.ErrInterrupted
	}
	// Images first, as file parts with data: URLs.
	parts := make([]map[string]any, 0, len(t.Images)+1)
	for i, im := range t.Images {
		parts = append(parts, map[string]any{"type": "file", "mime": im.MediaType, "filename": fmt.Sprintf("image-%d%s", i+1, imageExt(im.MediaType)),
			"url": "data:" + im.MediaType + ";base64," + base64.StdEncoding.EncodeToString(im.Data)})
	}
	if t.Content != "" || len(parts) == 0 {
		parts = append(parts, map[string]any{"type": "text", "text": t.Content})
	}
	body := map[string]any{"parts": parts}
	if r.system != "" {
		body["system"] = r.system
	}
	if err := srv.call(ctx, http.MethodPost, "/session/"+url.PathEscape(sid)+"/prompt_async", body, nil); err != nil {
		return agent.TurnResult{}, r.failed(ctx, tr, srv, fmt.Errorf("send the prompt: %w", err))
	}
	select {
	case end := <-tr.end:
		return agent.TurnResult{}, r.turnEnd(tr, end)
	case <-srv.streamDone:
		return agent.TurnResult{}, r.failed(ctx, tr, srv, nil)
	case <-srv.proc.Done():
		return agent.TurnResult{}, r.failed(ctx, tr, srv, nil)
	case <-ctx.Done():
		return agent.TurnResult{}, r.failed(ctx, tr, srv, nil)
	}
}

// endTurn ends the running turn: nothing it started stays pending.
func (r *runner) endTurn() {
	r.mu.Lock()
	r.cur = nil
	r.mu.Unlock()
	r.convMu.Lock()
	defer r.convMu.Unlock()
	r.turnOpen = false
	if r.conv != nil {
		r.emit(r.conv.blocks.SettlePending(time.Now().UTC().Truncate(time.Millisecond))...)
	}
}

func (r *runner) interrupted(tr *turnState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return tr.interrupted
}

// failed decides a turn's error when the server, its stream or ctx ended
// it (err, when set, is what the runner was doing).
func (r *runner) failed(ctx context.Context, tr *turnState, srv *server, err error) error {
	if srv.streamErr() != nil && ctx.Err() == nil && !r.interrupted(tr) {
		// A server that dies breaks its stream first: give the process
		// a moment to be reaped so the error names the real cause.
		t := time.NewTimer(2 * time.Second)
		select {
		case <-srv.proc.Done():
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-srv.proc.Done():
		r.stopServer(context.WithoutCancel(ctx), srv)
		if r.interrupted(tr) {
			return agent.ErrInterrupted
		}
		return srv.proc.ExitError()
	default:
	}
	if r.interrupted(tr) {
		// An interrupt that could not abort stopped the server.
		r.stopServer(context.WithoutCancel(ctx), srv)
		return agent.ErrInterrupted
	}
	if ctx.Err() != nil {
		// The session gave up waiting (interrupt backstop or shutdown):
		// the server goes; the next turn continues the session in a new
		// one.
		r.stopServer(context.WithoutCancel(ctx), srv)
		return ctx.Err()
	}
	if serr := srv.streamErr(); serr != nil {
		r.stopServer(context.WithoutCancel(ctx), srv)
		return agent.Fail(agent.CodeAgentProtocol, "opencode: lost the event stream: %v", serr)
	}
	if err == nil {
		err = errors.New("the server stopped")
	}
	return agent.Fail(agent.CodeAgentProtocol, "opencode: %v", err)
}

// turnEnd maps the converter's end of turn (the session went idle) to
// Turn's result.
func (r *runner) turnEnd(tr *turnState, end conversation.Payload) error {
	switch e := end.(type) {
	case conversation.QueryCompleted:
		if e.Interrupted || r.interrupted(tr) {
			return agent.ErrInterrupted
		}
	case conversation.QueryFailed:
		if e.Interrupted || r.interrupted(tr) {
			return agent.ErrInterrupted
		}
		return agentcli.Failed(agent.CodeModelError, "opencode", e)
	}
	return nil
}

// Interrupt implements agent.Runner: abort the session's running prompt; a
// server that does not answer is stopped.
func (r *runner) Interrupt(ctx context.Context) error {
	r.mu.Lock()
	tr, srv, sid := r.cur, r.srv, r.sessionID
	if tr == nil {
		r.mu.Unlock()
		return nil
	}
	tr.interrupted = true
	r.mu.Unlock()
	if srv == nil || sid == "" {
		return nil // Turn checks the flag before prompting
	}
	if err := srv.call(ctx, http.MethodPost, "/session/"+url.PathEscape(sid)+"/abort", nil, nil); err != nil {
		r.host.Logger().Warn("opencode abort failed; stopping the server", "err", err)
		r.stopServer(ctx, srv)
	}
	return nil
}

// Close implements agent.Runner.
func (r *runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	srv := r.srv
	r.mu.Unlock()
	if srv != nil {
		r.stopServer(ctx, srv)
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopServer forgets a server and stops it: event stream, then process.
func (r *runner) stopServer(ctx context.Context, srv *server) {
	r.mu.Lock()
	if r.srv == srv {
		r.srv = nil
	}
	r.mu.Unlock()
	srv.cancel()
	srv.proc.Stop(ctx, r.arch.stopGrace())
	select {
	case <-srv.done:
	case <-ctx.Done():
	}
	srv.http.CloseIdleConnections()
}

// ensureServer returns the running server, starting one and opening its
// event stream and the session's OpenCode session when there is none.
func (r *runner) ensureServer(ctx context.Context) (*server, error) {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	if srv != nil {
		if srv.alive() {
			return srv, nil
		}
		r.stopServer(context.WithoutCancel(ctx), srv)
		why := "its event stream ended"
		select {
		case <-srv.proc.Done():
			why = srv.proc.ExitError().Error()
		default:
		}
		r.emit(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
			Message: "opencode server stopped between turns (" + why + "); starting a new one"}))
	}
	sctx, cancel := context.WithTimeout(ctx, r.arch.startTimeout())
	defer cancel()
	srv, err := startServer(sctx, r.arch, r.host.Env(), r.stdoutLine)
	if err != nil {
		if sctx.Err() != nil && ctx.Err() == nil {
			return nil, agent.Fail(agent.CodeAgentProtocol, "opencode server did not start within %s", r.arch.startTimeout())
		}
		return nil, err
	}
	streamCtx, stopStream := context.WithCancel(context.Background())
	srv.cancel = stopStream
	connected := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		srv.drainStdout(r.stdoutLine)
	}()
	go func() {
		defer wg.Done()
		defer close(srv.streamDone)
		err := srv.subscribe(streamCtx, connected, func(data []byte) { r.onEvent(srv, data) })
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New("the server closed it")
		}
		srv.setStreamErr(err)
	}()
	go func() { wg.Wait(); close(srv.done) }()

	fail := func(err error) (*server, error) {
		r.stopServer(context.WithoutCancel(ctx), srv)
		return nil, err
	}
	select {
	case <-connected:
	case <-srv.streamDone:
		if err := srv.streamErr(); err != nil {
			return fail(agent.Fail(agent.CodeAgentProtocol, "opencode: %v", err))
		}
		return fail(agent.Fail(agent.CodeAgentProtocol, "opencode: the server stopped"))
	case <-srv.proc.Done():
		srv.cancel()
		<-srv.done
		return nil, srv.proc.ExitError()
	case <-sctx.Done():
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		return fail(agent.Fail(agent.CodeAgentProtocol, "opencode event stream did not open within %s", r.arch.startTimeout()))
	}
	var health struct {
		Version string `json:"version"`
	}
	if err := srv.call(sctx, http.MethodGet, "/global/health", nil, &health); err != nil {
		return fail(agent.Fail(agent.CodeAgentProtocol, "opencode: %v", err))
	}
	srv.version = health.Version
	if err := r.ensureSession(sctx, srv); err != nil {
		return fail(err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fail(agent.Fail(agent.CodeInternal, "opencode runner is closed"))
	}
	r.srv = srv
	r.mu.Unlock()
	return srv, nil
}

// ensureSession continues the saved OpenCode session, or creates one.
func (r *runner) ensureSession(ctx context.Context, srv *server) error {
	var st State
	if raw := r.host.AgentState(); len(raw) > 0 {
		_ = json.Unmarshal(raw, &st)
	}
	var sess struct {
		ID string `json:"id"`
	}
	if st.SessionID != "" {
		err := srv.call(ctx, http.MethodGet, "/session/"+url.PathEscape(st.SessionID), nil, &sess)
		var he *httpError
		switch {
		case err == nil:
		case errors.As(err, &he) && he.Status/100 == 4:
			r.emit(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
				Message: fmt.Sprintf("opencode could not continue session %s (%v); starting a new one without the earlier turns", st.SessionID, err)}))
			sess.ID = ""
		default:
			return agent.Fail(agent.CodeAgentProtocol, "opencode: %v", err)
		}
	}
	if sess.ID == "" {
		if err := srv.call(ctx, http.MethodPost, "/session", map[string]any{}, &sess); err != nil {
			return agent.Fail(agent.CodeAgentProtocol, "opencode: create a session: %v", err)
		}
		if sess.ID == "" {
			return agent.Fail(agent.CodeAgentProtocol, "opencode created a session without an id")
		}
	}
	if sess.ID != st.SessionID {
		b, _ := json.Marshal(State{SessionID: sess.ID})
		if err := r.host.SaveAgentState(ctx, b); err != nil {
			return fmt.Errorf("save opencode session id: %w", err)
		}
	}
	if err := r.host.SetAgentInfo(ctx, srv.version, sess.ID); err != nil {
		r.host.Logger().Warn("record opencode version", "err", err)
	}
	r.convMu.Lock()
	r.conv = NewEventsConverter(WithSessionID(sess.ID), WithoutUserMessages(), WithoutPermissionEvents())
	r.convMu.Unlock()
	r.mu.Lock()
	r.sessionID = sess.ID
	r.mu.Unlock()
	return nil
}

// eventHead is the part of an event the runner reads itself.
type eventHead struct {
	Type       string `json:"type"`
	Properties struct {
		ID         string          `json:"id"`
		SessionID  string          `json:"sessionID"`
		Permission string          `json:"permission"`
		Patterns   json.RawMessage `json:"patterns"`
		Metadata   json.RawMessage `json:"metadata"`
		Tool       *struct {
			CallID string `json:"callID"`
		} `json:"tool"`
	} `json:"properties"`
}

// onEvent handles one event of srv's stream (its goroutine).
func (r *runner) onEvent(srv *server, data []byte) {
	var head eventHead
	if err := json.Unmarshal(data, &head); err != nil {
		r.logData(conversation.LevelWarn, "opencode event that is not JSON: "+err.Error(), data)
		return
	}
	if noiseEvents[head.Type] {
		return
	}
	r.mu.Lock()
	aborting := r.cur != nil && r.cur.interrupted
	r.mu.Unlock()
	r.convMu.Lock()
	var evs []conversation.Event
	var err error
	if r.conv != nil {
		evs, err = r.conv.Convert(data)
		if !r.turnOpen {
			// A late event of a turn that has ended (an aborted part's
			// last update): nothing of it may stay pending. turnOpen is
			// read under convMu, so an event converted as the turn ends
			// is settled either here or by the turn's own settle, which
			// then comes after it.
			evs = append(evs, r.conv.blocks.SettlePending(time.Now().UTC().Truncate(time.Millisecond))...)
		}
	}
	if err != nil {
		r.logData(conversation.LevelWarn, err.Error(), data)
	}
	evs, end := agentcli.SplitEnd(evs)
	out := evs[:0]
	for _, e := range evs {
		if aborting && isAbortError(e) {
			// The abort agentd asked for ends the turn as interrupted;
			// it is not an error to show.
			continue
		}
		out = append(out, e)
	}
	r.emit(out...)
	r.convMu.Unlock()
	if end != nil {
		r.mu.Lock()
		tr := r.cur
		r.mu.Unlock()
		if tr != nil {
			agentcli.Offer(tr.end, end)
		}
	}
	if head.Type == "permission.asked" {
		r.permission(srv, &head)
	}
}

// noiseEvents are OpenCode events nobody reading a conversation needs (a
// server start announces some fifty plugins).
var noiseEvents = map[string]bool{
	"plugin.added": true, "catalog.updated": true, "integration.updated": true, "reference.updated": true,
}

// isAbortError reports an error block or event for OpenCode's
// MessageAbortedError.
func isAbortError(e conversation.Event) bool {
	const code = "MessageAbortedError"
	switch e.Type {
	case conversation.TypeError:
		var p conversation.ErrorEvent
		return json.Unmarshal(e.Payload, &p) == nil && p.Code == code
	case conversation.TypeBlockUpsert:
		var p conversation.BlockUpsert
		return json.Unmarshal(e.Payload, &p) == nil && p.Block.Type == conversation.BlockError && p.Block.Code == code
	}
	return false
}

// permission answers a permission.asked event through the host: the
// profile's policy, a client, or the timeout decides.
func (r *runner) permission(srv *server, head *eventHead) {
	p := head.Properties
	if p.ID == "" {
		return
	}
	callID := ""
	if p.Tool != nil {
		callID = p.Tool.CallID
	}
	r.mu.Lock()
	tr := r.cur
	first := tr != nil && callID != "" && !tr.asked[callID]
	if first {
		tr.asked[callID] = true
	}
	r.mu.Unlock()
	reply := func(d string, msg string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		body := map[string]any{"reply": d}
		if msg != "" && d == "reject" {
			body["message"] = msg
		}
		if err := srv.call(ctx, http.MethodPost, "/permission/"+url.PathEscape(p.ID)+"/reply", body, nil); err != nil && srv.alive() {
			r.host.Logger().Warn("answer opencode permission", "err", err)
		}
	}
	if tr == nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); reply("reject", "no turn is running") }()
		return
	}
	toolUse := ""
	if first {
		r.convMu.Lock()
		if r.conv != nil {
			toolUse = r.conv.callBlock[p.SessionID+"/"+callID]
		}
		r.convMu.Unlock()
		if toolUse == "" {
			toolUse = callID
		}
	}
	input := map[string]any{}
	var meta map[string]json.RawMessage
	if json.Unmarshal(p.Metadata, &meta) == nil {
		for k, v := range meta {
			input[k] = v
		}
	}
	if len(p.Patterns) > 0 && string(p.Patterns) != "null" {
		input["patterns"] = p.Patterns
	}
	in, _ := json.Marshal(input)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		d, err := r.host.RequestPermission(tr.ctx, agent.PermissionRequest{ToolName: p.Permission, Input: in, ToolUseID: toolUse})
		switch {
		case err != nil:
			reply("reject", "the turn ended")
		case d.Behavior == conversation.Allow:
			reply("once", "")
		default:
			reply("reject", d.Message)
		}
	}()
}

// stdoutLine keeps what the server prints on stdout as a debug log.
func (r *runner) stdoutLine(line []byte) {
	if len(line) == 0 {
		return
	}
	r.logData(conversation.LevelDebug, "opencode output", line)
}

func (r *runner) logData(level conversation.LogLevel, msg string, data []byte) {
	r.emit(agentcli.LogEvent(level, msg, data))
}

func (r *runner) emit(evs ...conversation.Event) { agentcli.Emit(r.host, "opencode", evs...) }

// imageExt is a file extension for an image's media type.
func imageExt(mediaType string) string {
	if _, sub, ok := strings.Cut(mediaType, "/"); ok && sub != "" {
		return "." + sub
	}
	return ""
}
