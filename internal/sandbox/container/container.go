// Package container holds what the sandbox backends that run the executor
// as a container's main process share, whatever the engine: the Shape an
// environment is made with (the warm pools' key) and the executor flags
// that follow from it, the warm pools with what Describe lists of them
// (Pools), the set of containers this process owns (Live), what Collect
// keeps (Kept, RemoveStaleDirs), the environment wrapped around the
// executor backend's (Environment), the first ping of a new executor, and
// the run folder of a server node. The engines' own calls (moby's client
// in internal/sandbox/docker, client-go's pods and port-forwards in
// internal/sandbox/kubernetes) stay in their packages.
package container

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentd/agentd/internal/executor/rpc"
	"github.com/agentd/agentd/internal/sandbox/executor"
	"github.com/agentd/agentd/sandbox"
)

// Shape is what an environment is made with, before any session: the key
// of the warm pools (comparable).
type Shape struct {
	Image  string
	Limits sandbox.Limits
	Ignore string // the workspace watcher's ignore list, NUL-separated
}

// NewShape is the shape of a session that sets nothing of its own: the
// provider's image, limits and ignore list.
func NewShape(image string, limits sandbox.Limits, ignore []string) Shape {
	return Shape{Image: image, Limits: limits, Ignore: strings.Join(ignore, "\x00")}
}

// For is the shape of spec's environment: spec's image and non-zero
// limits over s's, and spec's ignore list.
func (s Shape) For(spec sandbox.Spec) Shape {
	s.Ignore = strings.Join(spec.Ignore, "\x00")
	if spec.Image != "" {
		s.Image = spec.Image
	}
	if spec.Limits.MemoryBytes > 0 {
		s.Limits.MemoryBytes = spec.Limits.MemoryBytes
	}
	if spec.Limits.Pids > 0 {
		s.Limits.Pids = spec.Limits.Pids
	}
	if spec.Limits.CPUPercent > 0 {
		s.Limits.CPUPercent = spec.Limits.CPUPercent
	}
	return s
}

// String names the shape in pool listings and logs (image and limits).
func (s Shape) String() string {
	return fmt.Sprintf("%s mem=%d pids=%d cpu=%d%%", s.Image, s.Limits.MemoryBytes, s.Limits.Pids, s.Limits.CPUPercent)
}

// IgnoreList is the workspace watcher's ignore list.
func (s Shape) IgnoreList() []string {
	if s.Ignore == "" {
		return nil
	}
	return strings.Split(s.Ignore, "\x00")
}

// ExecutorArgs are the flags of `agentd executor` that follow from the
// shape and the provider's nice and spool size, the same in every
// container; the caller adds how the executor is reached and how the
// engine enforces the limits.
func (s Shape) ExecutorArgs(nice int, spoolBytes int64) []string {
	var argv []string
	if nice > 0 {
		argv = append(argv, "--nice", strconv.Itoa(nice))
	}
	if spoolBytes > 0 {
		argv = append(argv, "--spool-bytes", strconv.FormatInt(spoolBytes, 10))
	}
	for _, ig := range s.IgnoreList() {
		argv = append(argv, "--ignore", ig)
	}
	if s.Limits.Pids > 0 {
		// The executor's own threads count against the limit: it makes
		// its spare ones up front so a fork bomb cannot starve it.
		argv = append(argv, "--reserve-threads", "16")
	}
	return argv
}

// NewName is a container's name: short, unique, also the name of its
// folders under the run folder.
func NewName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "agentd-" + hex.EncodeToString(b[:])
}

// ProxyDir is the folder of an environment's model proxy socket: the
// executor backend's convention (its Handle.Dir + ".mp").
func ProxyDir(dir string) string { return dir + ".mp" }

