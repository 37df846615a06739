/* sessions.c — the REST half of the session contract: open, inspect, list ops, approve and
 * reject ops, abort / pause / resume / accept, change mode, and read an agent's trust score. */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api/auth.h"
#include "api/controls.h"
#include "api/agent/escape.h"
#include "api/rest/handlers.h"
#include "lib/images.h"
#include "lib/json.h"
#include "api/agent/ops.h"
#include "api/agent/policy.h"
#include "lib/policy.h"
#include "db/audit_store.h"
#include "db/ops.h"
#include "db/sessions.h"
#include "server/cache.h"
#include "lib/log.h"

/* ---------- shared steps ---------- */

/* Borrows a connection or answers 503. */
static void db_failed(struct jb_http_resp *resp, const jb_error *err);

static PGconn *conn_or_503(struct jb_app *app, struct jb_http_resp *resp) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) db_failed(resp, &err);
  return c;
}

/* Answers a JSON text made by the database (taken over). */
static void send_text(struct jb_http_resp *resp, int status, char *json) {
  free(resp->body);
  resp->status = status;
  resp->body = json;
  resp->content_type = "application/json";
}

static void db_failed(struct jb_http_resp *resp, const jb_error *err) {
  jb_db_unavailable(resp, err);
}

/* 409 with the current state inside the error object. */
static void conflict(struct jb_http_resp *resp, const char *what, const char *state) {
  jb_resp_invalid_state(resp, what, state);
}

#define SIMILAR_REFUSED 1 /* an approve whose allowSimilar does not fit the op: nothing done */

/* The request's control arguments (api/controls.h): the body with the path parameter
 * `path_value` (nullable) as the socket form, checked against the schema of `ctl`. Returns 0
 * with `args` borrowing from *doc (the caller releases it), or -1 with a 400 answered. */
static int control_body(const struct jb_http_req *req, enum jb_control ctl, const char *path_value,
                        json_t **doc, struct jb_control_args *args, struct jb_http_resp *resp) {
  char msg[512];
  *doc = jb_control_rest_form(ctl, req->body, req->body_len, path_value, msg, sizeof msg);
  if (!*doc || jb_control_check(ctl, *doc, args, msg, sizeof msg) < 0) {
    jb_resp_error(resp, 400, "bad_request", "%s", msg);
    return -1;
  }
  return 0;
}

/* The 409 of a decision that lost: how the op was decided (another buyer, a rule, the
 * timeout were first), or that its session ended. */
static void decided_already(PGconn *c, const char *job, long long op, const char *state,
                            struct jb_http_resp *resp) {
  char how[512], st[20];
  jb_error err = {0};
  if (jb_db_op_decided_how(c, job, op, how, sizeof how, st, &err) == JB_OK)
    conflict(resp, how, st);
  else
    conflict(resp, "op is not pending, or its session ended:", state);
}

/* An op id of the path: a positive integer, else -1 with 404 answered (the URL names no op). */
static long long path_op(const char *job, const char *ops, struct jb_http_resp *resp) {
  char *end;
  errno = 0;
  long long op = strtoll(ops, &end, 10);
  if (*end || errno || op <= 0 || !isdigit((unsigned char)ops[0])) {
    jb_resp_error(resp, 404, "not_found", "no op '%s' in session '%s'", ops, job);
    return -1;
  }
  return op;
}

/* ---------- POST /v1/jailbox ---------- */

/* Resolves `ws` (absolute, or relative to the workspace root) to an existing directory
 * strictly below the root. Returns 0 with `out` (PATH_MAX bytes) or -1 with `err`. */
