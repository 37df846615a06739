-- 023: approval rules (lib/policy.h) of each session, in the order they decide: `position`
-- grows with each rule added; the first live rule that matches an op decides it. A rule is
-- live until it is revoked (revoked_at), its expiresAt passes or its uses run out
-- (expired_at); a rule that is not live decides nothing, and its row stays for the record.
-- And who decided each op: ops.decided_by is "rule:<id>", "buyer", "timeout" or "mode" (the
-- session's mode decided: queued at once, or held for the buyer), decision_reason the why.
CREATE TABLE policy_rules (
  job_id      text NOT NULL REFERENCES sessions(job_id) ON DELETE CASCADE,
  rule_id     text NOT NULL CHECK (length(rule_id) BETWEEN 1 AND 64),
  position    bigint GENERATED ALWAYS AS IDENTITY,
  rule        jsonb NOT NULL,
  uses_left   integer CHECK (uses_left >= 0),
  expires_at  timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz,
  expired_at  timestamptz,
  PRIMARY KEY (job_id, rule_id)
);
CREATE INDEX policy_rules_live ON policy_rules (job_id, position)
  WHERE revoked_at IS NULL AND expired_at IS NULL;

ALTER TABLE ops ADD COLUMN decided_by text CHECK (length(decided_by) BETWEEN 1 AND 80),
                ADD COLUMN decision_reason text CHECK (length(decision_reason) <= 1000);

-- the decisions made without a rule name their decider from the decision itself: a queued op
-- ('auto') was decided by the session's mode, an approved or rejected one by the buyer
CREATE FUNCTION jb_ops_decided_by() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.decided_by IS NULL AND NEW.decision IS NOT NULL THEN
    NEW.decided_by := CASE WHEN NEW.decision = 'auto' THEN 'mode' ELSE 'buyer' END;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER ops_decided_by BEFORE INSERT OR UPDATE OF decision ON ops
  FOR EACH ROW EXECUTE FUNCTION jb_ops_decided_by();
CREATE INDEX ops_decided_by ON ops (job_id, decided_by);
