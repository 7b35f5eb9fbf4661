package codex

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agentcli"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/internal/agent/convkit"
	"github.com/agentd/agentd/sandbox"
)

// State is what the runner saves with host.SaveAgentState: the Codex
// thread a later runner resumes.
type State struct {
	ThreadID string `json:"threadId"`
	// Rollout is the thread's rollout file, relative to the workspace.
	Rollout string `json:"rollout,omitempty"`
}

// TranscriptName is the name under which the runner stores the thread's
// rollout with host.SaveTranscript after every turn, so a thread can be
// resumed in a fresh workspace.
const TranscriptName = "codex-rollout.jsonl"

// runner drives one session's app-server. Turn, Interrupt and Close follow
// agent.Runner's rules; the read loop of the current process converts and
// emits what Codex prints.
type runner struct {
	arch Architecture
	host agent.Host
	appr approval

	// Lock order: mu and convMu are never held together. What the
	// converter returns is emitted while convMu is held, so the log's
	// order is the converter's: a turn's settled blocks cannot be
	// overtaken by a late update of the same block converted just before.
	convMu   sync.Mutex // serialises conv, turns and turnOpen between read loops of successive processes
	conv     *AppServerConverter
	turnOpen bool // a Turn runs; cleared before its pending blocks settle
	// turns are the Codex turn ids started while this runner ran, from
	// turn/started: token counts for other turns are what a resumed thread
	// replays, already counted by an earlier runner.
	turns map[string]bool

	mu     sync.Mutex // guards the fields below
	srv    *server    // the running app-server; nil before the first turn and after it died
	cur    *turnState // the running turn
	closed bool

	wg sync.WaitGroup // approval goroutines
}

// turnState is one running turn. Its fields are guarded by runner.mu
// except end, a channel.
type turnState struct {
	ctx         context.Context
	end         chan conversation.Payload // QueryCompleted or QueryFailed from the converter
	turnID      string
	interrupted bool
	asked       map[string]bool // item ids a permission was requested for
}

func newRunner(a Architecture, h agent.Host, appr approval) *runner {
	return &runner{arch: a, host: h, appr: appr,
		conv: NewAppServerConverter(WithoutUserMessages(), WithoutPermissionEvents()), turns: map[string]bool{}}
}

// server is one `codex app-server` process and its JSON-RPC client.
type server struct {
	r        *runner
	proc     *agentproc.Proc
	rpc      *rpcClient
	threadID string
}

func (s *server) alive() bool {
	select {
	case <-s.rpc.Done():
		return false
	default:
		return true
	}
}

