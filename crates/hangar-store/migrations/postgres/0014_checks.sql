-- The check loop's schedule: a scope is checked every `check_every_ms`
-- (the shortest of its members' in unpaused pipelines; NULL: only on
-- request) and is due at `next_check_at`, read by index so a pass with
-- nothing due costs one small query. A claim moves `next_check_at` to the
-- end of its lease, so a scope whose node died is due again then.
ALTER TABLE resource_scopes ADD COLUMN check_every_ms BIGINT;
ALTER TABLE resource_scopes ADD COLUMN check_timeout_ms BIGINT;
ALTER TABLE resource_scopes ADD COLUMN next_check_at BIGINT;
CREATE INDEX resource_scopes_due ON resource_scopes (next_check_at);
CREATE INDEX resource_scopes_requested ON resource_scopes (check_requested_at);
-- A scope's members, found from the scope.
CREATE INDEX resources_by_scope ON resources (scope_id);
CREATE INDEX resource_types_by_scope ON resource_types (scope_id);