static int resolve_workspace(const char *root, const char *ws, char *out, jb_error *err) {
  char rroot[PATH_MAX], joined[PATH_MAX * 2];
  if (!realpath(root, rroot)) return jb_fail_errno(err, errno, "workspace root %s", root);
  if (ws[0] == '/')
    snprintf(joined, sizeof joined, "%s", ws);
  else
    snprintf(joined, sizeof joined, "%s/%s", rroot, ws);
  if (strlen(joined) >= PATH_MAX) return jb_fail(err, ENAMETOOLONG, "workspace path too long");
  if (!realpath(joined, out))
    return ws[0] == '/' ? jb_fail_errno(err, errno, "workspace '%s'", ws)
                        : jb_fail_errno(err, errno,
                                        "workspace '%s' (a relative path, taken under the "
                                        "workspace root %s)",
                                        ws, rroot);
  size_t rl = strlen(rroot);
  if (strncmp(out, rroot, rl) != 0 || out[rl] != '/' || out[rl + 1] == '\0')
    return jb_fail(err, EPERM, "workspace '%s' does not resolve under the workspace root %s", ws,
                   rroot);
  struct stat st;
  if (stat(out, &st) < 0 || !S_ISDIR(st.st_mode))
    return jb_fail(err, ENOTDIR, "workspace '%s' is not a directory", ws);
  return 0;
}

/* Checks {memoryMiB, cpus, pids, timeoutSec, idleTimeoutSec} and writes the full limits
 * object, defaults filled in (the two timeouts from the settings JAILBOX_SESSION_LIFETIME_S
 * and JAILBOX_IDLE_TIMEOUT_S), as JSON text into `out` (`len` bytes). */
