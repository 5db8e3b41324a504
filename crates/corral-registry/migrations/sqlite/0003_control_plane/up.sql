-- The control plane (crate corral-control-store), SQLite: users, accounts, memberships, invitations,
-- sessions, sign-in tokens, project ownership, legal releases and acceptances, the audit log,
-- email suppressions and webhook ids. Tokens and session ids are stored only as SHA-256 hashes.
CREATE TABLE users (
    id TEXT PRIMARY KEY NOT NULL,
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    personal_account_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- kind: 'personal' or 'organization'. version: bumped on every change (optimistic locking).
-- deleting_at: set when deletion starts; deleted_at when it finished (the row is kept).
CREATE TABLE accounts (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    deleting_at BIGINT,
    deleted_at BIGINT
);
CREATE INDEX accounts_deleting ON accounts (deleting_at);

-- role: 'owner', 'admin' or 'member'.
CREATE TABLE memberships (
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (account_id, user_id)
);
CREATE INDEX memberships_user ON memberships (user_id);

CREATE TABLE invitations (
    id TEXT PRIMARY KEY NOT NULL,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    email TEXT NOT NULL,
    role TEXT NOT NULL,
    token_hash BLOB NOT NULL UNIQUE,
    invited_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    accepted_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX invitations_account ON invitations (account_id);

-- id_hash: SHA-256 of the cookie's token. Idle expiry is last_seen_at + idle window; absolute
-- expiry is expires_at.
CREATE TABLE sessions (
    id_hash BLOB PRIMARY KEY NOT NULL,
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE INDEX sessions_user ON sessions (user_id);

-- Single-use sign-in links.
CREATE TABLE sign_in_tokens (
    token_hash BLOB PRIMARY KEY NOT NULL,
    email TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT
);

-- Which account owns a registry project (projects made by the CLI have no row here).
CREATE TABLE project_accounts (
    project_id TEXT PRIMARY KEY NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    deleting_at BIGINT,
    deleted_at BIGINT
);
CREATE INDEX project_accounts_account ON project_accounts (account_id);

-- document: 'terms', 'privacy' or 'acceptable-use'; release numbers start at 1.
CREATE TABLE legal_releases (
    document TEXT NOT NULL,
    release_number BIGINT NOT NULL,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    published_at BIGINT NOT NULL,
    PRIMARY KEY (document, release_number)
);

-- Kept for ever: the audit trail of who accepted what, when.
CREATE TABLE legal_acceptances (
    user_id TEXT NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    document TEXT NOT NULL,
    release_number BIGINT NOT NULL,
    accepted_at BIGINT NOT NULL,
    PRIMARY KEY (user_id, document, release_number)
);

CREATE TABLE audit_events (
    id TEXT PRIMARY KEY NOT NULL,
    account_id TEXT,
    actor_user_id TEXT,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX audit_events_account ON audit_events (account_id, created_at);

CREATE TABLE email_suppressions (
    email TEXT PRIMARY KEY NOT NULL,
    reason TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Standard Webhooks message ids already accepted (replay protection).
CREATE TABLE email_webhook_ids (
    id TEXT PRIMARY KEY NOT NULL,
    received_at BIGINT NOT NULL
);
