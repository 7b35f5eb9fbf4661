package claudecode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/agent/agentproc"
	"github.com/agentd/agentd/internal/sandbox"
)

// cliLine is one stdout line of the CLI, without its newline, with where it
// lies in the stdout stream (byte offsets from the process's first byte):
// a resumed turn replays the stream from an offset.
type cliLine struct {
	Data      []byte
	Truncated bool
	Start     int64 // offset of the line's first byte
	End       int64 // offset just after its newline
}

// errOutputGap: the executor's bounded spool dropped output this pipe
// needed (a re-attach asked for bytes no longer held).
var errOutputGap = errors.New("output dropped by the executor's spool")

// pipe runs over one CLI process of the sandbox, started or re-attached:
// stdout as lines with their offsets, the tail of stderr, stdin writes
// (serialised), signals and an escalating stop. It is agentproc.Proc plus
// offsets, which a resumable turn needs. Write, Stderr, Stop, Kill and
// Signal are safe for concurrent use; Lines has one consumer.
type pipe struct {
	name string
	p    sandbox.Process
	tag  string

	lines chan cliLine
	quit  chan struct{} // closed by abandon: stop delivering lines
	qOnce sync.Once

	wmu sync.Mutex // serialises stdin writes

	emu    sync.Mutex // guards stderr, gap
	stderr []byte
	gap    error // set when the first stdout chunk came after the expected offset

	done   chan struct{} // closed when output is drained and the process exited (or abandoned)
	status sandbox.ExitStatus
	werr   error
}

var _ cliProc = (*pipe)(nil)

// startPipe runs cmd in env with a stdin pipe. A missing binary is
// reported as agent.CodeAgentNotFound, a tag in use as a sandbox error.
func startPipe(ctx context.Context, env sandbox.Environment, name string, cmd sandbox.Cmd) (*pipe, error) {
	cmd.Stdin = true
	p, err := env.Exec(ctx, cmd)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, agent.Fail(agent.CodeAgentNotFound, "%s is not installed or not on PATH: %v", name, err)
		}
		return nil, agent.Fail(agent.CodeSandboxError, "start %s: %v", name, err)
	}
	return newPipe(name, p, 0), nil
}

// attachPipe re-attaches the process tagged tag, its stdout replayed from
// byte from (stderr from what the spool still holds). The error wraps
// sandbox.ErrNotFound when there is no such process.
func attachPipe(ctx context.Context, at sandbox.Attacher, name, tag string, from int64) (*pipe, error) {
	p, err := at.Attach(ctx, tag, sandbox.Offsets{Stdout: from})
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", name, err)
	}
	return newPipe(name, p, from), nil
}

func newPipe(name string, p sandbox.Process, from int64) *pipe {
	pr := &pipe{name: name, p: p, tag: p.Tag(), lines: make(chan cliLine, 64), quit: make(chan struct{}), done: make(chan struct{})}
	go pr.pump(from)
	return pr
}