static int read_limits(const struct jb_config *cfg, const json_t *body, char *out, size_t len,
                       jb_error *err) {
  long long mem = 1024, pids = 256, timeout = cfg->session_lifetime_s, idle = cfg->idle_timeout_s;
  double cpus = 1.0;
  json_t *l = json_object_get(body, "limits");
  if (l) {
    static const char *const allowed[] = {"memoryMiB",  "cpus",           "pids",
                                          "timeoutSec", "idleTimeoutSec", NULL};
    if (!json_is_object(l)) return jb_fail(err, EINVAL, "field 'limits' must be an object");
    if (jb_json_only_keys(l, allowed, err) < 0 ||
        jb_json_get_int(l, "memoryMiB", 64, 65536, &mem, err) < 0 ||
        jb_json_get_number(l, "cpus", 0.1, 64, &cpus, err) < 0 ||
        jb_json_get_int(l, "pids", 16, 65536, &pids, err) < 0 ||
        jb_json_get_int(l, "timeoutSec", 1, 604800, &timeout, err) < 0 ||
        jb_json_get_int(l, "idleTimeoutSec", 1, 604800, &idle, err) < 0)
      return jb_error_wrap(err, "limits");
  }
  json_t *o = json_pack("{s:I,s:f,s:I,s:I,s:I}", "memoryMiB", (json_int_t)mem, "cpus", cpus, "pids",
                        (json_int_t)pids, "timeoutSec", (json_int_t)timeout, "idleTimeoutSec",
                        (json_int_t)idle);
  char *txt = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(o);
  if (!txt || strlen(txt) >= len) {
    free(txt);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  snprintf(out, len, "%s", txt);
  free(txt);
  return 0;
}

static int read_exclude(const json_t *body, char **out, jb_error *err) {
  json_t *e = json_object_get(body, "exclude");
  if (!e) {
    *out = strdup("[]");
    return *out ? 0 : jb_fail(err, ENOMEM, "out of memory");
  }
  if (!json_is_array(e)) return jb_fail(err, EINVAL, "field 'exclude' must be an array of globs");
  if (json_array_size(e) > 256) return jb_fail(err, EINVAL, "field 'exclude' has over 256 globs");
  size_t i;
  json_t *g;
  json_array_foreach (e, i, g) {
    if (!json_is_string(g)) return jb_fail(err, EINVAL, "exclude[%zu] must be a string", i);
    const char *s = json_string_value(g);
    size_t n = json_string_length(g);
    if (n == 0 || n > 1024 || strlen(s) != n)
      return jb_fail(err, EINVAL, "exclude[%zu] must be 1 to 1024 bytes without NUL", i);
    for (size_t k = 0; k < n; k++)
      if ((unsigned char)s[k] < 0x20 || s[k] == 0x7f)
        return jb_fail(err, EINVAL, "exclude[%zu] has a control character", i);
  }
  *out = json_dumps(e, JSON_COMPACT);
  return *out ? 0 : jb_fail(err, ENOMEM, "out of memory");
}

/* The session's image: `name` (NULL: JAILBOX_SANDBOX_IMAGE) in canonical form into `out`
 * (`len` bytes), when the operator's allowlist (JAILBOX_SANDBOX_IMAGES, lib/images.h) has
 * it. 0, or -1 with a 400 answered. */
static int read_image(const struct jb_config *cfg, const char *name, char *out, size_t len,
                      struct jb_http_resp *resp) {
  jb_error err = {0};
  if (jb_image_name_canonical(name ? name : cfg->sandbox_image, out, len, &err) < 0) {
    jb_resp_error(resp, 400, "bad_request", "field 'image': %s", err.msg);
    return -1;
  }
  if (!jb_image_allowed(cfg->sandbox_images, cfg->sandbox_image, out)) {
    jb_resp_error(resp, 400, "bad_request",
                  "field 'image': '%s' is not an allowed sandbox image (JAILBOX_SANDBOX_IMAGES: "
                  "%s; or JAILBOX_SANDBOX_IMAGE: %s)",
                  name, cfg->sandbox_images, cfg->sandbox_image);
    return -1;
  }
  return 0;
}

void jb_api_session_open(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  jb_error err = {0};
  json_t *body = NULL, *rules = NULL;
  char *exclude = NULL;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  if (jb_auth_require(app, c, req, NULL, JB_ROLE_SERVICE, &who, resp) < 0) goto out;
  body = jb_json_parse_object(req->body, req->body_len, JB_JSON_MAX_DEPTH, &err);
  static const char *const allowed[] = {"jobId",  "agentId", "workspace", "mode", "exclude",
                                        "limits", "image",   "policy",    NULL};
  const char *job = NULL, *agent = NULL, *ws = NULL, *mode = "supervised", *image = NULL;
  char limits[200], wsabs[PATH_MAX], gen[32], img[JB_IMAGE_NAME_MAX + 8];
  if (!body || jb_json_only_keys(body, allowed, &err) < 0 ||
      jb_json_get_string(body, "jobId", 1, 128, true, &job, &err) < 0 ||
      jb_json_get_string(body, "agentId", 1, 200, true, &agent, &err) < 0 ||
      jb_json_get_string(body, "workspace", 1, 4096, true, &ws, &err) < 0 ||
      jb_json_get_string(body, "mode", 1, 32, true, &mode, &err) < 0 ||
      jb_json_get_string(body, "image", 1, JB_IMAGE_NAME_MAX, true, &image, &err) < 0 ||
      read_limits(app->cfg, body, limits, sizeof limits, &err) < 0 ||
      read_exclude(body, &exclude, &err) < 0) {
    jb_resp_error(resp, 400, "bad_request", "%s", err.msg);
    goto out;
  }
  if (!agent || !ws) {
    jb_resp_error(resp, 400, "bad_request", "fields 'agentId' and 'workspace' are required");
    goto out;
  }
  if (json_object_get(body, "policy")) {
    static const char *const pallowed[] = {"rules", NULL};
    json_t *pol = json_object_get(body, "policy");
    char msg[400];
    if (!json_is_object(pol) || jb_json_only_keys(pol, pallowed, &err) < 0) {
      jb_resp_error(resp, 400, "bad_request", "field 'policy' must be {rules: [...]}%s%s",
                    err.msg[0] ? ": " : "", err.msg);
      goto out;
    }
    if (json_object_get(pol, "rules") &&
        !(rules = jb_rules_check(json_object_get(pol, "rules"), 0, false, (long long)time(NULL),
                                 msg, sizeof msg))) {
      jb_resp_error(resp, 400, "bad_request", "policy.%s", msg);
      goto out;
    }
    const char *taken = jb_policy_operator_id_in(rules);
    if (taken) {
      jb_resp_error(resp, 409, "conflict", "policy.rules: rule id \"%s\" is the operator's", taken);
      goto out;
    }
  }
  if (!jb_valid_agent_id(agent)) {
    jb_resp_error(resp, 400, "bad_request",
                  "field 'agentId' must be [A-Za-z0-9._:@+-], not starting with '.'");
    goto out;
  }
  if (strcmp(mode, "supervised") != 0 && strcmp(mode, "unsupervised") != 0) {
    jb_resp_error(resp, 400, "bad_request", "field 'mode' must be 'supervised' or 'unsupervised'");
    goto out;
  }
  if (job && !jb_valid_job_id(job)) {
    jb_resp_error(resp, 400, "bad_request",
                  "field 'jobId' must be [A-Za-z0-9._-], not starting with '.'");
    goto out;
  }
  if (read_image(app->cfg, image, img, sizeof img, resp) < 0) goto out;
  if (!job) {
    unsigned char rnd[12];
    randombytes_buf(rnd, sizeof rnd);
    memcpy(gen, "job-", 4);
    sodium_bin2hex(gen + 4, sizeof gen - 4, rnd, sizeof rnd);
    job = gen;
  }

  if (resolve_workspace(app->cfg->workspace_root, ws, wsabs, &err) < 0) {
    jb_resp_error(resp, 400, "bad_workspace", "%s", err.msg);
    goto out;
  }
  char buyer[JB_TOKEN_TEXT_LEN], agent_tok[JB_TOKEN_TEXT_LEN];
  unsigned char bh[32], ah[32];
  jb_token_mint(buyer, bh);
  jb_token_mint(agent_tok, ah);
  struct jb_session_new s = {.job_id = job,
                             .agent_id = agent,
                             .workspace = wsabs,
                             .mode = mode,
                             .exclude_json = exclude,
                             .limits_json = limits,
                             .image = img,
                             .buyer_hash = bh,
                             .agent_hash = ah,
                             .rules = rules};
  struct jb_audit_head head;
  int rc = jb_db_session_create(c, jb_signer_key(app->signer), &s, &head, &err);
  if (rc == JB_ERR_EXISTS) {
    jb_resp_error(resp, 409, "exists", "a session with jobId '%s' exists", job);
  } else if (rc == JB_ERR_CONFLICT) {
    jb_resp_error(resp, 409, "workspace_in_use", "%s", err.msg);
  } else if (rc != JB_OK) {
    db_failed(resp, &err);
  } else {
    jb_resp_json(resp, 201,
                 json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "jobId", job, "state", "created", "mode",
                           mode, "image", img, "buyerToken", buyer, "agentToken", agent_tok));
    jb_bus_publish(app->bus, job, JB_EVENT_STATE,
                   json_pack("{s:s,s:s,s:n,s:s}", "jobId", job, "state", "created", "previous",
                             "actor", "service"));
    jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
    jb_log(JB_LOG_INFO, "session opened", "jobId", job, "agentId", agent, "mode", mode, "image",
           img, NULL);
  }
  sodium_memzero(buyer, sizeof buyer);
  sodium_memzero(agent_tok, sizeof agent_tok);
out:
  jb_db_release(app->db, c);
  free(exclude);
  json_decref(rules);
  json_decref(body);
}

