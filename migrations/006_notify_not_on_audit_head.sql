-- 006: moving a session's audit head (every audit append) no longer announces a change on
-- jb_change: transactions that NOTIFY commit one at a time, which capped appends of all
-- sessions together. Every other session update still does; the read cache keeps a cached
-- auditHead at most its TTL (2 s) on other instances, and the buyer gets every new head as a
-- jailbox:audit_head event.
DROP TRIGGER sessions_change ON sessions;
CREATE TRIGGER sessions_change AFTER INSERT OR DELETE ON sessions
  FOR EACH ROW EXECUTE FUNCTION jb_notify_change();
CREATE TRIGGER sessions_change_update AFTER UPDATE ON sessions
  FOR EACH ROW WHEN (OLD.audit_head_seq IS NOT DISTINCT FROM NEW.audit_head_seq)
  EXECUTE FUNCTION jb_notify_change();
