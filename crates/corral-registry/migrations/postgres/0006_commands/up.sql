-- Commands as durable jobs and their output journal (PostgreSQL). Timestamps are microseconds
-- since the Unix epoch.
--
-- A command row holds its state, its stream byte counts, the next event's sequence number and
-- the lease of the replica capturing its output (owner, lease_until). kill_reason is the final
-- state to report when the command ends after Corral signalled it (killed, timed_out).
CREATE TABLE commands (
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sandbox_id TEXT NOT NULL,
    operation_id TEXT NOT NULL UNIQUE,
    command TEXT NOT NULL,
    tag TEXT,
    state TEXT NOT NULL,
    exit_code INTEGER,
    handle TEXT,
    stdin_open BOOLEAN NOT NULL,
    stdin_bytes BIGINT NOT NULL,
    timeout_seconds BIGINT NOT NULL,
    stdout_bytes BIGINT NOT NULL,
    stderr_bytes BIGINT NOT NULL,
    kept_bytes BIGINT NOT NULL,
    next_seq BIGINT NOT NULL,
    kill_reason TEXT,
    owner TEXT,
    lease_until BIGINT,
    started_at BIGINT NOT NULL,
    ended_at BIGINT,
    updated_at BIGINT NOT NULL
);
CREATE INDEX commands_page ON commands (project_id, sandbox_id, started_at DESC, id DESC);
CREATE INDEX commands_live ON commands (state, lease_until);

-- One row per output event, in seq order. kind: 0 stdout, 1 stderr. data NULL marks bytes that
-- are lost (a gap; length NULL when unknown) or dropped by retention (length kept).
CREATE TABLE command_events (
    command_id TEXT NOT NULL REFERENCES commands (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    kind SMALLINT NOT NULL,
    byte_offset BIGINT NOT NULL,
    length BIGINT,
    data BYTEA,
    PRIMARY KEY (command_id, seq)
);