/* ---------- GET /v1/jailbox/:jobId ---------- */

/* Loads the service token set into the cache when it is not there. */
static void warm_service_set(struct jb_app *app, PGconn *c) {
  if (!app->cache || jb_cache_has_service_set(app->cache)) return;
  uint64_t stamp = jb_cache_stamp(app->cache);
  unsigned char *h = NULL;
  size_t n = 0;
  if (jb_db_service_token_hashes(c, &h, &n, NULL) == JB_OK)
    jb_cache_put_service_set(app->cache, stamp, h, n);
  free(h);
}

void jb_api_session_get(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *job = req->params[0];
  unsigned char th[32];
  if (app->cache && jb_auth_bearer_hash(req, th) == 0) {
    char *hit = jb_cache_get_session(app->cache, job, th);
    if (hit) {
      send_text(resp, 200, hit);
      return;
    }
  }
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  jb_error err = {0};
  char *json = NULL;
  if (jb_auth_require(app, c, req, job, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp) == 0) {
    uint64_t stamp = app->cache ? jb_cache_stamp(app->cache) : 0;
    unsigned char *readers = NULL;
    size_t n_readers = 0;
    int rc = jb_db_session_get_with_readers(c, job, &json, &readers, &n_readers, &err);
    if (rc == JB_OK) {
      if (app->cache) {
        jb_cache_put_session(app->cache, stamp, job, json, readers, n_readers);
        warm_service_set(app, c);
      }
      send_text(resp, 200, json);
    } else if (rc == JB_ERR_NOT_FOUND) {
      jb_resp_error(resp, 404, "not_found", "no session '%s'", job);
    } else {
      db_failed(resp, &err);
    }
    free(readers);
  }
  jb_db_release(app->db, c);
}

