-- Garbage collection. When a step last looked a cache up (the caches
-- collector keeps what was used recently), and indexes for the collectors:
-- missing rows by how long they have been missing, volumes by state and
-- owner, container rows by build.
ALTER TABLE volumes ADD COLUMN last_used_at BIGINT;
CREATE INDEX volumes_missing ON volumes (missing_since) WHERE missing_since IS NOT NULL;
CREATE INDEX volumes_by_state_owner ON volumes (state, owner_kind);
CREATE INDEX containers_missing ON containers (missing_since) WHERE missing_since IS NOT NULL;
CREATE INDEX containers_by_build ON containers (build_id);
