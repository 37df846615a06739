/* audit.c — the REST side of the audit chain: export a session's chain as JSON Lines
 * (streamed in pages), verify it on the server (page by page, one snapshot), and publish the
 * verification keys (format: api/audit.md). Memory stays bounded by a page, whatever the
 * chain's length. */
#define _GNU_SOURCE
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/core/auth.h"
#include "api/rest/handlers.h"
#include "db/audit_store.h"
#include "lib/log.h"

#define EXPORT_PAGE 512 /* entries fetched per statement while streaming an export */
#define VERIFY_PAGE 2048 /* entries fetched per statement while verifying */

/* Answers a failed session read (404 or 503). */
static void session_read_failed(struct jb_http_resp *resp, int rc, const char *job,
                                const jb_error *err) {
  if (rc == JB_ERR_NOT_FOUND) {
    jb_resp_error(resp, 404, "not_found", "no session %.128s", job);
  } else {
    jb_log(JB_LOG_ERROR, "audit load failed", "job_id", job, "detail", err->msg, NULL);
    jb_db_unavailable(resp, err);
  }
}

/* --- export: JSON Lines, streamed a page of rows at a time ------------------------------- */

struct export_stream {
  struct jb_app *app;
  char job[JB_AUDIT_MAX_SESSION + 1];
  long long after; /* seq of the last entry sent */
  char *buf; /* export lines of the current page */
  size_t len, off;
  bool end;
};

/* Appends the export line of `e` to `f` (a row that cannot be shown as an entry still takes
 * its place, so that a verifier of the export reports it where it is). */
static bool put_line(FILE *f, const struct jb_audit_entry *e) {
  if (e->malformed) return fprintf(f, "{\"seq\":%lld,\"malformed\":true}\n", e->seq) > 0;
  char *line = jb_audit_entry_line(e);
  bool ok = line && fputs(line, f) >= 0;
  free(line);
  return ok;
}

/* Fetches the next page into st->buf (borrowing a connection for one statement only, so a
 * slow reader holds no connection). 0, or -1 on a database error or OOM. */
static int export_fill(struct export_stream *st) {
  jb_error err = {0};
  free(st->buf);
  st->buf = NULL;
  st->len = st->off = 0;
  PGconn *c = jb_db_acquire(st->app->db, &err);
  if (!c) goto fail;
  struct jb_audit_entry *page = NULL;
  size_t n = 0;
  int rc = jb_audit_entries_page(c, st->job, st->after, EXPORT_PAGE, &page, &n, &err);
  jb_db_release(st->app->db, c);
  if (rc != JB_OK) goto fail;
  if (n == 0) {
    st->end = true;
    free(page);
    return 0;
  }
  FILE *f = open_memstream(&st->buf, &st->len);
  bool ok = f != NULL;
  for (size_t i = 0; ok && i < n; i++) ok = put_line(f, &page[i]);
  if (f && fclose(f) != 0) ok = false;
  st->after = page[n - 1].seq;
  if (n < EXPORT_PAGE) st->end = true;
  jb_audit_entries_free(page, n);
  if (ok) return 0;
  snprintf(err.msg, sizeof err.msg, "out of memory");
fail:
  jb_log(JB_LOG_ERROR, "audit export cut off", "job_id", st->job, "detail", err.msg, NULL);
  return -1;
}

static long export_read(void *ctx, char *out, size_t max) {
  struct export_stream *st = ctx;
  while (st->off == st->len) {
    if (st->end) return 0;
    if (export_fill(st) < 0) return -1;
  }
  size_t n = st->len - st->off < max ? st->len - st->off : max;
  memcpy(out, st->buf + st->off, n);
  st->off += n;
  return (long)n;
}

static void export_free(void *ctx) {
  struct export_stream *st = ctx;
  free(st->buf);
  free(st);
}

