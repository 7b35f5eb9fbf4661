-- 0001: the whole schema of the PostgreSQL store (the SQLite store's
-- migrations 1–4 in one): sessions, the event log, transcripts, workspace
-- files, agent profiles, leases with their fencing generation, the audit
-- log and model-proxy tokens. Identifiers, names and paths sort by bytes
-- (COLLATE "C"), as the store contract says, whatever the database's
-- locale. Times are timestamptz (NULL for Go's zero time).

CREATE TABLE sessions (
    id                text COLLATE "C" PRIMARY KEY,
    architecture      text   NOT NULL,
    agent_profile_ref text   NOT NULL,
    name              text   NOT NULL,
    status            text   NOT NULL,
    session_options   bytea,
    runtime           bytea  NOT NULL, -- JSON of conversation.Runtime
    created_at        timestamptz,
    last_activity     timestamptz,
    turns             bigint NOT NULL,
    sandbox_state     bytea,
    agent_state       bytea,
    -- Breaks ties of created_at: the later created lists first.
    created_order     bigint GENERATED ALWAYS AS IDENTITY
);

CREATE INDEX sessions_by_created_at ON sessions (created_at DESC NULLS LAST, created_order DESC);

-- The event log, clustered on its primary key: replaying a session is one
-- index range scan. (session_id, seq) is unique, so two servers can never
-- store the same seq of a session. There is no foreign key: an append
-- locks its sessions' rows once per batch instead (agentd_check_append),
-- which also keeps a deleted session from getting events back, and
-- DeleteSession deletes the events itself.
CREATE TABLE events (
    session_id      text COLLATE "C" NOT NULL,
    seq             bigint NOT NULL CHECK (seq > 0),
    type            text   NOT NULL,
    payload         bytea,
    conversation_id text   NOT NULL,
    source          text   NOT NULL,
    ts              timestamptz,
    actor           text,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE transcripts (
    session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    name       text COLLATE "C" NOT NULL,
    data       bytea       NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, name)
);

CREATE TABLE workspace_files (
    session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    path       text COLLATE "C" NOT NULL,
    content    bytea  NOT NULL,
    mode       bigint NOT NULL,
    updated_at timestamptz,
    PRIMARY KEY (session_id, path)
);

CREATE TABLE agent_profiles (
    id         text COLLATE "C" PRIMARY KEY,
    data       bytea       NOT NULL, -- JSON of profile.Profile
    updated_at timestamptz NOT NULL
);

-- A lease's generation grows whenever the lease passes to another holder;
-- a released lease keeps its row (expired) so a generation never repeats.
-- Expiry is by the database server's clock, the one clock every server of
-- a fleet shares.
CREATE TABLE leases (
    session_id text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    generation bigint      NOT NULL CHECK (generation > 0)
);

CREATE TABLE audit (
    id                    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id            text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    ts                    timestamptz,
    kind                  text    NOT NULL,
    method                text    NOT NULL,
    path                  text    NOT NULL,
    provider              text    NOT NULL,
    model                 text    NOT NULL,
    actor                 text    NOT NULL,
    outcome               text    NOT NULL,
    status                bigint  NOT NULL,
    error                 text    NOT NULL,
    bytes_in              bigint  NOT NULL,
    bytes_out             bigint  NOT NULL,
    duration_ms           bigint  NOT NULL,
    has_usage             boolean NOT NULL,
    input_tokens          bigint  NOT NULL,
    output_tokens         bigint  NOT NULL,
    cache_read_tokens     bigint  NOT NULL,
    cache_creation_tokens bigint  NOT NULL
);

CREATE INDEX audit_by_session ON audit (session_id, id);

CREATE TABLE model_tokens (
    hash       text COLLATE "C" PRIMARY KEY,
    session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    budget     bigint NOT NULL,
    created_at timestamptz
);

CREATE INDEX model_tokens_by_session ON model_tokens (session_id);

-- agentd_check_append runs first in every event append's transaction (the
-- same pipelined round trip as the insert) and in a fenced session update.
-- It locks the sessions' rows FOR KEY SHARE (a concurrent DeleteSession
-- waits for the append, and an append after a delete finds no row), then
-- the fences' lease rows FOR SHARE (no take-over can commit until the
-- write has): sessions before leases, the order DeleteSession's cascade
-- takes them in, so the two cannot deadlock. Then it raises AGF01 naming
-- every session whose fence is stale, or else AGN01 naming the missing
-- sessions. Fences are reported first: a stale writer's seqs usually
-- conflict too, and it must learn that it lost the lease.
CREATE FUNCTION agentd_check_append(p_sessions text[], p_fence_sessions text[], p_fence_generations bigint[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    bad text[];
BEGIN
    IF cardinality(p_sessions) > 0 THEN
        PERFORM 1 FROM sessions WHERE id = ANY (p_sessions) ORDER BY id FOR KEY SHARE;
    END IF;
    IF cardinality(p_fence_sessions) > 0 THEN
        PERFORM 1 FROM leases WHERE session_id = ANY (p_fence_sessions) ORDER BY session_id FOR SHARE;
        SELECT array_agg(DISTINCT f.s ORDER BY f.s) INTO bad
        FROM unnest(p_fence_sessions, p_fence_generations) AS f (s, g)
        LEFT JOIN leases l ON l.session_id = f.s
        WHERE l.generation IS DISTINCT FROM f.g;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'AGF01', MESSAGE = 'stale lease generation',
                DETAIL = array_to_string(bad, chr(31));
        END IF;
    END IF;
    IF cardinality(p_sessions) > 0 THEN
        SELECT array_agg(s ORDER BY s) INTO bad
        FROM unnest(p_sessions) AS s
        WHERE NOT EXISTS (SELECT 1 FROM sessions x WHERE x.id = s);
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'AGN01', MESSAGE = 'unknown session',
                DETAIL = array_to_string(bad, chr(31));
        END IF;
    END IF;
END
$$;
