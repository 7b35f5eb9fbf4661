// Package shell is the built-in `shell` architecture: each user message is
// a command run with `sh -c` in the session's workspace. It needs no model,
// which makes it the way to try agentd, and the reference runner for tests.
//
// A turn is a user_message (written by the session), a tool_use block
// (toolName "shell", input {command}) and a tool_result block whose output
// streams as block:delta events while the command runs; the exit code goes
// in the result's metadata and a non-zero exit marks it isError.
package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/conversation"
	"github.com/agentd/agentd/sandbox"
)

// Name is the architecture name.
const Name = "shell"

// Architecture implements agent.Architecture.
type Architecture struct {
	// MaxOutput bounds the output recorded per command (default 8 MiB;
	// negative: no bound, for a host that keeps long texts out of the log
	// itself, as agentd's sessions do); the rest is counted and reported,
	// not stored.
	MaxOutput int
}

// Name implements agent.Architecture.
func (Architecture) Name() string { return Name }

// Start implements agent.Architecture. The shell needs no preparation.
func (a Architecture) Start(ctx context.Context, h agent.Host) (agent.Runner, error) {
	max := a.MaxOutput
	switch {
	case max < 0:
		max = math.MaxInt
	case max == 0:
		max = 8 << 20
	}
	return &runner{host: h, max: max}, nil
}

type runner struct {
	host agent.Host
	max  int

	mu          sync.Mutex // guards proc, interrupted, detach
	proc        sandbox.Process
	interrupted bool
	detach      chan struct{} // closed by Detach
}

// Detach implements agent.Detacher: the running Turn stops following its
// command (which keeps running in the environment) and returns
// agent.ErrDetached.
func (r *runner) Detach() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detach == nil {
		r.detach = make(chan struct{})
	}
	select {
	case <-r.detach:
	default:
		close(r.detach)
	}
}

func (r *runner) detached() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detach == nil {
		r.detach = make(chan struct{})
	}
	return r.detach
}

// Argv is the command line of a turn: the message run by sh with its
// standard error merged into standard output at the source, so the output
// is one byte stream whose content does not depend on read timing (what
// makes a turn resumable exactly after a server restart).
func Argv(command string) []string {
	return []string{"sh", "-c", `exec sh -c "$1" 2>&1`, "sh", command}
}

// ToolUseID is the tool_use id of a turn's command.
func ToolUseID(queryID string) string { return "shell-" + queryID }

func (r *runner) Turn(ctx context.Context, t agent.Turn) (agent.TurnResult, error) {
	h := r.host
	toolID := ToolUseID(t.QueryID)
	resultID := conversation.ToolResultID(toolID)
	input, _ := json.Marshal(map[string]string{"command": t.Content})
	start := time.Now()
	if err := h.Emit(ctx,
		conversation.Upsert(conversation.Block{
			ID: toolID, Type: conversation.BlockToolUse, Status: conversation.StatusPending,
			ToolName: Name, ToolUseID: toolID, Input: input, Timestamp: start.UTC().Truncate(time.Millisecond),
		}),
		conversation.Upsert(conversation.Block{
			ID: resultID, Type: conversation.BlockToolResult, Status: conversation.StatusPending,
			ToolUseID: toolID, Timestamp: start.UTC().Truncate(time.Millisecond),
		}),
	); err != nil {
		return agent.TurnResult{}, err
	}

	p, err := h.Env().Exec(ctx, sandbox.Cmd{Argv: Argv(t.Content), Tag: t.QueryID})
	if err != nil {
		r.finish(context.WithoutCancel(ctx), toolID, resultID, start, -1, "", err.Error())
		code := agent.CodeSandboxError
		if errors.Is(err, sandbox.ErrGone) {
			// The executor died as the command started (the previous
			// turn killed it): the environment is gone, as when it dies
			// while a command runs.
			code = agent.CodeEnvironmentGone
		}
		return agent.TurnResult{}, agent.Fail(code, "start command: %v", err)
	}
	return r.follow(ctx, p, toolID, resultID, start, 0)
}

// Resume implements agent.Resumer: it re-attaches to the turn's command in
// an environment that survived a server restart, replays its output from
// the first byte, skips what the log already holds and streams the rest.
func (r *runner) Resume(ctx context.Context, t agent.Turn, st conversation.State) (agent.TurnResult, error) {
	toolID := ToolUseID(t.QueryID)
	resultID := conversation.ToolResultID(toolID)
	var emitted *conversation.Block
	for i := range st.Blocks {
		if st.Blocks[i].ID == resultID {
			emitted = &st.Blocks[i]
		}
	}
	if emitted == nil {
		// The server stopped before the command started: run it now.
		return r.Turn(ctx, t)
	}
	at, ok := r.host.Env().(sandbox.Attacher)
	if !ok {
		return agent.TurnResult{}, agent.Fail(agent.CodeServerRestarted, "the %s sandbox cannot re-attach to a running command", "current")
	}
	p, err := at.Attach(ctx, t.QueryID, sandbox.Offsets{})
	if err != nil {
		return agent.TurnResult{}, agent.Fail(agent.CodeServerRestarted, "re-attach to the running command: %v", err)
	}
	start := emitted.Timestamp
	if start.IsZero() {
		start = time.Now()
	}
	// The text the log holds: all of the output, or its length when the
	// log keeps a long one truncated (bounded by the host).
	skip := len(emitted.Output)
	if tr := emitted.Truncated; tr != nil && tr.Field == "output" {
		skip = int(tr.TotalBytes)
	}
	return r.follow(ctx, p, toolID, resultID, start, skip)
}

