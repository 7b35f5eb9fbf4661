//go:build !linux

package watch

import (
	"context"
	"sync"
)

// Only Linux has inotify: elsewhere (macOS) every watcher polls, and no
// inotify value is ever made; its methods exist for watch.go to compile
// and are never reached (Watcher.in stays nil).
type inotify struct{}

// noInotifyOnce logs once per process that watchers poll.
var noInotifyOnce sync.Once

func acquireInotify(w *Watcher) (*inotify, error) {
	noInotifyOnce.Do(func() {
		w.log.Info("watch: no inotify on this system, file watchers poll", "interval", w.opts.PollInterval)
	})
	return nil, errNoInotify
}

func (*inotify) release(*Watcher)                            {}
func (*inotify) barrier(context.Context) error               { return errNoInotify }
func (*inotify) add(*Watcher, string, string) (int32, error) { return -1, errNoInotify }
func (*inotify) remove(*Watcher, int32, string)              {}
