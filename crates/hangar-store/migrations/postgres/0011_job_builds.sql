-- The builds of a pipeline's jobs, numbered per job (`P/J #N`). No
-- foreign key to jobs: destroying a pipeline deletes these rows itself,
-- so no key can wedge it; the build rows stay, as one-off builds do.
CREATE TABLE job_builds (
    job_id        BIGINT NOT NULL,
    build_number  BIGINT NOT NULL,
    build_id      BIGINT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    PRIMARY KEY (job_id, build_number)
);
CREATE UNIQUE INDEX job_builds_by_build ON job_builds (build_id);
