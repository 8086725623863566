-- The versions a job build used and produced, so the scheduler can answer
-- "which version went through job X" with indexed queries (Concourse's
-- build_resource_config_version_inputs / _outputs). On success a build's
-- inputs are copied into its outputs, as Concourse does, so `passed` reads
-- outputs alone.
CREATE TABLE build_inputs (
    build_id     BIGINT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    job_id       BIGINT NOT NULL,
    name         TEXT NOT NULL,
    resource_id  BIGINT NOT NULL,
    version_id   BIGINT NOT NULL REFERENCES resource_versions (id) ON DELETE CASCADE,
    PRIMARY KEY (build_id, name)
);
CREATE INDEX build_inputs_by_job ON build_inputs (job_id, resource_id, version_id);

CREATE TABLE build_outputs (
    build_id     BIGINT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    job_id       BIGINT NOT NULL,
    resource_id  BIGINT NOT NULL,
    version_id   BIGINT NOT NULL REFERENCES resource_versions (id) ON DELETE CASCADE,
    PRIMARY KEY (build_id, resource_id, version_id)
);
CREATE INDEX build_outputs_by_job ON build_outputs (job_id, resource_id, version_id);

-- When build_log_retention reaped the build's log (its events), so pages
-- and the API can say the log was removed rather than show it empty.
ALTER TABLE builds ADD COLUMN logs_reaped_at BIGINT;
