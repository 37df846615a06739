-- 016: ops that jailboxd hands straight to the worker holding the session (sandbox/proto/direct.h)
-- are inserted, run and completed by the worker in one transaction, which sets
-- jailbox.direct_op for itself: nobody waits for a jb_op wake-up about such an op (the
-- answer goes back on the worker's socket), and the worker's own op thread must not be
-- woken to look for it. Every other op notifies as before (migration 009).
CREATE OR REPLACE FUNCTION jb_notify_op() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('jailbox.direct_op', true), '') = 'on' THEN
    RETURN NULL;
  END IF;
  IF (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state)
     AND NEW.state IN ('approved', 'done', 'failed', 'rejected') THEN
    PERFORM pg_notify('jb_op', NEW.op_id || ' ' || NEW.state || ' ' || NEW.job_id);
  END IF;
  RETURN NULL;
END $$;
