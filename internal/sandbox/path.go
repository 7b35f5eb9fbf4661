package sandbox

import (
	"fmt"
	"path"
	"strings"
)

// CleanPath validates a workspace-relative path and returns it cleaned,
// slash-separated, without a leading "./". The workspace root is ".".
// Absolute paths, paths that climb out with "..", NUL bytes and backslashes
// are rejected with ErrInvalidPath.
func CleanPath(p string) (string, error) {
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
	}
	c := path.Clean("./" + p)
	if c == "" {
		c = "."
	}
	return c, nil
}
