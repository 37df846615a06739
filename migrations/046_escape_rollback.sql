-- 046: rollback on escape. With JAILBOX_ROLLBACK_ON_ESCAPE a worker queues, for a session an
-- escape ended, a rollback of everything it changed (a launch job of kind 'rollback', claimed
-- once the session's teardown is done: its sandbox is gone) and its pending seal waits for it:
-- rollback_id names that job, rollback_until how long the seal waits at most. The rollback's
-- worker seals the chain once the rollback's entry is in it; past rollback_until jailboxd's
-- sweeper seals anyway, the rollback recorded as failed (timeout).
ALTER TABLE seals_pending ADD COLUMN rollback_id bigint;
ALTER TABLE seals_pending ADD COLUMN rollback_until timestamptz;
