-- 008: escape detection (issue 8). Security alerts of a session — escape signals that ended
-- it, and repeated refusals that only alert — each recorded in the audit chain (seq) and
-- listed over REST; counts of the signals that alert after N occurrences.
CREATE TABLE security_alerts (
  id          bigserial PRIMARY KEY,
  job_id      text NOT NULL REFERENCES sessions(job_id),
  kind        text NOT NULL CHECK (kind ~ '^[a-z_]{1,32}$'),
  escape      boolean NOT NULL,             -- true: the signal aborted the session
  detail      text NOT NULL DEFAULT '' CHECK (length(detail) <= 1024),
  seq         bigint,                       -- the audit entry that records it
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX security_alerts_job ON security_alerts (job_id, id);

CREATE TABLE signal_counts (
  job_id  text NOT NULL REFERENCES sessions(job_id),
  kind    text NOT NULL,
  count   bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, kind)
);

-- sessions an escape ended whose chain is not sealed yet: the abort commits first, the seal
-- after the container is gone; a crash in between leaves the row for jailboxd's sweeper.
-- Only these are ever sealed after the fact: a chain whose seal was deleted is tampering,
-- for the verifier to report, never for the sweeper to cover up.
CREATE TABLE seals_pending (
  job_id  text PRIMARY KEY REFERENCES sessions(job_id),
  since   timestamptz NOT NULL DEFAULT now()
);
