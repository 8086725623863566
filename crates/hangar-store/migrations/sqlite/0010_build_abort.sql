-- A user asked to abort a started build: the node running it stops it
-- (running its on_abort and ensure hooks) and finishes it as aborted.
ALTER TABLE builds ADD COLUMN abort_requested_at BIGINT;
