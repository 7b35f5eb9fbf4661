package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/internal/sandbox"
)

// process is one running Claude Code CLI. Its reader goroutine owns the
// stream converter and the fields after "reader goroutine only"; mu guards
// the fields shared with Turn, Interrupt, the saver and the permission
// goroutines. Events reach the session's log only from the reader (in line
// order, batched) and from Host.RequestPermission.
type process struct {
	r       *runner
	proc    cliProc
	resumed bool // started with --resume

	ctx    context.Context // ends when the CLI exited; bounds permission waits
	cancel context.CancelFunc

	exitedCh chan struct{} // closed when the CLI exited and its output was converted
	done     chan struct{} // closed when everything of the process finished
	closing  atomic.Bool   // Close asked it to exit: an exit is no news
	perms    sync.WaitGroup

	mu        sync.Mutex // guards the fields up to saveCh
	turn      *turnWait
	exited    bool
	exitEnd   turnEnd              // how a turn waiting at the exit ended
	inflight  map[string]*inflight // the CLI's control requests being answered
	reqSeq    int
	saveUUID  string // the saver waits for this line in the transcript
	sessionID string // the CLI's session id, once its init line came
	projDir   string

	saveCh    chan struct{} // reader → saver: the transcript changed
	saverDone chan struct{}

	// reader goroutine only
	conv     *StreamConverter
	out      []conversation.Event
	sawInit  bool
	badRun   int // consecutive lines that are not stream-json
	anyGood  bool
	firstBad string
	protoErr error
	result   *resultInfo
	// resumeFailure is the CLI's answer when it could not resume.
	resumeFailure string
	resumeKill    *time.Timer
	subs          map[string]*liveSubagent
	subOrder      []*liveSubagent
}

// cliProc is the running CLI as the process uses it (*agentproc.Proc).
type cliProc interface {
	Lines() <-chan agentproc.Line
	Write(b []byte) error
	CloseStdin() error
	Signal(sig syscall.Signal) error
	Kill() error
	Stop(ctx context.Context, grace time.Duration)
	Stderr() string
	Exit() (sandbox.ExitStatus, error)
	ExitError() error
}

var _ cliProc = (*agentproc.Proc)(nil)

// turnWait is a Turn waiting for its end.
type turnWait struct{ done chan turnEnd }

// turnEnd is how a turn ended.
type turnEnd struct {
	result string
	err    error
	// retryFresh: the CLI could not resume its session; the turn should be
	// retried in a new process without --resume.
	retryFresh bool
	// notSent: the CLI had exited before the message was sent.
	notSent bool
}

// inflight is a control request of the CLI agentd is answering.
type inflight struct {
	cancel   context.CancelFunc
	canceled bool // withdrawn (by the CLI, or the turn ended): send no answer
}

// resultInfo is what the converter said about a result line.
type resultInfo struct {
	completed *conversation.QueryCompleted
	failed    *conversation.QueryFailed
}

func newProcess(r *runner, pr cliProc, resumed bool) *process {
	ctx, cancel := context.WithCancel(context.Background())
	return &process{
		r: r, proc: pr, resumed: resumed, ctx: ctx, cancel: cancel,
		exitedCh: make(chan struct{}), done: make(chan struct{}),
		inflight: make(map[string]*inflight),
		saveCh:   make(chan struct{}, 1), saverDone: make(chan struct{}),
		conv: NewStreamConverter(), subs: make(map[string]*liveSubagent),
	}
}

// begin starts the reader and the transcript saver, and opens the control
// protocol.
func (p *process) begin() {
	go p.read()
	go p.saver()
	// The CLI answers initialize once it is up; the answer is only logged.
	// The user message may follow at once: the CLI reads stdin in order.
	_ = p.sendControl("initialize")
}

// write sends one line to the CLI's stdin.
func (p *process) write(line []byte) error {
	select {
	case <-p.exitedCh:
		return errProcessGone
	default:
	}
	if err := p.proc.Write(line); err != nil {
		return fmt.Errorf("write to claude: %w", err)
	}
	return nil
}

