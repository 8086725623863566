-- Teams own pipelines; `main` always exists, as in Concourse. Flags are
-- BIGINT 0/1, read the same on both databases.
CREATE TABLE teams (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);
INSERT INTO teams (name, created_at) VALUES ('main', 0);

-- A pipeline's name is unique within its team; a rename keeps its id, so
-- its versions, jobs and resources stay with it. A new pipeline starts
-- paused, as in Concourse.
CREATE TABLE pipelines (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    team_id         BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    paused          BIGINT NOT NULL,
    config_version  BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    UNIQUE (team_id, name)
);

-- Every set writes a new version; the older ones stay readable.
CREATE TABLE pipeline_configs (
    pipeline_id  BIGINT NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    version      BIGINT NOT NULL,
    config       TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (pipeline_id, version)
);

-- Jobs derived from the config at each set. A job the config no longer
-- names is kept inactive with its history (its build numbers), as
-- Concourse keeps it.
CREATE TABLE jobs (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline_id        BIGINT NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    name               TEXT NOT NULL,
    config             TEXT NOT NULL,
    paused             BIGINT NOT NULL,
    active             BIGINT NOT NULL,
    next_build_number  BIGINT NOT NULL,
    config_order       BIGINT NOT NULL,
    UNIQUE (pipeline_id, name)
);
CREATE INDEX jobs_by_pipeline ON jobs (pipeline_id, active, config_order);

CREATE TABLE resources (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline_id   BIGINT NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    type          TEXT NOT NULL,
    source        TEXT NOT NULL,
    config        TEXT NOT NULL,
    -- The version the config pins (`version:`), as JSON.
    pinned        TEXT,
    active        BIGINT NOT NULL,
    config_order  BIGINT NOT NULL,
    UNIQUE (pipeline_id, name)
);
CREATE INDEX resources_by_pipeline ON resources (pipeline_id, active, config_order);

CREATE TABLE resource_types (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline_id   BIGINT NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    name          TEXT NOT NULL,
    type          TEXT NOT NULL,
    source        TEXT NOT NULL,
    config        TEXT NOT NULL,
    active        BIGINT NOT NULL,
    config_order  BIGINT NOT NULL,
    UNIQUE (pipeline_id, name)
);

-- Versions a resource's checks and puts found (written by them; listed here).
CREATE TABLE resource_versions (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_id   BIGINT NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    version       TEXT NOT NULL,
    metadata      TEXT NOT NULL,
    check_order   BIGINT NOT NULL,
    enabled       BIGINT NOT NULL,
    created_at    BIGINT NOT NULL,
    UNIQUE (resource_id, version)
);
CREATE INDEX resource_versions_by_resource ON resource_versions (resource_id, id);
