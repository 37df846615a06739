/* sessions.c — SQL for sessions, ops and agents (see sessions.h). */
#include "db/sessions.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/audit_store.h"
#include "db/db.h"
#include "db/op_state.h"
#include "db/policy.h"
#include "db/tokens.h"

static const char *const live_states[] = {JB_LIVE_STATES, NULL};
static const char *const end_states[] = {"accepted", "aborted", "failed", NULL};

static bool in_list(const char *const list[], const char *s) {
  for (size_t i = 0; list[i]; i++)
    if (strcmp(list[i], s) == 0) return true;
  return false;
}

bool jb_state_is_live(const char *state) { return in_list(live_states, state); }
bool jb_state_is_known(const char *state) {
  return in_list(live_states, state) || in_list(end_states, state);
}

/* Indexed by enum jb_session_state. */
static const char *const state_names[] = {JB_LIVE_STATES, "accepted", "aborted", "failed"};
_Static_assert(sizeof state_names / sizeof state_names[0] == JB_SESSION_FAILED + 1,
               "one name per session state");

const char *jb_session_state_name(enum jb_session_state state) {
  if (state < 0 || (size_t)state >= sizeof state_names / sizeof state_names[0]) return NULL;
  return state_names[state];
}

enum jb_session_state jb_session_state_from_name(const char *name) {
  for (size_t i = 0; name && i < sizeof state_names / sizeof state_names[0]; i++)
    if (strcmp(state_names[i], name) == 0) return (enum jb_session_state)i;
  return JB_SESSION_UNKNOWN;
}

/* Copies column 0 of row 0 into a new string. */
static char *dup_value(PGresult *r) {
  return strndup(PQgetvalue(r, 0, 0), (size_t)PQgetlength(r, 0, 0));
}

int jb_db_session_create(PGconn *c, const struct jb_keyring *keys, const struct jb_session_new *s,
                         struct jb_audit_head *head, jb_error *err) {
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  char st[6] = "";
  const char *p1[1] = {s->agent_id};
  PGresult *r = jb_db_exec(c, "INSERT INTO agents (agent_id) VALUES ($1) ON CONFLICT DO NOTHING", 1,
                           p1, PGRES_COMMAND_OK, st, err, "create agent");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  const char *p2[7] = {s->job_id,       s->agent_id,    s->workspace, s->mode,
                       s->exclude_json, s->limits_json, s->image};
  r = jb_db_exec(c,
                 "INSERT INTO sessions (job_id, agent_id, workspace, mode, exclude, limits, image)"
                 " VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7)",
                 7, p2, PGRES_COMMAND_OK, st, err, "create session");
  if (!r) return strcmp(st, "23505") == 0 ? JB_ERR_EXISTS : JB_ERR_FAIL;
  PQclear(r);
  /* opens are serialized here so that two of them cannot both find a workspace free */
  r = jb_db_exec(c, "SELECT pg_advisory_xact_lock(7665523954990151714)", 0, NULL, PGRES_TUPLES_OK,
                 NULL, err, "lock workspaces");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  const char *pw[2] = {s->workspace, s->job_id};
  r = jb_db_exec(c,
                 "SELECT job_id FROM sessions WHERE state IN ('created', 'prescanning',"
                 " 'awaiting_agent', 'active', 'paused', 'done') AND (workspace = $1"
                 " OR starts_with($1, workspace || '/') OR starts_with(workspace, $1 || '/'))"
                 " AND job_id <> $2 LIMIT 1",
                 2, pw, PGRES_TUPLES_OK, NULL, err, "check workspace");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) > 0) {
    jb_fail(err, EBUSY, "workspace overlaps the one of live session '%s'", PQgetvalue(r, 0, 0));
    PQclear(r);
    return JB_ERR_CONFLICT;
  }
  PQclear(r);
  if (jb_db_token_insert(c, s->buyer_hash, "buyer", s->job_id, NULL, err) != JB_OK ||
      jb_db_token_insert(c, s->agent_hash, "agent", s->job_id, NULL, err) != JB_OK)
    return JB_ERR_FAIL;
  const char *p3[1] = {s->job_id};
  r = jb_db_exec(c, "INSERT INTO launch_jobs (job_id, kind) VALUES ($1, 'launch')", 1, p3,
                 PGRES_COMMAND_OK, NULL, err, "queue launch");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  json_t *d = json_pack("{s:n,s:s,s:s,s:s,s:s?}", "from", "to", "created", "actor", "service",
                        "mode", s->mode, "image", s->image);
  int arc = jb_audit_append(c, keys, s->job_id, "state", NULL, d, head, err);
  json_decref(d);
  if (arc != JB_OK) return JB_ERR_FAIL;
  char msg[300];
  if (s->rules && jb_db_rules_insert_tx(c, keys, s->job_id, s->rules, "open", 0, head, msg,
                                        sizeof msg, err) != JB_OK) {
    if (!err->msg[0]) jb_fail(err, EINVAL, "%s", msg);
    return JB_ERR_FAIL;
  }
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  return JB_OK;
}

