/* door.c — the HTTP doors' shared glue over the core (see door.h): a request's credential to
 * jb_auth_check, a struct jb_reply to an HTTP answer. */
#include "api/http/door.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db/tokens.h"
#include "lib/log.h"

/* Copies the token of "Bearer <token>" (RFC 6750 §2.1; surrounding whitespace dropped,
 * RFC 9110 §5.5) into `out` (`len` bytes). Returns 0, or -1 when malformed or too long. */
static int bearer_token(const char *h, char *out, size_t len) {
  if (!h || strncasecmp(h, "Bearer ", 7) != 0) return -1;
  const char *tok = h + 7;
  while (*tok == ' ' || *tok == '\t') tok++;
  size_t n = strlen(tok);
  while (n && (tok[n - 1] == ' ' || tok[n - 1] == '\t')) n--;
  if (n == 0 || n >= len) return -1;
  memcpy(out, tok, n);
  out[n] = '\0';
  return 0;
}

int jb_auth_bearer_hash(const struct jb_http_req *req, unsigned char hash[32]) {
  char tok[JB_TOKEN_TEXT_LEN + 1];
  if (bearer_token(jb_http_header(req, "Authorization"), tok, sizeof tok) < 0) return -1;
  return jb_token_hash(tok, hash);
}

bool jb_auth_token_known(void *appv, const char *authorization) {
  struct jb_app *app = appv;
  char tok[JB_TOKEN_TEXT_LEN + 1];
  unsigned char hash[32];
  if (bearer_token(authorization, tok, sizeof tok) < 0 || jb_token_hash(tok, hash) < 0)
    return false;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) return true; /* the handler answers 503 after the body; do not turn an outage into 401 */
  struct jb_token_info t;
  int rc = jb_db_token_find(c, hash, app->cfg->buyer_read_retention_s, &t, &err);
  jb_db_release(app->db, c);
  if (rc == JB_ERR_FAIL) return true;
  return rc == JB_OK && !t.lapsed && sodium_memcmp(hash, t.stored, 32) == 0;
}

int jb_auth_require(struct jb_app *app, PGconn *conn, const struct jb_http_req *req,
                    const char *job_id, unsigned roles, struct jb_principal *who,
                    struct jb_http_resp *resp) {
  char tok[JB_TOKEN_TEXT_LEN + 1];
  const char *h = jb_http_header(req, "Authorization");
  int kind = jb_http_credential(req->conn, req->method, tok, sizeof tok);
  if (kind == -2) {
    jb_resp_error(resp, 403, "forbidden",
                  "a console request that changes state must carry the " JB_CONSOLE_HEADER
                  ": 1 header");
    return -1;
  }
  if (kind == 0 && !h) {
    jb_resp_error(resp, 401, "unauthorized", "missing bearer token");
    return -1;
  }
  if (kind == 0 && strncasecmp(h, "Bearer ", 7) != 0) {
    jb_resp_error(resp, 401, "unauthorized", "Authorization must use the Bearer scheme");
    return -1;
  }
  struct jb_reply r = {0};
  if (jb_auth_check(app, conn, kind == 0 ? "" : tok, kind == 2, job_id, roles, who, &r) < 0) {
    jb_resp_reply(resp, &r);
    return -1;
  }
  return 0;
}

void jb_resp_reply(struct jb_http_resp *resp, struct jb_reply *r) {
  if ((r->status >= 400 || r->status == 0) && r->extra) { /* details beside code and message */
    json_t *e = json_pack("{s:s,s:s}", "code", r->code ? r->code : "internal", "message", r->msg);
    if (e && r->state[0]) json_object_set_new(e, "state", json_string(r->state));
    if (e) json_object_update(e, r->extra);
    jb_resp_json(resp, r->status ? r->status : 500, e ? json_pack("{s:o}", "error", e) : NULL);
    jb_reply_release(r);
    return;
  }
  if (r->status >= 400 || r->status == 0) {
    if (r->state[0]) {
      jb_resp_json(resp, r->status,
                   json_pack("{s:{s:s,s:s,s:s}}", "error", "code", r->code, "message", r->msg,
                             "state", r->state));
    } else {
      jb_resp_error(resp, r->status ? r->status : 500, r->code ? r->code : "internal", "%s",
                    r->status ? r->msg : "no answer");
    }
    jb_reply_release(r);
    return;
  }
  json_t *body = r->body;
  if (r->extra && body) json_object_update(body, r->extra);
  r->body = NULL;
  jb_reply_release(r);
  jb_resp_json(resp, r->status, body);
}

void jb_resp_invalid_state(struct jb_http_resp *resp, const char *what, const char *state) {
  struct jb_reply r = {0};
  jb_reply_invalid_state(&r, what, state);
  jb_resp_reply(resp, &r);
}

void jb_db_unavailable(struct jb_http_resp *resp, const jb_error *err) {
  struct jb_reply r = {0};
  jb_reply_db(&r, JB_ERR_FAIL, err, "", "", NULL);
  jb_resp_reply(resp, &r);
}

PGconn *jb_rest_authed_conn(struct jb_app *app, const struct jb_http_req *req, const char *job,
                            unsigned roles, struct jb_principal *who, struct jb_http_resp *resp) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return NULL;
  }
  if (jb_auth_require(app, c, req, job, roles, who, resp) < 0) {
    jb_db_release(app->db, c);
    return NULL;
  }
  return c;
}
