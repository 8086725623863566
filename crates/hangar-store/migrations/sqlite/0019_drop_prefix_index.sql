-- (state, owner_kind) is a prefix of volumes_by_state_owner_age and
-- serves no query the longer index does not; every volume update that
-- changes a state paid for both.
DROP INDEX volumes_by_state_owner;