// Turn implements agent.Runner.
func (r *runner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	tr := &turnState{ctx: ctx, end: make(chan conversation.Payload, 1), asked: map[string]bool{}}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return agent.TurnResult{}, agent.Fail(agent.CodeInternal, "codex runner is closed")
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
	if r.interrupted(tr) {
		return agent.TurnResult{}, agent.ErrInterrupted
	}
	// Images go first, as data: URLs (the app-server's UserInput "image").
	input := make([]map[string]any, 0, len(t.Images)+1)
	for _, im := range t.Images {
		input = append(input, map[string]any{"type": "image", "url": "data:" + im.MediaType + ";base64," + base64.StdEncoding.EncodeToString(im.Data)})
	}
	if t.Content != "" || len(input) == 0 {
		input = append(input, map[string]any{"type": "text", "text": t.Content, "text_elements": []any{}})
	}
	params := map[string]any{
		"threadId": srv.threadID,
		"input":    input,
	}
	var started struct {
		Turn struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	if err := srv.rpc.Call(ctx, "turn/start", params, &started); err != nil {
		return agent.TurnResult{}, r.callFailed(ctx, tr, srv, "start the turn", err)
	}
	r.mu.Lock()
	tr.turnID = started.Turn.ID
	intr := tr.interrupted
	r.mu.Unlock()
	if intr {
		go r.sendInterrupt(context.WithoutCancel(ctx), srv, started.Turn.ID)
	}

	select {
	case end := <-tr.end:
		r.saveTranscript(context.WithoutCancel(ctx), srv)
		return agent.TurnResult{}, r.turnEnd(tr, end)
	case <-srv.rpc.Done():
		r.dropServer(srv)
		if r.interrupted(tr) {
			return agent.TurnResult{}, agent.ErrInterrupted
		}
		return agent.TurnResult{}, srv.proc.ExitError()
	case <-ctx.Done():
		// The session gave up waiting (interrupt backstop or shutdown):
		// the process may be stuck, so it goes; the next turn resumes
		// the thread in a new one.
		r.stopServer(context.WithoutCancel(ctx), srv)
		if r.interrupted(tr) {
			return agent.TurnResult{}, agent.ErrInterrupted
		}
		return agent.TurnResult{}, ctx.Err()
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
	r.emit(r.conv.blocks.SettlePending(time.Now().UTC().Truncate(time.Millisecond))...)
}

func (r *runner) interrupted(tr *turnState) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return tr.interrupted
}

// exited reports whether the process's output ends within a moment: a
// request that failed to be written (broken pipe) usually means the
// process died, and its exit status and stderr say why.
func exited(srv *server) bool {
	t := time.NewTimer(2 * time.Second)
	defer t.Stop()
	select {
	case <-srv.rpc.Done():
		return true
	case <-t.C:
		return false
	}
}

// callFailed turns a failed request into the turn's error.
func (r *runner) callFailed(ctx context.Context, tr *turnState, srv *server, what string, err error) error {
	var we *wireError
	switch {
	case errors.Is(err, errClosed), ctx.Err() == nil && !errors.As(err, &we) && exited(srv):
		r.dropServer(srv)
		if r.interrupted(tr) {
			return agent.ErrInterrupted
		}
		return srv.proc.ExitError()
	case ctx.Err() != nil:
		r.stopServer(context.WithoutCancel(ctx), srv)
		if r.interrupted(tr) {
			return agent.ErrInterrupted
		}
		return ctx.Err()
	}
	return agent.Fail(agent.CodeAgentProtocol, "codex: %s: %v", what, err)
}

// turnEnd maps the converter's end of turn to Turn's result.
func (r *runner) turnEnd(tr *turnState, end conversation.Payload) error {
	switch e := end.(type) {
	case conversation.QueryCompleted:
		if e.Interrupted {
			return agent.ErrInterrupted
		}
		return nil
	case conversation.QueryFailed:
		if e.Interrupted || r.interrupted(tr) {
			return agent.ErrInterrupted
		}
		code := agent.CodeModelError
		switch e.Code {
		case "sandboxError":
			code = agent.CodeSandboxError
		case "sessionBudgetExceeded":
			code = agent.CodeBudgetExceeded
		}
		return agentcli.Failed(code, "codex", e)
	}
	return nil
}

// Interrupt implements agent.Runner: turn/interrupt for the running turn
// (sent as soon as its id is known when the turn is still starting); a
// process that does not answer is stopped.
func (r *runner) Interrupt(ctx context.Context) error {
	r.mu.Lock()
	tr, srv := r.cur, r.srv
	if tr == nil {
		r.mu.Unlock()
		return nil
	}
	tr.interrupted = true
	id := tr.turnID
	r.mu.Unlock()
	if srv == nil || id == "" {
		return nil // Turn sends it once the turn has an id
	}
	r.sendInterrupt(ctx, srv, id)
	return nil
}

func (r *runner) sendInterrupt(ctx context.Context, srv *server, turnID string) {
	err := srv.rpc.Call(ctx, "turn/interrupt", map[string]any{"threadId": srv.threadID, "turnId": turnID}, nil)
	if err != nil && srv.alive() {
		r.host.Logger().Warn("codex turn/interrupt failed; stopping the process", "err", err)
		r.stopServer(ctx, srv)
	}
}

// Close implements agent.Runner.
func (r *runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.proc.Stop(ctx, r.arch.stopGrace())
		select {
		case <-srv.rpc.Done():
		case <-ctx.Done():
		}
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// dropServer forgets a process that has ended.
func (r *runner) dropServer(srv *server) {
	r.mu.Lock()
	if r.srv == srv {
		r.srv = nil
	}
	r.mu.Unlock()
}

// stopServer stops a process (SIGINT, then SIGKILL) and forgets it.
func (r *runner) stopServer(ctx context.Context, srv *server) {
	r.dropServer(srv)
	srv.proc.Stop(ctx, r.arch.stopGrace())
	select {
	case <-srv.rpc.Done():
	case <-ctx.Done():
	}
}

// ensureServer returns the running app-server, starting one (initialize,
// then resume the session's thread or start one) when there is none.
func (r *runner) ensureServer(ctx context.Context) (*server, error) {
	r.mu.Lock()
	srv := r.srv
	r.mu.Unlock()
	if srv != nil {
		if srv.alive() {
			return srv, nil
		}
		// It died between turns; say so, then start another.
		r.dropServer(srv)
		r.emit(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
			Message: "codex app-server ended between turns (" + srv.proc.ExitError().Error() + "); starting a new one"}))
	}
	env := r.host.Env()
	home := path.Join(env.WorkDir(), HomeDir)
	proc, err := agentproc.Start(ctx, env, "codex", sandbox.Cmd{
		Argv: []string{r.arch.command(), "app-server"},
		Env:  map[string]string{"CODEX_HOME": home},
	})
	if err != nil {
		return nil, err
	}
	srv = &server{r: r, proc: proc}
	srv.rpc = newRPCClient(proc, srv)
	hctx, cancel := context.WithTimeout(ctx, r.arch.startTimeout())
	defer cancel()
	if err := r.handshake(hctx, srv); err != nil {
		var we *wireError
		if errors.Is(err, errClosed) || (!errors.As(err, &we) && exited(srv)) {
			<-srv.rpc.Done()
			return nil, srv.proc.ExitError()
		}
		srv.proc.Stop(context.WithoutCancel(ctx), r.arch.stopGrace())
		<-srv.rpc.Done()
		if hctx.Err() != nil && ctx.Err() == nil {
			return nil, agent.Fail(agent.CodeAgentProtocol, "codex app-server did not start within %s", r.arch.startTimeout())
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		srv.proc.Stop(context.WithoutCancel(ctx), r.arch.stopGrace())
		return nil, agent.Fail(agent.CodeInternal, "codex runner is closed")
	}
	r.srv = srv
	r.mu.Unlock()
	return srv, nil
}

// threadResponse is the part of thread/start and thread/resume results the
// runner reads.
type threadResponse struct {
	Thread struct {
		ID         string `json:"id"`
		Path       string `json:"path"`
		CLIVersion string `json:"cliVersion"`
	} `json:"thread"`
	Model string `json:"model"`
}

// notificationOptOut are app-server notifications agentd has no use for
// (they would only fill the log with debug events).
var notificationOptOut = []string{
	"account/rateLimits/updated", "remoteControl/status/changed", "thread/status/changed",
	"thread/readState/changed", "rawResponseItem/completed", "rawResponse/completed",
	"skills/changed", "app/list/updated", "mcpServer/startupStatus/updated",
}

func (r *runner) handshake(ctx context.Context, srv *server) error {
	init := map[string]any{
		"clientInfo": map[string]any{"name": "agentd", "title": "agentd", "version": "1"},
		"capabilities": map[string]any{
			"experimentalApi": false, "requestAttestation": false,
			"optOutNotificationMethods": notificationOptOut,
		},
	}
	if err := srv.rpc.Call(ctx, "initialize", init, nil); err != nil {
		return err
	}
	if err := srv.rpc.Notify("initialized", nil); err != nil {
		return fmt.Errorf("codex app-server: send initialized: %w", err)
	}
	prof := r.host.Profile()
	params := map[string]any{
		"cwd":            r.host.Env().WorkDir(),
		"approvalPolicy": r.appr.policy,
		"sandbox":        r.appr.sandbox,
	}
	if m := r.host.Options().Model; m != "" {
		params["model"] = m
	}
	if ins := agentcli.Instructions(prof); ins != "" {
		params["developerInstructions"] = ins
	}
	var st State
	if raw := r.host.AgentState(); len(raw) > 0 {
		_ = json.Unmarshal(raw, &st)
	}
	var resp threadResponse
	resumed := false
	if st.ThreadID != "" {
		p := map[string]any{"threadId": st.ThreadID, "excludeTurns": true}
		for k, v := range params {
			p[k] = v
		}
		err := srv.rpc.Call(ctx, "thread/resume", p, &resp)
		if err == nil {
			resumed = true
		} else {
			var we *wireError
			if !errors.As(err, &we) {
				return err
			}
			if !r.restoreRollout(ctx, srv, st, p, &resp) {
				r.emit(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
					Message: fmt.Sprintf("codex could not resume thread %s (%s); starting a new thread without the earlier turns", st.ThreadID, we.Message)}))
			} else {
				resumed = true
			}
		}
	}
	if !resumed {
		if err := srv.rpc.Call(ctx, "thread/start", params, &resp); err != nil {
			return err
		}
	}
	if resp.Thread.ID == "" {
		return agent.Fail(agent.CodeAgentProtocol, "codex app-server answered the thread request without a thread id")
	}
	srv.threadID = resp.Thread.ID
	rollout := ""
	if p, ok := strings.CutPrefix(resp.Thread.Path, strings.TrimSuffix(r.host.Env().WorkDir(), "/")+"/"); ok {
		rollout = p
	}
	if resp.Thread.ID != st.ThreadID || rollout != st.Rollout {
		b, _ := json.Marshal(State{ThreadID: resp.Thread.ID, Rollout: rollout})
		if err := r.host.SaveAgentState(ctx, b); err != nil {
			return fmt.Errorf("save codex thread id: %w", err)
		}
	}
	if err := r.host.SetAgentInfo(ctx, resp.Thread.CLIVersion, resp.Thread.ID); err != nil {
		r.host.Logger().Warn("record codex version", "err", err)
	}
	return nil
}

