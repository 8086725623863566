-- The age-bounded collectors (abandoned creations, orphans, caches,
-- artifacts) look only at rows older than their cutoff: with this index a
-- fleet of a million young rows costs them a range scan of nothing, not a
-- scan of every row on every run.
CREATE INDEX volumes_by_state_owner_age ON volumes (state, owner_kind, created_at);
