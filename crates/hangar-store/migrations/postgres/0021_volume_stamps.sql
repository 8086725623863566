-- A worker's volume stamp counts the changes to its volume rows that a
-- report's answer depends on (a row made, deleted, or its state or
-- missing mark changed); every such write bumps it in the same
-- transaction. A report that changed nothing and asked nothing destroyed
-- leaves its digest (of the reported handles, as a set) and the stamp it
-- read: the next report with the same digest, while the stamp has not
-- moved, would be planned from the same rows to the same empty answer, and
-- skips reading them. Its own table, so a collector bumping a stamp never
-- holds the row a heartbeat updates.
CREATE TABLE worker_volume_stamps (
    worker_name  TEXT PRIMARY KEY REFERENCES workers (name) ON DELETE CASCADE,
    stamp        BIGINT NOT NULL,
    quiet_digest TEXT,
    quiet_stamp  BIGINT
);
