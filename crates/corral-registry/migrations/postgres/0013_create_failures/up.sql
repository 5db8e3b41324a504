-- Why a sandbox's create failed (postgres): the error the create's caller was answered (never
-- a credential: answers carry none), so the console can say it later. at is microseconds since
-- the Unix epoch.
CREATE TABLE create_failures (
    project_id TEXT COLLATE "C" NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    code TEXT NOT NULL,
    reason TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (project_id, sandbox_id)
);
