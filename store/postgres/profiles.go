package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/agentd/agentd/profile"
	"github.com/agentd/agentd/store"
)

// Profiles are stored as their JSON encoding, so a field added to
// profile.Profile needs no migration.

// ListAgentProfiles returns every stored profile, sorted by id (byte order).
func (s *Store) ListAgentProfiles(ctx context.Context) ([]profile.Profile, error) {
	if err := checkCtx(ctx); err != nil {
		return nil, fmt.Errorf("list agent profiles: %w", err)
	}
	rows, err := s.pool.Query(ctx, `SELECT id, data FROM agent_profiles ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list agent profiles: %w", withCtxErr(ctx, err))
	}
	defer rows.Close()
	out := []profile.Profile{}
	for rows.Next() {
		var (
			id   string
			data []byte
		)
		if err := rows.Scan(&id, &data); err != nil {
			return nil, fmt.Errorf("list agent profiles: %w", err)
		}
		p, err := decodeProfile(id, data)
		if err != nil {
			return nil, fmt.Errorf("list agent profiles: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list agent profiles: %w", withCtxErr(ctx, err))
	}
	return out, nil
}

// LoadAgentProfile returns a profile or store.ErrNotFound.
func (s *Store) LoadAgentProfile(ctx context.Context, id string) (profile.Profile, error) {
	if err := checkCtx(ctx); err != nil {
		return profile.Profile{}, fmt.Errorf("load agent profile %q: %w", id, err)
	}
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM agent_profiles WHERE id = $1`, id).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return profile.Profile{}, fmt.Errorf("load agent profile %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return profile.Profile{}, fmt.Errorf("load agent profile %q: %w", id, withCtxErr(ctx, err))
	}
	return decodeProfile(id, data)
}

// SaveAgentProfile upserts a profile by id.
func (s *Store) SaveAgentProfile(ctx context.Context, p profile.Profile) error {
	if err := checkCtx(ctx); err != nil {
		return fmt.Errorf("save agent profile %q: %w", p.ID, err)
	}
	if p.ID == "" {
		return errors.New("save agent profile: empty id")
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("save agent profile %q: %w", p.ID, err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO agent_profiles (id, data, updated_at) VALUES ($1, $2, clock_timestamp())
		ON CONFLICT (id) DO UPDATE SET data = excluded.data, updated_at = excluded.updated_at`, p.ID, data)
	if err != nil {
		return fmt.Errorf("save agent profile %q: %w", p.ID, withCtxErr(ctx, err))
	}
	return nil
}

func decodeProfile(id string, data []byte) (profile.Profile, error) {
	var p profile.Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return profile.Profile{}, fmt.Errorf("decode profile %q: %w", id, err)
	}
	return p, nil
}
