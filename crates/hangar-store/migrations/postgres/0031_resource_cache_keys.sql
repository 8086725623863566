-- Which resource caches a pipeline resource's gets made or reused: their
-- keys (a cache volume's owner id) and the version each holds, so
-- clear-resource-cache finds a resource's caches (the key is a digest of
-- the type, the resolved source, the params and the version, which web
-- cannot make itself).
CREATE TABLE resource_cache_keys (
    resource_id  BIGINT NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    cache_key    TEXT NOT NULL,
    version      TEXT NOT NULL,
    PRIMARY KEY (resource_id, cache_key)
);
