-- What the E2B-compatible front door remembers per sandbox it created (sqlite): what E2B's
-- API exposes and the sandboxes table does not hold. Timestamps are microseconds since the
-- Unix epoch.
--
-- metadata is a JSON object of strings. env_sealed is the create's envVars (a JSON object)
-- sealed under the master key (XChaCha20-Poly1305, bound to project and sandbox), null when
-- none were given: env vars may hold secrets and are never stored in clear. end_at is when
-- E2B's timeout would end the sandbox.
CREATE TABLE e2b_sandboxes (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    template_id TEXT NOT NULL,
    alias TEXT,
    metadata TEXT NOT NULL,
    env_sealed BLOB,
    end_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, sandbox_id)
);
CREATE INDEX e2b_sandboxes_page ON e2b_sandboxes (project_id, created_at DESC, sandbox_id DESC);
CREATE INDEX e2b_sandboxes_sandbox ON e2b_sandboxes (sandbox_id);
