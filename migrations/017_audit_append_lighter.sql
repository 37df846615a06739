-- 017: two things every audit append paid for and nothing needs.
--
-- (1) An append no longer checks the sizes of seq, prev_hash, hash and signature in a
-- CHECK constraint. PostgreSQL reads a table's CHECK expressions back from their stored text
-- and plans them anew on every INSERT statement (ExecRelCheck: stringToNode, then
-- ExecPrepareExpr): with the one 012 left, that was the largest single cost of an append
-- statement after the commit (bench/audit; an append statement alone, no fsync: about 10-17 µs
-- of server CPU out of about 115, the same check as a domain on the three columns about
-- 4 µs). What it guarded is guarded without it: jailboxd writes only entries it has just made
-- (seq = head + 1, 32-byte hashes, 64-byte signature), and a row written any other way with a
-- column of the wrong size is read back as a malformed entry, which the verifier reports as
-- the first bad seq (db/audit_store.c read_row, api/audit.md), as it reports any other
-- tampering.
ALTER TABLE audit_entries DROP CONSTRAINT audit_entries_sizes_check;

-- (2) audit_entries.details (003), a JSONB copy of what the canonical bytes already hold, goes:
-- every append had the server parse the details' text into JSONB (jsonb_in) and store a second
-- copy of them, about a fifth of the row and of its WAL. Nothing read it in SQL but tests:
-- the export and both verifiers read an entry's details from its canonical bytes
-- (db/audit_store.c read_row), which are what is signed; a query that wants them as JSONB
-- calls jb_audit_details(canonical) (below; it fails on bytes that are not UTF-8 JSON, which
-- only tampering makes). (bench/audit, 16 sessions with one writer each, this build with and
-- without the column in the same minutes on a shared machine: 7934 against 6222 appends/s,
-- beside about the same pgbench.)
ALTER TABLE audit_entries DROP COLUMN details;

CREATE FUNCTION jb_audit_details(canonical bytea) RETURNS jsonb
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  AS $$ SELECT convert_from(canonical, 'UTF8')::jsonb -> 'details' $$;
