package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/agentd/agentd/store"
)

// allBytes is binary content holding every byte value, NUL included.
func allBytes() []byte {
	b := make([]byte, 512)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

func (h harness) transcripts(t *testing.T) {
	t.Run("SaveLoadReplace", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		first := []byte("{\"type\":\"system\"}\n{\"type\":\"assistant\"}\n")
		if err := s.SaveTranscript(ctx(t), "s1", "abc.jsonl", first); err != nil {
			t.Fatalf("SaveTranscript: %v", err)
		}
		checkTranscript(t, s, "s1", "abc.jsonl", first)
		second := []byte("{\"type\":\"result\"}\n")
		if err := s.SaveTranscript(ctx(t), "s1", "abc.jsonl", second); err != nil {
			t.Fatalf("SaveTranscript (replace): %v", err)
		}
		checkTranscript(t, s, "s1", "abc.jsonl", second)
		checkTranscriptNames(t, s, "s1", []string{"abc.jsonl"})
	})

	t.Run("EmptyAndBinaryContent", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		if err := s.SaveTranscript(ctx(t), "s1", "empty", []byte{}); err != nil {
			t.Fatalf("SaveTranscript(empty): %v", err)
		}
		if err := s.SaveTranscript(ctx(t), "s1", "nil", nil); err != nil {
			t.Fatalf("SaveTranscript(nil): %v", err)
		}
		if err := s.SaveTranscript(ctx(t), "s1", "binary", allBytes()); err != nil {
			t.Fatalf("SaveTranscript(binary): %v", err)
		}
		checkTranscript(t, s, "s1", "empty", nil)
		checkTranscript(t, s, "s1", "nil", nil)
		checkTranscript(t, s, "s1", "binary", allBytes())
		checkTranscriptNames(t, s, "s1", []string{"binary", "empty", "nil"})
		// Emptying a transcript keeps it.
		if err := s.SaveTranscript(ctx(t), "s1", "binary", nil); err != nil {
			t.Fatal(err)
		}
		checkTranscript(t, s, "s1", "binary", nil)
	})

	t.Run("ListSortedByteOrder", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		names := []string{"b.jsonl", "B.jsonl", "a-b.jsonl", "a/b.jsonl", "a_b.jsonl", "é.jsonl", "a.jsonl", "A.jsonl"}
		for _, n := range names {
			if err := s.SaveTranscript(ctx(t), "s1", n, []byte(n)); err != nil {
				t.Fatalf("SaveTranscript(%q): %v", n, err)
			}
		}
		want := append([]string(nil), names...)
		sort.Strings(want)
		checkTranscriptNames(t, s, "s1", want)
		for _, n := range names {
			checkTranscript(t, s, "s1", n, []byte(n))
		}
	})

	t.Run("MissingIsErrNotFound", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		if err := s.SaveTranscript(ctx(t), "s2", "t.jsonl", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadTranscript(ctx(t), "s1", "t.jsonl"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadTranscript of another session's name: got %v, want ErrNotFound", err)
		}
		if _, err := s.LoadTranscript(ctx(t), "s2", "other.jsonl"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadTranscript of a missing name: got %v, want ErrNotFound", err)
		}
		if _, err := s.LoadTranscript(ctx(t), "never-created", "t.jsonl"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("LoadTranscript of an unknown session: got %v, want ErrNotFound", err)
		}
		checkTranscriptNames(t, s, "s1", nil)
		checkTranscriptNames(t, s, "s2", []string{"t.jsonl"})
	})

	t.Run("ReturnedDataIsACopy", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		in := []byte("original")
		if err := s.SaveTranscript(ctx(t), "s1", "t", in); err != nil {
			t.Fatal(err)
		}
		scribble(in)
		got, err := s.LoadTranscript(ctx(t), "s1", "t")
		if err != nil {
			t.Fatal(err)
		}
		scribble(got)
		checkTranscript(t, s, "s1", "t", []byte("original"))
	})
}