// sendControl sends a control request of agentd (initialize, interrupt).
func (p *process) sendControl(subtype string) error {
	p.mu.Lock()
	p.reqSeq++
	id := "agentd-" + strconv.Itoa(p.reqSeq)
	p.mu.Unlock()
	body := map[string]any{"subtype": subtype}
	if subtype == "initialize" {
		body["hooks"] = nil
	}
	line, err := controlRequestLine(id, body)
	if err != nil {
		return err
	}
	return p.write(line)
}

// runTurn sends the user message and waits for the turn's end.
func (p *process) runTurn(ctx context.Context, t agent.Turn) turnEnd {
	w := &turnWait{done: make(chan turnEnd, 1)}
	p.mu.Lock()
	if p.exited {
		end := p.exitEnd
		p.mu.Unlock()
		end.notSent = true
		return end
	}
	p.turn = w
	p.mu.Unlock()
	line, err := userMessageLine(t.Content)
	if err == nil {
		err = p.write(line)
	}
	if err != nil && !errors.Is(err, errProcessGone) {
		p.r.host.Logger().Warn("send message to claude", "err", err)
	}
	select {
	case end := <-w.done:
		return end
	case <-ctx.Done():
		// The session gave up on the turn (interrupt backstop, shutdown).
		p.proc.Stop(context.Background(), p.r.opts.KillTimeout)
		end := <-w.done
		if end.err == nil || !errors.Is(end.err, agent.ErrInterrupted) {
			end.err = fmt.Errorf("claude turn: %w", ctx.Err())
		}
		return end
	}
}

// endTurn hands the end to the waiting Turn, if any.
func (p *process) endTurn(end turnEnd) bool {
	p.mu.Lock()
	w := p.turn
	p.turn = nil
	p.mu.Unlock()
	if w == nil {
		return false
	}
	w.done <- end
	return true
}

// read is the reader goroutine: it converts every stdout line, answers
// control requests, follows subagent transcripts, and emits the events in
// batches of whatever lines are ready.
func (p *process) read() {
	lines := p.proc.Lines()
	var ticker *time.Ticker
	var tick <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for lines != nil {
		select {
		case ln, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			p.handleLine(ln)
		drain:
			for len(p.out) < 1024 {
				select {
				case ln, ok := <-lines:
					if !ok {
						lines = nil
						break drain
					}
					p.handleLine(ln)
				default:
					break drain
				}
			}
		case <-tick:
			p.pollSubagents()
		}
		p.flush()
		// Follow subagent transcripts only while a subagent runs.
		active := p.activeSubagents()
		switch {
		case active && ticker == nil:
			ticker = time.NewTicker(p.r.opts.SubagentPoll)
			tick = ticker.C
		case !active && ticker != nil:
			ticker.Stop()
			ticker, tick = nil, nil
		}
	}
	p.finish()
}

// finish runs when stdout ended: the CLI exited.
func (p *process) finish() {
	for _, sa := range p.subOrder {
		if !sa.done {
			p.finalizeSubagent(sa, false) // the CLI exited: its files are complete
		}
	}
	p.flush()
	err := p.exitError()
	if p.resumeKill != nil {
		p.resumeKill.Stop()
	}
	end := turnEnd{err: err}
	if p.resumed && !p.sawInit && !p.r.wasInterrupted() &&
		(p.resumeFailure != "" || strings.Contains(p.proc.Stderr(), "No conversation found")) {
		end.retryFresh = true
	}
	p.mu.Lock()
	p.exited, p.exitEnd = true, end
	w := p.turn
	p.turn = nil
	p.mu.Unlock()
	close(p.exitedCh)
	p.cancel()
	p.perms.Wait() // open permission requests are resolved before the turn ends
	if w != nil {
		w.done <- end
	} else if !p.closing.Load() {
		p.r.emitLog(context.Background(), conversation.LevelWarn, "Claude Code exited between turns: "+err.Error()+"; the next message starts it again", nil)
	}
	close(p.saveCh)
	p.perms.Wait()
	<-p.saverDone
	close(p.done)
}

