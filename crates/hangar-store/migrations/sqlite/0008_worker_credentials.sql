-- Per-incarnation credentials. token_hash: the SHA-256 of the secret part
-- of the token the current registration was given (web never stores the
-- token itself). api_token: the secret the worker process made for its own
-- API, which web presents when it calls that worker and nobody else.
ALTER TABLE workers ADD COLUMN token_hash TEXT;
ALTER TABLE workers ADD COLUMN api_token TEXT;
