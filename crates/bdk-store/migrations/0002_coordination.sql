-- Coordination of several replicas sharing one store (PgCoordination):
-- which replica runs each session's turn, and which replicas are alive.
-- Liveness is judged on the database clock (now()), so replicas with skewed
-- clocks still agree on who is dead.

CREATE TABLE bdk_replicas (
    id            text COLLATE "C" PRIMARY KEY,
    started_at    timestamptz NOT NULL DEFAULT now(),
    -- Refreshed on every heartbeat; older than the time-to-live means dead.
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

-- At most one lease per session: the replica running its turn (or a
-- session-bound write call) and that turn's id. A lease of a dead replica is
-- moved to a live one by an UPDATE that skips rows another claimer holds, so
-- exactly one replica records the turn interrupted.
CREATE TABLE bdk_turn_leases (
    session_id   text COLLATE "C" PRIMARY KEY,
    replica      text COLLATE "C" NOT NULL,
    turn_id      text NOT NULL,
    acquired_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX bdk_turn_leases_replica ON bdk_turn_leases (replica);
