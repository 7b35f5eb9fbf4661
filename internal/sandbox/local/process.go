package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agentd/agentd/sandbox"
)

// readSize is the most one chunk holds (the read buffer grows to it).
const readSize = 256 << 10

// process is a started command. Output is read by one goroutine per stream
// and handed over unbuffered-ish (a small channel buffer): a slow consumer
// blocks the reader, so the pipe fills and the child blocks writing. Nothing
// is dropped.
type process struct {
	env  *Environment
	tag  string
	pid  int // also the process group id (and session id on a PTY)
	cmd  *exec.Cmd
	term *os.File // PTY master, nil for pipes
	in   *os.File // stdin pipe's write end, nil without Cmd.Stdin

	out     chan sandbox.Chunk
	readers sync.WaitGroup
	srcs    []*os.File // read ends being pumped
	exited  atomic.Bool
	exitAt  time.Time // set before exited becomes true

	abandoned chan struct{}
	abandonMu sync.Once

	// mu guards gone: once the leader is reaped its pid may be reused, so
	// signalling by pid must stop at that moment.
	mu   sync.Mutex
	gone bool

	reaped chan struct{} // closed once the leader is reaped
	done   chan struct{} // closed once status is set and out is closed
	status sandbox.ExitStatus
}

var _ sandbox.Process = (*process)(nil)

func start(e *Environment, cmd *exec.Cmd, tag string, c sandbox.Cmd) (*process, error) {
	p := &process{
		env:       e,
		tag:       tag,
		cmd:       cmd,
		out:       make(chan sandbox.Chunk, 16),
		abandoned: make(chan struct{}),
		reaped:    make(chan struct{}),
		done:      make(chan struct{}),
	}
	// Files handed to the child, closed in this process once it started.
	var child []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				_ = f.Close()
			}
		}
	}
	attr := newSysProcAttr()
	if c.PTY != nil {
		master, tty, err := openPTY(*c.PTY)
		if err != nil {
			return nil, fmt.Errorf("open pty: %w", err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		child = append(child, tty)
		p.term = master
		p.srcs = []*os.File{master}
		attr.Setsid = true // leads a new session, and so a new group
		attr.Setctty = true
		attr.Ctty = 0 // the child's stdin
	} else {
		attr.Setpgid = true
		outR, outW, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{outR, outW})
			return nil, err
		}
		// Bigger pipes mean fewer, larger reads for chatty commands; small
		// writes are still read (and delivered) as soon as they land.
		for _, w := range []*os.File{outW, errW} {
			growPipe(w)
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		child = append(child, outW, errW)
		p.srcs = []*os.File{outR, errR}
		if c.Stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				closeAll(append(child, p.srcs...))
				return nil, err
			}
			cmd.Stdin = inR
			child = append(child, inR)
			p.in = inW
		}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		closeAll(child)
		closeAll(p.srcs)
		closeAll([]*os.File{p.in})
		return nil, err
	}
	closeAll(child)
	p.pid = cmd.Process.Pid
	// The child leads its own group (or session), so pgid = pid.
	if err := e.nice.apply(p.pid); err != nil {
		e.log.Warn("could not lower the command's CPU priority", "tag", tag, "err", err)
	}
	streams := []sandbox.Stream{sandbox.Stdout, sandbox.Stderr}
	p.readers.Add(len(p.srcs))
	for i, src := range p.srcs {
		go p.pump(src, streams[i])
	}
	return p, nil
}

// openPTY opens a terminal pair of the given size. The master is made
// non-blocking and pollable so reads can be given deadlines (creack/pty
// leaves it blocking).
func openPTY(size sandbox.WindowSize) (master, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	_ = m.Close()
	if err != nil {
		_ = tty.Close()
		return nil, nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		_ = tty.Close()
		return nil, nil, err
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, size); err != nil {
		_ = master.Close()
		_ = tty.Close()
		return nil, nil, err
	}
	return master, tty, nil
}

func setWinsize(f *os.File, size sandbox.WindowSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	})
	if err != nil {
		return err
	}
	return ioErr
}

// pump copies one stream to out as it is read, with the stream's byte
// offset.
//
// Once the leader exited and its group was killed, only a process that
// left the group (setsid) can still write. The stream then ends
// DrainTimeout after the exit, plus however long out was blocked since:
// what the pipe held at the exit reads at once, so a slow consumer still
// gets all of it, while an escaped process, silent or chatty, can't hold
// Wait for longer than DrainTimeout.
func (p *process) pump(src *os.File, stream sandbox.Stream) {
	defer p.readers.Done()
	drain := p.env.opts.DrainTimeout
	var off int64
	var blocked time.Duration // time out was blocked after the exit
	// Start small (most commands print little) and grow while reads
	// fill the buffer.
	buf := make([]byte, 16<<10)
	for {
		select {
		case <-p.abandoned:
			return
		default:
		}
		exited := p.exited.Load()
		if exited {
			_ = src.SetReadDeadline(p.exitAt.Add(drain + blocked))
		}
		n, err := src.Read(buf)
		if n > 0 {
			chunk := sandbox.Chunk{Stream: stream, Data: append([]byte(nil), buf[:n]...), Offset: off}
			var sent time.Time
			if exited {
				sent = time.Now()
			}
			select {
			case p.out <- chunk:
			case <-p.abandoned:
				return
			}
			if exited {
				blocked += time.Since(sent)
			}
			off += int64(n)
			if n == len(buf) && len(buf) < readSize {
				buf = make([]byte, 2*len(buf))
			}
		}
		if err != nil {
			// EOF, EIO (a PTY whose last holder closed it), a deadline,
			// or the file closed by abandon.
			if errors.Is(err, os.ErrDeadlineExceeded) {
				p.env.log.Warn("output still held open by a process outside the command's group; ending it",
					"tag", p.tag, "stream", stream)
			}
			return
		}
	}
}

