// Package agentproc runs an agent CLI inside a session's environment and
// speaks line-delimited JSON with it: one place for starting (or
// re-attaching) the process, reading its stdout as lines with their byte
// offsets, keeping the tail of its stderr for error messages, writing to
// its stdin, and stopping it with escalation (SIGINT, then SIGKILL of its
// process group) or abandoning it to a later server.
package agentproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/agent"
	"github.com/agentd/agentd/sandbox"
)

// MaxLine bounds one stdout line; a longer line is delivered truncated with
// Line.Truncated set (agent CLIs print whole tool outputs on one line).
const MaxLine = 64 << 20

// Line is one line of stdout, without its newline, with where it lies in
// the stdout stream (byte offsets from the process's first byte): a
// resumed turn replays the stream from an offset.
type Line struct {
	Data      []byte
	Truncated bool
	Start     int64 // offset of the line's first byte
	End       int64 // offset just after its newline
}

// ErrOutputGap: the sandbox no longer held output an exact Proc needed (a
// re-attach asked for bytes its bounded spool dropped).
var ErrOutputGap = errors.New("output dropped by the executor's spool")

// Proc is a running agent process. Write, Stderr, Gap, Stop, Kill, Signal
// and Abandon are safe for concurrent use; Lines has one consumer.
type Proc struct {
	name  string
	p     sandbox.Process
	tag   string
	exact bool // check chunk offsets (New, Attach, StartExact)
	lines chan Line
	quit  chan struct{} // closed by Abandon: stop delivering lines
	qOnce sync.Once

	wmu sync.Mutex // serialises stdin writes

	emu    sync.Mutex // guards stderr, gap
	stderr []byte
	gap    error // set when a stdout chunk came after the expected offset

	done   chan struct{} // closed when output is drained and the process exited (or abandoned)
	status sandbox.ExitStatus
	werr   error
}

const stderrTail = 16 << 10

// Start runs cmd in env (with a stdin pipe). name is the CLI's name for
// error messages. A missing binary is reported as agent.CodeAgentNotFound,
// any other failure (a tag in use) as agent.CodeSandboxError. Chunk
// offsets are taken as they come (see StartExact).
func Start(ctx context.Context, env sandbox.Environment, name string, cmd sandbox.Cmd) (*Proc, error) {
	p, err := start(ctx, env, name, cmd)
	if err != nil {
		return nil, err
	}
	return newProc(name, p, 0, false), nil
}

// StartExact is Start for a consumer that resumes from byte offsets: like
// New, it checks the chunks' offsets.
func StartExact(ctx context.Context, env sandbox.Environment, name string, cmd sandbox.Cmd) (*Proc, error) {
	p, err := start(ctx, env, name, cmd)
	if err != nil {
		return nil, err
	}
	return New(name, p, 0), nil
}

func start(ctx context.Context, env sandbox.Environment, name string, cmd sandbox.Cmd) (sandbox.Process, error) {
	cmd.Stdin = true
	p, err := env.Exec(ctx, cmd)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, agent.Fail(agent.CodeAgentNotFound, "%s is not installed or not on PATH: %v", name, err)
		}
		return nil, agent.Fail(agent.CodeSandboxError, "start %s: %v", name, err)
	}
	return p, nil
}

// Attach re-attaches the process tagged tag, its stdout replayed from byte
// from (stderr from what the sandbox still holds), as New does. The error
// wraps sandbox.ErrNotFound when there is no such process.
func Attach(ctx context.Context, at sandbox.Attacher, name, tag string, from int64) (*Proc, error) {
	p, err := at.Attach(ctx, tag, sandbox.Offsets{Stdout: from})
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", name, err)
	}
	return New(name, p, from), nil
}

// New reads p, whose stdout is delivered from byte from, checking the
// chunks' offsets: bytes before from (an overlap the backend did not trim)
// are skipped, and a gap (output that starts after the expected byte)
// kills the process, since nothing after it can be converted faithfully;
// Gap reports it and no further line is delivered.
func New(name string, p sandbox.Process, from int64) *Proc {
	return newProc(name, p, from, true)
}

func newProc(name string, p sandbox.Process, from int64, exact bool) *Proc {
	pr := &Proc{name: name, p: p, tag: p.Tag(), exact: exact, lines: make(chan Line, 64), quit: make(chan struct{}), done: make(chan struct{})}
	go pr.pump(from)
	return pr
}

// pump delivers stdout as lines and keeps the stderr tail until the
// output ends (then it waits for the exit) or Abandon.
func (pr *Proc) pump(pos int64) {
	defer close(pr.done)
	if pr.split(pos) {
		return
	}
	// Abandoned: the rest of what this view of the process delivers is
	// someone else's (the next server replays it from the spool). Drain it,
	// so the sandbox's delivery ends with the view, without Wait (which
	// would let the executor forget the process).
	for range pr.p.Output() {
	}
}

