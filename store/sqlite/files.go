package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentd/agentd/store"
)

// SaveTranscript stores (replaces) the transcript called name. An unknown
// session is store.ErrNotFound.
func (s *Store) SaveTranscript(ctx context.Context, sessionID, name string, data []byte) error {
	if name == "" {
		return fmt.Errorf("save transcript of %q: empty name", sessionID)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO transcripts (session_id, name, data, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (session_id, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
		sessionID, name, reqBytes(data), time.Now().UnixNano())
	if isForeignKeyViolation(err) {
		return fmt.Errorf("save transcript %q of %q: session: %w", name, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("save transcript %q of %q: %w", name, sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// LoadTranscript returns a saved transcript or store.ErrNotFound.
func (s *Store) LoadTranscript(ctx context.Context, sessionID, name string) ([]byte, error) {
	var data []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM transcripts WHERE session_id = ? AND name = ?`, sessionID, name).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("load transcript %q of %q: %w", name, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load transcript %q of %q: %w", name, sessionID, err)
	}
	return reqBytes(data), nil
}

// ListTranscripts names the session's transcripts in byte order.
func (s *Store) ListTranscripts(ctx context.Context, sessionID string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT name FROM transcripts WHERE session_id = ? ORDER BY name`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list transcripts of %q: %w", sessionID, err)
	}
	defer rows.Close()
	names := []string{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list transcripts of %q: %w", sessionID, err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list transcripts of %q: %w", sessionID, err)
	}
	return names, nil
}

// SaveWorkspaceFile upserts a workspace file by path. An unknown session is
// store.ErrNotFound.
func (s *Store) SaveWorkspaceFile(ctx context.Context, sessionID string, f store.WorkspaceFile) error {
	if f.Path == "" {
		return fmt.Errorf("save workspace file of %q: empty path", sessionID)
	}
	updated, err := timeArg(f.UpdatedAt)
	if err != nil {
		return fmt.Errorf("save workspace file %q of %q: updatedAt: %w", f.Path, sessionID, err)
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO workspace_files (session_id, path, content, mode, updated_at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (session_id, path) DO UPDATE SET content = excluded.content, mode = excluded.mode, updated_at = excluded.updated_at`,
		sessionID, f.Path, reqBytes(f.Content), int64(f.Mode), updated)
	if isForeignKeyViolation(err) {
		return fmt.Errorf("save workspace file %q of %q: session: %w", f.Path, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("save workspace file %q of %q: %w", f.Path, sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// DeleteSessionFile deletes a workspace file; a missing one is not an error.
func (s *Store) DeleteSessionFile(ctx context.Context, sessionID, path string) error {
	if _, err := s.w.ExecContext(ctx, `DELETE FROM workspace_files WHERE session_id = ? AND path = ?`, sessionID, path); err != nil {
		return fmt.Errorf("delete workspace file %q of %q: %w", path, sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// ListWorkspaceFiles returns the session's files in byte order of path.
func (s *Store) ListWorkspaceFiles(ctx context.Context, sessionID string) ([]store.WorkspaceFile, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT path, content, mode, updated_at FROM workspace_files
		WHERE session_id = ? ORDER BY path`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list workspace files of %q: %w", sessionID, err)
	}
	defer rows.Close()
	files := []store.WorkspaceFile{}
	for rows.Next() {
		var (
			f       store.WorkspaceFile
			mode    int64
			updated sql.NullInt64
		)
		if err := rows.Scan(&f.Path, &f.Content, &mode, &updated); err != nil {
			return nil, fmt.Errorf("list workspace files of %q: %w", sessionID, err)
		}
		f.Content = reqBytes(f.Content)
		f.Mode = uint32(mode)
		f.UpdatedAt = scanTime(updated)
		files = append(files, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list workspace files of %q: %w", sessionID, err)
	}
	return files, nil
}
