package claudecode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/claudecode/claudeconv"
	"github.com/agentd/agentd/sandbox"
)

// agentState is what the runner saves with the session (Host.SaveAgentState)
// to resume the CLI's conversation in a later process.
type agentState struct {
	ClaudeSessionID string `json:"claudeSessionId,omitempty"`
	// ProjectDir is the projects/ sub-folder the CLI used (from its cwd).
	ProjectDir string `json:"projectDir,omitempty"`
	Version    string `json:"version,omitempty"`
	// Turn is where the last turn's output starts, for a later server to
	// resume it (environments that are a sandbox.Attacher only).
	Turn *turnMark `json:"turn,omitempty"`
}

// transcriptName is the name a Claude session's transcript is saved under
// with Host.SaveTranscript.
func transcriptName(claudeSessionID string) string { return claudeSessionID + ".jsonl" }

// runner runs the turns of one session. Turn and Resume run in a job
// goroutine of the session, Close and Detach come from its owner
// goroutine, Interrupt, UpdateOptions and Sync from goroutines of their
// own (see agent.Runner); the fields below mu are shared with those calls
// and with the process's goroutines.
type runner struct {
	opts Options
	host agent.Host
	m    materialized

	tag string // the CLI's sandbox tag (stable per session)

	mu            sync.Mutex // guards the fields below; never held across I/O
	proc          *process
	turnDone      chan struct{} // closed when the running Turn returns; nil when idle
	interrupted   bool          // the running turn was interrupted
	closed        bool
	detached      bool
	orphanChecked bool // a CLI left by an earlier server was stopped or taken over
	state         agentState
	stateVer      int64 // bumped by every change of state

	saveMu   sync.Mutex // serialises SaveAgentState calls (see saveState)
	savedVer int64      // the state version stored last; guarded by saveMu
}

var _ agent.Runner = (*runner)(nil)

func newRunner(opts Options, h agent.Host, m materialized) *runner {
	r := &runner{opts: opts, host: h, m: m, tag: cliTag(h.SessionID())}
	if raw := h.AgentState(); len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.state); err != nil {
			h.Logger().Warn("ignoring unreadable Claude Code state", "err", err)
		}
	}
	return r
}

func (r *runner) wasInterrupted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interrupted
}

func (r *runner) currentState() agentState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Turn implements agent.Runner: it sends the message to the CLI (starting
// it first if needed, resuming the Claude session the last process had)
// and returns when the CLI's result line for it arrived, the CLI exited, or
// ctx ended.
func (r *runner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	done, err := r.beginTurn()
	if err != nil {
		return agent.TurnResult{}, err
	}
	defer r.endTurn(done)
	return r.turn(ctx, t)
}

// beginTurn marks a turn running; endTurn(done) marks it over.
func (r *runner) beginTurn() (chan struct{}, error) {
	done := make(chan struct{})
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, agent.Fail(agent.CodeInternal, "claude-code runner is closed")
	case r.detached:
		return nil, agent.Fail(agent.CodeInternal, "claude-code runner is detached")
	case r.turnDone != nil:
		return nil, agent.Fail(agent.CodeInternal, "a turn is already running")
	}
	r.turnDone, r.interrupted = done, false
	return done, nil
}

func (r *runner) endTurn(done chan struct{}) {
	r.mu.Lock()
	r.turnDone = nil
	r.mu.Unlock()
	close(done)
}

func (r *runner) turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	fresh := false
	for attempt := 0; ; attempt++ {
		p, started, err := r.ensureProcess(ctx, fresh)
		if err != nil {
			return agent.TurnResult{}, err
		}
		if r.wasInterrupted() {
			return agent.TurnResult{}, agent.ErrInterrupted
		}
		end := p.runTurn(ctx, t)
		switch {
		case attempt > 0:
		case end.retryFresh:
			// The CLI could not resume its session (it answered the
			// resume with an error and exited): start a new Claude
			// session rather than fail every turn from now on.
			<-p.done
			r.emitLog(ctx, conversation.LevelWarn, "Claude Code could not resume its earlier session; starting a new conversation (the model will not see the earlier turns)", nil)
			fresh = true
			continue
		case end.notSent && !started:
			// It exited between turns, just before the message went out.
			// (One started for this turn that exits before reading it
			// failed this turn: starting it again would only repeat that,
			// and what it printed.)
			continue
		}
		if end.err != nil {
			return agent.TurnResult{}, end.err
		}
		return agent.TurnResult{Result: end.result}, nil
	}
}

