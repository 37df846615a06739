-- 018: a guard for statements sent several at a time (libpq pipeline mode, db/db.h): only an
-- error stops the statements after it — the COMMIT among them — so a condition the caller's
-- work depends on is checked with jb_refuse_unless(condition, why), which raises
-- (SQLSTATE JB409) unless the condition is true, and returns true otherwise. VOLATILE, so that
-- it is called only where and when the statement reaches it (never folded ahead of time).
CREATE FUNCTION jb_refuse_unless(ok boolean, why text) RETURNS boolean
  LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF ok IS NOT TRUE THEN
    RAISE EXCEPTION 'refused: %', why USING ERRCODE = 'JB409';
  END IF;
  RETURN true;
END $$;