#define SESSION_JSON                                                                               \
  "json_build_object('jobId', s.job_id, 'agentId', s.agent_id, 'workspace', s.workspace,"          \
  " 'mode', s.mode, 'state', s.state, 'stateReason', s.state_reason,"                              \
  " 'pausedBy', s.paused_by, 'exclude', s.exclude,"                                                \
  " 'limits', s.limits, 'image', s.image, 'createdAt', jb_ts(s.created_at), 'updatedAt', "         \
  "jb_ts(s.updated_at),"                                                                           \
  " 'endedAt', jb_ts(s.ended_at),"                                                                 \
  " 'pendingOps', (SELECT count(*) FROM ops o WHERE o.job_id = s.job_id AND o.state = 'pending')," \
  " 'auditHead', (SELECT json_build_object('seq', h.seq, 'hash', encode(h.hash, 'hex'))"           \
  "   FROM audit_heads h WHERE h.job_id = s.job_id),"                                              \
  " 'walls', s.walls)::text"

int jb_db_session_get(PGconn *c, const char *job_id, char **json_out, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT " SESSION_JSON " FROM sessions s WHERE s.job_id = $1", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "read session");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  *json_out = dup_value(r);
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, 12, "out of memory");
}

/* Indexed by enum jb_session_mode. */
static const char *const mode_names[] = {"supervised", "unsupervised"};
_Static_assert(sizeof mode_names / sizeof mode_names[0] == JB_MODE_UNSUPERVISED + 1,
               "one name per mode");

const char *jb_session_mode_name(enum jb_session_mode mode) {
  if (mode < 0 || (size_t)mode >= sizeof mode_names / sizeof mode_names[0]) return NULL;
  return mode_names[mode];
}

void jb_session_facts_clear(struct jb_session_facts *f) {
  if (!f) return;
  free(f->worker);
  free(f->effects_incomplete);
  free(f->exec_reason);
  free(f->state_reason);
  json_decref(f->exclude);
  json_decref(f->flagged);
  *f = (struct jb_session_facts){.state = JB_SESSION_UNKNOWN};
}

int jb_session_facts_copy(struct jb_session_facts *dst, const struct jb_session_facts *src,
                          jb_error *err) {
  *dst = (struct jb_session_facts){.state = src->state, .mode = src->mode, .exec = src->exec};
  if ((src->worker && !(dst->worker = strdup(src->worker))) ||
      (src->exec_reason && !(dst->exec_reason = strdup(src->exec_reason))) ||
      (src->effects_incomplete && !(dst->effects_incomplete = strdup(src->effects_incomplete))) ||
      (src->state_reason && !(dst->state_reason = strdup(src->state_reason))) ||
      (src->exclude && !(dst->exclude = json_deep_copy(src->exclude))) ||
      (src->flagged && !(dst->flagged = json_deep_copy(src->flagged)))) {
    jb_session_facts_clear(dst);
    return jb_fail(err, ENOMEM, "copy of the session's facts: out of memory");
  }
  return JB_OK;
}

