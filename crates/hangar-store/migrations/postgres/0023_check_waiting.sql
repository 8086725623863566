-- Why the scope's last check was given back without running (no worker
-- fits it, workers lost), kept until a check runs on a worker or ends:
-- `check-resource` and the dashboard say why a check waits. While no
-- worker of the kind the check needs is registered at all,
-- `check_waiting_since` is when that began: web fails the check once it
-- has waited longer than its --no-worker-timeout.
ALTER TABLE resource_scopes ADD COLUMN check_waiting_reason TEXT;
ALTER TABLE resource_scopes ADD COLUMN check_waiting_since BIGINT;