// NodeRunDir is the folder of a server node's environments (their folders
// and model proxy sockets): a sub-folder per node of dir, so that servers
// sharing dir keep out of each other's way (Collect cleans only its
// node's). dir defaults to $XDG_RUNTIME_DIR/<base>, else
// <temp>/<base>-<uid>. The result is absolute and short enough for the
// sockets in it (107 bytes).
func NodeRunDir(dir, base, node string) (string, error) {
	if dir == "" {
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			dir = filepath.Join(d, base)
		} else {
			dir = filepath.Join(os.TempDir(), base+"-"+strconv.Itoa(os.Getuid()))
		}
	}
	h := sha256.Sum256([]byte(node))
	dir, err := filepath.Abs(filepath.Join(dir, hex.EncodeToString(h[:4])))
	if err != nil {
		return "", err
	}
	env := filepath.Join(dir, "agentd-0123456789ab") // as long as NewName's
	for _, sock := range []string{filepath.Join(env, "executor.sock"), filepath.Join(ProxyDir(env), "model.sock")} {
		if len(sock) > 107 {
			return "", fmt.Errorf("run folder %s is too long for socket paths: use a shorter one", dir)
		}
	}
	return dir, nil
}

// RemoveDirs removes an environment's folders under runDir (its own and
// its model proxy's).
func RemoveDirs(runDir, name string) {
	if name == "" || filepath.Base(name) != name {
		return
	}
	dir := filepath.Join(runDir, name)
	_ = os.RemoveAll(dir)
	_ = os.RemoveAll(ProxyDir(dir))
}

// RemoveStaleDirs removes the environments' folders under runDir whose
// container keep does not name: those of containers that are no more.
func RemoveStaleDirs(runDir string, keep func(name string) bool) {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".mp")
		if strings.HasPrefix(name, "agentd-") && !keep(name) {
			_ = os.RemoveAll(filepath.Join(runDir, e.Name()))
		}
	}
}

// Kept is the set of the names the handles given to Collect hold: names
// reads them from one handle (an H); a handle that does not decode names
// nothing, nor does an empty name.
func Kept[H any](keep []json.RawMessage, names func(H) []string) map[string]bool {
	kept := map[string]bool{}
	for _, raw := range keep {
		var h H
		if json.Unmarshal(raw, &h) != nil {
			continue
		}
		for _, n := range names(h) {
			if n != "" {
				kept[n] = true
			}
		}
	}
	return kept
}

// Gone reports whether err, re-attaching to an environment's executor,
// means the environment is gone (sandbox.ErrGone: what is left of it is
// removed): not when the executor speaks another protocol version or ctx
// ended, which leave it as it is.
func Gone(ctx context.Context, err error) bool {
	return !errors.Is(err, executor.ErrIncompatible) && ctx.Err() == nil
}

// Ping pings the executor at the other end of rw once (rw is closed
// after) and checks that it speaks this server's protocol version, else
// fails with executor.ErrIncompatible and fix, what to do about it.
func Ping(ctx context.Context, rw io.ReadWriteCloser, fix string) (rpc.PingResult, error) {
	c := rpc.NewClient(rpc.NewConn(rw, nopHandler{}, rpc.ConnOptions{}))
	defer func() { c.Close(); c.Wait() }()
	ping, err := c.Ping(ctx)
	if err != nil {
		return rpc.PingResult{}, err
	}
	if ping.ProtocolVersion != rpc.ProtocolVersion {
		return rpc.PingResult{}, fmt.Errorf("%w: the image's executor speaks %d, this server %d (%s)",
			executor.ErrIncompatible, ping.ProtocolVersion, rpc.ProtocolVersion, fix)
	}
	return ping, nil
}

// nopHandler answers nothing: a connection that only pings.
type nopHandler struct{}

func (nopHandler) HandleCall(context.Context, *rpc.Conn, *rpc.Request) (any, error) {
	return nil, rpc.Errorf(rpc.CodeMethodNotFound, "not served")
}
func (nopHandler) HandleNotify(*rpc.Conn, string, json.RawMessage) {}