// exitError names why the CLI's output ended.
func (p *process) exitError() error {
	st, werr := p.proc.Exit()
	switch {
	case p.r.wasInterrupted():
		return agent.ErrInterrupted
	case p.protoErr != nil:
		return p.protoErr
	case !p.anyGood && p.firstBad != "":
		how := fmt.Sprintf("exited with code %d", st.Code)
		if werr != nil {
			how = werr.Error()
		} else if st.Signal != "" {
			how = "was killed by " + st.Signal
		}
		return agent.Fail(agent.CodeAgentProtocol, "%s does not speak stream-json: it printed %q and %s", p.r.opts.Command, p.firstBad, how)
	}
	return p.proc.ExitError()
}

// flush emits the pending events.
func (p *process) flush() {
	if len(p.out) == 0 {
		return
	}
	evs := p.out
	p.out = nil
	if err := p.r.host.Emit(context.Background(), evs...); err != nil {
		p.r.host.Logger().Error("record Claude Code events", "err", err, "events", len(evs))
	}
}

// handleLine converts one stdout line.
func (p *process) handleLine(ln agentproc.Line) {
	data := bytes.TrimSpace(ln.Data)
	if len(data) == 0 {
		return
	}
	if ln.Truncated {
		p.badLine(data, fmt.Sprintf("a line longer than %d bytes (cut)", agentproc.MaxLine))
		return
	}
	evs, err := p.conv.Convert(data)
	l := &p.conv.l
	if err != nil && !errors.Is(err, ErrIgnored) {
		p.badLine(data, "")
		return
	}
	p.badRun, p.anyGood = 0, true
	if strings.HasPrefix(l.Type, "control_") {
		p.control(data)
		return
	}
	if l.Type == "system" && l.Subtype == "init" {
		if in, ok := ParseInit(data); ok {
			p.onInit(in)
		}
	}
	// Subagents whose Task call ends on this line are completed from their
	// transcript first, so their blocks precede the completion.
	for _, e := range evs {
		if e.Type == conversation.TypeSubagentCompleted {
			var c conversation.SubagentCompleted
			if json.Unmarshal(e.Payload, &c) == nil {
				if sa := p.subs[c.ToolUseID]; sa != nil && !sa.done {
					p.finalizeSubagent(sa, c.Status != conversation.StatusError)
				}
			}
		}
	}
	if sa := p.subs[l.ParentToolUseID]; sa != nil && l.UUID != "" && (l.Type == "user" || l.Type == "assistant") {
		sa.streamUUID(l.UUID)
	}
	for _, e := range evs {
		switch e.Type {
		case conversation.TypeQueryStarted:
			continue
		case conversation.TypeQueryCompleted:
			var c conversation.QueryCompleted
			_ = json.Unmarshal(e.Payload, &c)
			p.result = &resultInfo{completed: &c}
			continue
		case conversation.TypeQueryFailed:
			var f conversation.QueryFailed
			_ = json.Unmarshal(e.Payload, &f)
			p.result = &resultInfo{failed: &f}
			continue
		case conversation.TypeSubagentSpawned:
			var s conversation.SubagentSpawned
			if json.Unmarshal(e.Payload, &s) == nil {
				p.trackSubagent(s.ToolUseID)
			}
		}
		if sa := p.subs[e.Context.ConversationID]; sa != nil && sa.hold(e) {
			continue
		}
		p.out = append(p.out, e)
	}
	if l.ParentToolUseID == "" && l.UUID != "" && (l.Type == "user" || l.Type == "assistant") {
		p.mu.Lock()
		p.saveUUID = l.UUID
		p.mu.Unlock()
	}
	if l.Type == "result" {
		p.flush()
		p.onResult()
	}
}

