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

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
	"github.com/agentd/agentd/sandbox"
)

// process is one running Claude Code CLI. Its goroutines: the reader
// (read: converts stdout, answers control requests, follows subagent
// transcripts), the transcript saver (saver), and one per permission
// request being answered (answerPermission); Turn's (or Resume's) job
// goroutine, Interrupt, UpdateOptions, Detach and Close call in from
// outside. Its state is split by owner:
//
//   - the fields up to mu are set before begin and only read after, but
//     closing (atomic); the channels are closed once (detachCh through
//     detachOnce) and ctx is canceled once, so any goroutine may wait on
//     them;
//   - shared, guarded by mu, is what the reader shares with the others;
//   - ctl is the control-request bookkeeping, safe for concurrent use;
//   - rd is the reader goroutine's own.
//
// Events reach the session's log only from the reader (in line order,
// batched) and from Host.RequestPermission.
type process struct {
	r       *runner
	proc    cliProc
	tag     string
	resumed bool // started with --resume
	// resumable: the environment keeps the CLI across server restarts
	// (sandbox.Attacher); the reader keeps what it stores resumable (see
	// resume.go).
	resumable bool
	attached  bool // re-attached after a restart (Resume), not started here

	detachCh   chan struct{} // closed by detach: the server lets go of the CLI
	detachOnce sync.Once
	firstLine  chan struct{} // closed at the first line of the CLI's own (not control, not keep-alive)

	ctx    context.Context // ends when the CLI exited; bounds permission waits
	cancel context.CancelFunc

	exitedCh  chan struct{} // closed when the CLI exited and its output was converted
	done      chan struct{} // closed when everything of the process finished
	closing   atomic.Bool   // Close asked it to exit: an exit is no news
	saveCh    chan struct{} // reader → saver: the transcript changed; closed by the reader at its end
	saverDone chan struct{}

	// mu guards shared, and nothing else; it is never held across a call
	// that blocks (a write to the CLI, a Host call).
	mu     sync.Mutex
	shared sharedState

	ctl controlRequests
	rd  readerState
}

// sharedState is the part of a process the reader shares with Turn's job
// goroutine, UpdateOptions, the saver and Resume. Guarded by process.mu
// (…Locked methods need it held); before begin the starter sets it freely.
type sharedState struct {
	turn      *turnWait // the Turn waiting for its end
	exited    bool
	exitEnd   turnEnd // how a turn waiting at the exit ended
	saveUUID  string  // the saver waits for this line in the transcript
	sessionID string  // the CLI's session id, once its init line came
	projDir   string
	turnQuery string    // the turn being run ("" between turns)
	idle      turnStart // where the next turn's output starts
	// model and mode are the model and permission mode the CLI runs with
	// (what it started with, or was told since).
	model, mode string
}