// ensureProcess returns the running CLI, starting one when there is none
// or the last one exited (started reports that). fresh starts without
// resuming.
func (r *runner) ensureProcess(ctx context.Context, fresh bool) (p *process, started bool, err error) {
	r.mu.Lock()
	p = r.proc
	r.mu.Unlock()
	if p != nil {
		select {
		case <-p.exitedCh:
			<-p.done // its reader finished: transcript saved, state recorded
		default:
			return p, false, nil
		}
	}
	p, err = r.start(ctx, fresh)
	if err != nil {
		return nil, false, err
	}
	r.mu.Lock()
	r.proc = p
	detached := r.detached
	r.mu.Unlock()
	if detached {
		p.detach()
	}
	return p, true, nil
}

// start launches the CLI (after stopping one an earlier server left, whose
// transcript is then final).
func (r *runner) start(ctx context.Context, fresh bool) (*process, error) {
	r.stopOrphan(ctx)
	st := r.currentState()
	resume := ""
	if st.ClaudeSessionID != "" && !fresh {
		if err := r.prepareResume(ctx, st); err != nil {
			r.emitLog(ctx, conversation.LevelWarn, fmt.Sprintf("cannot resume Claude Code session %s (%v); starting a new conversation", st.ClaudeSessionID, err), nil)
		} else {
			resume = st.ClaudeSessionID
		}
	}
	argv := r.argv(resume)
	env := map[string]string{}
	for _, kv := range cliEnv(r.m.configDir) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	pr, err := startPipe(ctx, r.host.Env(), r.opts.Command, sandbox.Cmd{Argv: argv, Env: env, Tag: r.tag})
	if err != nil {
		return nil, err
	}
	msg := "starting Claude Code"
	if resume != "" {
		msg += " (resuming session " + resume + ")"
	}
	data, _ := json.Marshal(map[string]any{"argv": argv})
	r.emitLog(ctx, conversation.LevelInfo, msg, data)
	_, resumable := r.host.Env().(sandbox.Attacher)
	p := newProcess(r, pr, pr.Tag(), resume != "", resumable)
	p.shared.model, p.shared.mode = r.host.Options().Model, permissionMode(r.host.Options().Extra)
	p.begin()
	return p, nil
}

// argv is the CLI's command line. Values use the --flag=value form so a
// value starting with '-' cannot be read as a flag.
func (r *runner) argv(resume string) []string {
	argv := []string{r.opts.Command,
		"--input-format", "stream-json", "--output-format", "stream-json",
		"--verbose", "--include-partial-messages",
		// Permission requests come to agentd as can_use_tool control
		// requests (this also works as root, where
		// --dangerously-skip-permissions is refused).
		"--permission-prompt-tool", "stdio",
	}
	if model := r.host.Options().Model; model != "" {
		argv = append(argv, "--model="+model)
	}
	if mode := permissionMode(r.host.Options().Extra); mode != "" {
		argv = append(argv, "--permission-mode="+mode)
	}
	argv = append(argv, r.m.args...)
	if resume != "" {
		argv = append(argv, "--resume="+resume)
	}
	return append(argv, r.opts.ExtraArgs...)
}

// permissionModes are the CLI's --permission-mode values a session may
// ask for with sessionOptions.permissionMode. (bypassPermissions is passed
// on too; the CLI refuses it when running as root, and says so.)
var permissionModes = map[string]bool{"default": true, "acceptEdits": true, "plan": true, "dontAsk": true, "auto": true, "bypassPermissions": true}

// permissionMode reads sessionOptions.permissionMode; unknown values are
// ignored.
func permissionMode(extra json.RawMessage) string {
	var o struct {
		PermissionMode string `json:"permissionMode"`
	}
	if len(extra) == 0 || json.Unmarshal(extra, &o) != nil || !permissionModes[o.PermissionMode] {
		return ""
	}
	return o.PermissionMode
}

// projectsRel is the workspace path of the CLI's projects/ folder.
var projectsRel = path.Join(configRel, "projects")

// prepareResume makes sure the transcript of the Claude session to resume
// is where the CLI will look for it: the projects/ folder named after the
// workspace as the CLI sees it. A workspace that lost it (a new
// environment, or one restored elsewhere) gets it back from the store.
func (r *runner) prepareResume(ctx context.Context, st agentState) error {
	env := r.host.Env()
	dir := projectDirName(env.WorkDir())
	name := transcriptName(st.ClaudeSessionID)
	want := path.Join(projectsRel, dir, name)
	if fileExists(ctx, env, path.Join(projectsRel, dir), name) {
		return nil
	}
	if st.ProjectDir != "" && st.ProjectDir != dir {
		// The workspace moved: the CLI kept it under its old name.
		if data, err := env.ReadFile(ctx, path.Join(projectsRel, st.ProjectDir, name)); err == nil {
			return env.WriteFile(ctx, want, data, 0o600)
		}
	}
	data, err := r.host.LoadTranscript(ctx, name)
	if err != nil {
		return fmt.Errorf("no saved transcript: %w", err)
	}
	if err := env.WriteFile(ctx, want, data, 0o600); err != nil {
		return fmt.Errorf("restore transcript: %w", err)
	}
	r.emitLog(ctx, conversation.LevelInfo, "restored Claude Code session "+st.ClaudeSessionID+" from the store", nil)
	return nil
}

