-- 0002: the audit log (executor calls and model requests) and the model
-- proxy's per-session tokens (hashed). Both go with their session.

CREATE TABLE audit (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id            TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ts                    INTEGER,
    kind                  TEXT    NOT NULL,
    method                TEXT    NOT NULL,
    path                  TEXT    NOT NULL,
    provider              TEXT    NOT NULL,
    model                 TEXT    NOT NULL,
    actor                 TEXT    NOT NULL,
    outcome               TEXT    NOT NULL,
    status                INTEGER NOT NULL,
    error                 TEXT    NOT NULL,
    bytes_in              INTEGER NOT NULL,
    bytes_out             INTEGER NOT NULL,
    duration_ms           INTEGER NOT NULL,
    has_usage             INTEGER NOT NULL,
    input_tokens          INTEGER NOT NULL,
    output_tokens         INTEGER NOT NULL,
    cache_read_tokens     INTEGER NOT NULL,
    cache_creation_tokens INTEGER NOT NULL
) STRICT;

-- A session's records in id order: reads and usage sums are one range scan.
CREATE INDEX audit_by_session ON audit (session_id, id);

CREATE TABLE model_tokens (
    hash       TEXT    PRIMARY KEY,
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    budget     INTEGER NOT NULL,
    created_at INTEGER
) STRICT;

CREATE INDEX model_tokens_by_session ON model_tokens (session_id);
