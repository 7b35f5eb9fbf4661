package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Start starts cmd inside the group: with v2 the child is cloned straight
// into it (CLONE_INTO_CGROUP); with v1 the thread that forks is moved into
// the group just before the fork, so the child is born there, and moved
// back right after. A thread that cannot be moved back is not handed back
// to the runtime: it ends with its goroutine.
func (g *Group) Start(cmd *exec.Cmd) error {
	if g.m.version == V2 {
		return g.startV2(cmd)
	}
	errc := make(chan error, 1)
	go g.startV1(cmd, errc)
	return <-errc
}

func (g *Group) startV2(cmd *exec.Cmd) error {
	d := g.dirs()[0]
	f, err := os.Open(d)
	if err != nil {
		return fmt.Errorf("cgroup: start in %s: %w", g.name, err)
	}
	defer f.Close()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = int(f.Fd())
	return cmd.Start()
}

// startV1 runs on a goroutine of its own, locked to its thread.
func (g *Group) startV1(cmd *exec.Cmd, errc chan<- error) {
	runtime.LockOSThread()
	// Never on the main thread, which names the whole process in
	// /proc/<pid>/cgroup: hold it busy and let another goroutine (so
	// another thread) do the work.
	if unix.Gettid() == os.Getpid() {
		done := make(chan struct{})
		go func() {
			g.startV1(cmd, errc)
			close(done)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	tid := unix.Gettid()
	home, err := threadGroups(tid)
	if err != nil {
		runtime.UnlockOSThread()
		errc <- fmt.Errorf("cgroup: start in %s: %w", g.name, err)
		return
	}
	moved := 0
	back := func() bool {
		ok := true
		for _, h := range g.m.dirs[:moved] {
			p, found := home[h.key]
			if !found || writeFile(filepath.Join(h.mount, p, "tasks"), strconv.Itoa(tid)) != nil {
				ok = false
			}
		}
		return ok
	}
	for _, h := range g.m.dirs {
		if err := writeFile(filepath.Join(h.dir, g.name, "tasks"), strconv.Itoa(tid)); err != nil {
			if back() {
				runtime.UnlockOSThread()
			}
			errc <- fmt.Errorf("cgroup: start in %s: %w", g.name, err)
			return
		}
		moved++
	}
	err = cmd.Start()
	if back() {
		runtime.UnlockOSThread()
	}
	errc <- err
}

// threadGroups maps each hierarchy's key to the group of thread tid.
func threadGroups(tid int) (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/cgroup")
	if err != nil {
		return nil, err
	}
	return parseSelfCgroup(b), nil
}
