-- The worker placement chose for a step, written when it chooses (before
-- the step's container or action exists, and before the worker reports
-- it): placement counts the steps placed on each worker whose build runs
-- and which have not finished, so a burst of steps spreads at once. A
-- step placed again (a retry elsewhere) overwrites it.
ALTER TABLE build_steps ADD COLUMN placed_on TEXT;
