-- 0001: sessions, the event log, transcripts, workspace files, agent
-- profiles and leases. Times are Unix nanoseconds (NULL for the zero time).
-- Everything a session owns goes with it (ON DELETE CASCADE).

CREATE TABLE sessions (
    id                TEXT    PRIMARY KEY,
    architecture      TEXT    NOT NULL,
    agent_profile_ref TEXT    NOT NULL,
    name              TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    session_options   BLOB,
    runtime           BLOB    NOT NULL, -- JSON of conversation.Runtime
    created_at        INTEGER,
    last_activity     INTEGER,
    turns             INTEGER NOT NULL,
    sandbox_state     BLOB,
    agent_state       BLOB
) STRICT;

CREATE INDEX sessions_by_created_at ON sessions (created_at DESC);

-- Clustered on (session_id, seq): appends go to the end of a session's
-- range and reads are one range scan.
CREATE TABLE events (
    session_id      TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL CHECK (seq > 0),
    type            TEXT    NOT NULL,
    payload         BLOB,
    conversation_id TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    ts              INTEGER,
    actor           TEXT,
    PRIMARY KEY (session_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE transcripts (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    data       BLOB    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, name)
) STRICT;

CREATE TABLE workspace_files (
    session_id TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    path       TEXT    NOT NULL,
    content    BLOB    NOT NULL,
    mode       INTEGER NOT NULL,
    updated_at INTEGER,
    PRIMARY KEY (session_id, path)
) STRICT;

CREATE TABLE agent_profiles (
    id         TEXT    PRIMARY KEY,
    data       BLOB    NOT NULL, -- JSON of profile.Profile
    updated_at INTEGER NOT NULL
) STRICT;

CREATE TABLE leases (
    session_id TEXT    PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
