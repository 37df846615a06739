/* auth.c — bearer tokens on requests: the bootstrap service token, and the role and
 * session checks every handler starts with (see auth.h). Token text is lib/token.c's. */
#include "api/auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/sessions.h"
#include "db/tokens.h"
#include "lib/log.h"

static const char *role_name(enum jb_role r) {
  return r == JB_ROLE_SERVICE ? "service" : r == JB_ROLE_BUYER ? "buyer" : "agent";
}

bool jb_valid_job_id(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 128 || s[0] == '.') return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-') return false;
  return true;
}

bool jb_valid_agent_id(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > 200 || s[0] == '.') return false;
  for (size_t i = 0; i < n; i++)
    if (!isalnum((unsigned char)s[i]) && !strchr("._:@+-", s[i])) return false;
  return true;
}

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

void jb_resp_invalid_state(struct jb_http_resp *resp, const char *what, const char *state) {
  json_t *o = json_pack("{s:{s:s,s:s++,s:s}}", "error", "code", "invalid_state", "message", what,
                        " in state ", state, "state", state);
  jb_resp_json(resp, 409, o);
}

int jb_auth_require(struct jb_app *app, PGconn *conn, const struct jb_http_req *req,
                    const char *job_id, unsigned roles, struct jb_principal *who,
                    struct jb_http_resp *resp) {
  char tok[JB_TOKEN_TEXT_LEN + 1];
  unsigned char hash[32];
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
  if (kind == 0 || jb_token_hash(tok, hash) < 0) {
    jb_resp_error(resp, 401, "unauthorized",
                  kind == 2 ? "malformed console cookie: sign in again" : "malformed token");
    return -1;
  }
  if (job_id && !jb_valid_job_id(job_id)) { /* never reaches SQL: 404 like any unknown id */
    jb_resp_error(resp, 404, "not_found", "no such session");
    return -1;
  }
  struct jb_token_info t;
  jb_error err = {0};
  int rc = jb_db_token_find(conn, hash, app->cfg->buyer_read_retention_s, &t, &err);
  if (rc == JB_ERR_FAIL) {
    jb_log(JB_LOG_ERROR, "database error", "detail", err.msg, NULL);
    jb_resp_error(resp, 503, "database_unavailable", "the database is unavailable; try again");
    return -1;
  }
  if (rc == JB_ERR_NOT_FOUND || sodium_memcmp(hash, t.stored, 32) != 0) {
    jb_resp_error(resp, 401, "unauthorized",
                  kind == 2 ? "the console sign-in expired or was revoked: sign in again"
                            : "unknown or revoked token");
    return -1;
  }
  if (t.lapsed) {
    jb_resp_error(resp, 401, "unauthorized",
                  "the token's session ended more than %ld s ago: its read access has expired "
                  "(JAILBOX_BUYER_READ_RETENTION_S)",
                  app->cfg->buyer_read_retention_s);
    return -1;
  }
  const char *role = t.role;
  enum jb_role r = strcmp(role, "service") == 0 ? JB_ROLE_SERVICE
                   : strcmp(role, "buyer") == 0 ? JB_ROLE_BUYER
                                                : JB_ROLE_AGENT;
  if (!(roles & r)) {
    jb_resp_error(resp, 403, "forbidden", "the %s token may not do this", role_name(r));
    return -1;
  }
  if (job_id && r != JB_ROLE_SERVICE && strcmp(t.job_id, job_id) != 0) {
    jb_resp_error(resp, 403, "forbidden", "the token belongs to another session");
    return -1;
  }
  if ((roles & JB_AUTH_CONTROL) && r != JB_ROLE_SERVICE && t.ended) {
    jb_resp_invalid_state(resp, "the session is read-only: it ended", t.state);
    return -1;
  }
  if ((roles & JB_AUTH_CONTROL) && r == JB_ROLE_SERVICE && job_id) {
    char state[20];
    rc = jb_db_session_state(conn, job_id, state, &err);
    if (rc == JB_ERR_FAIL) {
      jb_log(JB_LOG_ERROR, "database error", "detail", err.msg, NULL);
      jb_resp_error(resp, 503, "database_unavailable", "the database is unavailable; try again");
      return -1;
    }
    if (rc == JB_OK && !jb_state_is_live(state)) {
      jb_resp_invalid_state(resp, "the session is read-only: it ended", state);
      return -1;
    }
  }
  who->role = r;
  snprintf(who->job_id, sizeof who->job_id, "%s", t.job_id);
  who->ended = t.ended;
  return 0;
}

int jb_service_token_bootstrap(PGconn *conn, const char *path, bool create, jb_error *err) {
  char text[JB_TOKEN_TEXT_LEN + 8];
  unsigned char hash[32];
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd >= 0) {
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n < 0) return jb_fail_errno(err, errno, "read %s", path);
    text[n] = '\0';
    text[strcspn(text, "\r\n \t")] = '\0';
    if (jb_token_hash(text, hash) < 0)
      return jb_fail(err, EINVAL, "%s does not hold a jailbox token (jbt_ + 43 base64url chars)",
                     path);
  } else if (errno == ENOENT && create) {
    jb_token_mint(text, hash);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return jb_fail_errno(err, errno, "create %s", path);
    size_t len = strlen(text);
    text[len] = '\n';
    ssize_t w = write(fd, text, len + 1);
    int e = errno;
    close(fd);
    if (w != (ssize_t)len + 1) return jb_fail_errno(err, e, "write %s", path);
    jb_log(JB_LOG_INFO, "service token created", "file", path, NULL);
  } else {
    return jb_fail_errno(err, errno, "service token file %s", path);
  }
  sodium_memzero(text, sizeof text);
  if (jb_db_token_insert(conn, hash, "service", NULL, "bootstrap", err) != JB_OK) return -1;
  return 0;
}
