-- Instanced pipelines: a pipeline is (team, name, instance vars). The vars
-- are held as their canonical JSON text (compact, keys sorted at every
-- depth; hangar_core::instance_vars), so equal vars are equal text and the
-- uniqueness below is exact. A pipeline that is not an instance holds '{}',
-- as every pipeline set before this migration does.
ALTER TABLE pipelines ADD COLUMN instance_vars TEXT NOT NULL DEFAULT '{}';
ALTER TABLE pipelines DROP CONSTRAINT pipelines_team_id_name_key;
ALTER TABLE pipelines ADD CONSTRAINT pipelines_team_id_name_instance_vars_key
    UNIQUE (team_id, name, instance_vars);
