package executor

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

func newTestSpool(t testing.TB, capacity int64) *spool {
	t.Helper()
	s, err := newSpool(t.TempDir(), capacity)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.release() })
	return s
}

func readAll(t *testing.T, s *spool, off int64) (int64, []byte) {
	t.Helper()
	var out []byte
	first := int64(-1)
	buf := make([]byte, 7)
	for {
		start, n, err := s.read(off, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return first, out
		}
		if first < 0 {
			first = start
		} else if start != off {
			t.Fatalf("gap inside a quiet spool: %d → %d", off, start)
		}
		out = append(out, buf[:n]...)
		off = start + int64(n)
	}
}

func TestSpoolRing(t *testing.T) {
	s := newTestSpool(t, 10)
	s.write(0, []byte("hello"))
	if first, got := readAll(t, s, 0); first != 0 || string(got) != "hello" {
		t.Fatalf("%d %q", first, got)
	}
	s.write(5, []byte("world!!")) // wraps; drops "he"
	f, e, closed := s.state()
	if f != 2 || e != 12 || closed {
		t.Fatalf("state %d %d %v", f, e, closed)
	}
	if first, got := readAll(t, s, 0); first != 2 || string(got) != "lloworld!!" {
		t.Fatalf("from a dropped offset: %d %q", first, got)
	}
	if first, got := readAll(t, s, 7); first != 7 || string(got) != "rld!!" {
		t.Fatalf("from 7: %d %q", first, got)
	}
	// Overlap is trimmed, a gap is recorded as dropped bytes.
	s.write(10, []byte("!!?"))
	if _, e, _ := s.state(); e != 13 {
		t.Fatalf("end after overlap %d", e)
	}
	s.write(20, []byte("xy"))
	if first, got := readAll(t, s, 13); first != 20 || string(got) != "xy" {
		t.Fatalf("after gap: %d %q", first, got)
	}
	// One write larger than the ring keeps its tail.
	s.write(22, []byte("0123456789ABCDEF"))
	if first, got := readAll(t, s, 0); first != 28 || string(got) != "6789ABCDEF" {
		t.Fatalf("huge write: %d %q", first, got)
	}
	s.close()
	if _, _, closed := s.state(); !closed {
		t.Fatal("not closed")
	}
	if _, n, _ := s.read(38, make([]byte, 4)); n != 0 {
		t.Fatal("read past end")
	}
}

func TestSpoolModel(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.Int64Range(1, 64).Draw(t, "cap")
		s, err := newSpool(dir, capacity)
		if err != nil {
			t.Fatal(err)
		}
		defer s.release()
		var all []byte
		for _, w := range rapid.SliceOf(rapid.SliceOfN(rapid.Byte(), 0, 100)).Draw(t, "writes") {
			s.write(int64(len(all)), w)
			all = append(all, w...)
			off := rapid.Int64Range(0, int64(len(all))).Draw(t, "off")
			buf := make([]byte, rapid.IntRange(1, 200).Draw(t, "buf"))
			start, n, err := s.read(off, buf)
			if err != nil {
				t.Fatal(err)
			}
			wantFirst := max(0, int64(len(all))-capacity)
			if start != max(off, wantFirst) {
				t.Fatalf("start %d, want %d", start, max(off, wantFirst))
			}
			if !bytes.Equal(buf[:n], all[start:min(int64(len(all)), start+int64(len(buf)))]) {
				t.Fatalf("data at %d differs", start)
			}
		}
	})
}

// A reader racing the writer never sees a torn or stale byte: byte o of
// the stream is always o*7 mod 251.
func TestSpoolConcurrentReadWrite(t *testing.T) {
	s := newTestSpool(t, 4096)
	const total = 4 << 20
	pattern := func(o int64) byte { return byte(o * 7 % 251) }
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var off int64
		for off < total {
			n := int64(rand.IntN(3000) + 1)
			b := make([]byte, n)
			for i := range b {
				b[i] = pattern(off + int64(i))
			}
			s.write(off, b)
			off += n
		}
		s.close()
	}()
	buf := make([]byte, 1500)
	var off, gaps int64
	for {
		start, n, err := s.read(off, buf)
		if err != nil {
			t.Fatal(err)
		}
		if start > off {
			gaps++
		}
		for i := range n {
			if buf[i] != pattern(start+int64(i)) {
				t.Fatalf("byte %d is %d, want %d", start+int64(i), buf[i], pattern(start+int64(i)))
			}
		}
		off = start + int64(n)
		if n == 0 {
			if _, end, closed := s.state(); closed && off >= end {
				break
			}
		}
	}
	wg.Wait()
	if _, end, _ := s.state(); off != end || end < total {
		t.Fatalf("reader ended at %d, stream at %d", off, end)
	}
	t.Logf("reader skipped dropped output %d times", gaps)
}
