//go:build !linux

package watch

import (
	"testing"
	"time"

	"github.com/agentd/agentd/sandbox"
)

// haveInotify: only polling is tested here.
const haveInotify = false

// Without inotify a watcher that did not ask to poll polls anyway, and
// still reports changes.
func TestPollsWithoutInotify(t *testing.T) {
	root := t.TempDir()
	w, ch := start(t, root, Options{Debounce: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond})
	if !w.Polling() {
		t.Fatal("not polling without inotify")
	}
	if in, polling := Active(); in != 0 || polling < 1 {
		t.Fatalf("Active() = %d inotify, %d polling", in, polling)
	}
	write(t, root, "a.txt", "hello")
	until(t, ch, sandbox.Created, "a.txt")
}
