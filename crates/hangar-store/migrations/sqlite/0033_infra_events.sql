-- The infrastructure's lines of build logs (a worker lost, a step retried
-- elsewhere) are few among the output lines: a worker's page finds the
-- ones naming it through this index, not by reading every line.
CREATE INDEX build_events_infra ON build_events (id) WHERE kind = 'infra';
