-- Workers, their lifecycle events, and the global generation counter.
-- Times are milliseconds since the Unix epoch; lists are JSON text.
CREATE TABLE workers (
    name                TEXT PRIMARY KEY,
    state               TEXT NOT NULL,
    state_identity      TEXT NOT NULL,
    generation          BIGINT NOT NULL,
    platform            TEXT NOT NULL,
    tags                TEXT NOT NULL,
    team                TEXT,
    version             TEXT NOT NULL,
    resource_types      TEXT NOT NULL,
    ephemeral           BIGINT NOT NULL,
    containers          BIGINT NOT NULL,
    volumes             BIGINT NOT NULL,
    first_registered_at BIGINT NOT NULL,
    registered_at       BIGINT NOT NULL,
    last_heartbeat_at   BIGINT NOT NULL,
    state_changed_at    BIGINT NOT NULL,
    restarts            BIGINT NOT NULL DEFAULT 0
);

CREATE TABLE worker_events (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    worker     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    cause      TEXT NOT NULL,
    generation BIGINT NOT NULL,
    at         BIGINT NOT NULL
);
CREATE INDEX worker_events_by_worker ON worker_events (worker, id);

-- One row per counter; the generation row is also the lock that serialises
-- registrations, so two registrations of one name can never interleave.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('generation', 0);
