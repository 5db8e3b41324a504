-- A project's own E2B templates (sqlite): where an E2B-protocol create naming `name` is made,
-- before the server's [e2b.templates]. updated_at is microseconds since the Unix epoch.
CREATE TABLE e2b_templates (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    provider TEXT NOT NULL,
    image TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, name)
);