/* ---------- GET /v1/jailbox/:jobId/ops ---------- */

/* Reads a non-negative integer query argument; absent leaves *out. */
static int query_int(const struct jb_http_req *req, const char *name, long long min, long long max,
                     long long *out, struct jb_http_resp *resp) {
  const char *v = jb_http_query(req, name);
  if (!v) return 0;
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (!*v || *end || errno || x < min || x > max || !isdigit((unsigned char)v[0])) {
    jb_resp_error(resp, 400, "bad_request", "query '%s' must be an integer from %lld to %lld", name,
                  min, max);
    return -1;
  }
  *out = x;
  return 0;
}

void jb_api_ops_list(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *job = req->params[0];
  const char *state = jb_http_query(req, "state");
  long long limit = 50, after = 0;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  jb_error err = {0};
  char *json = NULL;
  if (jb_auth_require(app, c, req, job, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp) < 0) goto out;
  if (state && jb_op_state_from_name(state) == JB_OP_UNKNOWN) {
    jb_resp_error(resp, 400, "bad_request",
                  "query 'state' must be pending, approved, running, rejected, done or failed");
    goto out;
  }
  const char *by = jb_http_query(req, "decidedBy");
  if (by && strcmp(by, "buyer") && strcmp(by, "mode") && strcmp(by, "timeout") &&
      strcmp(by, "reviewer") && strcmp(by, "rule") &&
      (strncmp(by, "rule:", 5) || strlen(by) > 5 + JB_RULE_ID_MAX)) {
    jb_resp_error(resp, 400, "bad_request",
                  "query 'decidedBy' must be buyer, mode, timeout, reviewer, rule or rule:<id>");
    goto out;
  }
  if (query_int(req, "limit", 1, 500, &limit, resp) < 0 ||
      query_int(req, "after", 0, LLONG_MAX, &after, resp) < 0)
    goto out;
  {
    char *sess = NULL;
    int rc = jb_db_session_get(c, job, &sess, &err); /* 404 for an unknown session */
    free(sess);
    if (rc == JB_ERR_NOT_FOUND)
      jb_resp_error(resp, 404, "not_found", "no session '%s'", job);
    else if (rc != JB_OK)
      db_failed(resp, &err);
    else if (jb_db_ops_list_by(c, job, state, by, after, (int)limit, &json, &err) == JB_OK)
      send_text(resp, 200, json);
    else
      db_failed(resp, &err);
  }
out:
  jb_db_release(app->db, c);
}

/* ---------- POST /v1/jailbox/:jobId/{approve,reject}/:opId ---------- */

