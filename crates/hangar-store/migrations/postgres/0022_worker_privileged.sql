-- Whether the worker was started with --allow-privileged, as its latest
-- registration said (0 or 1): only such a worker is given privileged steps
-- (a privileged task, an action of a privileged resource type). Workers
-- registered before the column allow none until they register again.
ALTER TABLE workers ADD COLUMN allow_privileged BIGINT NOT NULL DEFAULT 0;
