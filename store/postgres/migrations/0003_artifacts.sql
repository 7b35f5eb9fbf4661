-- 0003: artifacts (store.ArtifactStore). Content is stored once per
-- SHA-256, in chunks of store.ArtifactChunkSize bytes, and counted by the
-- sessions that reference it (refs). A session's references go with the
-- session (ON DELETE CASCADE); the trigger deletes content, and by cascade
-- its chunks, when its last reference goes. refs is updated under the
-- content row's lock, so a put taking a reference and a delete dropping
-- the last one serialise on that row: the put either comes first (the
-- content stays) or finds no row and stores the content anew.

CREATE TABLE artifact_contents (
    sha256     text COLLATE "C" PRIMARY KEY,
    size       bigint      NOT NULL CHECK (size >= 0),
    refs       bigint      NOT NULL CHECK (refs >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE artifact_chunks (
    sha256 text COLLATE "C" NOT NULL REFERENCES artifact_contents (sha256) ON DELETE CASCADE,
    idx    bigint NOT NULL CHECK (idx >= 0),
    data   bytea  NOT NULL,
    PRIMARY KEY (sha256, idx)
);

CREATE TABLE session_artifacts (
    session_id   text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    sha256       text COLLATE "C" NOT NULL REFERENCES artifact_contents (sha256),
    content_type text        NOT NULL,
    name         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, sha256)
);

CREATE INDEX session_artifacts_by_sha256 ON session_artifacts (sha256);

CREATE FUNCTION agentd_artifact_unref() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE artifact_contents SET refs = refs - 1 WHERE sha256 = OLD.sha256;
    DELETE FROM artifact_contents WHERE sha256 = OLD.sha256 AND refs = 0;
    RETURN NULL;
END
$$;

CREATE TRIGGER session_artifacts_unref AFTER DELETE ON session_artifacts
    FOR EACH ROW EXECUTE FUNCTION agentd_artifact_unref();
