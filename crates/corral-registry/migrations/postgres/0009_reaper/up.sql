-- The orphan reaper (postgres). Timestamps are microseconds since the Unix epoch.

-- When a sandbox's asked-for lifetime ends (null: none asked), and why a tombstone ended
-- (`deleted` through Corral, `vanished` when the reaper found it gone at its provider).
ALTER TABLE sandboxes ADD COLUMN expires_at BIGINT;
ALTER TABLE sandboxes ADD COLUMN end_reason TEXT;

-- This deployment's id: one row, made by the first replica to need it, shared by every
-- replica over this database. Creates tag provider resources with it.
CREATE TABLE deployment (
    -- Always 1: the table holds one row, so concurrent first callers cannot make two ids.
    singleton INTEGER PRIMARY KEY NOT NULL CHECK (singleton = 1),
    id TEXT COLLATE "C" NOT NULL,
    created_at BIGINT NOT NULL
);

-- Named leases: one holder at a time across replicas (the reaper's pass).
CREATE TABLE leases (
    name TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    owner TEXT NOT NULL,
    until_at BIGINT NOT NULL
);

-- Provider sandboxes this deployment made that no live record names. The project is the
-- resource's own tag (not a reference: it may name a project this database never had).
CREATE TABLE orphans (
    provider TEXT COLLATE "C" NOT NULL,
    native_id TEXT COLLATE "C" NOT NULL,
    project_id TEXT COLLATE "C",
    operation_id TEXT,
    first_seen_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    deleted_at BIGINT,
    PRIMARY KEY (provider, native_id)
);
