-- 004: every change to a session, its ops or its tokens is announced on channel jb_change
-- with the job id as payload ('' for service tokens), so that each jailboxd instance can drop
-- what it cached for that session. PostgreSQL folds identical notifications of one
-- transaction into one.
CREATE FUNCTION jb_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    PERFORM pg_notify('jb_change', coalesce(OLD.job_id, ''));
  ELSE
    PERFORM pg_notify('jb_change', coalesce(NEW.job_id, ''));
    IF TG_OP = 'UPDATE' AND OLD.job_id IS DISTINCT FROM NEW.job_id THEN
      PERFORM pg_notify('jb_change', coalesce(OLD.job_id, ''));
    END IF;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER sessions_change AFTER INSERT OR UPDATE OR DELETE ON sessions
  FOR EACH ROW EXECUTE FUNCTION jb_notify_change();
CREATE TRIGGER ops_change AFTER INSERT OR UPDATE OR DELETE ON ops
  FOR EACH ROW EXECUTE FUNCTION jb_notify_change();
CREATE TRIGGER tokens_change AFTER INSERT OR UPDATE OR DELETE ON tokens
  FOR EACH ROW EXECUTE FUNCTION jb_notify_change();
