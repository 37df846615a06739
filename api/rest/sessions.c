/* sessions.c — the REST reads of the session contract and its opening: open, inspect, list
 * ops, an op's whole diff, and an agent's trust score (the controls are api/rest/controls.c). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/core/auth.h"
#include "api/rest/handlers.h"
#include "lib/images.h"
#include "lib/json.h"
#include "api/core/ops.h"
#include "api/core/policy.h"
#include "lib/policy.h"
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

/* ---------- GET /v1/jailbox/:jobId/ops/:opId/diff ---------- */

/* A whole-diff request, answered from a socket handler thread (the stat it waits for may take
 * up to OP_RUN_TIMEOUT_MS; no HTTP thread is held meanwhile). */
struct diff_call {
  struct jb_app *app;
  struct jb_http_later *later;
  long long op;
  char job[129];
};

/* The answer of a whole diff (api/core/ops.h jb_op_full_diff) into `resp`. */
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
            (op = jb_rest_path_op(job, ops, resp)) > 0;
  jb_db_release(app->db, c); /* not held while the sandbox reads the file */
  if (!ok) return;
  struct diff_call *dc = calloc(1, sizeof *dc);
  struct jb_http_later *l = dc ? jb_http_defer(req, resp) : NULL;
  if (!l) {
    free(dc);
    jb_resp_error(resp, 503, "unavailable", "server busy; try again");
    return;
  }
  *dc = (struct diff_call){.app = app, .later = l, .op = op};
  snprintf(dc->job, sizeof dc->job, "%s", job);
  if (jb_app_run(app, diff_run, dc) == 0) return;
  struct jb_http_resp busy = {0};
  jb_resp_error(&busy, 503, "unavailable", "server busy; try again");
  jb_http_later_answer(l, &busy);
  free(dc);
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