// readerState is the part of a process only its reader goroutine uses:
// read and what it calls (handleLine, flush, control, pollSubagents,
// onResult, finish). Resume seeds conv, filter and answered before begin
// starts the reader; tests that call handleLine directly act as the
// reader.
type readerState struct {
	conv   *claudeconv.StreamConverter
	out    []outEvent
	track  *blockTracker // resumable only: the turn sequence's blocks
	seqNo  int           // events of the turn sequence so far
	filter *replayFilter // a resumed turn: drops what the log holds
	// answered are the responses an earlier server sent for this turn's
	// permission requests (turnMark.Perms), sent again instead of asking.
	answered map[string]permAnswer
	lineEnd  int64 // stdout offset after the line being handled
	gotLine  bool
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

// cliProc is the running CLI as the process uses it (*pipe).
type cliProc interface {
	Lines() <-chan cliLine
	// Abandon stops delivering lines; the CLI keeps running (Detach).
	Abandon()
	Write(b []byte) error
	CloseStdin() error
	Signal(sig syscall.Signal) error
	Kill() error
	Stop(ctx context.Context, grace time.Duration)
	Stderr() string
	Exit() (sandbox.ExitStatus, error)
	ExitError() error
}

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

// resultInfo is what the converter said about a result line.
type resultInfo struct {
	completed *conversation.QueryCompleted
	failed    *conversation.QueryFailed
}

func newProcess(r *runner, pr cliProc, tag string, resumed, resumable bool) *process {
	ctx, cancel := context.WithCancel(context.Background())
	p := &process{
		r: r, proc: pr, tag: tag, resumed: resumed, resumable: resumable, ctx: ctx, cancel: cancel,
		exitedCh: make(chan struct{}), done: make(chan struct{}),
		detachCh: make(chan struct{}), firstLine: make(chan struct{}),
		saveCh: make(chan struct{}, 1), saverDone: make(chan struct{}),
		ctl: controlRequests{prefix: "agentd-"},
		rd:  readerState{conv: claudeconv.NewStreamConverter(), subs: make(map[string]*liveSubagent)},
	}
	if resumable {
		p.rd.track = newBlockTracker()
	}
	if _, ok := r.host.(agent.ArtifactPutter); ok {
		p.rd.conv.KeepImages() // images of tool results become artifacts
	}
	return p
}

// storeImages stores the images of a converted line as artifacts, before
// the events that reference them are emitted.
func (p *process) storeImages(ims []claudeconv.Image) {
	ap := p.r.host.(agent.ArtifactPutter)
	for _, im := range ims {
		if _, err := ap.PutArtifact(context.Background(), im.Ref, bytes.NewReader(im.Data)); err != nil {
			p.r.host.Logger().Warn("store a tool result's image", "sha256", im.Ref.SHA256, "err", err)
		}
	}
}

// begin starts the reader and the transcript saver, and opens the control
// protocol (a re-attached CLI has it open already).
func (p *process) begin() {
	go p.read()
	go p.saver()
	if p.attached {
		return
	}
	// The CLI answers initialize once it is up; the answer is only logged.
	// The user message may follow at once: the CLI reads stdin in order.
	_ = p.sendControl("initialize")
}

// detach makes the process let go of the CLI: the reader stops (storing
// nothing more), the CLI keeps running.
func (p *process) detach() {
	p.detachOnce.Do(func() { close(p.detachCh) })
}

func (p *process) detached() bool {
	select {
	case <-p.detachCh:
		return true
	default:
		return false
	}
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
	return p.sendControlWith(subtype, nil)
}

// sendControlWith sends a control request with fields besides its subtype
// (set_model, set_permission_mode). The answer is only logged when it is
// an error.
func (p *process) sendControlWith(subtype string, fields map[string]any) error {
	id := p.ctl.nextID()
	body := map[string]any{"subtype": subtype}
	for k, v := range fields {
		body[k] = v
	}
	if subtype == "initialize" {
		body["hooks"] = nil
	}
	line, err := controlRequestLine(id, body)
	if err != nil {
		return err
	}
	return p.write(line)
}

// runTurn sends the user message and waits for the turn's end. In a
// resumable environment it first records where the turn's output starts.
func (p *process) runTurn(ctx context.Context, t agent.Turn) turnEnd {
	w := &turnWait{done: make(chan turnEnd, 1)}
	p.mu.Lock()
	if p.shared.exited {
		end := p.shared.exitEnd
		p.mu.Unlock()
		end.notSent = true
		return end
	}
	p.shared.turn = w
	p.shared.turnQuery = t.QueryID
	start := p.shared.idle
	p.mu.Unlock()
	if p.resumable {
		p.r.markTurn(ctx, turnMark{QueryID: t.QueryID, Tag: p.tag, Offset: start.offset, Seed: start.seed})
	}
	p.sendMessage(ctx, t)
	return p.waitTurn(ctx, w)
}

// sendMessage writes the turn's user message.
func (p *process) sendMessage(ctx context.Context, t agent.Turn) {
	line, err := userMessageLine(t.Content, t.Images)
	if err == nil {
		err = p.write(line)
	}
	if err != nil && !errors.Is(err, errProcessGone) {
		p.r.host.Logger().Warn("send message to claude", "err", err)
	}
	if err == nil && p.resumable {
		p.r.markSent(ctx, t.QueryID)
	}
}

// waitTurn waits for the end of the turn w waits for.
func (p *process) waitTurn(ctx context.Context, w *turnWait) turnEnd {
	select {
	case end := <-w.done:
		return end
	case <-p.detachCh:
		// The server lets go: the turn goes on in the environment.
		return turnEnd{err: agent.ErrDetached}
	case <-ctx.Done():
		// The session gave up on the turn (interrupt backstop, shutdown).
		p.proc.Stop(context.Background(), p.r.opts.KillTimeout)
		var end turnEnd
		select {
		case end = <-w.done:
		case <-p.detachCh:
			return turnEnd{err: agent.ErrDetached}
		}
		if end.err == nil || !errors.Is(end.err, agent.ErrInterrupted) {
			end.err = fmt.Errorf("claude turn: %w", ctx.Err())
		}
		return end
	}
}

// endTurn hands the end to the waiting Turn, if any.
func (p *process) endTurn(end turnEnd) bool {
	p.mu.Lock()
	w := p.takeTurnLocked()
	p.mu.Unlock()
	if w == nil {
		return false
	}
	w.done <- end
	return true
}

// takeTurnLocked takes the waiting Turn, if any, so that only one end is
// reported to it. p.mu must be held.
func (p *process) takeTurnLocked() *turnWait {
	w := p.shared.turn
	p.shared.turn = nil
	return w
}

// deferLimit bounds how long events whose presence the log's reduced
// state cannot show wait for an evident event (resumable environments, see
// resume.go) before they are stored with a checkpoint.
const deferLimit = 500 * time.Millisecond

// read is the reader goroutine: it converts every stdout line, answers
// control requests, follows subagent transcripts, and emits the events in
// batches of whatever lines are ready.
func (p *process) read() {
	lines := p.proc.Lines()
	var ticker *time.Ticker
	var tick <-chan time.Time
	var stale *time.Timer
	var staleC <-chan time.Time
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
		if stale != nil {
			stale.Stop()
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
			for len(p.rd.out) < 1024 && !p.detached() {
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
		case <-staleC:
			stale, staleC = nil, nil
			// Not while a resumed turn still skips what the log holds:
			// a later line decides whether these are stored.
			if p.rd.filter == nil || p.rd.filter.live {
				p.flushAll()
			}
		case <-p.detachCh:
		}
		if p.detached() {
			p.endDetached()
			return
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
		switch {
		case len(p.rd.out) > 0 && staleC == nil:
			stale = time.NewTimer(deferLimit)
			staleC = stale.C
		case len(p.rd.out) == 0 && stale != nil:
			stale.Stop()
			stale, staleC = nil, nil
		}
	}
	p.finish()
}

// endDetached ends the reader after detach: nothing more is stored or
// answered; the CLI, its pending permission requests and its output stay
// with the environment for a later server.
func (p *process) endDetached() {
	p.rd.out = nil
	p.proc.Abandon()
	close(p.saveCh)
	<-p.saverDone
	close(p.done)
}

// finish runs when stdout ended: the CLI exited.
func (p *process) finish() {
	for _, sa := range p.rd.subOrder {
		if !sa.done {
			p.finalizeSubagent(sa, false) // the CLI exited: its files are complete
		}
	}
	p.flushAll()
	err := p.exitError()
	if p.rd.resumeKill != nil {
		p.rd.resumeKill.Stop()
	}
	end := turnEnd{err: err}
	if p.resumed && !p.rd.sawInit && !p.r.wasInterrupted() &&
		(p.rd.resumeFailure != "" || strings.Contains(p.proc.Stderr(), "No conversation found")) {
		end.retryFresh = true
	}
	p.mu.Lock()
	p.shared.exited, p.shared.exitEnd = true, end
	w := p.takeTurnLocked()
	p.shared.turnQuery = ""
	p.mu.Unlock()
	close(p.exitedCh)
	p.cancel()
	p.ctl.wait() // open permission requests are resolved before the turn ends
	if w != nil {
		w.done <- end
	} else if !p.closing.Load() {
		p.r.emitLog(context.Background(), conversation.LevelWarn, "Claude Code exited between turns: "+err.Error()+"; the next message starts it again", nil)
	}
	close(p.saveCh)
	p.ctl.wait()
	<-p.saverDone
	close(p.done)
}

// exitError names why the CLI's output ended.
func (p *process) exitError() error {
	st, werr := p.proc.Exit()
	switch {
	case p.r.wasInterrupted():
		return agent.ErrInterrupted
	case p.rd.protoErr != nil:
		return p.rd.protoErr
	case !p.rd.anyGood && p.rd.firstBad != "":
		how := fmt.Sprintf("exited with code %d", st.Code)
		if werr != nil {
			how = werr.Error()
		} else if st.Signal != "" {
			how = "was killed by " + st.Signal
		}
		return agent.Fail(agent.CodeAgentProtocol, "%s does not speak stream-json: it printed %q and %s", p.r.opts.Command, p.rd.firstBad, how)
	}
	return p.proc.ExitError()
}

// addSeq queues an event of the turn sequence: converted from a line, in
// line order (see resume.go).
func (p *process) addSeq(e conversation.Event) {
	o := outEvent{ev: e}
	if p.resumable {
		p.rd.seqNo++
		o.seq = p.rd.seqNo
		o.key, o.after, o.evident, o.isBlock = p.rd.track.apply(e)
	}
	p.rd.out = append(p.rd.out, o)
}

// addPolled queues a subagent block the transcript poller found.
func (p *process) addPolled(e conversation.Event) {
	o := outEvent{ev: e, poll: true}
	if p.resumable {
		o.key, o.after, _, o.isBlock = p.rd.track.apply(e)
	}
	p.rd.out = append(p.rd.out, o)
}

// flush emits the pending events. In a resumable environment the turn
// sequence's trailing events that are not evident stay queued.
func (p *process) flush() { p.store(false) }

// flushAll emits every pending event; in a resumable environment a batch
// whose last event of the turn sequence is not evident ends with the
// turn's checkpoint.
func (p *process) flushAll() { p.store(true) }

func (p *process) store(all bool) {
	if len(p.rd.out) == 0 {
		return
	}
	if p.detached() {
		p.rd.out = nil
		return
	}
	batch := p.rd.out
	p.rd.out = nil
	if p.resumable {
		cut := len(batch)
		if !all {
			cut = 0
			for i := len(batch) - 1; i >= 0; i-- {
				if !batch[i].poll && batch[i].evident {
					cut = i + 1
					break
				}
			}
		}
		now := append([]outEvent(nil), batch[:cut]...)
		for _, o := range batch[cut:] {
			if o.poll {
				now = append(now, o)
			} else {
				p.rd.out = append(p.rd.out, o)
			}
		}
		batch = now
		if p.rd.filter != nil {
			batch = p.rd.filter.pass(batch, all)
		}
	}
	evs := make([]conversation.Event, 0, len(batch)+1)
	for _, o := range batch {
		evs = append(evs, o.ev)
	}
	if all && p.resumable {
		last := -1
		for i := len(batch) - 1; i >= 0; i-- {
			if !batch[i].poll {
				last = i
				break
			}
		}
		p.mu.Lock()
		q := p.shared.turnQuery
		p.mu.Unlock()
		if last >= 0 && !batch[last].evident && q != "" {
			evs = append(evs, checkpoint(q, p.rd.seqNo))
		}
	}
	if len(evs) == 0 {
		return
	}
	if err := p.r.host.Emit(context.Background(), evs...); err != nil {
		p.r.host.Logger().Error("record Claude Code events", "err", err, "events", len(evs))
	}
}

// handleLine converts one stdout line.
func (p *process) handleLine(ln cliLine) {
	p.rd.lineEnd = ln.End
	data := bytes.TrimSpace(ln.Data)
	if len(data) == 0 {
		return
	}
	if ln.Truncated {
		p.badLine(data, fmt.Sprintf("a line longer than %d bytes (cut)", agentproc.MaxLine))
		return
	}
	evs, err := p.rd.conv.Convert(data)
	if ims := p.rd.conv.TakeImages(); len(ims) > 0 {
		p.storeImages(ims)
	}
	if err != nil && !errors.Is(err, claudeconv.ErrIgnored) {
		p.badLine(data, "")
		return
	}
	l := p.rd.conv.Line()
	p.rd.badRun, p.rd.anyGood = 0, true
	if !p.rd.gotLine && l.Type != "keep_alive" && !strings.HasPrefix(l.Type, "control_") {
		// The CLI is working on a message (Resume: it got the turn's).
		p.rd.gotLine = true
		close(p.firstLine)
	}
	if strings.HasPrefix(l.Type, "control_") {
		p.control(data)
		return
	}
	if l.Type == "system" && l.Subtype == "init" {
		if in, ok := claudeconv.ParseInit(data); ok {
			p.onInit(in)
		}
	}
	// Subagents whose Task call ends on this line are completed from their
	// transcript first, so their blocks precede the completion.
	for _, e := range evs {
		if e.Type == conversation.TypeSubagentCompleted {
			var c conversation.SubagentCompleted
			if json.Unmarshal(e.Payload, &c) == nil {
				if sa := p.rd.subs[c.ToolUseID]; sa != nil && !sa.done {
					p.finalizeSubagent(sa, c.Status != conversation.StatusError)
				}
			}
		}
	}
	if sa := p.rd.subs[l.ParentToolUseID]; sa != nil && l.UUID != "" && (l.Type == "user" || l.Type == "assistant") {
		sa.streamUUID(l.UUID)
	}
	for _, e := range evs {
		switch e.Type {
		case conversation.TypeQueryStarted:
			continue
		case conversation.TypeQueryCompleted:
			var c conversation.QueryCompleted
			_ = json.Unmarshal(e.Payload, &c)
			p.rd.result = &resultInfo{completed: &c}
			continue
		case conversation.TypeQueryFailed:
			var f conversation.QueryFailed
			_ = json.Unmarshal(e.Payload, &f)
			p.rd.result = &resultInfo{failed: &f}
			continue
		case conversation.TypeSubagentSpawned:
			var s conversation.SubagentSpawned
			if json.Unmarshal(e.Payload, &s) == nil {
				p.trackSubagent(s.ToolUseID)
			}
		}
		if sa := p.rd.subs[e.Context.ConversationID]; sa != nil && sa.hold(e) {
			continue
		}
		p.addSeq(e)
	}
	if l.ParentToolUseID == "" && l.UUID != "" && (l.Type == "user" || l.Type == "assistant") {
		p.mu.Lock()
		p.shared.saveUUID = l.UUID
		p.mu.Unlock()
	}
	if l.Type == "result" {
		p.onResult()
	}
}

// badLine reports a line that is not stream-json; too many in a row end
// the turn with AGENT_PROTOCOL.
func (p *process) badLine(data []byte, why string) {
	p.rd.badRun++
	shown := clip(data, 300)
	if p.rd.firstBad == "" {
		p.rd.firstBad = shown
	}
	if p.rd.protoErr != nil {
		return
	}
	if why == "" {
		why = strconv.Quote(shown)
	}
	p.addSeq(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
		Message: "Claude Code printed a line that is not stream-json: " + why}).From(conversation.SourceServer))
	if p.rd.badRun >= p.r.opts.MaxBadLines {
		p.rd.protoErr = agent.Fail(agent.CodeAgentProtocol, "%s printed %d lines in a row that are not stream-json (the first: %q)",
			p.r.opts.Command, p.rd.badRun, p.rd.firstBad)
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

func (p *process) onInit(in claudeconv.Init) {
	p.rd.sawInit = true
	p.mu.Lock()
	if in.SessionID != "" {
		p.shared.sessionID = in.SessionID
	}
	if in.Cwd != "" {
		p.shared.projDir = projectDirName(in.Cwd)
	}
	p.mu.Unlock()
	p.r.recordSession(p.ctx, in)
}

// onResult ends the turn at the CLI's result line: it stores the turn's
// last events, notes where the next turn's output starts, and reports the
// end.
func (p *process) onResult() {
	res := p.rd.result
	p.rd.result = nil
	end := turnEnd{}
	switch {
	case res == nil:
	case res.completed != nil:
		end.result = res.completed.Result
	case res.failed != nil:
		f := res.failed
		switch {
		case p.resumed && !p.rd.sawInit && !p.r.wasInterrupted():
			// The CLI refused to resume (it answers a session it cannot
			// find with this result, then exits): finish decides, with the
			// CLI's stderr at hand. A CLI that lingers is stopped.
			p.flush()
			p.rd.resumeFailure = orElse(f.Error, "resume failed")
			p.rd.resumeKill = time.AfterFunc(p.r.opts.FlushTimeout, func() { _ = p.proc.Kill() })
			return
		case p.r.wasInterrupted():
			end.err = agent.ErrInterrupted
		default:
			code := agent.CodeModelError
			if f.Code == "MAX_BUDGET" {
				code = agent.CodeBudgetExceeded
			}
			msg := orElse(f.Error, "Claude Code reported an error")
			p.addSeq(conversation.NewEvent(conversation.ErrorEvent{Message: msg, Code: code}))
			end.err = agent.Fail(code, "%s", msg)
		}
	}
	p.flushAll()
	p.abandonPermissions()
	// The next turn's output starts after this line, with the converter as
	// it is now.
	p.mu.Lock()
	p.shared.idle = turnStart{offset: p.rd.lineEnd, seed: p.rd.conv.Seed()}
	p.shared.turnQuery = ""
	p.mu.Unlock()
	p.rd.seqNo = 0
	if p.resumable {
		p.rd.track = newBlockTracker()
	}
	p.rd.filter = nil
	p.requestSave()
	p.endTurn(end)
}

// abandonPermissions withdraws the permission requests still open when a
// turn ends (the CLI moved on: no answer is sent) and waits until the
// session has resolved them, before the turn's end is reported.
func (p *process) abandonPermissions() {
	p.ctl.withdrawAll()
}

// control handles a control protocol line.
func (p *process) control(line []byte) {
	m, err := parseControl(line)
	if err != nil {
		p.addSeq(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
			Message: "unusable control message from Claude Code: " + err.Error(), Data: jsonOrNil(line)}).From(conversation.SourceServer))
		return
	}
	switch m.Type {
	case typeControlResponse:
		var r controlResponseBody
		_ = json.Unmarshal(m.Response, &r)
		if r.Subtype == "error" {
			p.addSeq(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelWarn,
				Message: "Claude Code refused control request " + r.RequestID + ": " + r.Error}).From(conversation.SourceServer))
		}
	case typeControlCancel:
		withdrawn := p.ctl.withdraw(m.RequestID)
		p.mu.Lock()
		q := p.shared.turnQuery
		p.mu.Unlock()
		if withdrawn && p.resumable {
			// A later server replaying this turn must not ask again.
			p.r.recordPerm(p.ctx, q, m.RequestID, permAnswer{})
		}
	case typeControlRequest:
		var head controlRequestBody
		_ = json.Unmarshal(m.Request, &head)
		if head.Subtype != "can_use_tool" {
			p.addSeq(conversation.NewEvent(conversation.LogEvent{Level: conversation.LevelInfo,
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
		if a, ok := p.rd.answered[m.RequestID]; ok {
			// Decided before the restart: the same answer again (the CLI
			// ignores it if it got the first), or nothing for a request it
			// withdrew.
			if !a.withdrawn() {
				if line, err := a.line(m.RequestID, permInput(req)); err == nil {
					_ = p.write(line)
				}
			}
			return
		}
		ctx, cancel := context.WithCancel(p.ctx)
		p.mu.Lock()
		q := p.shared.turnQuery
		p.mu.Unlock()
		in := p.ctl.start(m.RequestID, cancel)
		go p.answerPermission(ctx, q, m.RequestID, in, req)
	}
}

func (p *process) answerError(id, msg string) {
	if line, err := controlErrorLine(id, msg); err == nil {
		_ = p.write(line)
	}
}

// permInput is the tool input of a permission request as agentd passes it
// on (an object).
func permInput(req canUseTool) json.RawMessage {
	if !isJSONObject(req.Input) {
		return json.RawMessage("{}")
	}
	return req.Input
}

// answerPermission asks the session (policy, clients, timeout) and answers
// the CLI.
func (p *process) answerPermission(ctx context.Context, queryID, id string, in *inflight, req canUseTool) {
	defer p.ctl.finish(id, in)
	input := permInput(req)
	d, err := p.r.host.RequestPermission(ctx, agent.PermissionRequest{ToolName: req.ToolName, Input: input, ToolUseID: req.ToolUseID})
	if p.ctl.withdrawn(in) || p.detached() {
		// Withdrawn; or this server let go of the CLI, and the next one
		// asks again.
		return
	}
	var a permAnswer
	switch {
	case err != nil:
		// The CLI exited, or the session could not record the request.
		a.Error = "agentd could not ask for permission: " + err.Error()
	case d.Behavior == conversation.Allow:
		a.Behavior = "allow"
		if isJSONObject(d.UpdatedInput) && !bytes.Equal(d.UpdatedInput, input) {
			a.UpdatedInput = d.UpdatedInput
		}
	default:
		a.Behavior, a.Message = "deny", orElse(d.Message, "denied")
	}
	line, err := a.line(id, input)
	if err != nil {
		a = permAnswer{Error: err.Error()}
		if line, err = a.line(id, input); err != nil {
			return
		}
	}
	if p.resumable {
		// Recorded first: a later server replaying the turn sends it again
		// rather than asking.
		p.r.recordPerm(ctx, queryID, id, a)
	}
	_ = p.write(line)
}

// jsonOrNil returns line for a log's data, nil when it is not valid JSON
// (the event's encoding compacts it).
func jsonOrNil(line []byte) json.RawMessage {
	if !json.Valid(line) {
		return nil
	}
	return line
}

// orElse returns a, or b when a is empty.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
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
		if !p.detached() {
			p.saveTranscript(true)
		}
	}
	if !p.detached() {
		p.saveTranscript(false)
	}
}

// saveTranscript reads the main transcript and saves it. With wait, it
// first waits (up to FlushTimeout) until the file holds the last line the
// stream showed.
func (p *process) saveTranscript(wait bool) {
	p.mu.Lock()
	id, dir, want := p.shared.sessionID, p.shared.projDir, p.shared.saveUUID
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
		case <-p.detachCh:
			return // this server let go; the next one saves it
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
