-- The lifecycle event log (postgres): append-only, one sequence per project. Timestamps are
-- microseconds since the Unix epoch.
--
-- event_counters holds each project's last sequence number. An append bumps it in the same
-- transaction as the change it reports, so the row lock orders one project's appends: a
-- reader that has seen sequence n never later finds an event below n committed after it.
CREATE TABLE event_counters (
    project_id TEXT COLLATE "C" PRIMARY KEY NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    last_seq BIGINT NOT NULL
);

-- One row per event. Only ids, states, codes and durations: never output, commands or secrets.
CREATE TABLE events (
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    -- The sandbox's id; null for an orphan (a provider sandbox with no record here), which
    -- is named by provider and native id instead.
    sandbox_id TEXT COLLATE "C",
    provider TEXT,
    native_id TEXT,
    command_id TEXT COLLATE "C",
    status TEXT,
    previous_status TEXT,
    reason TEXT,
    command_state TEXT,
    exit_code INTEGER,
    duration_ms BIGINT,
    occurred_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, seq)
);
CREATE INDEX events_occurred ON events (occurred_at);
