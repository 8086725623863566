-- A failed task step's container kept for `intercept` after its step
-- ended: until this time (Unix ms), or until its job's next build starts,
-- whichever comes first; NULL for every other container.
ALTER TABLE containers ADD COLUMN kept_until BIGINT;