static void decide(struct jb_app *app, const struct jb_http_req *req, struct jb_http_resp *resp,
                   bool approve) {
  const char *job = req->params[0], *ops = req->params[1];
  enum jb_control ctl = approve ? JB_CONTROL_APPROVE : JB_CONTROL_REJECT;
  json_t *doc = NULL;
  struct jb_control_args a;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  long long op;
  if (jb_auth_require(app, c, req, job, JB_ROLE_BUYER | JB_AUTH_CONTROL, &who, resp) == 0 &&
      (op = path_op(job, ops, resp)) > 0 && control_body(req, ctl, ops, &doc, &a, resp) == 0) {
    jb_error err = {0};
    char *json = NULL, state[20] = "";
    struct jb_audit_head head;
    const char *key = a.allow_similar, *reason = a.reason;
    json_t *similar = NULL;
    struct jb_policy_reply pr = {0};
    if (key) jb_policy_similar(c, job, op, key, &similar, &pr);
    memset(&head, 0, sizeof head);
    int rc = key && !similar ? SIMILAR_REFUSED
             : similar
                 ? jb_policy_approve_similar(app, c, job, op, reason, similar, &json, state, &pr)
                 : jb_db_op_decide(c, jb_signer_key(app->signer), job, op, approve, reason, &json,
                                   state, &head, &err);
    if (rc == SIMILAR_REFUSED && pr.status == 409) {
      decided_already(c, job, op, "pending", resp); /* decided meanwhile */
    } else if (rc == SIMILAR_REFUSED || (rc == JB_ERR_CONFLICT && pr.status == 409)) {
      jb_resp_error(resp, pr.status, pr.code, "%s", pr.msg);
    } else if (rc == JB_OK) {
      if (app->cache) jb_cache_invalidate(app->cache, job); /* read-your-writes here */
      json_t *ev = json_loads(json, 0, NULL);
      if (pr.body) { /* the op approved with the rule made of it */
        json_t *o = json_loads(json, 0, NULL);
        if (o) json_object_set(o, "rule", pr.body);
        free(json);
        json = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
      }
      json_decref(pr.body);
      if (json)
        send_text(resp, 200, json);
      else
        jb_resp_error(resp, 500, "internal", "out of memory");
      jb_bus_publish(app->bus, job, JB_EVENT_OP, ev);
      if (head.seq > 0)
        jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
    } else if (rc == JB_ERR_NOT_FOUND) {
      jb_resp_error(resp, 404, "not_found", "no op %lld in session '%s'", op, job);
    } else if (rc == JB_ERR_CONFLICT) {
      decided_already(c, job, op, state, resp);
    } else {
      db_failed(resp, &err);
    }
    json_decref(similar);
  }
  jb_db_release(app->db, c);
  json_decref(doc);
}

void jb_api_op_approve(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  decide(app, req, resp, true);
}
void jb_api_op_reject(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  decide(app, req, resp, false);
}

/* ---------- POST /v1/jailbox/:jobId/ops/:opId/kill ---------- */

void jb_api_op_kill(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *job = req->params[0], *ops = req->params[1];
  json_t *doc = NULL;
  struct jb_control_args a;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  long long op;
  if (jb_auth_require(app, c, req, job, JB_ROLE_SERVICE | JB_ROLE_BUYER | JB_AUTH_CONTROL, &who,
                      resp) == 0 &&
      (op = path_op(job, ops, resp)) > 0 &&
      control_body(req, JB_CONTROL_KILL, ops, &doc, &a, resp) == 0) {
    jb_error err = {0};
    char state[20] = "";
    json_t *out = NULL;
    int rc = jb_op_kill(app, c, job, op, a.reason, &out, state, &err);
    if (rc == JB_OK) {
      if (app->cache) jb_cache_invalidate(app->cache, job);
      jb_resp_json(resp, 200, out);
    } else if (rc == JB_ERR_NOT_FOUND) {
      jb_resp_error(resp, 404, "not_found", "no op %lld in session '%s'", op, job);
    } else if (rc == JB_ERR_CONFLICT) {
      conflict(resp, "only an exec that is pending, queued or running can be killed; it is", state);
    } else {
      db_failed(resp, &err);
    }
  }
  jb_db_release(app->db, c);
  json_decref(doc);
}

/* ---------- GET /v1/jailbox/:jobId/ops/:opId/diff ---------- */

/* A whole-diff request, answered from a socket handler thread (the stat it waits for may take
 * up to OP_RUN_TIMEOUT_MS; no HTTP thread is held meanwhile). */
struct diff_call {
  struct jb_app *app;
  struct jb_http_later *later;
  long long op;
  char job[129];
};

/* The answer of a whole diff (api/agent/ops.h jb_op_full_diff) into `resp`. */
static void diff_answer(struct jb_app *app, const char *job, long long op,
                        struct jb_http_resp *resp) {
  struct jb_op_diff_fail f;
  json_t *out = jb_op_full_diff(app, job, op, JB_OP_DIFF_FULL_MAX, &f);
  if (out)
    jb_resp_json(resp, 200, out);
  else if (f.state[0])
    jb_resp_json(resp, f.status,
                 json_pack("{s:{s:s,s:s,s:s}}", "error", "code", f.code, "message", f.msg, "state",
                           f.state));
  else
    jb_resp_error(resp, f.status, f.code, "%s", f.msg);
}

