-- Where a worker serves its volume API, for web to call.
ALTER TABLE workers ADD COLUMN api_url TEXT;

-- Every volume web knows, on which worker, in which state. A row exists
-- before the worker makes the volume. A child's row never outlives its
-- parent's (the foreign key), so collectors delete children first; a
-- worker's rows go with the worker.
CREATE TABLE volumes (
    handle        TEXT PRIMARY KEY,
    worker_name   TEXT NOT NULL REFERENCES workers (name) ON DELETE CASCADE,
    state         TEXT NOT NULL,
    parent_handle TEXT REFERENCES volumes (handle),
    owner_kind    TEXT NOT NULL,
    owner_id      TEXT,
    strategy      TEXT NOT NULL,
    size_bytes    BIGINT,
    created_at    BIGINT NOT NULL,
    missing_since BIGINT
);
CREATE INDEX volumes_by_worker ON volumes (worker_name, state);
CREATE INDEX volumes_by_parent ON volumes (parent_handle);