// fileExists reports whether dir holds a file called name.
func fileExists(ctx context.Context, env sandbox.Environment, dir, name string) bool {
	list, err := env.List(ctx, dir, false)
	if err != nil {
		return false
	}
	want := path.Join(dir, name)
	for _, f := range list {
		if !f.IsDir && f.Path == want {
			return true
		}
	}
	return false
}

// Interrupt implements agent.Runner with escalation: the control
// protocol's interrupt; if the turn has not ended after InterruptTimeout,
// SIGINT to the CLI's process group; after KillTimeout more, SIGKILL. The
// turn then ends with agent.ErrInterrupted and the next one resumes the
// Claude session in a new process.
func (r *runner) Interrupt(ctx context.Context) error {
	r.mu.Lock()
	done, p := r.turnDone, r.proc
	if done != nil {
		r.interrupted = true
	}
	r.mu.Unlock()
	if done == nil || p == nil {
		// Nothing running, or the CLI is still starting: Turn sees the
		// flag before it sends the message.
		return nil
	}
	if err := p.sendControl("interrupt"); err == nil && waitClosed(ctx, done, r.opts.InterruptTimeout) {
		return nil
	}
	r.emitLog(ctx, conversation.LevelWarn, fmt.Sprintf("Claude Code did not stop within %s of the interrupt; sending SIGINT", r.opts.InterruptTimeout), nil)
	_ = p.proc.Signal(syscall.SIGINT)
	if waitClosed(ctx, done, r.opts.KillTimeout) {
		return nil
	}
	r.emitLog(ctx, conversation.LevelWarn, fmt.Sprintf("Claude Code did not stop within %s of SIGINT; killing it", r.opts.KillTimeout), nil)
	_ = p.proc.Kill()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("interrupt: turn did not end: %w", ctx.Err())
	}
}

// waitClosed waits up to d for ch to close (false when it did not, or ctx
// ended).
func waitClosed(ctx context.Context, ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// Close implements agent.Runner: it closes the CLI's stdin (the CLI then
// finishes writing its transcript and exits), stops it if it does not exit
// within CloseTimeout, and waits for the last transcript save.
func (r *runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	p, detached := r.proc, r.detached
	r.mu.Unlock()
	if detached {
		// The CLI belongs to the environment now (a later server resumes
		// it); only wait for the reader to let go.
		if p != nil {
			select {
			case <-p.done:
			case <-ctx.Done():
				return fmt.Errorf("close claude: %w", ctx.Err())
			}
		}
		return nil
	}
	if p == nil {
		// A CLI an earlier server left running, if any, goes too.
		r.stopOrphan(ctx)
		return nil
	}
	p.closing.Store(true)
	_ = p.proc.CloseStdin()
	if !waitClosed(ctx, p.exitedCh, r.opts.CloseTimeout) {
		p.proc.Stop(ctx, r.opts.KillTimeout)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close claude: %w", ctx.Err())
	}
}

// emitLog emits a log event from agentd (source server).
func (r *runner) emitLog(ctx context.Context, level conversation.LogLevel, msg string, data json.RawMessage) {
	ev := conversation.NewEvent(conversation.LogEvent{Level: level, Message: msg, Data: data}).From(conversation.SourceServer)
	if err := r.host.Emit(context.WithoutCancel(ctx), ev); err != nil {
		r.host.Logger().Warn("record log event", "err", err, "message", msg)
	}
}

// recordSession notes the CLI's version and Claude session id from its
// init line: on the session's runtime and in the resume state.
func (r *runner) recordSession(ctx context.Context, in claudeconv.Init) {
	changed := false
	r.saveState(ctx, func(st *agentState) bool {
		changed = st.ClaudeSessionID != in.SessionID || st.Version != in.Version ||
			(in.Cwd != "" && st.ProjectDir != projectDirName(in.Cwd))
		if in.SessionID != "" {
			st.ClaudeSessionID = in.SessionID
		}
		if in.Version != "" {
			st.Version = in.Version
		}
		if in.Cwd != "" {
			st.ProjectDir = projectDirName(in.Cwd)
		}
		return changed
	})
	if !changed {
		return
	}
	if err := r.host.SetAgentInfo(ctx, in.Version, in.SessionID); err != nil {
		r.host.Logger().Warn("record Claude Code version", "err", err)
	}
}

// errProcessGone is returned by writes to a CLI that exited.
var errProcessGone = errors.New("claude process exited")