// follow streams p's output into the result block, skipping the first skip
// bytes of text (already in the log), and finishes the turn.
func (r *runner) follow(ctx context.Context, p sandbox.Process, toolID, resultID string, start time.Time, skip int) (agent.TurnResult, error) {
	r.mu.Lock()
	r.proc = p
	r.interrupted = false
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.proc = nil
		r.mu.Unlock()
	}()

	// Stop the command when the turn is cancelled (interrupt backstop or
	// shutdown).
	stop := context.AfterFunc(ctx, func() { _ = p.Kill() })
	defer stop()

	outErr := r.stream(context.WithoutCancel(ctx), p, resultID, skip)
	if errors.Is(outErr, agent.ErrDetached) {
		stop() // the command must outlive this server
		return agent.TurnResult{}, outErr
	}
	if outErr != nil {
		// The output cannot be recorded (the log failed): stop the command
		// and drain what it still sends, or Wait, which returns once all
		// output was delivered, would never return.
		_ = p.Kill()
		for range p.Output() {
		}
	}
	status, werr := p.Wait(context.WithoutCancel(ctx))
	ectx := context.WithoutCancel(ctx)
	if werr != nil {
		r.finish(ectx, toolID, resultID, start, -1, "", werr.Error())
		return agent.TurnResult{}, agent.Fail(agent.CodeSandboxError, "wait for command: %v", werr)
	}
	if outErr != nil {
		return agent.TurnResult{}, outErr
	}
	r.finish(ectx, toolID, resultID, start, status.Code, status.Signal, "")
	if ctx.Err() != nil || r.wasInterrupted() {
		return agent.TurnResult{}, agent.ErrInterrupted
	}
	return agent.TurnResult{}, nil
}

// stream forwards output as deltas. It drains whatever chunks are ready into
// one delta, so a fast producer costs one append per batch, not per read.
// The text it emits depends only on the bytes, never on how they were cut
// into chunks (an incomplete UTF-8 sequence waits for the next chunk, each
// invalid byte becomes U+FFFD), which is what lets Resume skip exactly the
// first skip bytes of text that an earlier server already stored.
func (r *runner) stream(ctx context.Context, p sandbox.Process, resultID string, skip int) error {
	var carry []byte
	written, dropped := 0, 0
	emit := func(text string) error {
		if skip > 0 {
			n := min(skip, len(text))
			skip -= n
			written += n
			text = text[n:]
		}
		if room := r.max - written; len(text) > room {
			dropped += len(text) - max(room, 0)
			text = text[:max(room, 0)]
		}
		if text == "" {
			return nil
		}
		written += len(text)
		return r.host.Emit(ctx, conversation.Delta(resultID, text))
	}
	out := p.Output()
	detached := r.detached()
	for out != nil {
		var c sandbox.Chunk
		var ok bool
		select {
		case c, ok = <-out:
		case <-detached:
			return agent.ErrDetached
		}
		if !ok {
			break
		}
		buf := append(carry, c.Data...)
	drain:
		for len(buf) < 1<<20 {
			select {
			case c2, ok2 := <-out:
				if !ok2 {
					out = nil
					break drain
				}
				buf = append(buf, c2.Data...)
			default:
				break drain
			}
		}
		whole, rest := splitUTF8(buf)
		carry = append([]byte(nil), rest...)
		if err := emit(validText(whole)); err != nil {
			return err
		}
	}
	if err := emit(validText(carry)); err != nil {
		return err
	}
	if dropped > 0 {
		return r.host.Emit(ctx, conversation.Delta(resultID, fmt.Sprintf("\n[agentd: output truncated, %d bytes not shown]\n", dropped)))
	}
	return nil
}

// validText decodes b as UTF-8, turning each invalid byte into U+FFFD.
func validText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}

// splitUTF8 splits b before a trailing incomplete UTF-8 sequence.
func splitUTF8(b []byte) (whole, rest []byte) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i], b[i:]
			}
			break
		}
	}
	return b, nil
}

func (r *runner) finish(ctx context.Context, toolID, resultID string, start time.Time, code int, signal, errText string) {
	meta := map[string]any{"exitCode": code}
	if signal != "" {
		meta["signal"] = signal
	}
	isErr := code != 0 || signal != "" || errText != ""
	st := conversation.StatusComplete
	if isErr {
		st = conversation.StatusError
	}
	evs := []conversation.Event{
		conversation.Upsert(conversation.Block{ID: toolID, Type: conversation.BlockToolUse, Status: conversation.StatusComplete}),
	}
	if errText != "" {
		evs = append(evs, conversation.Delta(resultID, errText))
	}
	evs = append(evs, conversation.Upsert(conversation.Block{
		ID: resultID, Type: conversation.BlockToolResult, Status: st, IsError: isErr,
		DurationMs: time.Since(start).Milliseconds(), Metadata: meta,
	}))
	if err := r.host.Emit(ctx, evs...); err != nil {
		r.host.Logger().Error("record command result", "err", err)
	}
}

func (r *runner) wasInterrupted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.interrupted
}

func (r *runner) Interrupt(ctx context.Context) error {
	r.mu.Lock()
	p := r.proc
	r.interrupted = true
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Kill()
}

func (r *runner) Close(ctx context.Context) error {
	return r.Interrupt(ctx)
}
