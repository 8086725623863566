-- An archived pipeline (Concourse's archive-pipeline): paused, its config
-- emptied so nothing checks or builds, its history kept; unpausing it is
-- refused, and setting it again brings it back (paused).
ALTER TABLE pipelines ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