// wait reaps the leader, ends its group, waits for the output, and records
// the status.
func (p *process) wait() {
	// Wait for the exit without reaping: the zombie keeps the pid (and so
	// the group id) from being reused while the group is killed.
	waitExited(p.pid)
	p.mu.Lock()
	p.killLocked(sigKill)
	p.gone = true
	p.mu.Unlock()
	err := p.cmd.Wait()
	close(p.reaped)

	st := sandbox.ExitStatus{Code: -1}
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			if ws.Signaled() {
				st.Signal = signalName(ws.Signal())
			} else {
				st.Code = ws.ExitStatus()
			}
		}
	} else if err != nil {
		p.env.log.Warn("wait for process", "tag", p.tag, "err", err)
	}
	p.status = st

	// The group is gone: bound what the readers still wait for (see
	// pump). The deadline set here wakes a read already waiting.
	p.exitAt = time.Now()
	p.exited.Store(true)
	for _, src := range p.srcs {
		_ = src.SetReadDeadline(p.exitAt.Add(p.env.opts.DrainTimeout))
	}
	p.readers.Wait()
	close(p.out)
	for _, src := range p.srcs {
		_ = src.Close()
	}
	if p.in != nil {
		_ = p.in.Close()
	}
	p.env.forget(p)
	p.env.log.Debug("process ended", "tag", p.tag, "pid", p.pid, "code", st.Code, "signal", st.Signal)
	close(p.done)
}

// abandon discards undelivered output (Terminate: nobody may be reading).
func (p *process) abandon() {
	p.abandonMu.Do(func() {
		close(p.abandoned)
		// Closing unblocks a pending Read; wait closes them again, harmlessly.
		for _, src := range p.srcs {
			_ = src.Close()
		}
	})
}

// killLocked sends sig to the process group and, on a PTY, to every other
// process of the session (an interactive shell puts background jobs in
// groups of their own). p.mu must be held and the leader not yet reaped.
func (p *process) killLocked(sig syscall.Signal) {
	_ = syscall.Kill(-p.pid, sig)
	if p.term != nil {
		killSession(p.pid, sig)
	}
}

// signalAll signals everything of the process unless it is already gone.
func (p *process) signalAll(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.killLocked(sig)
	}
}

func (p *process) Tag() string { return p.tag }

// Output delivers the output in order per stream and is closed after the
// last chunk. It must be drained: Wait returns only once everything was
// delivered, and an unread channel holds the process up (back-pressure).
func (p *process) Output() <-chan sandbox.Chunk { return p.out }

// Write writes to the process's stdin pipe or terminal.
func (p *process) Write(b []byte) (int, error) {
	switch {
	case p.term != nil:
		return p.term.Write(b)
	case p.in != nil:
		return p.in.Write(b)
	}
	return 0, ErrNoInput
}

// CloseStdin closes the stdin pipe. On a PTY it writes the end-of-file
// character (Ctrl-D), which a program reading the terminal in canonical
// mode sees as end of input at the start of a line.
func (p *process) CloseStdin() error {
	switch {
	case p.term != nil:
		_, err := p.term.Write([]byte{4})
		return err
	case p.in != nil:
		return p.in.Close()
	}
	return ErrNoInput
}

// Signal sends sig to the process's whole group. After the process exited
// it returns os.ErrProcessDone.
func (p *process) Signal(sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return fmt.Errorf("signal %v: not a unix signal", sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(-p.pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %s: %w", signalName(s), err)
	}
	return nil
}

// Kill sends SIGKILL to the whole group (and, on a PTY, session). Killing a
// process that already exited is not an error.
func (p *process) Kill() error {
	p.signalAll(sigKill)
	return nil
}

// Resize changes the terminal's size (the process gets SIGWINCH).
func (p *process) Resize(size sandbox.WindowSize) error {
	if p.term == nil {
		return ErrNotTerminal
	}
	if err := setWinsize(p.term, size); err != nil {
		return fmt.Errorf("resize: %w", err)
	}
	return nil
}

// Wait returns how the process ended once it exited and all its output
// was delivered on Output. A process killed by a signal has Code -1 and
// Signal set ("SIGKILL"); otherwise Code is the exit code.
func (p *process) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	select {
	case <-p.done:
		return p.status, nil
	case <-ctx.Done():
		return sandbox.ExitStatus{}, ctx.Err()
	}
}
