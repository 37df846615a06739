-- 035: the claim a worker holds on a live session it drives: its worker id and until when
-- (renewed every JAILBOX_WORKER_LEASE_S / 3 s). A session whose lease ran out — its worker
-- gone longer than JAILBOX_WORKER_LEASE_S, not restarted to re-adopt it — is failed by the
-- sweeper with the reason worker_unavailable. NULL: no worker drives it (before its walls
-- are up, or sessions opened before).
ALTER TABLE sessions ADD COLUMN lease_worker text, ADD COLUMN lease_until timestamptz;
CREATE INDEX sessions_lease_until ON sessions (lease_until) WHERE lease_until IS NOT NULL;