// restoreRollout handles a thread Codex cannot find (a workspace restored
// elsewhere, without .agentd): it writes the rollout saved with the
// session back and resumes from that file.
func (r *runner) restoreRollout(ctx context.Context, srv *server, st State, params map[string]any, resp *threadResponse) bool {
	if st.Rollout == "" {
		return false
	}
	data, err := r.host.LoadTranscript(ctx, TranscriptName)
	if err != nil || len(data) == 0 {
		r.host.Logger().Warn("no saved codex rollout to restore", "err", err)
		return false
	}
	if err := r.host.Env().WriteFile(ctx, st.Rollout, data, 0o600); err != nil {
		r.host.Logger().Warn("restore codex rollout", "err", err)
		return false
	}
	// Back where it was, Codex finds the rollout by the thread id (a path
	// parameter needs the experimental API).
	if err := srv.rpc.Call(ctx, "thread/resume", params, resp); err != nil {
		r.host.Logger().Warn("resume the restored codex rollout", "err", err)
		return false
	}
	return true
}

// saveTranscript stores the thread's rollout with the session.
func (r *runner) saveTranscript(ctx context.Context, srv *server) {
	var st State
	if raw := r.host.AgentState(); len(raw) > 0 {
		_ = json.Unmarshal(raw, &st)
	}
	if st.Rollout == "" || st.ThreadID != srv.threadID {
		return
	}
	data, err := r.host.Env().ReadFile(ctx, st.Rollout)
	if err != nil {
		r.host.Logger().Debug("read codex rollout", "err", err)
		return
	}
	if err := r.host.SaveTranscript(ctx, TranscriptName, data); err != nil {
		r.host.Logger().Warn("save codex rollout", "err", err)
	}
}

