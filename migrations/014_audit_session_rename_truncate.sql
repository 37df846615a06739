-- 014: since 012 no foreign key ties audit entries to their session; the delete trigger of 012
-- is joined by the two other ways a session row could leave its entries behind: renaming its
-- job_id, and TRUNCATE of sessions (statement-level, so it sees no rows). Either is refused
-- while any of the affected entries exist; the chains themselves still verify on their own.
CREATE FUNCTION jb_audit_session_renamed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_entries WHERE job_id = OLD.job_id) THEN
    RAISE EXCEPTION 'session % has audit entries; its job id never changes', OLD.job_id
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER sessions_audit_id_kept BEFORE UPDATE OF job_id ON sessions
  FOR EACH ROW WHEN (OLD.job_id IS DISTINCT FROM NEW.job_id)
  EXECUTE FUNCTION jb_audit_session_renamed();

CREATE FUNCTION jb_audit_sessions_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM audit_entries) THEN
    RAISE EXCEPTION 'sessions have audit entries; they are never deleted'
      USING ERRCODE = 'restrict_violation';
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER sessions_audit_kept_truncate BEFORE TRUNCATE ON sessions
  FOR EACH STATEMENT EXECUTE FUNCTION jb_audit_sessions_truncated();
