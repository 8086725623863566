-- Generations come from a sequence. Taken from the counters row, each
-- registration held that row's lock until it committed, so registrations
-- across every web node ran one at a time: 10,000 workers starting
-- together took minutes, and the registrations queued on the lock held
-- pooled connections that heartbeats were waiting for. A sequence hands
-- out numbers without a lock; the name's own row is locked instead (see
-- `register_incarnation`). The sequence starts after the last number the
-- counter issued, so no generation is ever issued twice.
CREATE SEQUENCE worker_generations;
SELECT setval('worker_generations', GREATEST(value, 1), value > 0)
  FROM counters WHERE name = 'generation';
DELETE FROM counters WHERE name = 'generation';

-- (state, owner_kind) is a prefix of volumes_by_state_owner_age and
-- serves no query the longer index does not; every volume update that
-- changes a state paid for both.
DROP INDEX volumes_by_state_owner;
