//go:build !linux

package executor

import (
	"errors"
	"fmt"
)

// switchUser fails: the executor switches users only on Linux, where its
// sandboxes (executor, bwrap) start it as root for that.
func switchUser(uid, gid int, _ []int) error {
	return fmt.Errorf("switch user to uid %d gid %d: the executor needs Linux for that: %w", uid, gid, errors.ErrUnsupported)
}
