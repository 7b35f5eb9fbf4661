// Package agentproc runs an agent CLI inside a session's environment and
// speaks line-delimited JSON with it: one place for starting the process,
// reading its stdout as lines, keeping the tail of its stderr for error
// messages, writing to its stdin, and stopping it with escalation
// (SIGINT, then SIGKILL of its process group).
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

	"github.com/agentd/agentd/internal/agent"
	"github.com/agentd/agentd/internal/sandbox"
)

// MaxLine bounds one stdout line; a longer line is delivered truncated with
// Line.Truncated set (agent CLIs print whole tool outputs on one line).
const MaxLine = 64 << 20

// Line is one line of stdout, without its newline.
type Line struct {
	Data      []byte
	Truncated bool
}

// Proc is a running agent process. Write, Stderr, Stop and Kill are safe
// for concurrent use; Lines has one consumer.
type Proc struct {
	name  string
	p     sandbox.Process
	lines chan Line

	wmu sync.Mutex // serialises stdin writes

	emu    sync.Mutex // guards stderr
	stderr []byte

	done   chan struct{} // closed when output is drained and the process exited
	status sandbox.ExitStatus
	werr   error
}

const stderrTail = 16 << 10

// Start runs cmd in env (with a stdin pipe). name is the CLI's name for
// error messages. A missing binary is reported as agent.CodeAgentNotFound.
func Start(ctx context.Context, env sandbox.Environment, name string, cmd sandbox.Cmd) (*Proc, error) {
	cmd.Stdin = true
	p, err := env.Exec(ctx, cmd)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, agent.Fail(agent.CodeAgentNotFound, "%s is not installed or not on PATH: %v", name, err)
		}
		return nil, agent.Fail(agent.CodeSandboxError, "start %s: %v", name, err)
	}
	pr := &Proc{name: name, p: p, lines: make(chan Line, 64), done: make(chan struct{})}
	go pr.pump()
	return pr, nil
}

// pump splits stdout into lines and keeps the stderr tail.
func (pr *Proc) pump() {
	defer close(pr.done)
	var buf []byte
	truncated := false
	for c := range pr.p.Output() {
		if c.Stream == sandbox.Stderr {
			pr.emu.Lock()
			pr.stderr = append(pr.stderr, c.Data...)
			if len(pr.stderr) > stderrTail {
				pr.stderr = append([]byte(nil), pr.stderr[len(pr.stderr)-stderrTail:]...)
			}
			pr.emu.Unlock()
			continue
		}
		data := c.Data
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if room := MaxLine - len(buf); room > 0 {
					buf = append(buf, data[:min(room, len(data))]...)
				}
				if len(buf) >= MaxLine {
					truncated = true
				}
				break
			}
			if room := MaxLine - len(buf); room > 0 {
				buf = append(buf, data[:min(room, i)]...)
			} else {
				truncated = true
			}
			pr.lines <- Line{Data: bytes.TrimRight(buf, "\r"), Truncated: truncated}
			buf, truncated = nil, false
			data = data[i+1:]
		}
	}
	if len(buf) > 0 {
		pr.lines <- Line{Data: buf, Truncated: truncated}
	}
	close(pr.lines)
	pr.status, pr.werr = pr.p.Wait(context.Background())
}

// Lines delivers stdout lines; it is closed at EOF.
func (pr *Proc) Lines() <-chan Line { return pr.lines }

// Done is closed when the process exited and its output was read.
func (pr *Proc) Done() <-chan struct{} { return pr.done }

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
