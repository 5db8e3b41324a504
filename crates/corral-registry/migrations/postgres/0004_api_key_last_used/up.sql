-- When each API key last authenticated a request (advisory: written at most once a minute
-- per key, so the authentication path does not become a write per request).
ALTER TABLE api_keys ADD COLUMN last_used_at BIGINT;
