package api

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/agentd/agentd/sandbox"
	"github.com/agentd/agentd/store"
)

func TestErrorTextHidesHostPaths(t *testing.T) {
	s := &Server{hidden: hiddenRoots("/srv/agentd/data")}
	ws := "/srv/agentd/data/workspaces/01a2-b3"
	for in, want := range map[string]string{
		"read " + ws + "/d/e: is a directory":            "read d/e: is a directory",
		"stat " + ws + ": no such file":                  "stat .: no such file",
		"open " + ws:                                     "open .",
		`open "` + ws + `/x y.txt": denied`:              `open "x y.txt": denied`,
		"open /srv/agentd/data/agentd.db: locked":        "open <data-dir>/agentd.db: locked",
		"dial unix /srv/agentd/data/run/e.sock: refused": "dial unix <data-dir>/run/e.sock: refused",
		"/srv/agentd/data-other/x":                       "/srv/agentd/data-other/x",
		"in /srv/agentd/data.":                           "in <data-dir>.",
		"/srv/agentd/data.bak/x":                         "/srv/agentd/data.bak/x",
		"in /srv/agentd/data":                            "in <data-dir>",
		"no paths here":                                  "no paths here",
	} {
		if got := s.errorText(errors.New(in)); got != want {
			t.Errorf("errorText(%q) = %q, want %q", in, got, want)
		}
	}
	// A path an fs.PathError names outside the data folder: its last element.
	err := fmt.Errorf("read x: %w", &fs.PathError{Op: "open", Path: "/var/lib/secret/place/x", Err: syscall.ENOENT})
	if got := s.errorText(err); strings.Contains(got, "/var/lib") || !strings.Contains(got, "open x") {
		t.Errorf("errorText(%q) = %q", err, got)
	}
	// No data folder, or one at /: nothing is rewritten by root.
	if got := (&Server{hidden: hiddenRoots("/")}).errorText(errors.New("open /a/b: x")); got != "open /a/b: x" {
		t.Errorf("root data folder: %q", got)
	}
}

func TestInternalErrorsStayInTheLog(t *testing.T) {
	var logged bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logged, nil)), hidden: hiddenRoots("/srv/agentd/data")}
	status, e := s.describe(errors.New("store: open /srv/agentd/data/agentd.db: disk I/O error"), "path", "/api/x")
	if status != 500 || e.Code != CodeInternal || strings.Contains(e.Error, "agentd.db") || !strings.Contains(e.Error, "ref ") {
		t.Fatalf("internal error answered %d %+v", status, e)
	}
	ref := e.Error[strings.Index(e.Error, "ref ")+4 : len(e.Error)-1]
	if !strings.Contains(logged.String(), "ref="+ref) || !strings.Contains(logged.String(), "disk I/O error") {
		t.Fatalf("log %q lacks ref %s and the error", logged.String(), ref)
	}
	// ENAMETOOLONG from below is a bad path, not an internal error.
	if status, e := s.describe(&fs.PathError{Op: "openat", Path: "x", Err: syscall.ENAMETOOLONG}); status != 400 || e.Code != CodeInvalidPath {
		t.Fatalf("ENAMETOOLONG answered %d %+v", status, e)
	}
	if _, err := sandbox.CleanPath(strings.Repeat("n", 256)); !errors.Is(err, sandbox.ErrInvalidPath) {
		t.Fatalf("CleanPath of a 256-byte name: %v", err)
	}
}

// An artifact put refused for its quota, however wrapped on its way (the
// session layer, an upload), is 507 ARTIFACT_QUOTA_EXCEEDED with the
// store's figures in the message.
func TestClassifyArtifactQuota(t *testing.T) {
	err := store.ArtifactQuota{Session: 10}.Check(8, 5, 0, 5)
	err = fmt.Errorf("keep output of q3: %w", fmt.Errorf("put artifact of %q: %w", "s1", err))
	if status, code := classify(err); status != 507 || code != CodeArtifactQuota {
		t.Errorf("classify(%v) = %d %s, want 507 %s", err, status, code, CodeArtifactQuota)
	}
	if !strings.Contains(err.Error(), "13 bytes") || !strings.Contains(err.Error(), "quota of 10") {
		t.Errorf("message %q: want the figures", err)
	}
	if status, code := classify(fmt.Errorf("x: %w", errArtifactNotFound)); status != 404 || code != CodeArtifactNotFound {
		t.Errorf("classify(not found) = %d %s", status, code)
	}
}
