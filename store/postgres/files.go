package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/store"
)

// SaveTranscript stores (replaces) the transcript called name. An unknown
// session is store.ErrNotFound.
func (s *Store) SaveTranscript(ctx context.Context, sessionID, name string, data []byte) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("save transcript of %q: %w", sessionID, err)
	}
	if name == "" {
		return fmt.Errorf("save transcript of %q: empty name", sessionID)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO transcripts (session_id, name, data, updated_at) VALUES ($1, $2, $3, clock_timestamp())
		ON CONFLICT (session_id, name) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`,
		sessionID, name, reqBytes(data))
	if pgCode(err) == codeForeignKeyViolation {
		return fmt.Errorf("save transcript %q of %q: session: %w", name, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("save transcript %q of %q: %w", name, sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// LoadTranscript returns a saved transcript or store.ErrNotFound.
func (s *Store) LoadTranscript(ctx context.Context, sessionID, name string) ([]byte, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("load transcript of %q: %w", sessionID, err)
	}
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM transcripts WHERE session_id = $1 AND name = $2`, sessionID, name).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("load transcript %q of %q: %w", name, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load transcript %q of %q: %w", name, sessionID, withCtxErr(ctx, err))
	}
	return reqBytes(data), nil
}

// ListTranscripts names the session's transcripts in byte order.
func (s *Store) ListTranscripts(ctx context.Context, sessionID string) ([]string, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("list transcripts of %q: %w", sessionID, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT name FROM transcripts WHERE session_id = $1 ORDER BY name`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list transcripts of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list transcripts of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	if names == nil {
		names = []string{}
	}
	return names, nil
}

// SaveWorkspaceFile upserts a workspace file by path. An unknown session is
// store.ErrNotFound.
func (s *Store) SaveWorkspaceFile(ctx context.Context, sessionID string, f store.WorkspaceFile) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("save workspace file of %q: %w", sessionID, err)
	}
	if f.Path == "" {
		return fmt.Errorf("save workspace file of %q: empty path", sessionID)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO workspace_files (session_id, path, content, mode, updated_at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (session_id, path) DO UPDATE SET content = excluded.content, mode = excluded.mode, updated_at = excluded.updated_at`,
		sessionID, f.Path, reqBytes(f.Content), int64(f.Mode), timeArg(f.UpdatedAt))
	if pgCode(err) == codeForeignKeyViolation {
		return fmt.Errorf("save workspace file %q of %q: session: %w", f.Path, sessionID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("save workspace file %q of %q: %w", f.Path, sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// DeleteSessionFile deletes a workspace file; a missing one is not an error.
func (s *Store) DeleteSessionFile(ctx context.Context, sessionID, path string) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("delete workspace file of %q: %w", sessionID, err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM workspace_files WHERE session_id = $1 AND path = $2`, sessionID, path); err != nil {
		return fmt.Errorf("delete workspace file %q of %q: %w", path, sessionID, withCtxErr(ctx, err))
	}
	return nil
}

// ListWorkspaceFiles returns the session's files in byte order of path.
func (s *Store) ListWorkspaceFiles(ctx context.Context, sessionID string) ([]store.WorkspaceFile, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("list workspace files of %q: %w", sessionID, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT path, content, mode, updated_at FROM workspace_files
		WHERE session_id = $1 ORDER BY path`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list workspace files of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	defer rows.Close()
	files := []store.WorkspaceFile{}
	for rows.Next() {
		var (
			f       store.WorkspaceFile
			mode    int64
			updated *time.Time
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
		return nil, fmt.Errorf("list workspace files of %q: %w", sessionID, withCtxErr(ctx, err))
	}
	return files, nil
}
