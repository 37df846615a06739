-- 001: the tables every later issue builds on. Applied once; later changes are new files.

-- Agents and their trust score; history lives in agent_events.
CREATE TABLE agents (
  agent_id     text PRIMARY KEY CHECK (length(agent_id) BETWEEN 1 AND 200),
  trust_score  integer NOT NULL DEFAULT 100,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE agent_events (
  id           bigserial PRIMARY KEY,
  agent_id     text NOT NULL REFERENCES agents(agent_id),
  job_id       text,
  kind         text NOT NULL,
  score_delta  integer NOT NULL DEFAULT 0,
  detail       jsonb NOT NULL DEFAULT '{}'::jsonb,
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_events_agent ON agent_events (agent_id, id);

-- A jailbox session. state follows the lifecycle in design.md.
CREATE TABLE sessions (
  job_id          text PRIMARY KEY CHECK (length(job_id) BETWEEN 1 AND 128),
  agent_id        text NOT NULL REFERENCES agents(agent_id),
  workspace       text NOT NULL,
  mode            text NOT NULL DEFAULT 'supervised' CHECK (mode IN ('supervised', 'unsupervised')),
  state           text NOT NULL DEFAULT 'created' CHECK (state IN (
                    'created', 'prescanning', 'awaiting_agent', 'active', 'paused', 'done',
                    'accepted', 'aborted', 'failed')),
  state_reason    text,
  exclude         jsonb NOT NULL DEFAULT '[]'::jsonb,
  limits          jsonb NOT NULL DEFAULT '{}'::jsonb,
  walls           jsonb,
  audit_head_seq  bigint NOT NULL DEFAULT 0,
  audit_head_hash bytea,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  ended_at        timestamptz
);
CREATE INDEX sessions_state ON sessions (state);

-- Bearer tokens: only a SHA-256 of the token is kept.
CREATE TABLE tokens (
  token_hash   bytea PRIMARY KEY CHECK (length(token_hash) = 32),
  role         text NOT NULL CHECK (role IN ('service', 'buyer', 'agent')),
  job_id       text REFERENCES sessions(job_id),
  label        text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  revoked_at   timestamptz,
  CHECK ((role = 'service') = (job_id IS NULL))
);
CREATE INDEX tokens_job ON tokens (job_id);

-- File operations asked for by an agent; writes wait in 'pending' for the buyer.
CREATE TABLE ops (
  op_id         bigserial PRIMARY KEY,
  job_id        text NOT NULL REFERENCES sessions(job_id),
  tool          text NOT NULL CHECK (tool IN ('read', 'write', 'list', 'done')),
  path          text,
  args          jsonb NOT NULL DEFAULT '{}'::jsonb,
  state         text NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'done', 'failed')),
  decision      text CHECK (decision IN ('approved', 'rejected', 'auto')),
  reason        text,
  result        jsonb,
  created_at    timestamptz NOT NULL DEFAULT now(),
  decided_at    timestamptz,
  completed_at  timestamptz
);
CREATE INDEX ops_job_state ON ops (job_id, state, op_id);

-- Public halves of the audit signing keys, old ones kept for verification.
CREATE TABLE audit_signing_keys (
  key_id       text PRIMARY KEY,
  algorithm    text NOT NULL DEFAULT 'ed25519' CHECK (algorithm = 'ed25519'),
  public_key   bytea NOT NULL CHECK (length(public_key) = 32),
  created_at   timestamptz NOT NULL DEFAULT now(),
  retired_at   timestamptz
);

-- The hash-chained audit log; `canonical` holds the signed bytes verbatim.
CREATE TABLE audit_entries (
  job_id       text NOT NULL REFERENCES sessions(job_id),
  seq          bigint NOT NULL CHECK (seq >= 1),
  operation    text NOT NULL,
  path         text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  canonical    bytea NOT NULL,
  prev_hash    bytea NOT NULL CHECK (length(prev_hash) = 32),
  hash         bytea NOT NULL CHECK (length(hash) = 32),
  signature    bytea NOT NULL CHECK (length(signature) = 64),
  key_id       text NOT NULL REFERENCES audit_signing_keys(key_id),
  PRIMARY KEY (job_id, seq)
);

-- Work for jailbox-worker: claimed with SELECT ... FOR UPDATE SKIP LOCKED.
CREATE TABLE launch_jobs (
  id           bigserial PRIMARY KEY,
  job_id       text NOT NULL REFERENCES sessions(job_id),
  kind         text NOT NULL CHECK (kind IN ('launch', 'teardown')),
  state        text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'claimed', 'done', 'failed')),
  worker_id    text,
  attempts     integer NOT NULL DEFAULT 0,
  payload      jsonb NOT NULL DEFAULT '{}'::jsonb,
  error        text,
  created_at   timestamptz NOT NULL DEFAULT now(),
  claimed_at   timestamptz,
  finished_at  timestamptz
);
CREATE INDEX launch_jobs_queued ON launch_jobs (id) WHERE state = 'queued';
