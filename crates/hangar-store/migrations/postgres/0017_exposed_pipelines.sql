-- Pipelines anyone may read on the dashboard without logging in
-- (Concourse's `fly expose-pipeline`). Its own table, so exposing never
-- touches the pipelines rows other work changes.
CREATE TABLE exposed_pipelines (
    pipeline_id  BIGINT PRIMARY KEY REFERENCES pipelines (id) ON DELETE CASCADE
);
