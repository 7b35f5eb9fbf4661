-- 0003: the event tail. Appends go to events_tail, in arrival order: a
-- commit carrying one event of each of k sessions writes a page or two,
-- not the k leaf pages of events' per-session ranges (which made
-- single-event group commits cost a WAL frame per session). The tail has
-- no index for the same reason: the store keeps (session_id, seq) unique
-- across both tables itself (seqs.go). A compactor moves the tail into
-- events, sorted by (session_id, seq), when appends pause or the tail
-- reaches its hard limit (compact.go), which bounds what a read scans.
-- Reads see both tables.

CREATE TABLE events_tail (
    id              INTEGER PRIMARY KEY,
    session_id      TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL CHECK (seq > 0),
    type            TEXT    NOT NULL,
    payload         BLOB,
    conversation_id TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    ts              INTEGER,
    actor           TEXT
) STRICT;
