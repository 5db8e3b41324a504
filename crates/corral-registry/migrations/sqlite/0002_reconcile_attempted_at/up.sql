-- When the background reconciler last tried to settle a pending or unknown create (SQLite).
-- NULL means never tried. The reconciler takes never-tried records first, then the longest
-- untried, so records it cannot settle (an inline credential is never stored, so its lookup
-- cannot be repeated) go to the back of the queue instead of starving newer ones. Kept apart
-- from updated_at, which counts the reconcile grace period from when an answer was lost.
ALTER TABLE sandboxes ADD COLUMN reconcile_attempted_at BIGINT;
