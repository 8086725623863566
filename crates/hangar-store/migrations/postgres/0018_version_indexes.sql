-- Deleting a version (its scope's last resource went) cascades to the
-- build rows that name it: without an index on version_id each deleted
-- version scanned every build's inputs and outputs, so destroying a
-- pipeline with a long history took minutes holding its locks.
CREATE INDEX build_inputs_by_version ON build_inputs (version_id);
CREATE INDEX build_outputs_by_version ON build_outputs (version_id);
