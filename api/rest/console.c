/* console.c — the buyer's web console (see console.h): GET /console/… serves the embedded
 * files under a strict Content-Security-Policy; /v1/console/… mints one-time codes, exchanges
 * a code or a pasted token for the sign-in cookie, tells the page who it is signed in as,
 * signs out, and lists sessions for a service sign-in. The cookie is a token of its own
 * (tokens.expires_at), checked by api/core/auth.c like a bearer token. */
#include "api/rest/console.h"

#include <jansson.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api/core/auth.h"
#include "api/rest/handlers.h"
#include "db/sessions.h"
#include "db/tokens.h"
#include "lib/log.h"
#include "lib/token.h"

/* Every console file goes out with these (W3C CSP Level 3; RFC 7034 for framing). The page
 * loads only its own files and talks only to this server and its WebSocket port. */
static const char *const console_headers[] = {
    "Content-Security-Policy",
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Frame-Options",
    "DENY",
    "Referrer-Policy",
    "no-referrer",
    "Cross-Origin-Opener-Policy",
    "same-origin",
    NULL};

static const char *content_type(const char *path) {
  const char *dot = strrchr(path, '.');
  if (!dot) return "text/plain; charset=utf-8";
  if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
  if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
  if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
  if (!strcmp(dot, ".svg")) return "image/svg+xml";
  if (!strcmp(dot, ".png")) return "image/png";
  return "text/plain; charset=utf-8";
}

static void serve(const char *rel, struct jb_http_resp *resp) {
  for (size_t i = 0; i < jb_console_files_count; i++) {
    const struct jb_console_file *f = &jb_console_files[i];
    if (strcmp(f->path, rel) != 0) continue;
    char *body = malloc(f->len + 1);
    if (!body) {
      jb_resp_error(resp, 500, "internal", "out of memory");
      return;
    }
    memcpy(body, f->data, f->len + 1);
    free(resp->body);
    resp->status = 200;
    resp->body = body; /* the files are text: the server sends strlen(body) bytes */
    resp->content_type = content_type(rel);
    resp->headers = console_headers;
    return;
  }
  jb_resp_error(resp, 404, "not_found", "no such console file");
  resp->headers = console_headers;
}

void jb_api_console_index(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  (void)app, (void)req;
  serve("index.html", resp);
}

void jb_api_console_file(void *app, const struct jb_http_req *req, struct jb_http_resp *resp) {
  (void)app;
  char rel[256];
  if (req->n_params == 2)
    snprintf(rel, sizeof rel, "%s/%s", req->params[0], req->params[1]);
  else
    snprintf(rel, sizeof rel, "%s", req->params[0]);
  serve(rel, resp);
}

/* ---------- POST /v1/console/codes ---------- */

void jb_api_console_code(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_principal who;
  PGconn *c = jb_rest_authed_conn(app, req, NULL, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp);
  if (!c) return;
  jb_error err = {0};
  char code[JB_TOKEN_TEXT_LEN];
  unsigned char hash[32];
  jb_token_mint(code, hash);
  const char *role = who.role == JB_ROLE_SERVICE ? "service" : "buyer";
  if (jb_db_console_code_insert(c, hash, role, who.job_id[0] ? who.job_id : NULL,
                                JB_CONSOLE_CODE_TTL_S, &err) != JB_OK) {
    jb_db_unavailable(resp, &err);
  } else {
    char path[128];
    snprintf(path, sizeof path, "/console/#code=%s", code);
    jb_resp_json(resp, 201,
                 json_pack("{s:s,s:s,s:i}", "code", code, "path", path, "expiresInS",
                           JB_CONSOLE_CODE_TTL_S));
  }
  sodium_memzero(code, sizeof code);
  jb_db_release(app->db, c);
}

/* ---------- /v1/console/session ---------- */

/* The sign-in cookie for `tok` (RFC 6265 §4.1; SameSite: RFC 6265bis). Secure when the request
 * came through TLS, as a proxy in front says with X-Forwarded-Proto. */
static void set_cookie(const struct jb_http_req *req, struct jb_http_resp *resp, const char *tok,
                       long max_age) {
  const char *proto = jb_http_header(req, "X-Forwarded-Proto");
  snprintf(resp->set_cookie, sizeof resp->set_cookie,
           JB_CONSOLE_COOKIE "=%s; Path=/; Max-Age=%ld; HttpOnly; SameSite=Strict%s", tok, max_age,
           proto && strcasecmp(proto, "https") == 0 ? "; Secure" : "");
}