// pump splits stdout into lines and keeps the stderr tail. A gap before
// the first expected byte kills the process: what it printed there is lost,
// so nothing after it can be converted faithfully.
func (pr *pipe) pump(pos int64) {
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
func (pr *pipe) split(pos int64) bool {
	var buf []byte
	start := pos
	truncated := false
	send := func(l cliLine) bool {
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
			pr.emu.Lock()
			pr.stderr = append(pr.stderr, c.Data...)
			if len(pr.stderr) > stderrTail {
				pr.stderr = append([]byte(nil), pr.stderr[len(pr.stderr)-stderrTail:]...)
			}
			pr.emu.Unlock()
			continue
		}
		if c.Offset > pos {
			pr.emu.Lock()
			gapped := pr.gap != nil
			if !gapped {
				pr.gap = fmt.Errorf("%w: bytes %d to %d of %s's output are gone", errOutputGap, pos, c.Offset, pr.name)
			}
			pr.emu.Unlock()
			if !gapped {
				_ = pr.p.Kill()
			}
		}
		if pr.gapped() {
			continue // drain until the exit
		}
		data := c.Data
		if skip := pos - c.Offset; skip > 0 { // an overlap the backend did not trim
			if skip >= int64(len(data)) {
				continue
			}
			data = data[skip:]
		}
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if room := agentproc.MaxLine - len(buf); room > 0 {
					buf = append(buf, data[:min(room, len(data))]...)
				}
				if len(buf) >= agentproc.MaxLine {
					truncated = true
				}
				pos += int64(len(data))
				break
			}
			if room := agentproc.MaxLine - len(buf); room > 0 {
				buf = append(buf, data[:min(room, i)]...)
			} else {
				truncated = true
			}
			pos += int64(i + 1)
			if !send(cliLine{Data: bytes.TrimRight(buf, "\r"), Truncated: truncated, Start: start, End: pos}) {
				return false
			}
			buf, truncated, start = nil, false, pos
			data = data[i+1:]
		}
	}
	if len(buf) > 0 && !pr.gapped() {
		if !send(cliLine{Data: buf, Truncated: truncated, Start: start, End: pos}) {
			return false
		}
	}
	close(pr.lines)
	pr.status, pr.werr = pr.p.Wait(context.Background())
	return true
}

const stderrTail = 16 << 10

func (pr *pipe) gapped() bool {
	pr.emu.Lock()
	defer pr.emu.Unlock()
	return pr.gap != nil
}

// Gap returns the error for output the spool dropped, if it did.
func (pr *pipe) Gap() error {
	pr.emu.Lock()
	defer pr.emu.Unlock()
	return pr.gap
}

// Tag is the process's sandbox tag.
func (pr *pipe) Tag() string { return pr.tag }

// Lines delivers stdout lines; it is closed at EOF (never after abandon).
func (pr *pipe) Lines() <-chan cliLine { return pr.lines }

// Done is closed when the process exited and its output was read, or,
// after abandon, when the sandbox stopped delivering this view of it.
func (pr *pipe) Done() <-chan struct{} { return pr.done }

// abandon stops delivering: the process keeps running in the sandbox
// (Detach). Lines is not closed; Exit reports nothing useful afterwards.
func (pr *pipe) abandon() {
	pr.qOnce.Do(func() { close(pr.quit) })
}

// Exit returns the exit status once Done is closed.
func (pr *pipe) Exit() (sandbox.ExitStatus, error) {
	<-pr.done
	return pr.status, pr.werr
}

// Stderr returns the last 16 KiB the process wrote to stderr.
func (pr *pipe) Stderr() string {
	pr.emu.Lock()
	defer pr.emu.Unlock()
	return string(pr.stderr)
}

// Write writes raw bytes to stdin.
func (pr *pipe) Write(b []byte) error {
	pr.wmu.Lock()
	defer pr.wmu.Unlock()
	_, err := pr.p.Write(b)
	return err
}

// CloseStdin closes stdin.
func (pr *pipe) CloseStdin() error {
	pr.wmu.Lock()
	defer pr.wmu.Unlock()
	return pr.p.CloseStdin()
}

// Signal signals the process group.
func (pr *pipe) Signal(sig syscall.Signal) error { return pr.p.Signal(sig) }

// Kill kills the process group.
func (pr *pipe) Kill() error { return pr.p.Kill() }

// Stop ends the process: SIGINT, then SIGKILL of its group when it has not
// exited after grace. It returns when the process is gone or ctx ends.
func (pr *pipe) Stop(ctx context.Context, grace time.Duration) {
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
// tail, as agent.CodeAgentExited (agent.CodeServerRestarted when a
// re-attach found the output it needed gone).
func (pr *pipe) ExitError() error {
	st, err := pr.Exit()
	if gap := pr.Gap(); gap != nil {
		return agent.Fail(agent.CodeServerRestarted, "cannot resume the turn after the server restart: %v (the executor's spool is bounded); %s was stopped", gap, pr.name)
	}
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
