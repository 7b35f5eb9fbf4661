package sandbox

import (
	"fmt"
	"path"
	"strings"
)

// Limits of a workspace path: Linux's NAME_MAX for one name, PATH_MAX
// (with the terminating NUL) for the whole path.
const (
	MaxNameLen = 255
	MaxPathLen = 4095
)

// CleanPath validates a workspace-relative path and returns it cleaned,
// slash-separated, without a leading "./". The workspace root is ".".
// Absolute paths, paths that climb out with "..", NUL bytes and backslashes
// are rejected with ErrInvalidPath, as are names and paths longer than
// MaxNameLen and MaxPathLen.
func CleanPath(p string) (string, error) {
	// The kernel's limits: a long path is a bad path here, where
	// ENAMETOOLONG deeper down would be a server error, and is not echoed.
	if len(p) > MaxPathLen {
		return "", fmt.Errorf("%w: the path is %d bytes long (at most %d)", ErrInvalidPath, len(p), MaxPathLen)
	}
	if strings.ContainsRune(p, 0) || strings.ContainsRune(p, '\\') {
		return "", fmt.Errorf("%w: %q", ErrInvalidPath, p)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q is absolute", ErrInvalidPath, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q leaves the workspace", ErrInvalidPath, p)
		}
		if len(part) > MaxNameLen {
			return "", fmt.Errorf("%w: a name in the path is %d bytes long (at most %d)", ErrInvalidPath, len(part), MaxNameLen)
		}
	}
	c := path.Clean("./" + p)
	if c == "" {
		c = "."
	}
	return c, nil
}
