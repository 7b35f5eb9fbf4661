// Package artifact holds what the SQLite and PostgreSQL stores share for
// artifacts: staging a put (hashing its content while spooling it to a
// temporary file, so the database transaction that stores it neither waits
// on a slow writer nor holds the artifact in memory) and the chunked
// reader of a stored artifact.
package artifact

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/agentd/agentd/store"
)

// Staged is the content of a put, read to its end: its SHA-256 and size,
// and the bytes, in memory when they fit one chunk, else in a temporary
// file. Close removes the file.
type Staged struct {
	SHA256 string
	Size   int64
	small  []byte   // the content, when it fit one chunk
	file   *os.File // else the spooled content
}

// Stage reads r to its end. It fails with store.ErrArtifactQuota as soon
// as more than limit bytes come (limit < 0: no limit), and with ctx's error
// when ctx ends (checked between chunks). Memory use is one chunk.
func Stage(ctx context.Context, r io.Reader, limit int64) (*Staged, error) {
	h := sha256.New()
	buf := make([]byte, store.ArtifactChunkSize)
	n, err := io.ReadFull(r, buf)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		if limit >= 0 && int64(n) > limit {
			return nil, tooBig(limit)
		}
		h.Write(buf[:n])
		return &Staged{SHA256: hex.EncodeToString(h.Sum(nil)), Size: int64(n), small: bytes.Clone(buf[:n])}, nil
	default:
		return nil, fmt.Errorf("read artifact: %w", err)
	}
	f, err := os.CreateTemp("", "agentd-artifact-")
	if err != nil {
		return nil, fmt.Errorf("stage artifact: %w", err)
	}
	// Unlinked at once: nothing is left behind if the process dies.
	_ = os.Remove(f.Name())
	s := &Staged{file: f}
	total := int64(0)
	for {
		if limit >= 0 && total+int64(n) > limit {
			s.Close()
			return nil, tooBig(limit)
		}
		h.Write(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			s.Close()
			return nil, fmt.Errorf("stage artifact: %w", err)
		}
		total += int64(n)
		if err := ctx.Err(); err != nil {
			s.Close()
			return nil, err
		}
		n, err = io.ReadFull(r, buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			s.Close()
			return nil, fmt.Errorf("read artifact: %w", err)
		}
		if n == 0 {
			break
		}
	}
	s.SHA256, s.Size = hex.EncodeToString(h.Sum(nil)), total
	return s, nil
}

func tooBig(limit int64) error {
	return fmt.Errorf("%w: the artifact is larger than the %d bytes the quota leaves", store.ErrArtifactQuota, limit)
}

// Chunks calls f with each chunk of the content in order (index from 0; an
// empty artifact has no chunk). data is only valid during the call.
func (s *Staged) Chunks(f func(idx int64, data []byte) error) error {
	if s.file == nil {
		if len(s.small) == 0 {
			return nil
		}
		return f(0, s.small)
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read staged artifact: %w", err)
	}
	buf := make([]byte, store.ArtifactChunkSize)
	for idx := int64(0); ; idx++ {
		n, err := io.ReadFull(s.file, buf)
		if n > 0 {
			if ferr := f(idx, buf[:n]); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read staged artifact: %w", err)
		}
	}
}

// ChunkRange calls f with chunks [from, to) of the content, in order.
func (s *Staged) ChunkRange(from, to int64, f func(idx int64, data []byte) error) error {
	if s.file == nil {
		if from > 0 || to < 1 || len(s.small) == 0 {
			return nil
		}
		return f(0, s.small)
	}
	buf := make([]byte, store.ArtifactChunkSize)
	for idx := from; idx < to; idx++ {
		n, err := s.file.ReadAt(buf, idx*store.ArtifactChunkSize)
		if n == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read staged artifact: %w", err)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read staged artifact: %w", err)
		}
		if err := f(idx, buf[:n]); err != nil {
			return err
		}
	}
	return nil
}

// Close releases the temporary file.
func (s *Staged) Close() {
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
}

// ChunkFunc loads n bytes of chunk idx of an artifact from byte off of the
// chunk (fewer when the chunk ends first). Loading only what a range needs
// spares copying the rest of the chunk out of the database (and, in
// PostgreSQL, reading it: chunks are stored uncompressed, so a substring
// reads only the TOAST pages it covers).
type ChunkFunc func(ctx context.Context, idx, off, n int64) ([]byte, error)

// NewReader returns a reader of n bytes of an artifact from off, loading
// one chunk at a time with load. A chunk missing (the artifact deleted
// while being read) fails the read with io.ErrUnexpectedEOF.
func NewReader(ctx context.Context, off, n int64, load ChunkFunc) io.ReadCloser {
	return &reader{ctx: ctx, off: off, left: n, load: load}
}

type reader struct {
	ctx  context.Context
	off  int64 // the next byte to return
	left int64 // bytes still to return
	load ChunkFunc
	cur  []byte // the rest of the current chunk
	err  error
}

func (r *reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.left <= 0 {
		return 0, io.EOF
	}
	if len(r.cur) == 0 {
		idx := r.off / store.ArtifactChunkSize
		skip := r.off - idx*store.ArtifactChunkSize
		data, err := r.load(r.ctx, idx, skip, min(r.left, store.ArtifactChunkSize-skip))
		if err != nil {
			r.err = err
			return 0, err
		}
		if len(data) == 0 {
			r.err = fmt.Errorf("artifact chunk %d is short: %w", idx, io.ErrUnexpectedEOF)
			return 0, r.err
		}
		r.cur = data
	}
	want := min(int64(len(p)), r.left, int64(len(r.cur)))
	n := copy(p[:want], r.cur)
	r.cur = r.cur[n:]
	r.off += int64(n)
	r.left -= int64(n)
	return n, nil
}

func (r *reader) Close() error {
	r.err = errors.New("read of a closed artifact")
	r.cur = nil
	return nil
}

// Reader returns a new reader of the whole content, from its start (a
// spooled file is read with ReadAt, so readers do not share an offset).
func (s *Staged) Reader() io.Reader {
	if s.file == nil {
		return bytes.NewReader(s.small)
	}
	return io.NewSectionReader(s.file, 0, s.Size)
}
