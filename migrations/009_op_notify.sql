-- 009: wake-ups for the op hand-over (issue 7) on channel jb_op, sent by the same commit that
-- stores the change (a NOTIFY is delivered only if its transaction commits):
--   "<op id> approved <job id>"             an op queued for the worker (stored, or approved)
--   "<op id> done|failed|rejected <job id>" an op finished: the waiting agent call reads it
--   "0 <state> <job id>"                    the session changed state (resume, pause, end)
-- jb_change (004) keeps announcing only what the session read cache shows of the ops, the
-- pending count, so that running an op no longer wakes every listener of every process.
CREATE FUNCTION jb_notify_op() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM NEW.state)
     AND NEW.state IN ('approved', 'done', 'failed', 'rejected') THEN
    PERFORM pg_notify('jb_op', NEW.op_id || ' ' || NEW.state || ' ' || NEW.job_id);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER ops_notify_op AFTER INSERT OR UPDATE OF state ON ops
  FOR EACH ROW EXECUTE FUNCTION jb_notify_op();

CREATE FUNCTION jb_notify_session_op() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('jb_op', '0 ' || NEW.state || ' ' || NEW.job_id);
  RETURN NULL;
END $$;
CREATE TRIGGER sessions_notify_op AFTER UPDATE OF state ON sessions
  FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state) EXECUTE FUNCTION jb_notify_session_op();

CREATE FUNCTION jb_notify_pending_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF (TG_OP <> 'DELETE' AND NEW.state = 'pending') OR (TG_OP <> 'INSERT' AND OLD.state = 'pending') THEN
    PERFORM pg_notify('jb_change', CASE WHEN TG_OP = 'DELETE' THEN OLD.job_id ELSE NEW.job_id END);
  END IF;
  RETURN NULL;
END $$;
DROP TRIGGER ops_change ON ops;
CREATE TRIGGER ops_change AFTER INSERT OR UPDATE OR DELETE ON ops
  FOR EACH ROW EXECUTE FUNCTION jb_notify_pending_change();

-- An op's arguments (a write's content, up to 1 MiB) and result (a read's content) are
-- compressed with lz4 where the server has it: pglz, the default, spent tens of milliseconds
-- on every 1 MiB write. A server built without lz4 keeps pglz.
DO $$
BEGIN
  ALTER TABLE ops ALTER COLUMN args SET COMPRESSION lz4, ALTER COLUMN result SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
  NULL;
END $$;