// badLine reports a line that is not stream-json; too many in a row end
// the turn with AGENT_PROTOCOL.
func (p *process) badLine(data []byte, why string) {
	p.badRun++
	shown := clip(data, 300)
	if p.firstBad == "" {
		p.firstBad = shown
	}
	if p.protoErr != nil {
		return
	}
	if why == "" {
		why = strconv.Quote(shown)
	}
	p.out = append(p.out, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
		Message: "Claude Code printed a line that is not stream-json: " + why}).From(conversation.SourceServer))
	if p.badRun >= p.r.opts.MaxBadLines {
		p.protoErr = agent.Fail(agent.CodeAgentProtocol, "%s printed %d lines in a row that are not stream-json (the first: %q)",
			p.r.opts.Command, p.badRun, p.firstBad)
		p.flush()
		_ = p.proc.Kill()
	}
}

// clip shortens b to at most n bytes of valid UTF-8.
func clip(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
		for len(b) > 0 && !utf8.Valid(b) {
			b = b[:len(b)-1]
		}
		return string(b) + "…"
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

func (p *process) onInit(in Init) {
	p.sawInit = true
	p.mu.Lock()
	if in.SessionID != "" {
		p.sessionID = in.SessionID
	}
	if in.Cwd != "" {
		p.projDir = projectDirName(in.Cwd)
	}
	p.mu.Unlock()
	p.r.recordSession(p.ctx, in)
}

// onResult ends the turn at the CLI's result line.
func (p *process) onResult() {
	res := p.result
	p.result = nil
	end := turnEnd{}
	switch {
	case res == nil:
	case res.completed != nil:
		end.result = res.completed.Result
	case res.failed != nil:
		f := res.failed
		switch {
		case p.resumed && !p.sawInit && !p.r.wasInterrupted():
			// The CLI refused to resume (it answers a session it cannot
			// find with this result, then exits): finish decides, with the
			// CLI's stderr at hand. A CLI that lingers is stopped.
			p.resumeFailure = orElse(f.Error, "resume failed")
			p.resumeKill = time.AfterFunc(p.r.opts.FlushTimeout, func() { _ = p.proc.Kill() })
			return
		case p.r.wasInterrupted():
			end.err = agent.ErrInterrupted
		default:
			code := agent.CodeModelError
			if f.Code == "MAX_BUDGET" {
				code = agent.CodeBudgetExceeded
			}
			msg := orElse(f.Error, "Claude Code reported an error")
			p.out = append(p.out, conversation.NewEvent(conversation.ErrorEvent{Message: msg, Code: code}))
			p.flush()
			end.err = agent.Fail(code, "%s", msg)
		}
	}
	p.abandonPermissions()
	p.requestSave()
	p.endTurn(end)
}

// abandonPermissions withdraws the permission requests still open when a
// turn ends (the CLI moved on: no answer is sent) and waits until the
// session has resolved them, before the turn's end is reported.
func (p *process) abandonPermissions() {
	p.mu.Lock()
	for _, in := range p.inflight {
		in.canceled = true
		in.cancel()
	}
	p.mu.Unlock()
	p.perms.Wait()
}

// control handles a control protocol line.
func (p *process) control(line []byte) {
	m, err := parseControl(line)
	if err != nil {
		p.out = append(p.out, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
			Message: "unusable control message from Claude Code: " + err.Error(), Data: json.RawMessage(compactJSON(line))}).From(conversation.SourceServer))
		return
	}
	switch m.Type {
	case typeControlResponse:
		var r controlResponseBody
		_ = json.Unmarshal(m.Response, &r)
		if r.Subtype == "error" {
			p.out = append(p.out, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
				Message: "Claude Code refused control request " + r.RequestID + ": " + r.Error}).From(conversation.SourceServer))
		}
	case typeControlCancel:
		p.mu.Lock()
		if in := p.inflight[m.RequestID]; in != nil {
			in.canceled = true
			in.cancel()
		}
		p.mu.Unlock()
	case typeControlRequest:
		var head controlRequestBody
		_ = json.Unmarshal(m.Request, &head)
		if head.Subtype != "can_use_tool" {
			p.out = append(p.out, conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo,
				Message: "refused Claude Code control request " + strconv.Quote(head.Subtype) + " (agentd does not use it)"}).From(conversation.SourceServer))
			p.answerError(m.RequestID, "agentd does not support control request "+strconv.Quote(head.Subtype))
			return
		}
		var req canUseTool
		if err := json.Unmarshal(m.Request, &req); err != nil || req.ToolName == "" {
			p.answerError(m.RequestID, "can_use_tool request without a tool name")
			return
		}
		// The tool call's block goes out before the permission request.
		p.flush()
		ctx, cancel := context.WithCancel(p.ctx)
		in := &inflight{cancel: cancel}
		p.mu.Lock()
		p.inflight[m.RequestID] = in
		p.mu.Unlock()
		p.perms.Add(1)
		go p.answerPermission(ctx, m.RequestID, in, req)
	}
}

