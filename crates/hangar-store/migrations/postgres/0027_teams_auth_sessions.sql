-- A team's auth config, as Concourse stores it: role name -> users and
-- groups, each `connector:name`. An empty config gives no role to anyone
-- (main's is written from web's flags at every start).
ALTER TABLE teams ADD COLUMN auth TEXT NOT NULL DEFAULT '{}';

-- A user's logged-in session: web keeps only the SHA-256 of its token.
-- It ends at its absolute expiry, after an idle spell, or at logout
-- (revoked_at), whichever comes first; the identity is the one the
-- connector vouched for at login, and roles are read from the teams at
-- each request, so a set-team takes effect at once.
CREATE TABLE sessions (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    token_digest    TEXT NOT NULL UNIQUE,
    connector       TEXT NOT NULL,
    user_id         TEXT NOT NULL,
    user_name       TEXT NOT NULL,
    groups          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    last_used_at    BIGINT NOT NULL,
    expires_at      BIGINT NOT NULL,
    revoked_at      BIGINT
);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- A job build records its pipeline's team too (a one-off build's is the
-- team it was made in), so who may read a build is decided from its row.
UPDATE builds SET team = (
    SELECT t.name FROM job_builds jb JOIN jobs j ON j.id = jb.job_id
    JOIN pipelines p ON p.id = j.pipeline_id JOIN teams t ON t.id = p.team_id
    WHERE jb.build_id = builds.id)
WHERE team IS NULL AND id IN (SELECT build_id FROM job_builds);
-- One-off builds made before builds had teams were main's.
UPDATE builds SET team = 'main' WHERE team IS NULL;
