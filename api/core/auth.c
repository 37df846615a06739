/* auth.c — tokens: the bootstrap service token, and the role and session checks every door
 * starts with (see auth.h). Token text is lib/token.c's. */
#include "api/core/auth.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "db/sessions.h"
#include "db/tokens.h"
#include "lib/log.h"

const char *jb_role_name(enum jb_role r) {
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

int jb_auth_check(struct jb_app *app, PGconn *conn, const char *token, bool cookie,
                  const char *job_id, unsigned roles, struct jb_principal *who,
                  struct jb_reply *out) {
  unsigned char hash[32];
  if (jb_token_hash(token, hash) < 0)
    return jb_reply_fail(out, 401, "unauthorized",
                         cookie ? "malformed console cookie: sign in again" : "malformed token");
  return jb_auth_check_hash(app, conn, hash, cookie, job_id, roles, who, out);
}

int jb_auth_check_hash(struct jb_app *app, PGconn *conn, const unsigned char hash[32], bool cookie,
                       const char *job_id, unsigned roles, struct jb_principal *who,
                       struct jb_reply *out) {
  if (job_id && !jb_valid_job_id(job_id)) /* never reaches SQL: 404 like any unknown id */
    return jb_reply_fail(out, 404, "not_found", "no such session");
  struct jb_token_info t;
  jb_error err = {0};
  int rc = jb_db_token_find(conn, hash, app->cfg->buyer_read_retention_s, &t, &err);
  if (rc == JB_ERR_FAIL) {
    jb_log(JB_LOG_ERROR, "database error", "detail", err.msg, NULL);
    return jb_reply_fail(out, 503, "database_unavailable",
                         "the database is unavailable; try again");
  }
  if (rc == JB_ERR_NOT_FOUND || sodium_memcmp(hash, t.stored, 32) != 0)
    return jb_reply_fail(out, 401, "unauthorized",
                         cookie ? "the console sign-in expired or was revoked: sign in again"
                                : "unknown or revoked token");
  if (t.lapsed)
    return jb_reply_fail(out, 401, "unauthorized",
                         "the token's session ended more than %ld s ago: its read access has "
                         "expired (JAILBOX_BUYER_READ_RETENTION_S)",
                         app->cfg->buyer_read_retention_s);
  enum jb_role r = strcmp(t.role, "service") == 0 ? JB_ROLE_SERVICE
                   : strcmp(t.role, "buyer") == 0 ? JB_ROLE_BUYER
                                                  : JB_ROLE_AGENT;
  if (!(roles & r))
    return jb_reply_fail(out, 403, "forbidden", "the %s token may not do this", jb_role_name(r));
  if (job_id && r != JB_ROLE_SERVICE && strcmp(t.job_id, job_id) != 0)
    return jb_reply_fail(out, 403, "forbidden", "the token belongs to another session");
  if ((roles & JB_AUTH_CONTROL) && r != JB_ROLE_SERVICE && t.ended)
    return jb_reply_invalid_state(out, "the session is read-only: it ended", t.state);
  if ((roles & JB_AUTH_CONTROL) && r == JB_ROLE_SERVICE && job_id) {
    char state[20];
    rc = jb_db_session_state(conn, job_id, state, &err);
    if (rc == JB_ERR_FAIL) {
      jb_log(JB_LOG_ERROR, "database error", "detail", err.msg, NULL);
      return jb_reply_fail(out, 503, "database_unavailable",
                           "the database is unavailable; try again");
    }
    if (rc == JB_OK && !jb_state_is_live(state))
      return jb_reply_invalid_state(out, "the session is read-only: it ended", state);
  }
  *who = (struct jb_principal){
      .role = r, .ended = t.ended, .live_checked = (roles & JB_AUTH_CONTROL) && job_id};
  snprintf(who->job_id, sizeof who->job_id, "%s", t.job_id);
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
