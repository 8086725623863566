-- A login under way, kept for minutes: an OIDC login between the redirect
-- to the provider and its callback (keyed by the digest of the state the
-- browser carries), and a CLI's browser login between the callback and
-- the CLI's exchange of its one-time code. Each is taken once (deleted as
-- it is read), so a replayed state or code finds nothing. Rows hold no
-- secret: the PKCE verifier is good only with a code the provider gives
-- the browser, and a session is opened only at the exchange.
CREATE TABLE pending_logins (
    key_digest  TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX pending_logins_by_expiry ON pending_logins (expires_at);
