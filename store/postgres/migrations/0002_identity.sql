-- 0002: identity (the SQLite store's migration 5). Sessions get their owner
-- and tenant; users, API tokens (hashed), shares, sealed provider keys,
-- budgets, per-day usage counts and the access log (store/identity.go).

ALTER TABLE sessions ADD COLUMN owner  text COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN tenant text COLLATE "C" NOT NULL DEFAULT '';

CREATE TABLE users (
    id         text COLLATE "C" PRIMARY KEY,
    name       text    NOT NULL,
    tenant     text COLLATE "C" NOT NULL,
    role       text    NOT NULL,
    issuer     text COLLATE "C" NOT NULL,
    subject    text COLLATE "C" NOT NULL,
    disabled   boolean NOT NULL,
    created_at timestamptz
);

CREATE UNIQUE INDEX users_by_subject ON users (issuer, subject) WHERE subject <> '';

CREATE TABLE api_tokens (
    id           text COLLATE "C" PRIMARY KEY,
    hash         text COLLATE "C" NOT NULL UNIQUE,
    user_id      text COLLATE "C" NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text NOT NULL,
    scopes       text NOT NULL, -- space-separated
    created_at   timestamptz,
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz
);

CREATE INDEX api_tokens_by_user ON api_tokens (user_id);

CREATE TABLE session_shares (
    session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    user_id    text COLLATE "C" NOT NULL,
    access     text NOT NULL,
    created_at timestamptz,
    PRIMARY KEY (session_id, user_id)
);

CREATE INDEX session_shares_by_user ON session_shares (user_id, session_id);

CREATE TABLE provider_keys (
    scope      text COLLATE "C" NOT NULL,
    owner      text COLLATE "C" NOT NULL,
    provider   text COLLATE "C" NOT NULL,
    sealed     bytea NOT NULL,
    hint       text  NOT NULL,
    created_at timestamptz,
    PRIMARY KEY (scope, owner, provider)
);

CREATE TABLE budgets (
    scope                 text COLLATE "C" NOT NULL,
    owner                 text COLLATE "C" NOT NULL,
    tokens_per_day        bigint NOT NULL,
    tokens_per_month      bigint NOT NULL,
    cost_per_day_micros   bigint NOT NULL,
    cost_per_month_micros bigint NOT NULL,
    PRIMARY KEY (scope, owner)
);

CREATE TABLE usage_days (
    user_id     text COLLATE "C" NOT NULL,
    tenant      text COLLATE "C" NOT NULL,
    day         bigint NOT NULL, -- days since 1970-01-01 (UTC)
    tokens      bigint NOT NULL,
    cost_micros bigint NOT NULL,
    PRIMARY KEY (user_id, tenant, day)
);

CREATE INDEX usage_days_by_tenant ON usage_days (tenant, day);

CREATE TABLE access_log (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ts       timestamptz,
    kind     text NOT NULL,
    actor    text NOT NULL,
    token_id text NOT NULL,
    subject  text NOT NULL,
    detail   text NOT NULL
);
