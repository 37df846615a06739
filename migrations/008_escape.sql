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

-- the sweeper looks for ended sessions whose chain has no seal yet (a crash between an
-- escape's abort and its seal) among those that ended recently
CREATE INDEX sessions_ended ON sessions (ended_at) WHERE ended_at IS NOT NULL;
