-- The PgStore schema, version 1. Applied by PgStore::connect inside the
-- store's own schema (the connection's search_path), so several agents can
-- share one database in separate schemas. Text that is sorted or matched by
-- prefix uses the "C" collation: byte order, the same order FsStore lists in.
-- JSON is kept as `json` (the text as written), not `jsonb`, so any value
-- serde_json produces round-trips exactly, including "\u0000" in strings.

CREATE TABLE bdk_sessions (
    -- Surrogate key: events reference it, so a session deleted and created
    -- again under the same id never shares rows or followers with the old one.
    pk          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id          text COLLATE "C" NOT NULL UNIQUE,
    token       text NOT NULL,
    principal   text,
    created_at  timestamptz NOT NULL,
    -- The index the next append gets. Appends take this row's lock (an
    -- UPDATE ... RETURNING in the append statement), which serializes
    -- appenders of one session across every replica and keeps indices gapless.
    next_index  bigint NOT NULL DEFAULT 0,
    -- The whole SessionRecord as JSON; the columns above are copies for lookups.
    record      json NOT NULL
);
CREATE INDEX bdk_sessions_token ON bdk_sessions (token);
CREATE INDEX bdk_sessions_created ON bdk_sessions (created_at, id);

CREATE TABLE bdk_events (
    session_pk  bigint NOT NULL REFERENCES bdk_sessions (pk) ON DELETE CASCADE,
    idx         bigint NOT NULL,
    turn_id     text,
    at          timestamptz NOT NULL,
    kind        text NOT NULL,
    data        json NOT NULL,
    PRIMARY KEY (session_pk, idx)
);

CREATE TABLE bdk_kv (
    namespace   text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    value       json NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, key)
);

CREATE TABLE bdk_files (
    path        text COLLATE "C" PRIMARY KEY,
    content     bytea NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE bdk_artifacts (
    id          text COLLATE "C" PRIMARY KEY,
    session_id  text,
    principal   text,
    kind        text NOT NULL,
    created_at  timestamptz NOT NULL,
    record      json NOT NULL,
    content     bytea NOT NULL
);
CREATE INDEX bdk_artifacts_session ON bdk_artifacts (session_id);
CREATE INDEX bdk_artifacts_created ON bdk_artifacts (created_at DESC, id DESC);
