-- 040: the buyer's web console (api/rest/console.c). A console sign-in is a token of its own
-- (role buyer or service, the session of the token that made it) that ends at expires_at:
-- the browser holds it only as an HttpOnly cookie. One-time codes (console_codes) are what a
-- printed console link carries instead of a token: used once, within minutes, then dead.
ALTER TABLE tokens ADD COLUMN expires_at timestamptz;

CREATE TABLE console_codes (
  code_hash   bytea PRIMARY KEY CHECK (length(code_hash) = 32),
  role        text NOT NULL CHECK (role IN ('service', 'buyer')),
  job_id      text REFERENCES sessions(job_id) ON DELETE CASCADE,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz,
  CHECK ((role = 'service') = (job_id IS NULL))
);
CREATE INDEX console_codes_expiry ON console_codes (expires_at);