// split delivers the lines; it reports false when abandoned.
func (pr *Proc) split(pos int64) bool {
	var buf []byte
	start := pos
	truncated := false
	send := func(l Line) bool {
		select {
		case pr.lines <- l:
			return true
		case <-pr.quit:
			return false
		}
	}
	out := pr.p.Output()
	for {
		var c sandbox.Chunk
		var ok bool
		select {
		case c, ok = <-out:
		case <-pr.quit:
			return false
		}
		if !ok {
			break
		}
		if c.Stream == sandbox.Stderr {
			pr.keepStderr(c.Data)
			continue
		}
		data := c.Data
		if pr.exact {
			if c.Offset > pos {
				pr.setGap(pos, c.Offset)
			}
			if pr.Gap() != nil {
				continue // drain until the exit
			}
			if skip := pos - c.Offset; skip > 0 { // an overlap the backend did not trim
				if skip >= int64(len(data)) {
					continue
				}
				data = data[skip:]
			}
		}
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if room := MaxLine - len(buf); room > 0 {
					buf = append(buf, data[:min(room, len(data))]...)
				}
				if len(buf) >= MaxLine {
					truncated = true
				}
				pos += int64(len(data))
				break
			}
			if room := MaxLine - len(buf); room > 0 {
				buf = append(buf, data[:min(room, i)]...)
			} else {
				truncated = true
			}
			pos += int64(i + 1)
			if !send(Line{Data: bytes.TrimRight(buf, "\r"), Truncated: truncated, Start: start, End: pos}) {
				return false
			}
			buf, truncated, start = nil, false, pos
			data = data[i+1:]
		}
	}
	if len(buf) > 0 && pr.Gap() == nil {
		if !send(Line{Data: buf, Truncated: truncated, Start: start, End: pos}) {
			return false
		}
	}
	close(pr.lines)
	pr.status, pr.werr = pr.p.Wait(context.Background())
	return true
}

func (pr *Proc) keepStderr(b []byte) {
	pr.emu.Lock()
	defer pr.emu.Unlock()
	pr.stderr = append(pr.stderr, b...)
	if len(pr.stderr) > stderrTail {
		pr.stderr = append([]byte(nil), pr.stderr[len(pr.stderr)-stderrTail:]...)
	}
}

// setGap records the first gap, from byte want to got, and kills the
// process.
func (pr *Proc) setGap(want, got int64) {
	pr.emu.Lock()
	first := pr.gap == nil
	if first {
		pr.gap = fmt.Errorf("%w: bytes %d to %d of %s's output are gone", ErrOutputGap, want, got, pr.name)
	}
	pr.emu.Unlock()
	if first {
		_ = pr.p.Kill()
	}
}

// Gap returns the error (wrapping ErrOutputGap) for output the sandbox
// dropped, if it did.
func (pr *Proc) Gap() error {
	pr.emu.Lock()
	defer pr.emu.Unlock()
	return pr.gap
}

// Name is the CLI's name, as error messages give it.
func (pr *Proc) Name() string { return pr.name }

// Tag is the process's sandbox tag.
func (pr *Proc) Tag() string { return pr.tag }

// Lines delivers stdout lines; it is closed at EOF (never after Abandon).
func (pr *Proc) Lines() <-chan Line { return pr.lines }

// Done is closed when the process exited and its output was read, or,
// after Abandon, when the sandbox stopped delivering this view of it.
func (pr *Proc) Done() <-chan struct{} { return pr.done }

// Abandon stops delivering: the process keeps running in the sandbox
// (Detach) for a later server to re-attach. Lines is not closed; Exit
// reports nothing useful afterwards.
func (pr *Proc) Abandon() { pr.qOnce.Do(func() { close(pr.quit) }) }

// Exit returns the exit status once Done is closed.
func (pr *Proc) Exit() (sandbox.ExitStatus, error) {
	<-pr.done
	return pr.status, pr.werr
}

// Stderr returns the last 16 KiB the process wrote to stderr.
func (pr *Proc) Stderr() string {
	pr.emu.Lock()
	defer pr.emu.Unlock()
	return string(pr.stderr)
}

// Write writes raw bytes to stdin.
func (pr *Proc) Write(b []byte) error {
	pr.wmu.Lock()
	defer pr.wmu.Unlock()
	_, err := pr.p.Write(b)
	return err
}

// WriteJSON writes v as one JSON line to stdin.
func (pr *Proc) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return pr.Write(append(b, '\n'))
}

// CloseStdin closes stdin (some CLIs finish on EOF).
func (pr *Proc) CloseStdin() error {
	pr.wmu.Lock()
	defer pr.wmu.Unlock()
	return pr.p.CloseStdin()
}

// Signal signals the process group.
func (pr *Proc) Signal(sig syscall.Signal) error { return pr.p.Signal(sig) }

// Kill kills the process group.
func (pr *Proc) Kill() error { return pr.p.Kill() }

// Stop ends the process: SIGINT, then SIGKILL of its group when it has not
// exited after grace. It returns when the process is gone or ctx ends.
func (pr *Proc) Stop(ctx context.Context, grace time.Duration) {
	select {
	case <-pr.done:
		return
	default:
	}
	_ = pr.p.Signal(syscall.SIGINT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-pr.done:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	_ = pr.p.Kill()
	select {
	case <-pr.done:
	case <-ctx.Done():
	}
}

// ExitError describes an unexpected exit, naming the cause from the stderr
// tail, as agent.CodeAgentExited.
func (pr *Proc) ExitError() error {
	st, err := pr.Exit()
	if err != nil {
		return agent.Fail(agent.CodeAgentExited, "%s: %v", pr.name, err)
	}
	how := fmt.Sprintf("exited with code %d", st.Code)
	if st.Signal != "" {
		how = "was killed by " + st.Signal
	}
	tail := strings.TrimSpace(pr.Stderr())
	if len(tail) > 2000 {
		tail = "…" + tail[len(tail)-2000:]
	}
	if tail != "" {
		return agent.Fail(agent.CodeAgentExited, "%s %s: %s", pr.name, how, tail)
	}
	return agent.Fail(agent.CodeAgentExited, "%s %s", pr.name, how)
}
