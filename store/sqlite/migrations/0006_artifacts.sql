-- 0006: artifacts (store.ArtifactStore). Content is stored once per
-- SHA-256, in chunks of store.ArtifactChunkSize bytes, and counted by the
-- sessions that reference it (refs); a session's references go with the
-- session (ON DELETE CASCADE), and the trigger deletes content, and by
-- cascade its chunks, when its last reference goes.

CREATE TABLE artifact_contents (
    sha256     TEXT    PRIMARY KEY,
    size       INTEGER NOT NULL CHECK (size >= 0),
    refs       INTEGER NOT NULL CHECK (refs >= 0),
    created_at INTEGER NOT NULL
) STRICT;

CREATE TABLE artifact_chunks (
    sha256 TEXT    NOT NULL REFERENCES artifact_contents (sha256) ON DELETE CASCADE,
    idx    INTEGER NOT NULL CHECK (idx >= 0),
    data   BLOB    NOT NULL,
    PRIMARY KEY (sha256, idx)
) STRICT, WITHOUT ROWID;

CREATE TABLE session_artifacts (
    session_id   TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    sha256       TEXT    NOT NULL REFERENCES artifact_contents (sha256),
    content_type TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (session_id, sha256)
) STRICT, WITHOUT ROWID;

CREATE INDEX session_artifacts_by_sha256 ON session_artifacts (sha256);

CREATE TRIGGER session_artifacts_unref AFTER DELETE ON session_artifacts
BEGIN
    UPDATE artifact_contents SET refs = refs - 1 WHERE sha256 = OLD.sha256;
    DELETE FROM artifact_contents WHERE sha256 = OLD.sha256 AND refs = 0;
END;