static void diff_run(void *arg, bool run) {
  struct diff_call *dc = arg;
  struct jb_http_resp resp = {0};
  if (run)
    diff_answer(dc->app, dc->job, dc->op, &resp);
  else
    jb_resp_error(&resp, 503, "unavailable", "the server is shutting down; try again");
  jb_http_later_answer(dc->later, &resp);
  free(dc);
}

void jb_api_op_diff(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *job = req->params[0], *ops = req->params[1];
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  long long op = -1;
  bool ok = jb_auth_require(app, c, req, job, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp) == 0 &&
            (op = path_op(job, ops, resp)) > 0;
  jb_db_release(app->db, c); /* not held while the sandbox reads the file */
  if (!ok) return;
  struct jb_socket *sock = __atomic_load_n(&app->sock, __ATOMIC_ACQUIRE);
  struct diff_call *dc = sock ? calloc(1, sizeof *dc) : NULL;
  struct jb_http_later *l = dc ? jb_http_defer(req, resp) : NULL;
  if (!l) {
    free(dc);
    jb_resp_error(resp, 503, "unavailable", "server busy; try again");
    return;
  }
  *dc = (struct diff_call){.app = app, .later = l, .op = op};
  snprintf(dc->job, sizeof dc->job, "%s", job);
  if (jb_socket_run(sock, diff_run, dc) == 0) return;
  struct jb_http_resp busy = {0};
  jb_resp_error(&busy, 503, "unavailable", "server busy; try again");
  jb_http_later_answer(l, &busy);
  free(dc);
}

/* ---------- state changes ---------- */

static void transition(struct jb_app *app, const struct jb_http_req *req, struct jb_http_resp *resp,
                       enum jb_control ctl, const char *const from[], const char *to) {
  const char *job = req->params[0];
  json_t *doc = NULL;
  struct jb_control_args a;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  if (jb_auth_require(app, c, req, job, JB_ROLE_BUYER | JB_AUTH_CONTROL, &who, resp) == 0 &&
      control_body(req, ctl, NULL, &doc, &a, resp) == 0) {
    const char *reason = a.reason;
    struct jb_transition t;
    jb_error err = {0};
    if (jb_session_state_from_name(to) == JB_SESSION_ABORTED)
      jb_escape_release_session(app, c, job); /* an op in flight */
    int rc = jb_db_session_transition(c, jb_signer_key(app->signer), job, from, to, reason, "buyer",
                                      &t, &err);
    if (rc == JB_OK) {
      if (app->cache) jb_cache_invalidate(app->cache, job); /* read-your-writes here */
      jb_op_session_changed(job); /* before the buyer hears of it: no read runs after a pause */
      jb_resp_json(resp, 200,
                   json_pack("{s:s,s:s,s:s,s:I}", "jobId", job, "state", t.state, "previous",
                             t.previous, "rejectedOps", (json_int_t)t.rejected_ops));
      jb_bus_publish(app->bus, job, JB_EVENT_STATE,
                     json_pack("{s:s,s:s,s:s,s:s?,s:s}", "jobId", job, "state", t.state, "previous",
                               t.previous, "reason", reason, "actor", "buyer"));
      jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&t.head));
      jb_log(JB_LOG_INFO, "session state", "jobId", job, "from", t.previous, "to", t.state, NULL);
    } else if (rc == JB_ERR_NOT_FOUND) {
      jb_resp_error(resp, 404, "not_found", "no session '%s'", job);
    } else if (rc == JB_ERR_CONFLICT) {
      char what[64];
      snprintf(what, sizeof what, "cannot go to %s", to);
      conflict(resp, what, t.state);
    } else {
      db_failed(resp, &err);
    }
  }
  jb_db_release(app->db, c);
  json_decref(doc);
}

void jb_api_session_abort(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  static const char *const from[] = {JB_LIVE_STATES, NULL};
  transition(app, req, resp, JB_CONTROL_ABORT, from, "aborted");
}
void jb_api_session_pause(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  static const char *const from[] = {"active", NULL};
  transition(app, req, resp, JB_CONTROL_PAUSE, from, "paused");
}
void jb_api_session_resume(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  static const char *const from[] = {"paused", NULL};
  transition(app, req, resp, JB_CONTROL_RESUME, from, "active");
}
void jb_api_session_accept(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  static const char *const from[] = {"done", NULL};
  transition(app, req, resp, JB_CONTROL_ACCEPT, from, "accepted");
}

