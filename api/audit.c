/* audit.c — the REST side of the audit chain: export a session's chain as JSON Lines, verify
 * it on the server, and publish the verification keys (format: api/audit.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/auth.h"
#include "api/handlers.h"
#include "server/log.h"
#include "db/audit_store.h"
#include "server/log.h"

/* Borrows a connection, checks the caller may read the audit of the session in params[0]
 * (its buyer, or a service token) and loads the chain. Returns the connection (release it)
 * with *chain filled, or NULL with `resp` answered. */
static PGconn *load_chain(struct jb_app *app, const struct jb_http_req *req,
                          struct jb_audit_chain *chain, struct jb_http_resp *resp) {
  jb_error err = {0};
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    jb_db_unavailable(resp, &err);
    return NULL;
  }
  const char *job = req->params[0];
  struct jb_principal who;
  if (jb_auth_require(app, c, req, job, JB_ROLE_SERVICE | JB_ROLE_BUYER, &who, resp) < 0) {
    jb_db_release(app->db, c);
    return NULL;
  }
  int rc = jb_audit_chain_load(c, job, chain, &err);
  if (rc == JB_OK) return c;
  jb_db_release(app->db, c);
  if (rc == JB_ERR_NOT_FOUND) {
    jb_resp_error(resp, 404, "not_found", "no session %.128s", job);
  } else {
    jb_log(JB_LOG_ERROR, "audit load failed", "job_id", job, "detail", err.msg, NULL);
    jb_db_unavailable(resp, &err);
  }
  return NULL;
}

void jb_api_audit_export(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_audit_chain chain;
  PGconn *c = load_chain(app, req, &chain, resp);
  if (!c) return;
  jb_db_release(app->db, c);
  char *body = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&body, &len);
  bool ok = f != NULL;
  for (size_t i = 0; ok && i < chain.n; i++) {
    const struct jb_audit_entry *e = &chain.entries[i];
    /* a row that cannot be shown as an entry still takes its place, so that a verifier of
     * the export reports it where it is */
    if (e->malformed) {
      ok = fprintf(f, "{\"seq\":%lld,\"malformed\":true}\n", e->seq) > 0;
      continue;
    }
    char *line = jb_audit_entry_line(e);
    ok = line && fputs(line, f) >= 0;
    free(line);
  }
  if (f && fclose(f) != 0) ok = false;
  jb_audit_chain_free(&chain);
  if (!ok) {
    free(body);
    jb_resp_error(resp, 500, "internal", "out of memory");
    return;
  }
  free(resp->body);
  resp->status = 200;
  resp->body = body;
  resp->content_type = "application/x-ndjson";
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

void jb_api_audit_verify(void *appv, const struct jb_http_req *req, struct jb_http_resp *resp) {
  struct jb_app *app = appv;
  struct jb_audit_head known;
  const char *head = jb_http_query(req, "head");
  jb_error err = {0};
  if (head && jb_audit_head_parse(head, &known, &err) < 0) {
    jb_resp_error(resp, 400, "bad_request", "head: %s", err.msg);
    return;
  }
  struct jb_audit_chain chain;
  PGconn *c = load_chain(app, req, &chain, resp);
  if (!c) return;
  struct jb_audit_pubkey *keys = NULL;
  size_t nkeys = 0;
  int krc = published_keys(c, &keys, &nkeys, &err);
  jb_db_release(app->db, c);
  if (krc < 0) {
    jb_audit_chain_free(&chain);
    jb_db_unavailable(resp, &err);
    return;
  }
  struct jb_audit_verify_opts opts = {.session = req->params[0],
                                      .known_head = head ? &known : NULL,
                                      .stored_head = &chain.stored,
                                      .require_seal = chain.ended};
  struct jb_audit_result res;
  int rc = jb_audit_verify(chain.entries, chain.n, keys, nkeys, &opts, &res);
  free(keys);
  jb_audit_chain_free(&chain);
  json_t *body = rc < 0 ? NULL : jb_audit_result_json(&res);
  if (!body) {
    jb_resp_error(resp, 500, "internal", "verification could not run: %s",
                  rc < 0 ? res.detail : "out of memory");
    return;
  }
  if (!res.ok) {
    char seq[24];
    snprintf(seq, sizeof seq, "%lld", res.first_bad_seq);
    jb_log(JB_LOG_WARN, "audit chain verification failed", "job_id", req->params[0],
           "first_bad_seq", seq, "reason", jb_audit_reason_name(res.reason), "detail",
           res.detail, NULL);
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
                          "ed25519", "publicKey", b64, "createdAt", rows[i].created_at,
                          "retiredAt", rows[i].retired_at[0] ? rows[i].retired_at : NULL);
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