/* POST: a one-time code (header X-Jailbox-Console-Code) or a buyer or service bearer token
 * becomes a new console token, sent only as the cookie. The console header is required, so a
 * cross-site form cannot sign a browser in to somebody else's session. */
void jb_api_console_signin(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  const char *x = jb_http_header(req, JB_CONSOLE_HEADER);
  if (!x || strcmp(x, "1") != 0) {
    jb_resp_error(resp, 403, "forbidden", "sign-in needs the " JB_CONSOLE_HEADER ": 1 header");
    return;
  }
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return;
  }
  char role[16] = "", job[129] = "";
  const char *code = jb_http_header(req, "X-Jailbox-Console-Code");
  if (code) {
    unsigned char hash[32];
    int rc = jb_token_hash(code, hash) < 0 ? JB_ERR_NOT_FOUND
                                           : jb_db_console_code_use(c, hash, role, job, &err);
    if (rc == JB_ERR_FAIL) {
      jb_db_unavailable(resp, &err);
      goto out;
    }
    if (rc != JB_OK) {
      jb_resp_error(resp, 401, "unauthorized",
                    "this console link was already used or has expired: print a new one with"
                    " jailboxctl open --console");
      goto out;
    }
  } else {
    if (!jb_http_header(req, "Authorization")) {
      jb_resp_error(resp, 401, "unauthorized", "give a one-time code or a bearer token");
      goto out;
    }
    struct jb_principal who;
    if (jb_auth_require(app, c, req, NULL, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp) < 0)
      goto out;
    snprintf(role, sizeof role, "%s", who.role == JB_ROLE_SERVICE ? "service" : "buyer");
    snprintf(job, sizeof job, "%s", who.job_id);
  }
  {
    char tok[JB_TOKEN_TEXT_LEN];
    unsigned char th[32];
    jb_token_mint(tok, th);
    if (jb_db_console_token_insert(c, th, role, job[0] ? job : NULL, JB_CONSOLE_COOKIE_TTL_S,
                                   &err) != JB_OK) {
      jb_db_unavailable(resp, &err);
    } else {
      set_cookie(req, resp, tok, JB_CONSOLE_COOKIE_TTL_S);
      jb_resp_json(resp, 200,
                   json_pack("{s:s,s:s?,s:i}", "role", role, "jobId", job[0] ? job : NULL,
                             "expiresInS", JB_CONSOLE_COOKIE_TTL_S));
      jb_log(JB_LOG_INFO, "console sign-in", "role", role, "jobId", job, "via",
             code ? "code" : "token", NULL);
    }
    sodium_memzero(tok, sizeof tok);
  }
out:
  jb_db_release(app->db, c);
}

/* GET: who the credential is, and the Socket.IO port (the page asks once it loads). */
void jb_api_console_whoami(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_principal who;
  PGconn *c = jb_rest_authed_conn(app, req, NULL, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp);
  if (!c) return;
  jb_resp_json(
      resp, 200,
      json_pack("{s:s,s:s?,s:i}", "role", who.role == JB_ROLE_SERVICE ? "service" : "buyer",
                "jobId", who.job_id[0] ? who.job_id : NULL, "socketPort", jb_app_ws_port(app)));
  jb_db_release(app->db, c);
}

/* DELETE: revokes the console token of the cookie and clears the cookie. */
void jb_api_console_signout(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  char tok[JB_TOKEN_TEXT_LEN + 1];
  unsigned char hash[32];
  if (jb_http_credential(req->conn, req->method, tok, sizeof tok) != 2 ||
      jb_token_hash(tok, hash) < 0) {
    jb_resp_error(resp, 401, "unauthorized", "not signed in to the console");
    return;
  }
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return;
  }
  if (jb_db_token_revoke(c, hash, &err) != JB_OK) {
    jb_db_unavailable(resp, &err);
  } else {
    set_cookie(req, resp, "", 0);
    resp->status = 204;
  }
  jb_db_release(app->db, c);
}

/* ---------- GET /v1/console/sessions ---------- */

void jb_api_console_sessions(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_principal who;
  PGconn *c = jb_rest_authed_conn(app, req, NULL, JB_ROLE_SERVICE, &who, resp);
  if (!c) return;
  jb_error err = {0};
  char *json = NULL;
  if (jb_db_session_list(c, 200, &json, &err) != JB_OK)
    jb_db_unavailable(resp, &err);
  else
    jb_resp_json(resp, 200, json_pack("{s:o}", "sessions", json_loads(json, 0, NULL)));
  free(json);
  jb_db_release(app->db, c);
}