/* ---------- POST /v1/jailbox/:jobId/effects/clear ---------- */

void jb_api_session_effects_clear(void *appv, const struct jb_http_req *req,
                                  struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *job = req->params[0];
  jb_error err = {0};
  struct jb_control_args a;
  json_t *body = NULL;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  if (jb_auth_require(app, c, req, job, JB_ROLE_BUYER | JB_AUTH_CONTROL, &who, resp) < 0 ||
      control_body(req, JB_CONTROL_EFFECTS_CLEAR, NULL, &body, &a, resp) < 0)
    goto out;
  char state[20] = "";
  bool cleared = false;
  struct jb_audit_head head = {0};
  int rc = jb_db_session_effects_clear(c, jb_signer_key(app->signer), job, a.reason, &cleared,
                                       state, &head, &err);
  if (rc == JB_OK) {
    jb_op_session_changed(job);
    if (head.seq > 0) jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
    json_t *o = json_pack("{s:s,s:b}", "jobId", job, "cleared", cleared);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (text)
      send_text(resp, 200, text);
    else
      jb_resp_error(resp, 500, "internal", "out of memory");
  } else if (rc == JB_ERR_NOT_FOUND) {
    jb_resp_error(resp, 404, "not_found", "no session '%s'", job);
  } else if (rc == JB_ERR_CONFLICT) {
    conflict(resp, "cannot clear incomplete effects", state);
  } else {
    db_failed(resp, &err);
  }
out:
  jb_db_release(app->db, c);
  json_decref(body);
}

/* ---------- PATCH /v1/jailbox/:jobId ---------- */

void jb_api_session_patch(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *job = req->params[0];
  jb_error err = {0};
  struct jb_control_args a;
  json_t *body = NULL;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  if (jb_auth_require(app, c, req, job, JB_ROLE_BUYER | JB_AUTH_CONTROL, &who, resp) < 0 ||
      control_body(req, JB_CONTROL_MODE, NULL, &body, &a, resp) < 0)
    goto out;
  const char *mode = a.mode;
  char state[20] = "", *json = NULL;
  struct jb_audit_head head = {0};
  int rc = jb_db_session_set_mode(c, jb_signer_key(app->signer), job, mode, state, &head, &err);
  if (rc == JB_OK && head.seq > 0)
    jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
  if (rc == JB_OK && app->cache) jb_cache_invalidate(app->cache, job); /* read-your-writes here */
  if (rc == JB_OK && jb_db_session_get(c, job, &json, &err) == JB_OK) {
    send_text(resp, 200, json);
    jb_bus_publish(app->bus, job, JB_EVENT_MODE,
                   json_pack("{s:s,s:s}", "jobId", job, "mode", mode));
  } else if (rc == JB_ERR_NOT_FOUND) {
    jb_resp_error(resp, 404, "not_found", "no session '%s'", job);
  } else if (rc == JB_ERR_CONFLICT) {
    conflict(resp, "cannot change mode", state);
  } else {
    db_failed(resp, &err);
  }
out:
  jb_db_release(app->db, c);
  json_decref(body);
}

/* ---------- GET /v1/agents/:agentId ---------- */

void jb_api_agent_get(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  PGconn *c = conn_or_503(app, resp);
  if (!c) return;
  struct jb_principal who;
  const char *agent = req->params[0];
  if (jb_auth_require(app, c, req, NULL, JB_ROLE_SERVICE, &who, resp) == 0) {
    jb_error err = {0};
    char *json = NULL;
    int rc = jb_valid_agent_id(agent) ? jb_db_agent_get(c, agent, &json, &err) : JB_ERR_NOT_FOUND;
    if (rc == JB_OK)
      send_text(resp, 200, json);
    else if (rc == JB_ERR_NOT_FOUND)
      jb_resp_error(resp, 404, "not_found", "no such agent");
    else
      db_failed(resp, &err);
  }
  jb_db_release(app->db, c);
}