/* Column `col` of row 0 of `r` (JSON text; SQL NULL: *out = NULL) parsed into *out (new). */
static int facts_json(PGresult *r, int col, const char *what, json_t **out, jb_error *err) {
  *out = NULL;
  if (PQgetisnull(r, 0, col)) return JB_OK;
  json_error_t je;
  *out = json_loadb(PQgetvalue(r, 0, col), (size_t)PQgetlength(r, 0, col),
                    JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
  return *out ? JB_OK
              : jb_fail(err, EINVAL, "the session's %s from the database: %s", what, je.text);
}

int jb_db_session_facts(PGconn *c, const char *job_id, struct jb_session_facts *out,
                        jb_error *err) {
  *out = (struct jb_session_facts){.state = JB_SESSION_UNKNOWN};
  const char *p[1] = {job_id};
  /* a worker that is not a JSON string is none, as the op path reads the contract */
  PGresult *r =
      jb_db_exec(c,
                 "SELECT state, mode, exclude::text,"
                 " CASE WHEN jsonb_typeof(walls->'worker') = 'string' THEN walls->>'worker' END,"
                 " (walls->'prescan'->'flagged')::text, effects_incomplete,"
                 " CASE WHEN jsonb_typeof(walls->'exec'->'available') = 'boolean'"
                 " THEN walls->'exec'->>'available' END,"
                 " CASE WHEN jsonb_typeof(walls->'exec'->'reason') = 'string'"
                 " THEN left(walls->'exec'->>'reason', 300) END, left(state_reason, 300)"
                 " FROM sessions WHERE job_id = $1",
                 1, p, PGRES_TUPLES_OK, NULL, err, "read session facts");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  int rc = JB_OK;
  const char *mode = PQgetvalue(r, 0, 1);
  out->state = jb_session_state_from_name(PQgetvalue(r, 0, 0));
  if (!strcmp(mode, "supervised"))
    out->mode = JB_MODE_SUPERVISED;
  else if (!strcmp(mode, "unsupervised"))
    out->mode = JB_MODE_UNSUPERVISED;
  else
    rc = jb_fail(err, EINVAL, "the session's mode from the database is unknown: %.40s", mode);
  if (rc == JB_OK && !PQgetisnull(r, 0, 3) && !(out->worker = strdup(PQgetvalue(r, 0, 3))))
    rc = jb_fail(err, ENOMEM, "read session facts: out of memory");
  if (rc == JB_OK) rc = facts_json(r, 2, "exclusions", &out->exclude, err);
  if (rc == JB_OK) rc = facts_json(r, 4, "pre-scan flags", &out->flagged, err);
  if (rc == JB_OK && !PQgetisnull(r, 0, 5) &&
      !(out->effects_incomplete = strdup(PQgetvalue(r, 0, 5))))
    rc = jb_fail(err, ENOMEM, "read session facts: out of memory");
  if (!PQgetisnull(r, 0, 6))
    out->exec = !strcmp(PQgetvalue(r, 0, 6), "true") ? JB_EXEC_AVAILABLE : JB_EXEC_UNAVAILABLE;
  if (rc == JB_OK && !PQgetisnull(r, 0, 7) && !(out->exec_reason = strdup(PQgetvalue(r, 0, 7))))
    rc = jb_fail(err, ENOMEM, "read session facts: out of memory");
  if (rc == JB_OK && !PQgetisnull(r, 0, 8) && !(out->state_reason = strdup(PQgetvalue(r, 0, 8))))
    rc = jb_fail(err, ENOMEM, "read session facts: out of memory");
  PQclear(r);
  if (rc != JB_OK) jb_session_facts_clear(out);
  return rc;
}

static int why_not(PGconn *c, const char *job_id, char state[20], jb_error *err);

int jb_db_session_effects_incomplete(PGconn *c, const char *job_id, const char *why,
                                     jb_error *err) {
  const char *p[2] = {job_id, why};
  PGresult *r = jb_db_exec(c,
                           "WITH u AS (UPDATE sessions SET effects_incomplete = left($2, 300)"
                           " WHERE job_id = $1 AND effects_incomplete IS NULL RETURNING job_id)"
                           " SELECT pg_notify('jb_op', '0 effects ' || job_id) FROM u",
                           2, p, PGRES_TUPLES_OK, NULL, err, "hold writable commands");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  return JB_OK;
}

int jb_db_session_effects_held(PGconn *c, const char *job_id, char *why, size_t wsize,
                               jb_error *err) {
  why[0] = '\0';
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT effects_incomplete FROM sessions WHERE job_id = $1", 1, p,
                           PGRES_TUPLES_OK, NULL, err, "read the hold of writable commands");
  if (!r) return JB_ERR_FAIL;
  int rc = PQntuples(r) == 1 ? JB_OK : JB_ERR_NOT_FOUND;
  if (rc == JB_OK && !PQgetisnull(r, 0, 0)) snprintf(why, wsize, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  return rc;
}

int jb_db_session_effects_clear(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                                const char *reason, bool *cleared, char state[20],
                                struct jb_audit_head *head, jb_error *err) {
  memset(head, 0, sizeof *head);
  *cleared = false;
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(
      c,
      "WITH old AS (SELECT effects_incomplete FROM sessions WHERE job_id = $1 FOR UPDATE),"
      " u AS (UPDATE sessions s SET effects_incomplete = NULL FROM old WHERE s.job_id = $1"
      " AND s.state IN ('created', 'prescanning', 'awaiting_agent', 'active', 'paused', 'done')"
      " RETURNING old.effects_incomplete, s.job_id)"
      " SELECT effects_incomplete, pg_notify('jb_op', '0 effects ' || job_id) FROM u",
      1, p, PGRES_TUPLES_OK, NULL, err, "clear the hold of writable commands");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    int rc = why_not(c, job_id, state, err);
    return rc;
  }
  if (!PQgetisnull(r, 0, 0)) {
    json_t *d = json_pack("{s:s,s:s}", "was", PQgetvalue(r, 0, 0), "actor", "buyer");
    if (d && reason) json_object_set_new(d, "reason", json_string(reason));
    int arc = d ? jb_audit_append(c, keys, job_id, "effects_clear", NULL, d, head, err)
                : jb_fail(err, ENOMEM, "out of memory");
    json_decref(d);
    if (arc != JB_OK) {
      PQclear(r);
      return JB_ERR_FAIL;
    }
    *cleared = true;
  }
  PQclear(r);
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  return JB_OK;
}