func checkTranscript(t *testing.T, s store.Store, session, name string, want []byte) {
	t.Helper()
	got, err := s.LoadTranscript(ctx(t), session, name)
	if err != nil {
		t.Fatalf("LoadTranscript(%q, %q): %v", session, name, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("LoadTranscript(%q, %q) = %d bytes %q…, want %d bytes %q…", session, name, len(got), head(got), len(want), head(want))
	}
}

func checkTranscriptNames(t *testing.T, s store.Store, session string, want []string) {
	t.Helper()
	got, err := s.ListTranscripts(ctx(t), session)
	if err != nil {
		t.Fatalf("ListTranscripts(%q): %v", session, err)
	}
	if !equalStrings(got, want) {
		t.Errorf("ListTranscripts(%q) = %q, want %q", session, got, want)
	}
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

func (h harness) workspaceFiles(t *testing.T) {
	t.Run("SaveListUpsert", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		files := []store.WorkspaceFile{
			{Path: "src/main.go", Content: []byte("package main\n"), Mode: 0o644, UpdatedAt: baseTime},
			{Path: "run.sh", Content: []byte("#!/bin/sh\n"), Mode: 0o755, UpdatedAt: baseTime.Add(time.Second)},
			{Path: "bin/blob", Content: allBytes(), Mode: 0o600, UpdatedAt: baseTime.Add(2 * time.Second)},
			{Path: "empty.txt", Content: []byte{}, UpdatedAt: baseTime.Add(3 * time.Second)},
			{Path: "nil.txt", Content: nil, Mode: 0o644, UpdatedAt: baseTime.Add(4 * time.Second)},
		}
		for _, f := range files {
			if err := s.SaveWorkspaceFile(ctx(t), "s1", f); err != nil {
				t.Fatalf("SaveWorkspaceFile(%q): %v", f.Path, err)
			}
		}
		checkFiles(t, s, "s1", files)

		// Upsert by path replaces content, mode and time.
		files[0] = store.WorkspaceFile{Path: "src/main.go", Content: []byte("package main\n\nfunc main() {}\n"), Mode: 0o600, UpdatedAt: baseTime.Add(time.Hour)}
		files[2] = store.WorkspaceFile{Path: "bin/blob", Content: nil, Mode: 0o600, UpdatedAt: baseTime.Add(time.Hour)}
		for _, f := range []store.WorkspaceFile{files[0], files[2]} {
			if err := s.SaveWorkspaceFile(ctx(t), "s1", f); err != nil {
				t.Fatalf("SaveWorkspaceFile(%q) again: %v", f.Path, err)
			}
		}
		checkFiles(t, s, "s1", files)
	})

	t.Run("ListSortedByteOrder", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		paths := []string{"b", "B", "a-b", "a/b", "a/B", "a_b", "a.b", "é", "a", "A", ".hidden", "a/b/c"}
		var want []store.WorkspaceFile
		for i, p := range paths {
			f := store.WorkspaceFile{Path: p, Content: []byte(p), Mode: 0o644, UpdatedAt: baseTime.Add(time.Duration(i) * time.Minute)}
			want = append(want, f)
			if err := s.SaveWorkspaceFile(ctx(t), "s1", f); err != nil {
				t.Fatalf("SaveWorkspaceFile(%q): %v", p, err)
			}
		}
		checkFiles(t, s, "s1", want)
	})

	t.Run("Delete", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		createSession(t, s, "s2")
		keep := store.WorkspaceFile{Path: "keep.txt", Content: []byte("k"), Mode: 0o644, UpdatedAt: baseTime}
		gone := store.WorkspaceFile{Path: "gone.txt", Content: []byte{}, Mode: 0o644, UpdatedAt: baseTime}
		for _, f := range []store.WorkspaceFile{keep, gone} {
			if err := s.SaveWorkspaceFile(ctx(t), "s1", f); err != nil {
				t.Fatal(err)
			}
		}
		// Same path in another session is a different file.
		if err := s.SaveWorkspaceFile(ctx(t), "s2", gone); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteSessionFile(ctx(t), "s1", "gone.txt"); err != nil {
			t.Fatalf("DeleteSessionFile: %v", err)
		}
		checkFiles(t, s, "s1", []store.WorkspaceFile{keep})
		checkFiles(t, s, "s2", []store.WorkspaceFile{gone})
		for _, p := range []string{"gone.txt", "never-saved.txt"} {
			if err := s.DeleteSessionFile(ctx(t), "s1", p); err != nil {
				t.Errorf("DeleteSessionFile of a missing file %q: %v", p, err)
			}
		}
		if err := s.DeleteSessionFile(ctx(t), "never-created", "x"); err != nil {
			t.Errorf("DeleteSessionFile in an unknown session: %v", err)
		}
		checkFiles(t, s, "s1", []store.WorkspaceFile{keep})
	})

	t.Run("ListUnknownSessionIsEmpty", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		checkFiles(t, s, "s1", nil)
		checkFiles(t, s, "never-created", nil)
	})

	t.Run("ContentIsCopied", func(t *testing.T) {
		s := h.store(t)
		createSession(t, s, "s1")
		in := store.WorkspaceFile{Path: "f", Content: []byte("original"), Mode: 0o644, UpdatedAt: baseTime}
		want := in
		want.Content = []byte("original")
		if err := s.SaveWorkspaceFile(ctx(t), "s1", in); err != nil {
			t.Fatal(err)
		}
		scribble(in.Content)
		got, err := s.ListWorkspaceFiles(ctx(t), "s1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			scribble(got[0].Content)
		}
		checkFiles(t, s, "s1", []store.WorkspaceFile{want})
	})
}

// checkFiles fails t unless the session's files are want, sorted by path.
func checkFiles(t *testing.T, s store.Store, session string, want []store.WorkspaceFile) {
	t.Helper()
	want = append([]store.WorkspaceFile(nil), want...)
	sort.Slice(want, func(i, j int) bool { return want[i].Path < want[j].Path })
	got, err := s.ListWorkspaceFiles(ctx(t), session)
	if err != nil {
		t.Fatalf("ListWorkspaceFiles(%q): %v", session, err)
	}
	gotPaths := make([]string, len(got))
	for i, f := range got {
		gotPaths[i] = f.Path
	}
	wantPaths := make([]string, len(want))
	for i, f := range want {
		wantPaths[i] = f.Path
	}
	if !equalStrings(gotPaths, wantPaths) {
		t.Fatalf("ListWorkspaceFiles(%q) paths = %q, want %q", session, gotPaths, wantPaths)
	}
	for i := range want {
		w, g := want[i], got[i]
		var d []string
		if !bytes.Equal(w.Content, g.Content) {
			d = append(d, fmt.Sprintf("Content: got %d bytes %q…, want %d bytes %q…", len(g.Content), head(g.Content), len(w.Content), head(w.Content)))
		}
		if w.Mode != g.Mode {
			d = append(d, fmt.Sprintf("Mode: got %o, want %o", g.Mode, w.Mode))
		}
		if !sameInstant(w.UpdatedAt, g.UpdatedAt) {
			d = append(d, fmt.Sprintf("UpdatedAt: got %v, want %v", g.UpdatedAt, w.UpdatedAt))
		}
		if len(d) > 0 {
			t.Errorf("workspace file %q of %q:\n  %v", w.Path, session, d)
		}
	}
}
