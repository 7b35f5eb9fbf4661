package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/internal/agent/agentcli"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/sandbox"
)

// State is what the runner saves with host.SaveAgentState.
type State struct {
	// SessionID is the Gemini chat session the next turn resumes.
	SessionID string `json:"sessionId"`
}

// TranscriptName is the name under which the session's chat files are
// saved with host.SaveTranscript after every turn (a JSON object of the
// files by workspace path).
const TranscriptName = "gemini-chats.json"

func isNotExist(err error) bool {
	return errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
}

// runner runs one process per turn. Turn, Interrupt and Close follow
// agent.Runner's rules.
type runner struct {
	arch Architecture
	host agent.Host
	args []string // approval flags

	mu          sync.Mutex // guards the fields below
	proc        *agentproc.Proc
	interrupted bool
	closed      bool
	pending     string // session id chosen for a first turn that has not started a session yet
}

func newRunner(a Architecture, h agent.Host, args []string) *runner {
	return &runner{arch: a, host: h, args: args}
}

func (r *runner) state() State {
	var st State
	if raw := r.host.AgentState(); len(raw) > 0 {
		_ = json.Unmarshal(raw, &st)
	}
	return st
}

// Turn implements agent.Runner.
func (r *runner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	st := r.state()
	argv := []string{r.arch.command(), "--output-format", "stream-json"}
	resume := st.SessionID != ""
	sessionID := st.SessionID
	if resume {
		r.restoreChat(ctx, st)
		argv = append(argv, "--resume", sessionID)
	} else {
		r.mu.Lock()
		if r.pending == "" {
			r.pending = uuid.NewString()
		}
		sessionID = r.pending
		r.mu.Unlock()
		argv = append(argv, "--session-id", sessionID)
	}
	argv = append(argv, r.args...)
	if m := r.host.Options().Model; m != "" {
		argv = append(argv, "--model", m)
	}
	// The prompt goes on stdin (no size limit, not visible in ps); -p
	// selects headless mode and is appended to it.
	argv = append(argv, "--prompt", "")

	env := r.host.Env()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return agent.TurnResult{}, agent.Fail(agent.CodeInternal, "gemini-cli runner is closed")
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.interrupted = false
		r.mu.Unlock()
	}()
	prompt, err := imagePrompt(ctx, env, t)
	if err != nil {
		return agent.TurnResult{}, err
	}
	proc, err := agentproc.Start(ctx, env, "gemini", sandbox.Cmd{
		Argv: argv,
		Env: map[string]string{
			"GEMINI_CLI_HOME":            path.Join(env.WorkDir(), HomeDir),
			"GEMINI_CLI_TRUST_WORKSPACE": "true",
		},
	})
	if err != nil {
		return agent.TurnResult{}, err
	}
	r.mu.Lock()
	r.proc = proc
	intr := r.interrupted
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.proc = nil
		r.mu.Unlock()
	}()
	if intr {
		proc.Stop(context.WithoutCancel(ctx), r.arch.stopGrace())
	}
	if err := proc.Write([]byte(prompt)); err == nil {
		_ = proc.CloseStdin()
	}
	stop := context.AfterFunc(ctx, func() { proc.Stop(context.Background(), r.arch.stopGrace()) })
	defer stop()

	conv := NewStreamJSONConverter(WithIDPrefix(t.QueryID), WithoutUserMessages())
	var end conversation.Payload
	started := false
	for l := range proc.Lines() {
		if l.Truncated {
			r.logLine(l.Data, "gemini-cli: stream-json line too long; dropped")
			continue
		}
		line := l.Data
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		if line[0] != '{' {
			// Gemini prints some notices on stdout; keep them as logs.
			r.logLine(line, "gemini-cli output")
			continue
		}
		evs, err := conv.Convert(line)
		if err != nil {
			r.logLine(line, err.Error())
			continue
		}
		if !started && conv.SessionID() != "" {
			started = true
			r.sessionStarted(ctx, conv.SessionID(), st)
		}
		out, e := agentcli.SplitEnd(evs)
		if e != nil {
			end = e
		}
		r.emit(out...)
	}
	status, werr := proc.Exit()
	r.emit(conv.blocks.SettlePending(time.Now().UTC().Truncate(time.Millisecond))...)
	if started {
		r.saveChat(context.WithoutCancel(ctx))
	}

	r.mu.Lock()
	intr = r.interrupted
	r.mu.Unlock()
	if intr || ctx.Err() != nil {
		if intr {
			return agent.TurnResult{}, agent.ErrInterrupted
		}
		return agent.TurnResult{}, ctx.Err()
	}
	switch e := end.(type) {
	case conversation.QueryCompleted:
		return agent.TurnResult{}, nil
	case conversation.QueryFailed:
		if e.Interrupted {
			return agent.TurnResult{}, agent.ErrInterrupted
		}
		return agent.TurnResult{}, agentcli.Failed(agent.CodeModelError, "gemini-cli", e)
	}
	if werr == nil && status.Success() {
		return agent.TurnResult{}, agent.Fail(agent.CodeAgentProtocol, "gemini-cli exited without a result line: %s", lastLine(proc.Stderr()))
	}
	return agent.TurnResult{}, proc.ExitError()
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if s == "" {
		return "no output"
	}
	return s
}