func (p *process) answerError(id, msg string) {
	if line, err := controlErrorLine(id, msg); err == nil {
		_ = p.write(line)
	}
}

// answerPermission asks the session (policy, clients, timeout) and answers
// the CLI.
func (p *process) answerPermission(ctx context.Context, id string, in *inflight, req canUseTool) {
	defer p.perms.Done()
	defer func() {
		in.cancel()
		p.mu.Lock()
		delete(p.inflight, id)
		p.mu.Unlock()
	}()
	input := req.Input
	if !isJSONObject(input) {
		input = json.RawMessage("{}")
	}
	d, err := p.r.host.RequestPermission(ctx, agent.PermissionRequest{ToolName: req.ToolName, Input: input, ToolUseID: req.ToolUseID})
	p.mu.Lock()
	withdrawn := in.canceled
	p.mu.Unlock()
	if withdrawn {
		return
	}
	if err != nil {
		// The CLI exited, or the session could not record the request.
		p.answerError(id, "agentd could not ask for permission: "+err.Error())
		return
	}
	var resp any
	if d.Behavior == conversation.Allow {
		upd := d.UpdatedInput
		if !isJSONObject(upd) {
			upd = input
		}
		resp = permissionAllow{Behavior: "allow", UpdatedInput: upd}
	} else {
		resp = permissionDeny{Behavior: "deny", Message: orElse(d.Message, "denied")}
	}
	line, err := controlSuccessLine(id, resp)
	if err != nil {
		p.answerError(id, err.Error())
		return
	}
	_ = p.write(line)
}

func isJSONObject(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 1 && t[0] == '{' && json.Valid(t)
}

// requestSave asks the saver to store the transcript once the CLI wrote
// the turn's last line.
func (p *process) requestSave() {
	select {
	case p.saveCh <- struct{}{}:
	default:
	}
}

// saver stores the Claude session's transcript with the session after
// each turn (waiting for the CLI's buffered write of the turn's last line)
// and once more when the CLI exited.
func (p *process) saver() {
	defer close(p.saverDone)
	for range p.saveCh {
		p.saveTranscript(true)
	}
	p.saveTranscript(false)
}

// saveTranscript reads the main transcript and saves it. With wait, it
// first waits (up to FlushTimeout) until the file holds the last line the
// stream showed.
func (p *process) saveTranscript(wait bool) {
	p.mu.Lock()
	id, dir, want := p.sessionID, p.projDir, p.saveUUID
	p.mu.Unlock()
	if id == "" || dir == "" {
		return
	}
	env := p.r.host.Env()
	rel := path.Join(projectsRel, dir, transcriptName(id))
	ctx, cancel := context.WithTimeout(context.Background(), p.r.opts.FlushTimeout+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(p.r.opts.FlushTimeout)
	var data []byte
	for {
		b, err := env.ReadFile(ctx, rel)
		if err == nil {
			data = b
			if want == "" || bytes.Contains(b, []byte(want)) {
				break
			}
		}
		if !wait || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(25 * time.Millisecond):
		case <-p.exitedCh:
			// The CLI exited: the file is final; the saver saves it once
			// more anyway.
			wait = false
		}
	}
	if data == nil {
		return
	}
	if err := p.r.host.SaveTranscript(ctx, transcriptName(id), data); err != nil {
		p.r.host.Logger().Warn("save Claude Code transcript", "err", err)
	}
}