int jb_db_session_context(PGconn *c, const char *job_id, json_t **out, jb_error *err) {
  *out = NULL;
  const char *p[1] = {job_id};
  PGresult *r =
      jb_db_exec(c,
                 "SELECT jsonb_build_object('jobId', job_id, 'mode', mode, 'image', image,"
                 " 'agentId', agent_id, 'state', state)::text"
                 " FROM sessions WHERE job_id = $1",
                 1, p, PGRES_TUPLES_OK, NULL, err, "read session context");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  *out = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
  PQclear(r);
  return *out ? JB_OK : jb_fail(err, ENOMEM, "read session context: out of memory");
}

/* Decodes a comma-separated list of 64-hex-digit hashes into a new array. */
static int hex_list(const char *txt, unsigned char **out, size_t *n, jb_error *err) {
  *out = NULL;
  *n = 0;
  size_t len = strlen(txt);
  if (len == 0) return JB_OK;
  size_t count = (len + 1) / 65;
  unsigned char *v = malloc(count * 32);
  if (!v) return jb_fail(err, 12, "out of memory");
  for (size_t i = 0; i < count; i++) {
    size_t bin = 0;
    if (sodium_hex2bin(v + i * 32, 32, txt + i * 65, 64, NULL, &bin, NULL) != 0 || bin != 32) {
      free(v);
      return jb_fail(err, 22, "bad token hash from the database");
    }
  }
  *out = v;
  *n = count;
  return JB_OK;
}

int jb_db_session_get_with_readers(PGconn *c, const char *job_id, char **json_out,
                                   unsigned char **readers, size_t *n_readers, jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r =
      jb_db_exec(c,
                 "SELECT " SESSION_JSON
                 ", coalesce((SELECT string_agg(encode(t.token_hash, 'hex'), ',')"
                 "  FROM tokens t WHERE t.job_id = s.job_id AND t.role = 'buyer' AND "
                 "t.revoked_at IS NULL AND t.expires_at IS NULL AND s.ended_at IS NULL), '')"
                 " FROM sessions s WHERE s.job_id = $1",
                 1, p, PGRES_TUPLES_OK, NULL, err, "read session");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  int rc = hex_list(PQgetvalue(r, 0, 1), readers, n_readers, err);
  if (rc == JB_OK) {
    *json_out = dup_value(r);
    if (!*json_out) {
      free(*readers);
      *readers = NULL;
      rc = jb_fail(err, 12, "out of memory");
    }
  }
  PQclear(r);
  return rc;
}

