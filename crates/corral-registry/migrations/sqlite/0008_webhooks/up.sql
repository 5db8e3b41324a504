-- Webhook endpoints and their delivery outbox (sqlite). Timestamps are microseconds since the
-- Unix epoch.
--
-- An endpoint's signing secret is stored sealed (XChaCha20-Poly1305 under the master key,
-- bound to the endpoint's id); after a rotation the previous secret signs too until
-- previous_until. types is ' <type> <type> ' (spaces around each) or '*'.
CREATE TABLE webhook_endpoints (
    id TEXT PRIMARY KEY NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    url TEXT NOT NULL,
    types TEXT NOT NULL,
    secret BLOB NOT NULL,
    previous_secret BLOB,
    previous_until BIGINT,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE INDEX webhook_endpoints_project ON webhook_endpoints (project_id, created_at);

-- One row per (endpoint, event): written in the event's own transaction (the outbox), then
-- claimed by one replica at a time (owner, lease_until) and attempted until delivered or dead.
CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY NOT NULL,
    endpoint_id TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    project_id TEXT NOT NULL,
    event_seq BIGINT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    last_status INTEGER,
    last_error TEXT,
    owner TEXT,
    lease_until BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);
