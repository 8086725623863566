-- Builds, their steps, their event log, and the containers web asked for.
CREATE TABLE builds (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name           TEXT NOT NULL,
    team           TEXT,
    plan           TEXT NOT NULL,
    artifacts      TEXT NOT NULL,
    status         TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    started_at     BIGINT,
    finished_at    BIGINT,
    exit_code      BIGINT,
    error          TEXT,
    -- The web node running the build holds it until this time; a build whose
    -- lease ran out (its node died) is taken over and resumed.
    lease_owner    TEXT,
    lease_until    BIGINT
);
CREATE INDEX builds_by_status ON builds (status, id);

CREATE TABLE build_steps (
    build_id         BIGINT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    step_id          TEXT NOT NULL,
    name             TEXT NOT NULL,
    kind             TEXT NOT NULL,
    state            TEXT NOT NULL,
    attempt          BIGINT NOT NULL,
    worker_name      TEXT,
    container_handle TEXT,
    log_offset       BIGINT NOT NULL DEFAULT 0,
    exit_code        BIGINT,
    outputs          TEXT NOT NULL,
    error            TEXT,
    started_at       BIGINT,
    finished_at      BIGINT,
    PRIMARY KEY (build_id, step_id)
);

CREATE TABLE build_events (
    id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    build_id  BIGINT NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    step      TEXT,
    kind      TEXT NOT NULL,
    payload   TEXT NOT NULL,
    at        BIGINT NOT NULL
);
CREATE INDEX build_events_by_build ON build_events (build_id, id);

CREATE TABLE containers (
    handle        TEXT PRIMARY KEY,
    worker_name   TEXT NOT NULL REFERENCES workers (name) ON DELETE CASCADE,
    state         TEXT NOT NULL,
    build_id      BIGINT,
    step_id       TEXT,
    created_at    BIGINT NOT NULL,
    missing_since BIGINT
);
CREATE INDEX containers_by_worker ON containers (worker_name, state);
CREATE INDEX volumes_by_owner ON volumes (worker_name, owner_kind, owner_id);
