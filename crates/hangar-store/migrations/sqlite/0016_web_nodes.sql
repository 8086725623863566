-- Several web nodes over one database. Each claim of a build counts up its
-- lease token (a fencing token): the node running the build writes its
-- steps, its log and its end only while the token is still the one it
-- claimed with, so a node that paused past its lease cannot write after
-- another took the build over.
ALTER TABLE builds ADD COLUMN lease_token BIGINT NOT NULL DEFAULT 0;

-- Each web node records that it is alive every few seconds: who runs now,
-- and what other loops (checks, scheduling) can use to see a node die
-- within seconds rather than wait out a claim.
CREATE TABLE web_nodes (
    name              TEXT PRIMARY KEY,
    started_at        BIGINT NOT NULL,
    last_heartbeat_at BIGINT NOT NULL
);
