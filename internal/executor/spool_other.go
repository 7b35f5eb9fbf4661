//go:build !linux

package executor

import (
	"errors"
	"os"
)

// openTmpfile fails: O_TMPFILE is Linux's (createFile falls back to a
// named file, unlinked at once).
func openTmpfile(string) (*os.File, error) { return nil, errors.ErrUnsupported }
