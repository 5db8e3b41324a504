-- Issue #26: an optional name for each API key, shown in lists, and an optional expiry after
-- which the key authenticates nothing (refused exactly like an unknown key). Both nullable:
-- keys issued before this migration keep working unnamed and without an end.
ALTER TABLE api_keys ADD COLUMN name TEXT;
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
