-- A user asked to abort a started build: the node running it stops it
-- (running its on_abort and ensure hooks) and finishes it as aborted.
ALTER TABLE builds ADD COLUMN abort_requested_at BIGINT;

-- The version a put step's `out` produced (JSON), recorded before its
-- implicit get runs, so that a resumed build never runs `out` twice.
ALTER TABLE build_steps ADD COLUMN version TEXT;