// emit appends events; a failure is logged (the session's log is the only
// place to report it, and it failed).
func (r *runner) emit(evs ...conversation.Event) { agentcli.Emit(r.host, "codex", evs...) }

// convert runs a line through the converter, emits the events, and hands
// an end of turn to the running turn.
func (r *runner) convert(line []byte, m *wireMessage) {
	var p struct {
		TurnID string `json:"turnId"`
		Turn   struct {
			ID string `json:"id"`
		} `json:"turn"`
	}
	switch m.Method {
	case "turn/started", "thread/tokenUsage/updated":
		_ = json.Unmarshal(m.Params, &p)
	}
	r.convMu.Lock()
	if m.Method == "turn/started" && p.Turn.ID != "" {
		r.turns[p.Turn.ID] = true
	}
	replayedUsage := m.Method == "thread/tokenUsage/updated" && !r.turns[p.TurnID]
	evs, err := r.conv.Convert(line)
	if err != nil {
		r.invalidLine(line, err)
		r.convMu.Unlock()
		return
	}
	if !r.turnOpen {
		// A late notification of a turn that has ended: nothing of it
		// may stay pending. turnOpen is read under convMu, so a
		// notification converted as the turn ends is settled either
		// here or by the turn's own settle, which then comes after it.
		evs = append(evs, r.conv.blocks.SettlePending(time.Now().UTC().Truncate(time.Millisecond))...)
	}
	evs, end := agentcli.SplitEnd(evs) // the session writes the turn's end itself
	out := evs[:0]
	for _, e := range evs {
		if e.Type == conversation.TypeMetadataUpdate && replayedUsage {
			// The converter took it as its baseline; the counts were
			// reported when those turns ran.
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
}

// invalidLine records a line that is not the protocol (kept verbatim when
// it is JSON, quoted otherwise).
func (r *runner) invalidLine(line []byte, err error) {
	r.emit(agentcli.LogEvent(conversation.LevelWarn, err.Error(), line))
}

// rpcHandler implementation: the current process's read loop.

func (s *server) notification(line []byte, m *wireMessage) { s.r.convert(line, m) }

func (s *server) invalid(line []byte, err error) { s.r.invalidLine(line, err) }

func (s *server) request(line []byte, m *wireMessage) {
	r := s.r
	a, ok := ParseApprovalRequest(m.Method, m.Params)
	if !ok {
		r.convert(line, m) // a log event naming the request
		result, err := unsupportedRequest(m.Method)
		if rerr := s.rpc.Respond(m.ID, result, err); rerr != nil {
			r.host.Logger().Warn("answer codex request", "method", m.Method, "err", rerr)
		}
		return
	}
	r.mu.Lock()
	tr := r.cur
	first := tr != nil && !tr.asked[a.ItemID] && a.ItemID != ""
	if first {
		tr.asked[a.ItemID] = true
	}
	r.mu.Unlock()
	toolUse := ""
	if first {
		r.convMu.Lock()
		toolUse = r.conv.blocks.Lookup("item:"+a.ThreadID+":"+a.TurnID+":"+a.ItemID, a.ItemID)
		r.convMu.Unlock()
	}
	id := append(json.RawMessage(nil), m.ID...)
	params := append(json.RawMessage(nil), m.Params...)
	if tr == nil {
		// No turn to ask for: Codex asked between turns.
		_ = s.rpc.Respond(id, approvalResponse(m.Method, params, false, "no turn is running"), nil)
		return
	}
	if a.ToolName == "apply_patch" && r.appr.autoPatch {
		r.emit(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo,
			Message: "codex file change accepted without asking (approvalMode auto_edit)", Data: convkit.MustJSON(a)}))
		_ = s.rpc.Respond(id, approvalResponse(m.Method, params, true, ""), nil)
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		d, err := r.host.RequestPermission(tr.ctx, agent.PermissionRequest{ToolName: a.ToolName, Input: a.Input, ToolUseID: toolUse})
		allow := err == nil && d.Behavior == conversation.Allow
		msg := d.Message
		if err != nil {
			msg = "the turn ended"
		}
		if rerr := s.rpc.Respond(id, approvalResponse(m.Method, params, allow, msg), nil); rerr != nil && s.alive() {
			r.host.Logger().Warn("answer codex approval", "err", rerr)
		}
	}()
}

