-- A team's pipelines in the order its members set (Concourse's
-- order-pipelines); a new pipeline goes last. Until now they were listed
-- by id, which this keeps.
ALTER TABLE pipelines ADD COLUMN ordering BIGINT NOT NULL DEFAULT 0;
UPDATE pipelines SET ordering = id;
