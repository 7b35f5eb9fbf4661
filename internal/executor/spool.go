package executor

import (
	"fmt"
	"os"
	"sync"
)

// DefaultSpoolBytes is the default spool size per stream of each process.
const DefaultSpoolBytes = 16 << 20

// spool keeps the last capacity bytes of one output stream in a file used
// as a ring, with absolute stream offsets: byte o lives at file position
// o % capacity while first <= o < end. Writing never blocks on readers:
// when the ring is full the oldest bytes are dropped (first moves on), and
// a reader asking for a dropped offset is moved to first.
//
// One goroutine writes (the exec's pump); any number read concurrently. The
// file is created on the first write, without a name (O_TMPFILE, or
// unlinked at once), so it disappears with the executor.
type spool struct {
	dir      string
	capacity int64
	f        *os.File // nil until the first write; set under mu

	mu     sync.Mutex
	first  int64 // oldest byte still held
	end    int64 // offset after the last byte written
	closed bool  // the stream reached EOF
	err    error // the last write error (bytes then dropped)
}

func newSpool(dir string, capacity int64) (*spool, error) {
	if capacity <= 0 {
		capacity = DefaultSpoolBytes
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("spool folder: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("spool folder %s: not a folder", dir)
	}
	return &spool{dir: dir, capacity: capacity}, nil
}

// createFile makes the spool's nameless file.
func createFile(dir string) (*os.File, error) {
	if f, err := openTmpfile(dir); err == nil {
		return f, nil
	}
	// Without O_TMPFILE (file systems lacking it, systems other than
	// Linux): a named file, unlinked at once.
	f, err := os.CreateTemp(dir, "spool-*")
	if err != nil {
		return nil, fmt.Errorf("create spool: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("unlink spool: %w", err)
	}
	return f, nil
}

// write stores p as the bytes at offset off. Normally off == end; a gap
// (off > end) is recorded as dropped bytes and an overlap (off < end) is
// trimmed.
func (s *spool) write(off int64, p []byte) {
	s.mu.Lock()
	if off < s.end {
		skip := min(s.end-off, int64(len(p)))
		p, off = p[skip:], off+skip
	}
	if off > s.end {
		s.end = off
		s.first = max(s.first, off)
	}
	if n := int64(len(p)); n > s.capacity {
		p, off = p[n-s.capacity:], off+n-s.capacity
		s.end = off
	}
	if len(p) == 0 {
		s.mu.Unlock()
		return
	}
	// Move first past what this write overwrites before overwriting it, so
	// a concurrent reader can tell (see read).
	newEnd := off + int64(len(p))
	s.first = max(s.first, newEnd-s.capacity)
	s.mu.Unlock()

	var err error
	if s.f == nil { // only the writer sets it
		var f *os.File
		if f, err = createFile(s.dir); err == nil {
			s.mu.Lock()
			s.f = f
			s.mu.Unlock()
		}
	}
	if err == nil {
		err = s.writeRing(off, p)
	}

	s.mu.Lock()
	if err != nil {
		// Those bytes are unreadable now: drop everything up to them.
		s.err = err
		s.first = newEnd
	}
	s.end = newEnd
	s.mu.Unlock()
}

func (s *spool) writeRing(off int64, p []byte) error {
	pos := off % s.capacity
	n := min(int64(len(p)), s.capacity-pos)
	if _, err := s.f.WriteAt(p[:n], pos); err != nil {
		return err
	}
	if n < int64(len(p)) {
		if _, err := s.f.WriteAt(p[n:], 0); err != nil {
			return err
		}
	}
	return nil
}

// close marks the stream as ended: no more writes.
func (s *spool) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// state reports the held range and whether the stream ended.
func (s *spool) state() (first, end int64, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first, s.end, s.closed
}

// read copies bytes from offset off (or from first, when off was dropped)
// into p. It returns the offset of the first byte copied and how many
// were; n == 0 means nothing is available yet at or after off.
func (s *spool) read(off int64, p []byte) (start int64, n int, err error) {
	for {
		s.mu.Lock()
		first, end, f := s.first, s.end, s.f
		s.mu.Unlock()
		start = max(off, first)
		if start >= end || len(p) == 0 {
			return start, 0, nil
		}
		n = int(min(int64(len(p)), end-start))
		if err := readRing(f, s.capacity, start, p[:n]); err != nil {
			return start, 0, fmt.Errorf("read spool: %w", err)
		}
		s.mu.Lock()
		first = s.first
		s.mu.Unlock()
		if first <= start {
			return start, n, nil
		}
		// Overwritten while we read it: those bytes are gone; go again.
		off = first
	}
}

func readRing(f *os.File, capacity, off int64, p []byte) error {
	pos := off % capacity
	n := min(int64(len(p)), capacity-pos)
	if _, err := f.ReadAt(p[:n], pos); err != nil {
		return err
	}
	if n < int64(len(p)) {
		if _, err := f.ReadAt(p[n:], 0); err != nil {
			return err
		}
	}
	return nil
}

// release frees the file. Reads after it fail.
func (s *spool) release() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	return s.f.Close()
}
