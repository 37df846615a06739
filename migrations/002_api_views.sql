-- 002: helpers the REST API reads through: timestamps in ISO 8601 UTC with milliseconds.
CREATE FUNCTION jb_ts(t timestamptz) RETURNS text
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
