-- One row naming this database. The id is drawn once, when this migration
-- runs on an empty database, and never changes: web writes it beside a
-- SQLite file to notice the file being deleted or replaced, and workers can
-- tell a new database from the one they registered with. `only_row` pins the
-- table to a single row. `health_probe` is written by web's reachability
-- check: a write that must succeed for web to call the database healthy.
CREATE TABLE database_identity (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    id TEXT NOT NULL
);
INSERT INTO database_identity (only_row, id) VALUES (1, lower(hex(randomblob(16))));

CREATE TABLE health_probe (
    only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
    probed_at BIGINT NOT NULL
);
