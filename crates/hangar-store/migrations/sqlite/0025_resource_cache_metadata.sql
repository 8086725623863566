-- The metadata a resource type's `in` answered for the version a resource
-- cache holds (Concourse's resource cache metadata): a get that reuses the
-- cache sets its step's local var `((.:NAME))` from it as a get that runs
-- `in` does. NULL for a cache made before this column, whose metadata is
-- unknown (such a cache is fetched again by a get step).
ALTER TABLE volumes ADD COLUMN resource_metadata TEXT;
