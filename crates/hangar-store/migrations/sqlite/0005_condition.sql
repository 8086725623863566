-- The worker's own view of its condition (pressure, health, memory, disk),
-- as JSON from its last heartbeat.
ALTER TABLE workers ADD COLUMN condition TEXT;
