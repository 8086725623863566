-- Instanced pipelines: a pipeline is (team, name, instance vars). The vars
-- are held as their canonical JSON text (compact, keys sorted at every
-- depth; hangar_core::instance_vars), so equal vars are equal text and the
-- uniqueness below is exact. A pipeline that is not an instance holds '{}',
-- as every pipeline set before this migration does.
--
-- SQLite cannot drop the old UNIQUE (team_id, name), so the table is rebuilt
-- as SQLite's documentation describes: with foreign keys off (which only
-- works outside a transaction: the store sets it around its migrations),
-- else dropping the old table would cascade to every job, resource and
-- build. Ids are copied, so every row that refers to a pipeline still does.
CREATE TABLE pipelines_0024 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    team_id         BIGINT NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    name            TEXT NOT NULL,
    paused          BIGINT NOT NULL,
    config_version  BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    schedule_owner  TEXT,
    schedule_until  BIGINT,
    instance_vars   TEXT NOT NULL DEFAULT '{}',
    UNIQUE (team_id, name, instance_vars)
);
INSERT INTO pipelines_0024 (id, team_id, name, paused, config_version,
                            created_at, updated_at, schedule_owner, schedule_until)
    SELECT id, team_id, name, paused, config_version,
           created_at, updated_at, schedule_owner, schedule_until
    FROM pipelines;
-- Keep AUTOINCREMENT's high mark, so a destroyed pipeline's id is never
-- given again.
DELETE FROM sqlite_sequence WHERE name = 'pipelines_0024';
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'pipelines_0024', seq FROM sqlite_sequence WHERE name = 'pipelines';
DROP TABLE pipelines;
ALTER TABLE pipelines_0024 RENAME TO pipelines;