// sessionStarted records the Gemini session once its init line is seen,
// so the next turn (or a later runner) resumes it.
func (r *runner) sessionStarted(ctx context.Context, id string, st State) {
	r.mu.Lock()
	r.pending = ""
	r.mu.Unlock()
	if id != st.SessionID {
		st = State{SessionID: id}
		b, _ := json.Marshal(st)
		if err := r.host.SaveAgentState(context.WithoutCancel(ctx), b); err != nil {
			r.host.Logger().Error("save gemini session id", "err", err)
		}
	}
	if err := r.host.SetAgentInfo(context.WithoutCancel(ctx), "", id); err != nil {
		r.host.Logger().Warn("record gemini session id", "err", err)
	}
}

// chatDir is where Gemini keeps chat files (one folder per project).
const chatDir = HomeDir + "/.gemini/tmp"

// chatFiles returns the chat files of session id, sorted: Gemini names
// them session-<minute it started writing>-<first 8 characters of the
// id>.jsonl, and a session resumed in a later minute goes on in a new
// file, so one session can span several.
func (r *runner) chatFiles(ctx context.Context, id string) []string {
	if len(id) < 8 {
		return nil
	}
	files, err := r.host.Env().List(ctx, chatDir, true)
	if err != nil {
		return nil
	}
	var found []string
	for _, f := range files {
		if !f.IsDir && path.Base(path.Dir(f.Path)) == "chats" && strings.HasSuffix(f.Path, "-"+id[:8]+".jsonl") {
			found = append(found, f.Path)
		}
	}
	sort.Strings(found)
	return found
}

// savedChats is the transcript saved with the session: every chat file of
// the Gemini session, by workspace path.
type savedChats struct {
	SessionID string            `json:"sessionId"`
	Files     map[string][]byte `json:"files"`
}

// saveChat stores the session's chat files with the session.
func (r *runner) saveChat(ctx context.Context) {
	st := r.state()
	if st.SessionID == "" {
		return
	}
	saved := savedChats{SessionID: st.SessionID, Files: map[string][]byte{}}
	for _, f := range r.chatFiles(ctx, st.SessionID) {
		data, err := r.host.Env().ReadFile(ctx, f)
		if err != nil {
			r.host.Logger().Debug("read gemini chat", "path", f, "err", err)
			return
		}
		saved.Files[f] = data
	}
	if len(saved.Files) == 0 {
		return
	}
	b, err := json.Marshal(saved)
	if err == nil {
		err = r.host.SaveTranscript(ctx, TranscriptName, b)
	}
	if err != nil {
		r.host.Logger().Warn("save gemini chat", "err", err)
	}
}

// restoreChat writes the saved chat files back when the workspace lost
// them (restored elsewhere without .agentd), so --resume finds the session.
func (r *runner) restoreChat(ctx context.Context, st State) {
	if len(r.chatFiles(ctx, st.SessionID)) > 0 {
		return
	}
	data, err := r.host.LoadTranscript(ctx, TranscriptName)
	if err != nil || len(data) == 0 {
		return
	}
	var saved savedChats
	if err := json.Unmarshal(data, &saved); err != nil || saved.SessionID != st.SessionID {
		r.host.Logger().Warn("saved gemini chat is not this session's", "err", err)
		return
	}
	files := make([]sandbox.File, 0, len(saved.Files))
	for p, c := range saved.Files {
		if !strings.HasPrefix(p, chatDir+"/") {
			continue // only ever Gemini's chat folder
		}
		files = append(files, sandbox.File{Path: p, Content: c, Mode: 0o600})
	}
	if err := r.host.Env().WriteFiles(ctx, files); err != nil {
		r.host.Logger().Warn("restore gemini chat", "err", err)
		return
	}
	r.host.Logger().Info("restored gemini chat", "files", len(files))
}

// Interrupt implements agent.Runner: SIGINT, then SIGKILL after the grace.
func (r *runner) Interrupt(ctx context.Context) error {
	r.mu.Lock()
	r.interrupted = true
	p := r.proc
	r.mu.Unlock()
	if p != nil {
		p.Stop(ctx, r.arch.stopGrace())
	}
	return nil
}

// Close implements agent.Runner.
func (r *runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	p := r.proc
	r.mu.Unlock()
	if p != nil {
		p.Stop(ctx, r.arch.stopGrace())
	}
	return nil
}

func (r *runner) emit(evs ...conversation.Event) { agentcli.Emit(r.host, "gemini", evs...) }

// logLine keeps a line agentd cannot convert as a log event.
func (r *runner) logLine(line []byte, msg string) {
	r.emit(agentcli.LogEvent(conversation.LevelWarn, msg, line))
}

// ImagesDir holds a turn's images in the workspace (under .agentd, which
// the server does not watch), for the prompt to reference.
const ImagesDir = ".agentd/images"

// imagePrompt is the turn's prompt: with images, each written to
// ImagesDir and referenced first with Gemini CLI's @path syntax, which
// reads the file into the request as inline data.
func imagePrompt(ctx context.Context, env sandbox.Environment, t agent.Turn) (string, error) {
	if len(t.Images) == 0 {
		return t.Content, nil
	}
	var b strings.Builder
	for _, im := range t.Images {
		_, sub, _ := strings.Cut(im.MediaType, "/")
		p := path.Join(ImagesDir, im.SHA256+"."+sub)
		if err := env.WriteFile(ctx, p, im.Data, 0o644); err != nil {
			return "", fmt.Errorf("write image for gemini: %w", err)
		}
		b.WriteString("@" + p + " ")
	}
	b.WriteString(t.Content)
	return b.String(), nil
}
