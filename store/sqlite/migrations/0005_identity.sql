-- 0005: identity. Sessions get their owner and tenant; users, API tokens
-- (hashed), shares, sealed provider keys, budgets, per-day usage counts and
-- the access log (store/identity.go).

ALTER TABLE sessions ADD COLUMN owner  TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN tenant TEXT NOT NULL DEFAULT '';

CREATE TABLE users (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL,
    tenant     TEXT    NOT NULL,
    role       TEXT    NOT NULL,
    issuer     TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    disabled   INTEGER NOT NULL,
    created_at INTEGER
) STRICT;

CREATE UNIQUE INDEX users_by_subject ON users (issuer, subject) WHERE subject <> '';

CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    hash         TEXT NOT NULL UNIQUE,
    user_id      TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    scopes       TEXT NOT NULL, -- space-separated
    created_at   INTEGER,
    expires_at   INTEGER,
    last_used_at INTEGER,
    revoked_at   INTEGER
) STRICT;

CREATE INDEX api_tokens_by_user ON api_tokens (user_id);

CREATE TABLE session_shares (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id    TEXT NOT NULL,
    access     TEXT NOT NULL,
    created_at INTEGER,
    PRIMARY KEY (session_id, user_id)
) STRICT;

CREATE INDEX session_shares_by_user ON session_shares (user_id, session_id);

CREATE TABLE provider_keys (
    scope      TEXT NOT NULL,
    owner      TEXT NOT NULL,
    provider   TEXT NOT NULL,
    sealed     BLOB NOT NULL,
    hint       TEXT NOT NULL,
    created_at INTEGER,
    PRIMARY KEY (scope, owner, provider)
) STRICT;

CREATE TABLE budgets (
    scope                 TEXT    NOT NULL,
    owner                 TEXT    NOT NULL,
    tokens_per_day        INTEGER NOT NULL,
    tokens_per_month      INTEGER NOT NULL,
    cost_per_day_micros   INTEGER NOT NULL,
    cost_per_month_micros INTEGER NOT NULL,
    PRIMARY KEY (scope, owner)
) STRICT;

CREATE TABLE usage_days (
    user_id     TEXT    NOT NULL,
    tenant      TEXT    NOT NULL,
    day         INTEGER NOT NULL, -- days since 1970-01-01 (UTC)
    tokens      INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL,
    PRIMARY KEY (user_id, tenant, day)
) STRICT;

CREATE INDEX usage_days_by_tenant ON usage_days (tenant, day);

CREATE TABLE access_log (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    ts       INTEGER,
    kind     TEXT NOT NULL,
    actor    TEXT NOT NULL,
    token_id TEXT NOT NULL,
    subject  TEXT NOT NULL,
    detail   TEXT NOT NULL
) STRICT;
