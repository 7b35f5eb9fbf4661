package api

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"fmt"

	"net/http"
	"strconv"
	"time"

	"github.com/agentd/agentd/restapi"
	"github.com/agentd/agentd/sandbox"
)

// Session routes beyond the contract's first set: rename, the message
// queue, the changes view and the workspace download.

func (s *Server) handleRename(w http.ResponseWriter, r *http.Request) {
	var req restapi.RenameSessionRequest
	if err := decode(r, &req, false); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Name == nil {
		s.fail(w, r, badRequest(`body must be {"name": "…"}`))
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	sum, err := s.cfg.Sessions.Rename(ctx, r.PathValue("id"), *req.Name, Principal(r.Context()))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sum)
}

func (s *Server) handleQueue(w http.ResponseWriter, r *http.Request) {
	q, err := s.cfg.Sessions.Queue(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.QueuedMessageList{Messages: q})
}

func (s *Server) handleCancelQueued(w http.ResponseWriter, r *http.Request) {
	sess, err := s.cfg.Sessions.Get(r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ctx, cancel := shortCtx(r)
	defer cancel()
	if err := sess.CancelQueued(ctx, r.PathValue("messageId"), Principal(r.Context())); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, restapi.Success{Success: true})
}

func (s *Server) handleChanges(w http.ResponseWriter, r *http.Request) {
	ch, err := s.cfg.Sessions.Changes(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ch)
}

func (s *Server) handleChangedContent(w http.ResponseWriter, r *http.Request) {
	data, err := s.cfg.Sessions.ChangedContent(r.Context(), r.PathValue("id"), r.PathValue("sha256"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Content addressed: it never changes.
	w.Header().Set("Cache-Control", "private, max-age=31536000, immutable")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

// archiveMaxFile is the largest file an archive includes; larger ones are
// listed in AGENTD-SKIPPED.txt instead.
const archiveMaxFile = 64 << 20

func (s *Server) handleArchive(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	format := r.URL.Query().Get("format")
	if format == "" {
		format = "zip"
	}
	if format != "zip" && format != "tar.gz" {
		s.fail(w, r, badRequest(`format must be "zip" or "tar.gz"`))
		return
	}
	if _, err := s.cfg.Sessions.Get(id); err != nil {
		s.fail(w, r, err)
		return
	}
	name := "workspace-" + shortID(id)
	ctype := "application/zip"
	if format == "tar.gz" {
		ctype = "application/gzip"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.%s"`, name, format))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	var add func(fi sandbox.FileInfo, data []byte) error
	var finish func() error
	if format == "zip" {
		zw := zip.NewWriter(w)
		add = func(fi sandbox.FileInfo, data []byte) error {
			h := &zip.FileHeader{Name: name + "/" + fi.Path, Method: zip.Deflate, Modified: fi.ModTime}
			h.SetMode(fi.Mode.Perm())
			f, err := zw.CreateHeader(h)
			if err == nil {
				_, err = f.Write(data)
			}
			return err
		}
		finish = zw.Close
	} else {
		gz := gzip.NewWriter(w)
		tw := tar.NewWriter(gz)
		add = func(fi sandbox.FileInfo, data []byte) error {
			err := tw.WriteHeader(&tar.Header{Name: name + "/" + fi.Path, Mode: int64(fi.Mode.Perm()), Size: int64(len(data)),
				ModTime: fi.ModTime, Typeflag: tar.TypeReg, Format: tar.FormatPAX})
			if err == nil {
				_, err = tw.Write(data)
			}
			return err
		}
		finish = func() error {
			if err := tw.Close(); err != nil {
				return err
			}
			return gz.Close()
		}
	}
	var skipped []string
	started := false
	err := s.cfg.Sessions.WalkFiles(r.Context(), id, archiveMaxFile, func(fi sandbox.FileInfo, data []byte) error {
		started = true
		if data == nil && fi.Size > 0 {
			skipped = append(skipped, fmt.Sprintf("%s (%d bytes)", fi.Path, fi.Size))
			return nil
		}
		return add(fi, data)
	})
	if err != nil && !started {
		// Nothing sent yet: a proper error answer is still possible.
		w.Header().Del("Content-Disposition")
		s.fail(w, r, err)
		return
	}
	if err == nil && len(skipped) > 0 {
		note := "Files larger than " + strconv.Itoa(archiveMaxFile>>20) + " MiB are not in this archive:\n"
		for _, p := range skipped {
			note += p + "\n"
		}
		err = add(sandbox.FileInfo{Path: "AGENTD-SKIPPED.txt", Mode: 0o644, ModTime: time.Now()}, []byte(note))
	}
	if err == nil {
		err = finish()
	}
	if err != nil {
		// Mid-stream: the truncated body is all the client gets; abort so
		// it sees a failed download rather than a short archive.
		s.log.Warn("archive", "session", id, "err", err)
		panic(http.ErrAbortHandler)
	}
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}
