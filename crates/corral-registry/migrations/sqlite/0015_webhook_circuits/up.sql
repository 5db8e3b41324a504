-- A circuit breaker per webhook endpoint (sqlite), shared by every replica. Timestamps are
-- microseconds since the Unix epoch.
--
-- consecutive_failures counts failed attempts since the last delivered one; at the
-- configured threshold the circuit opens until open_until (doubled at each reopening,
-- circuit_opens counting them) and the endpoint's deliveries wait instead of each being
-- tried. Once open_until passes, one replica takes a single probe (probe_until: that
-- probe's lease); its success closes the circuit, its failure reopens it.
ALTER TABLE webhook_endpoints ADD COLUMN consecutive_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_opens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN open_until BIGINT;
ALTER TABLE webhook_endpoints ADD COLUMN probe_until BIGINT;
