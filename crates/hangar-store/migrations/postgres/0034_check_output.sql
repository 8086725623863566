-- What the last check that succeeded printed (its stderr, the end of it
-- when long), shown on the resource's page; a failed check's output is in
-- its error.
ALTER TABLE resource_scopes ADD COLUMN last_check_output TEXT;
