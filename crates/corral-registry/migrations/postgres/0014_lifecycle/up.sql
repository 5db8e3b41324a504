-- The sandbox lifecycle (postgres): stop, resume, idle stop and snapshots. Timestamps are
-- microseconds since the Unix epoch.

-- What a sandbox was created with: whether a request to a stopped sandbox resumes it, after
-- how many idle seconds it is stopped (null: never), and the snapshot it was restored from.
-- last_activity_at is its last known activity (starts at created_at; never moves back).
-- Defaults only so the columns can be added: every insert writes them all.
ALTER TABLE sandboxes ADD COLUMN auto_resume BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE sandboxes ADD COLUMN idle_stop_seconds BIGINT;
ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT COLLATE "C";
ALTER TABLE sandboxes ADD COLUMN last_activity_at BIGINT NOT NULL DEFAULT 0;
UPDATE sandboxes SET last_activity_at = created_at;
-- The idle sweep reads only live records that asked for an idle stop, oldest activity first.
CREATE INDEX sandboxes_idle ON sandboxes (last_activity_at)
    WHERE idle_stop_seconds IS NOT NULL AND deleted_at IS NULL;

-- Snapshots, project-scoped like sandboxes, tombstoned (never deleted) on delete. native_id
-- is the provider's own id once it answered; failure says why a failed one failed. id uses
-- the "C" collation so that the pagination tiebreak is byte order, as on SQLite.
CREATE TABLE snapshots (
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    native_id TEXT,
    name TEXT,
    status TEXT NOT NULL,
    size_bytes BIGINT,
    failure TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE INDEX snapshots_page ON snapshots (project_id, created_at DESC, id DESC);
-- Snapshots still being made, oldest first (the follower after a restart).
CREATE INDEX snapshots_status ON snapshots (status, created_at);

-- snapshot.* events name their snapshot.
ALTER TABLE events ADD COLUMN snapshot_id TEXT COLLATE "C";