int jb_db_service_token_hashes(PGconn *c, unsigned char **out, size_t *n, jb_error *err) {
  PGresult *r = jb_db_exec(c,
                           "SELECT coalesce(string_agg(encode(token_hash, 'hex'), ','), '')"
                           " FROM tokens WHERE role = 'service' AND revoked_at IS NULL"
                           " AND expires_at IS NULL",
                           0, NULL, PGRES_TUPLES_OK, NULL, err, "read service tokens");
  if (!r) return JB_ERR_FAIL;
  int rc = hex_list(PQgetvalue(r, 0, 0), out, n, err);
  PQclear(r);
  return rc;
}

/* "{a,b,c}" array literal of the NULL-terminated `list` (state names need no quoting). */
static void array_literal(const char *const list[], char *out, size_t len) {
  size_t o = (size_t)snprintf(out, len, "{");
  for (size_t i = 0; list[i] && o < len; i++)
    o += (size_t)snprintf(out + o, len - o, "%s%s", i ? "," : "", list[i]);
  if (o < len) snprintf(out + o, len - o, "}");
}

int jb_db_session_state(PGconn *c, const char *job_id, char state[20], jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c, "SELECT state FROM sessions WHERE job_id = $1", 1, p, PGRES_TUPLES_OK,
                           NULL, err, "read session state");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_ERR_NOT_FOUND;
  if (PQntuples(r) == 1) {
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    rc = JB_OK;
  }
  PQclear(r);
  return rc;
}

/* JB_ERR_NOT_FOUND or JB_ERR_CONFLICT (current state into `state`) for a session whose
 * conditional update matched nothing. */
static int why_not(PGconn *c, const char *job_id, char state[20], jb_error *err) {
  int rc = jb_db_session_state(c, job_id, state, err);
  return rc == JB_OK ? JB_ERR_CONFLICT : rc;
}

/* JB_ERR_NOT_FOUND, or JB_ERR_CONFLICT with the session's state, who paused it (`actor`, 16
 * bytes; "" when not paused by anyone recorded) and whether a rollback of it is queued or
 * claimed (`rollback`), for a transition that matched nothing. */
static int paused_by(PGconn *c, const char *job_id, char state[20], char actor[16], bool *rollback,
                     jb_error *err) {
  const char *p[1] = {job_id};
  PGresult *r = jb_db_exec(c,
                           "SELECT state, coalesce(paused_by, ''), EXISTS (SELECT 1 FROM"
                           " launch_jobs WHERE job_id = $1 AND kind = 'rollback'"
                           " AND state IN ('queued', 'claimed')) FROM sessions WHERE job_id = $1",
                           1, p, PGRES_TUPLES_OK, NULL, err, "read state");
  if (!r) return JB_ERR_FAIL;
  int rc = PQntuples(r) == 1 ? JB_ERR_CONFLICT : JB_ERR_NOT_FOUND;
  if (rc == JB_ERR_CONFLICT) {
    snprintf(state, 20, "%s", PQgetvalue(r, 0, 0));
    snprintf(actor, 16, "%s", PQgetvalue(r, 0, 1));
    *rollback = PQgetvalue(r, 0, 2)[0] == 't';
  }
  PQclear(r);
  return rc;
}

