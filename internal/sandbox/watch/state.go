package watch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timestampGranule is how coarse file timestamps may be. A file whose mtime
// is older than this when observed cannot be rewritten without its mtime
// changing, so polling needs no hash to notice the rewrite.
const timestampGranule = 2 * time.Second

// fileState is what the watcher remembers about a regular file.
type fileState struct {
	size  int64
	mtime int64  // UnixNano
	sha   string // hex; "" when not hashed
	seen  time.Time
}

func stateOf(info fs.FileInfo, now time.Time) fileState {
	return fileState{size: info.Size(), mtime: info.ModTime().UnixNano(), seen: now}
}

func (s fileState) stable() bool {
	return s.seen.UnixNano()-s.mtime > int64(timestampGranule)
}

// changed reports whether cur differs in content from prev: by size, then by
// hash when both are hashed, else by mtime.
func changed(prev, cur fileState) bool {
	if prev.size != cur.size {
		return true
	}
	if prev.sha != "" && cur.sha != "" {
		return prev.sha != cur.sha
	}
	return prev.mtime != cur.mtime
}

// observe stats and (below the hash limit) hashes the file at rel. It never
// follows a symlink and never reads anything but a regular file, so a path
// swapped for a FIFO or /dev/zero cannot stall the watcher.
func (w *Watcher) observe(rel string, now time.Time) (fileState, error) {
	f, err := os.OpenFile(w.abs(rel), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fileState{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fileState{}, err
	}
	if !info.Mode().IsRegular() {
		return fileState{}, fmt.Errorf("%s: not a regular file", rel)
	}
	st := stateOf(info, now)
	if w.opts.HashLimit < 0 || st.size > w.opts.HashLimit {
		return st, nil
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, w.opts.HashLimit+1))
	if err != nil {
		return fileState{}, err
	}
	if n > w.opts.HashLimit {
		return st, nil // grew past the limit while we read; a later event follows
	}
	// Report the size of what was hashed so Size and SHA256 agree even if
	// the file changed between stat and read; a later event follows then.
	st.size = n
	st.sha = hex.EncodeToString(h.Sum(nil))
	return st, nil
}