void jb_api_audit_export(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  jb_error err = {0};
  struct jb_audit_chain sess = {0};
  int rc = jb_audit_session_read(c, req->params[0], &sess, &err);
  jb_db_release(app->db, c);
  if (rc != JB_OK) {
    session_read_failed(resp, rc, req->params[0], &err);
    return;
  }
  struct export_stream *st = calloc(1, sizeof *st);
  if (!st) {
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  st->app = app;
  snprintf(st->job, sizeof st->job, "%s", req->params[0]);
  /* the first page now, so that a database failure is still a 503 rather than a cut body */
  if (export_fill(st) < 0) {
    export_free(st);
    jb_resp_error(resp, 503, "unavailable", "the audit chain cannot be read now");
    return;
  }
  free(resp->body);
  resp->body = NULL;
  resp->status = 200;
  resp->content_type = "application/x-ndjson";
  resp->stream = (struct jb_http_stream){.read = export_read, .free = export_free, .ctx = st};
}

/* Reads the published keys into a verifier's array. */
static int published_keys(PGconn *c, struct jb_audit_pubkey **out, size_t *n, jb_error *err) {
  struct jb_audit_key_row *rows = NULL;
  if (jb_audit_keys_load(c, &rows, n, err) != JB_OK) return -1;
  struct jb_audit_pubkey *v = calloc(*n ? *n : 1, sizeof *v);
  if (!v) {
    free(rows);
    return jb_fail(err, ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < *n; i++) v[i] = rows[i].key;
  free(rows);
  *out = v;
  return 0;
}

/* Verifies the chain of `job` page by page inside the caller's REPEATABLE READ transaction
 * (one snapshot: the session row and every page agree). JB_OK with `res` filled, else the
 * store's error. */
static int verify_paged(PGconn *c, const char *job, const struct jb_audit_head *known,
                        struct jb_audit_result *res, jb_error *err) {
  struct jb_audit_chain sess = {0};
  int rc = jb_audit_session_read(c, job, &sess, err);
  if (rc != JB_OK) return rc;
  struct jb_audit_pubkey *keys = NULL;
  size_t nkeys = 0;
  if (published_keys(c, &keys, &nkeys, err) < 0) return JB_ERR_FAIL;
  struct jb_audit_verify_opts opts = {
      .session = job, .known_head = known, .stored_head = &sess.stored, .require_seal = sess.ended};
  struct jb_audit_verifier v;
  jb_audit_verifier_init(&v, keys, nkeys, &opts);
  long long after = 0;
  bool settled = false;
  for (;;) {
    struct jb_audit_entry *page = NULL;
    size_t n = 0;
    if (jb_audit_entries_page(c, job, after, VERIFY_PAGE, &page, &n, err) != JB_OK) {
      free(keys);
      return JB_ERR_FAIL;
    }
    for (size_t i = 0; i < n; i++)
      if (jb_audit_verifier_add(&v, settled ? NULL : &page[i])) settled = true;
    if (n) after = page[n - 1].seq;
    jb_audit_entries_free(page, n);
    if (n < VERIFY_PAGE) break;
  }
  jb_audit_verifier_finish(&v, res);
  free(keys);
  return JB_OK;
}

void jb_api_audit_verify(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_audit_head known;
  const char *head = jb_http_query(req, "head");
  jb_error err = {0};
  if (head && jb_audit_head_parse(head, &known, &err) < 0) {
    jb_resp_error(resp, 400, "bad_request", "head: %s", err.msg);
    return;
  }
  PGconn *c = jb_rest_session_conn(app, req, resp);
  if (!c) return;
  struct jb_audit_result res;
  int rc = JB_ERR_FAIL;
  if (jb_audit_snapshot_begin(c, &err) == JB_OK)
    rc = verify_paged(c, req->params[0], head ? &known : NULL, &res, &err);
  jb_db_rollback(c); /* read only: nothing to keep */
  jb_db_release(app->db, c);
  if (rc != JB_OK) {
    session_read_failed(resp, rc, req->params[0], &err);
    return;
  }
  json_t *body = jb_audit_result_json(&res);
  if (!body) {
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  if (!res.ok) {
    char seq[24];
    snprintf(seq, sizeof seq, "%lld", res.first_bad_seq);
    jb_log(JB_LOG_WARN, "audit chain verification failed", "job_id", req->params[0],
           "first_bad_seq", seq, "reason", jb_audit_reason_name(res.reason), "detail", res.detail,
           NULL);
  }
  jb_resp_json(resp, 200, body);
}

void jb_api_audit_keys(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return;
  }
  struct jb_audit_key_row *rows = NULL;
  size_t n = 0;
  int rc = jb_audit_keys_load(c, &rows, &n, &err);
  jb_db_release(app->db, c);
  if (rc != JB_OK) {
    jb_db_unavailable(resp, &err);
    return;
  }
  json_t *arr = json_array();
  for (size_t i = 0; arr && i < n; i++) {
    char b64[sodium_base64_ENCODED_LEN(JB_AUDIT_PK_LEN, sodium_base64_VARIANT_ORIGINAL)];
    sodium_bin2base64(b64, sizeof b64, rows[i].key.public_key, JB_AUDIT_PK_LEN,
                      sodium_base64_VARIANT_ORIGINAL);
    json_t *k = json_pack("{s:s,s:s,s:s,s:s,s:s?}", "keyId", rows[i].key.key_id, "algorithm",
                          "ed25519", "publicKey", b64, "createdAt", rows[i].created_at, "retiredAt",
                          rows[i].retired_at[0] ? rows[i].retired_at : NULL);
    if (!k || json_array_append_new(arr, k) < 0) {
      json_decref(arr);
      arr = NULL;
    }
  }
  free(rows);
  json_t *body = arr ? json_pack("{s:o}", "keys", arr) : NULL;
  if (!body) {
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  jb_resp_json(resp, 200, body);
}
