package watch

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// errNoInotify: this system has no inotify (inotify_other.go); its
// watchers poll, which New logs once per process, not per watcher.
var errNoInotify = fmt.Errorf("inotify needs Linux: %w", errors.ErrUnsupported)

// Counts of live watchers by mode, for Active.
var activeInotify, activePolling atomic.Int64

// Active reports how many watchers of this process are open, by mode:
// using the shared inotify instance, or polling (requested, or inotify
// unavailable). It is safe for concurrent use.
func Active() (inotify, polling int) {
	return int(activeInotify.Load()), int(activePolling.Load())
}

// kind says what a raw event is about; the Watcher settles the details by
// looking at the file.
type kind uint8

const (
	kindCreate kind = iota + 1 // created or moved in
	kindRemove                 // deleted or moved away
	kindChange                 // written or attributes changed
	kindRescan                 // events were lost: compare the whole tree
)

// rawEvent is one inotify event routed to one watcher, its path relative to
// that watcher's root.
type rawEvent struct {
	rel  string
	kind kind
	dir  bool
}
