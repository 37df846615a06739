-- 005: audit entries stop referencing audit_signing_keys by a foreign key; keys are kept by a
-- trigger instead. The foreign key made every append take a KEY SHARE lock on the one row of
-- the active key, so concurrent appends (different sessions) each turned that row's lock
-- into a new MultiXact: a write to one shared page per append (bench/audit: about 30% fewer
-- appends per second with 16 sessions). What the key reference protected stays true: a
-- published key is never deleted (retired keys stay, see lib/keyring.h), and the verifier
-- reports an entry whose keyId is not published as "unknown key".
ALTER TABLE audit_entries DROP CONSTRAINT audit_entries_key_id_fkey;

CREATE FUNCTION jb_audit_keys_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'audit signing keys are never deleted; old entries are verified with them'
    USING ERRCODE = 'restrict_violation';
END $$;

CREATE TRIGGER audit_signing_keys_kept BEFORE DELETE ON audit_signing_keys
  FOR EACH ROW EXECUTE FUNCTION jb_audit_keys_kept();
CREATE TRIGGER audit_signing_keys_kept_truncate BEFORE TRUNCATE ON audit_signing_keys
  FOR EACH STATEMENT EXECUTE FUNCTION jb_audit_keys_kept();
