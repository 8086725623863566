-- Resources with the same type and source in one team share one check and
-- one version history (Concourse's "global resources"): a scope. A
-- resource of a custom type is scoped by its pipeline too, since the same
-- type name means different things in different pipelines; the store
-- computes `digest` over what identifies the scope.
CREATE TABLE resource_scopes (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    team_id            BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    type               TEXT NOT NULL,
    digest             TEXT NOT NULL,
    source             TEXT NOT NULL,
    -- Check state, shown on every resource of the scope.
    last_check_started_at   BIGINT,
    last_check_finished_at  BIGINT,
    last_check_error        TEXT,
    -- A webhook or `check-resource` asked for a check now (and from which
    -- version, as JSON); the check loop takes these first.
    check_requested_at      BIGINT,
    check_from              TEXT,
    -- The web node running the scope's check holds it until this time.
    claim_owner        TEXT,
    claim_until        BIGINT,
    created_at         BIGINT NOT NULL,
    UNIQUE (team_id, digest)
);

ALTER TABLE resources ADD COLUMN scope_id BIGINT REFERENCES resource_scopes (id);
-- A pin set with `pin-resource` (the config's `version:` stays in `pinned`
-- and wins over it, as in Concourse).
ALTER TABLE resources ADD COLUMN api_pinned_version_id BIGINT;
ALTER TABLE resources ADD COLUMN pin_comment TEXT;
ALTER TABLE resource_types ADD COLUMN scope_id BIGINT REFERENCES resource_scopes (id);

-- Every existing resource gets a scope of its own, so its history stays
-- with it; the next set of its pipeline gives the scope its real digest.
INSERT INTO resource_scopes (team_id, type, digest, source, created_at)
    SELECT p.team_id, r.type, 'resource:' || r.id, r.source, 0
    FROM resources r JOIN pipelines p ON p.id = r.pipeline_id;
UPDATE resources SET scope_id = (
    SELECT s.id FROM resource_scopes s WHERE s.digest = 'resource:' || resources.id);

-- Versions belong to a scope now; enabling and disabling stays per
-- resource (resource_disabled_versions), as in Concourse.
CREATE TABLE scope_versions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    scope_id      BIGINT NOT NULL REFERENCES resource_scopes (id) ON DELETE CASCADE,
    version       TEXT NOT NULL,
    metadata      TEXT NOT NULL,
    check_order   BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    UNIQUE (scope_id, version)
);
INSERT INTO scope_versions (id, scope_id, version, metadata, check_order, created_at)
    SELECT v.id, r.scope_id, v.version, v.metadata, v.check_order, v.created_at
    FROM resource_versions v JOIN resources r ON r.id = v.resource_id;

CREATE TABLE resource_disabled_versions (
    resource_id  BIGINT NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    version_id   BIGINT NOT NULL,
    PRIMARY KEY (resource_id, version_id)
);
INSERT INTO resource_disabled_versions (resource_id, version_id)
    SELECT resource_id, id FROM resource_versions WHERE enabled = 0;

DROP TABLE resource_versions;
ALTER TABLE scope_versions RENAME TO resource_versions;
CREATE INDEX resource_versions_by_order ON resource_versions (scope_id, check_order);