int jb_db_session_end_ops(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                          const char *to, const char *reason, long *rejected, long *failed,
                          jb_error *err) {
  const char *p[3] = {job_id, to, reason && reason[0] ? reason : to};
  PGresult *r = jb_db_exec(c,
                           "UPDATE ops SET state = 'rejected', decision = 'rejected',"
                           " reason = 'session ' || $2, decided_at = now()"
                           " WHERE job_id = $1 AND state = 'pending'",
                           2, p, PGRES_COMMAND_OK, NULL, err, "reject pending ops");
  if (!r) return JB_ERR_FAIL;
  if (rejected) *rejected = strtol(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  /* a batch's staged ops (committed or not) are rejected with it */
  r = jb_db_exec(c,
                 "UPDATE ops SET state = 'rejected', decision = 'rejected',"
                 " reason = 'session ' || $2 || ' before changeset ' || (args->>'changeset')"
                 "   || ' was decided', decided_at = now()"
                 " WHERE job_id = $1 AND state = 'staged'",
                 2, p, PGRES_COMMAND_OK, NULL, err, "reject staged ops");
  if (!r) return JB_ERR_FAIL;
  if (rejected) *rejected += strtol(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  /* a changeset rejected so has each of its rows rejected, as the buyer's reject leaves it */
  r = jb_db_exec(c,
                 "UPDATE changeset_files f SET decision = 'rejected' FROM ops o"
                 " WHERE f.job_id = $1 AND f.decision IS NULL AND o.job_id = f.job_id"
                 "   AND o.op_id = f.op_id AND o.tool = 'changeset' AND o.state = 'rejected'",
                 1, p, PGRES_COMMAND_OK, NULL, err, "reject pending changesets' files");
  if (!r) return JB_ERR_FAIL;
  PQclear(r);
  /* approved but not run: the agent waiting on one is told the session ended */
  r = jb_db_exec(
      c,
      "UPDATE ops SET state = 'failed', completed_at = now(), reason = 'session ' || $2,"
      " result = jsonb_build_object('ok', false, 'error', jsonb_build_object("
      "   'code', 'aborted', 'message', 'the session was ' || $2 || ' before the op ran'))"
      " WHERE job_id = $1 AND state = 'approved'",
      2, p, PGRES_COMMAND_OK, NULL, err, "fail queued ops");
  if (!r) return JB_ERR_FAIL;
  long n = strtol(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  /* an exec still running: its command goes with the sandbox; whether it had finished is
   * not known here (its worker may have lost the outcome's commit), so only what is known is
   * said: no outcome was stored; the agent waiting on it is told why, and the chain records it */
  r = jb_db_exec(
      c,
      "UPDATE ops SET state = 'failed', completed_at = now(),"
      " reason = 'session ' || $2 || ' before the command''s outcome was stored: ' || $3,"
      " result = jsonb_build_object('ok', false, 'error', jsonb_build_object("
      "   'code', 'aborted', 'message', 'no outcome of the command was stored: the session was '"
      "   || $2 || ' while it ran or before its outcome was stored (' || $3 || ');"
      " its outcome is unknown'))"
      " WHERE job_id = $1 AND state = 'running'"
      " RETURNING op_id, coalesce(path, ''), reason",
      3, p, PGRES_TUPLES_OK, NULL, err, "fail running ops");
  if (!r) return JB_ERR_FAIL;
  int rc = JB_OK;
  for (int i = 0; rc == JB_OK && i < PQntuples(r); i++) {
    if (!keys) {
      rc = jb_fail(err, EINVAL, "a running op ended without audit signing keys");
      break;
    }
    const char *path = PQgetvalue(r, i, 1);
    json_t *d = json_pack("{s:I,s:s,s:b,s:s,s:s}", "opId",
                          (json_int_t)strtoll(PQgetvalue(r, i, 0), NULL, 10), "decision",
                          "approved", "ok", 0, "error", "aborted", "reason", PQgetvalue(r, i, 2));
    if (d) json_object_set_new(d, "outcome", json_string("unknown"));
    rc = d ? jb_audit_append(c, keys, job_id, "exec", path[0] ? path : NULL, d, NULL, err)
           : jb_fail(err, ENOMEM, "out of memory");
    json_decref(d);
  }
  n += PQntuples(r);
  PQclear(r);
  if (rc != JB_OK) return JB_ERR_FAIL;
  if (failed) *failed = n;
  return JB_OK;
}

int jb_db_session_transition(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                             const char *const from[], const char *to, const char *reason,
                             const char *actor, struct jb_transition *out, jb_error *err) {
  memset(out, 0, sizeof *out);
  char from_lit[256];
  array_literal(from, from_lit, sizeof from_lit);
  bool ending = in_list(end_states, to);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[5] = {job_id, to, reason, from_lit, actor ? actor : "system"};
  PGresult *r;
  /* a resume or an accept must see a rollback queued while it waited for the row: the lock
   * first, the update in a new snapshot */
  if (strcmp(to, "active") == 0 || strcmp(to, "accepted") == 0) {
    r = jb_db_exec(c, "SELECT 1 FROM sessions WHERE job_id = $1 FOR UPDATE", 1, p, PGRES_TUPLES_OK,
                   NULL, err, "lock the session");
    if (!r) return JB_ERR_FAIL;
    PQclear(r);
  }
  r = jb_db_exec(
      c,
      "WITH old AS (SELECT state, paused_by FROM sessions WHERE job_id = $1 FOR UPDATE)"
      " UPDATE sessions s SET state = $2, state_reason = $3, updated_at = now(),"
      "   paused_by = CASE WHEN $2 = 'paused' THEN $5 END,"
      "   ended_at = CASE WHEN $2 IN ('accepted', 'aborted', 'failed') THEN now() END"
      " FROM old WHERE s.job_id = $1 AND old.state = ANY($4::text[])"
      "   AND NOT (old.state = 'paused' AND $2 = 'active' AND coalesce(old.paused_by, $5) <> $5)"
      "   AND NOT ($2 IN ('active', 'accepted') AND EXISTS (SELECT 1 FROM launch_jobs"
      "     WHERE job_id = $1 AND kind = 'rollback' AND state IN ('queued', 'claimed')))"
      " RETURNING old.state",
      5, p, PGRES_TUPLES_OK, NULL, err, "session transition");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return paused_by(c, job_id, out->state, out->actor, &out->rollback_running, err);
  }
  snprintf(out->previous, sizeof out->previous, "%s", PQgetvalue(r, 0, 0));
  snprintf(out->state, sizeof out->state, "%s", to);
  PQclear(r);

  if (strcmp(to, "done") == 0) { /* a batch never committed is not offered to the buyer */
    r = jb_db_exec(c,
                   "UPDATE ops SET state = 'rejected', decision = 'rejected', decided_at = now(),"
                   " reason = 'changeset ' || (args->>'changeset') || ' was not committed'"
                   " WHERE job_id = $1 AND state = 'staged' AND parent_op_id IS NULL",
                   1, p, PGRES_COMMAND_OK, NULL, err, "reject uncommitted staged ops");
    if (!r) return JB_ERR_FAIL;
    PQclear(r);
  }
  if (ending) {
    const char *pe[2] = {job_id, to};
    if (jb_db_session_end_ops(c, keys, job_id, to, reason, &out->rejected_ops, NULL, err) != JB_OK)
      return JB_ERR_FAIL;
    r = jb_db_exec(c,
                   "UPDATE tokens SET revoked_at = now()"
                   " WHERE job_id = $1 AND role <> 'buyer' AND revoked_at IS NULL",
                   1, pe, PGRES_COMMAND_OK, NULL, err, "revoke agent tokens");
    if (!r) return JB_ERR_FAIL;
    PQclear(r);
    r = jb_db_exec(c, "INSERT INTO launch_jobs (job_id, kind) VALUES ($1, 'teardown')", 1, pe,
                   PGRES_COMMAND_OK, NULL, err, "queue teardown");
    if (!r) return JB_ERR_FAIL;
    PQclear(r);
  }
  const char *op = strcmp(to, "paused") == 0                                             ? "pause"
                   : strcmp(to, "aborted") == 0                                          ? "abort"
                   : strcmp(to, "accepted") == 0                                         ? "accept"
                   : (strcmp(to, "active") == 0 && strcmp(out->previous, "paused") == 0) ? "resume"
                                                                                         : "state";
  json_t *d = json_pack("{s:s,s:s,s:s,s:s?}", "from", out->previous, "to", to, "actor",
                        actor ? actor : "system", "reason", reason);
  if (d && ending && out->rejected_ops > 0)
    json_object_set_new(d, "rejectedOps", json_integer(out->rejected_ops));
  if (!keys) { /* every state change is an audit entry: a caller without keys is a bug */
    json_decref(d);
    jb_fail(err, EINVAL, "session transition without audit signing keys");
    return JB_ERR_FAIL;
  }
  int arc = d ? jb_audit_append(c, keys, job_id, op, NULL, d, &out->head, err)
              : jb_fail(err, ENOMEM, "out of memory");
  json_decref(d);
  if (arc != JB_OK) return JB_ERR_FAIL;
  if (ending && jb_audit_seal(c, keys, job_id, &out->head, err) != JB_OK) return JB_ERR_FAIL;
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  return JB_OK;
}

int jb_db_session_set_mode(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                           const char *mode, char state[20], struct jb_audit_head *head,
                           jb_error *err) {
  memset(head, 0, sizeof *head);
  cleanup_tx struct jb_tx tx = {0};
  if (jb_tx_begin(&tx, c, err) < 0) return JB_ERR_FAIL;
  const char *p[2] = {job_id, mode};
  PGresult *r = jb_db_exec(c,
                           "WITH old AS (SELECT mode FROM sessions WHERE job_id = $1 FOR UPDATE)"
                           " UPDATE sessions s SET mode = $2, updated_at = now() FROM old"
                           " WHERE s.job_id = $1 AND s.state IN ('created', 'prescanning',"
                           " 'awaiting_agent', 'active', 'paused', 'done') RETURNING old.mode",
                           2, p, PGRES_TUPLES_OK, NULL, err, "set mode");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    int rc = why_not(c, job_id, state, err);
    return rc;
  }
  char from[16];
  snprintf(from, sizeof from, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  if (strcmp(from, mode) != 0) {
    json_t *d = json_pack("{s:s,s:s,s:s}", "from", from, "to", mode, "actor", "buyer");
    int arc = d ? jb_audit_append(c, keys, job_id, "mode", NULL, d, head, err)
                : jb_fail(err, ENOMEM, "out of memory");
    json_decref(d);
    if (arc != JB_OK) return JB_ERR_FAIL;
  }
  if (jb_tx_commit(&tx, err) < 0) return JB_ERR_FAIL;
  return JB_OK;
}

int jb_db_agent_get(PGconn *c, const char *agent_id, char **json_out, jb_error *err) {
  const char *p[1] = {agent_id};
  PGresult *r = jb_db_exec(
      c,
      "SELECT json_build_object('agentId', a.agent_id, 'trustScore', a.trust_score,"
      " 'createdAt', jb_ts(a.created_at), 'updatedAt', jb_ts(a.updated_at),"
      " 'sessions', (SELECT count(*) FROM sessions s WHERE s.agent_id = a.agent_id),"
      " 'history', coalesce((SELECT json_agg(json_build_object('kind', e.kind, 'jobId', e.job_id,"
      "   'scoreDelta', e.score_delta, 'detail', e.detail, 'at', jb_ts(e.created_at)) ORDER BY "
      "e.id)"
      "   FROM agent_events e WHERE e.agent_id = a.agent_id), '[]'::json))::text"
      " FROM agents a WHERE a.agent_id = $1",
      1, p, PGRES_TUPLES_OK, NULL, err, "read agent");
  if (!r) return JB_ERR_FAIL;
  if (PQntuples(r) != 1) {
    PQclear(r);
    return JB_ERR_NOT_FOUND;
  }
  *json_out = dup_value(r);
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, 12, "out of memory");
}

int jb_db_session_list(PGconn *c, long limit, char **json_out, jb_error *err) {
  char lim[24];
  snprintf(lim, sizeof lim, "%ld", limit);
  const char *vals[1] = {lim};
  PGresult *r = jb_db_exec(
      c,
      "SELECT coalesce(json_agg(json_build_object('jobId', s.job_id, 'agentId', s.agent_id,"
      " 'state', s.state, 'mode', s.mode, 'createdAt', jb_ts(s.created_at))"
      " ORDER BY s.created_at DESC, s.job_id), '[]'::json)::text"
      " FROM (SELECT * FROM sessions ORDER BY created_at DESC, job_id LIMIT $1::bigint) s",
      1, vals, PGRES_TUPLES_OK, NULL, err, "session list");
  if (!r) return JB_ERR_FAIL;
  *json_out = strdup(PQgetvalue(r, 0, 0));
  PQclear(r);
  return *json_out ? JB_OK : jb_fail(err, ENOMEM, "session list: out of memory");
}