// approvalResponse is the result for an approval request of method.
func approvalResponse(method string, params json.RawMessage, allow bool, msg string) any {
	switch method {
	case "item/permissions/requestApproval":
		var p struct {
			Permissions json.RawMessage `json:"permissions"`
		}
		_ = json.Unmarshal(params, &p)
		if !allow || len(p.Permissions) == 0 || string(p.Permissions) == "null" {
			return map[string]any{"permissions": map[string]any{}, "scope": "turn"}
		}
		return map[string]any{"permissions": p.Permissions, "scope": "turn"}
	case "execCommandApproval", "applyPatchApproval":
		if allow {
			return map[string]any{"decision": "approved"}
		}
		if msg == "" {
			msg = "denied"
		}
		return map[string]any{"decision": map[string]any{"denied": map[string]any{"rejection": msg}}}
	}
	if allow {
		return map[string]any{"decision": "accept"}
	}
	return map[string]any{"decision": "decline"}
}

// unsupportedRequest answers the server requests agentd has no channel
// for, so Codex never waits on them.
func unsupportedRequest(method string) (any, error) {
	switch method {
	case "mcpServer/elicitation/request":
		return map[string]any{"action": "decline", "content": nil, "_meta": nil}, nil
	case "item/tool/call":
		return map[string]any{"success": false, "contentItems": []map[string]any{
			{"type": "inputText", "text": "agentd registered no dynamic tools"}}}, nil
	case "item/tool/requestUserInput":
		return nil, &wireError{Code: -32000, Message: "agentd has no channel for questions to the user; continue without an answer"}
	}
	return nil, &wireError{Code: -32601, Message: "agentd does not handle " + method}
}
