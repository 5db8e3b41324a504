-- Corral registry and idempotency store, PostgreSQL. Timestamps are microseconds since the Unix
-- epoch (BIGINT) on both backends, so keyset pagination compares integers exactly.
CREATE TABLE projects (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);

-- Only the key id (the visible part of the key) and a keyed hash of the secret are stored.
CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    secret_hash BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX api_keys_project ON api_keys (project_id);

-- credential: nonce || XChaCha20-Poly1305 ciphertext, bound to (project, provider, id). Every
-- put gives the profile a fresh id, so verifications of an earlier credential (keyed by the
-- old id) stop applying.
CREATE TABLE provider_profiles (
    id TEXT PRIMARY KEY NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    context TEXT NOT NULL,
    settings TEXT NOT NULL,
    credential BYTEA,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (project_id, provider)
);

-- The last deep verification per (profile, operation).
CREATE TABLE profile_verifications (
    profile_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    ok BOOLEAN NOT NULL,
    reason TEXT,
    remediation TEXT,
    checked_at BIGINT NOT NULL,
    PRIMARY KEY (profile_id, operation)
);

-- id uses the "C" collation so that the pagination tiebreak is byte order, as on SQLite.
CREATE TABLE sandboxes (
    id TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    provider TEXT NOT NULL,
    native_id TEXT,
    status TEXT NOT NULL,
    status_observed_at BIGINT NOT NULL,
    metadata TEXT NOT NULL,
    operation_id TEXT NOT NULL UNIQUE,
    create_state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    deleted_at BIGINT
);
CREATE INDEX sandboxes_page ON sandboxes (project_id, created_at DESC, id DESC);
CREATE INDEX sandboxes_create_state ON sandboxes (create_state, created_at);

CREATE TABLE idempotency_keys (
    project_id TEXT NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    idempotency_key TEXT NOT NULL,
    fingerprint BYTEA NOT NULL,
    state TEXT NOT NULL,
    owner TEXT NOT NULL,
    lease_until BIGINT NOT NULL,
    operation_id TEXT,
    response_status INTEGER,
    response_body BYTEA,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    PRIMARY KEY (project_id, idempotency_key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (state, expires_at);
CREATE INDEX idempotency_keys_lease ON idempotency_keys (state, lease_until);
