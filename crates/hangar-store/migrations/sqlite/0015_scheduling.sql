-- The scheduler. A job build is created `held`: the engine claims it only
-- once serial, serial_groups and max_in_flight let it start. A manual
-- trigger whose inputs do not resolve yet is `inputs_pending`: the
-- scheduler fixes its versions (and its plan) on a later pass.
ALTER TABLE builds ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
ALTER TABLE builds ADD COLUMN inputs_pending BIGINT NOT NULL DEFAULT 0;
-- (builds_by_status, from 0003, finds the few running and pending ones.)

-- The node scheduling a pipeline holds it until schedule_until, so one
-- change makes one decision whichever node runs it, and start limits
-- across its jobs are applied by one node at a time.
ALTER TABLE pipelines ADD COLUMN schedule_owner TEXT;
ALTER TABLE pipelines ADD COLUMN schedule_until BIGINT;
-- The last decision's reason a job waits, as JSON, for `hangar jobs`.
ALTER TABLE jobs ADD COLUMN waiting TEXT;

-- "Which version did this job's newest build use for input X" (`every`).
CREATE INDEX build_inputs_by_job_name ON build_inputs (job_id, name, build_id);
