/* batch.c — an agent's batch committed as one changeset (see batch.h): its rows made from the
 * staged members, the changeset op stored and announced, and the call's wait for the members. */
#define _GNU_SOURCE
#include "api/core/batch.h"

#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/core/progress.h"
#include "db/batch.h"
#include "db/db.h"
#include "db/events.h"
#include "db/sessions.h"
#include "lib/json.h"
#include "lib/log.h"
#include "server/app.h"
#include "server/bus.h"
#include "server/pool.h"

#define POLL_MS 250 /* the commit call's look at its members while it waits */
#define COMMIT_TRIES 4 /* a batch that changes while it is committed: read it again */

bool jb_batch_name_ok(const json_t *v) {
  const char *s = json_string_value(v);
  size_t n = json_string_length(v);
  if (!s || n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; i++)
    if (!s[i] || (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))) return false;
  return true;
}

/* ---- the rows ---- */

static const char *str(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* A stat's type as a changeset row names it: file, dir, link, special. */
static const char *row_type(const char *t) {
  if (!t) return "special";
  if (!strcmp(t, "file") || !strcmp(t, "dir")) return t;
  return !strcmp(t, "symlink") || !strcmp(t, "link") ? "link" : "special";
}

/* The SHA-256 (hex) and size of a write's content in `args` (utf-8 or base64). False when it
 * cannot be read. */
static bool content_sha(const json_t *args, char hex[65], long long *size) {
  const json_t *jc = json_object_get(args, "content");
  if (!json_is_string(jc)) return false;
  const char *t = json_string_value(jc);
  size_t n = json_string_length(jc), len = n;
  unsigned char *buf = NULL;
  const unsigned char *data = (const unsigned char *)t;
  if (str(args, "encoding") && !strcmp(str(args, "encoding"), "base64")) {
    buf = malloc(n / 4 * 3 + 4);
    if (!buf || sodium_base642bin(buf, n / 4 * 3 + 4, t, n, "\n\r ", &len, NULL,
                                  sodium_base64_VARIANT_ORIGINAL) != 0) {
      free(buf);
      return false;
    }
    data = buf;
  }
  unsigned char h[32];
  crypto_hash_sha256(h, data, len);
  sodium_bin2hex(hex, 65, h, sizeof h);
  *size = (long long)len;
  free(buf);
  return true;
}

/* One row (new) of member `id` at `path`. */
static json_t *row(const char *path, const char *change, const char *old_type, const char *new_type,
                   const char *old_sha, const char *new_sha, const json_t *diff, json_int_t id) {
  json_t *r = json_pack("{s:s,s:s,s:s,s:s,s:O,s:b,s:I}", "path", path, "change", change, "oldType",
                        old_type, "newType", new_type, "diff", diff ? diff : json_null(),
                        "approvable", 1, "memberOpId", id);
  if (r && old_sha && old_sha[0]) json_object_set_new(r, "oldSha256", json_string(old_sha));
  if (r && new_sha && new_sha[0]) json_object_set_new(r, "newSha256", json_string(new_sha));
  return r;
}

/* The rows of one member into `rows`. False for a member that cannot be shown. */
static bool member_rows(const json_t *m, json_t *rows) {
  const char *tool = str(m, "tool"), *path = str(m, "path");
  const json_t *args = json_object_get(m, "args"), *diff = json_object_get(m, "diff");
  json_int_t id = json_integer_value(json_object_get(m, "opId"));
  if (!tool || !path || !json_is_object(args) || id <= 0) return false;
  const json_t *x = json_object_get(args, "expectCurrent");
  const json_t *src = json_array_get(x, 0), *dst = json_array_get(x, 1);
  bool src_exists = json_is_true(json_object_get(src, "exists"));
  const char *src_type = src_exists ? row_type(str(src, "type")) : "absent";
  json_t *r = NULL, *r2 = NULL;
  if (!strcmp(tool, "write") || !strcmp(tool, "edit")) {
    char hex[65];
    long long size = 0;
    const char *old = str(args, "expectSha256");
    if (!content_sha(args, hex, &size)) return false;
    bool existed = old && old[0];
    r = row(path, existed ? "modified" : "added", existed ? "file" : "absent", "file", old, hex,
            diff, id);
    if (r) json_object_set_new(r, "size", json_integer(size));
  } else if (!strcmp(tool, "mkdir")) {
    r = row(path, "added", src_type, "dir", NULL, NULL, NULL, id);
  } else if (!strcmp(tool, "delete")) {
    r = row(path, "deleted", src_type, "absent", str(src, "sha256"), NULL, NULL, id);
  } else if (!strcmp(tool, "move") && str(args, "destination")) {
    bool dexists = json_is_true(json_object_get(dst, "exists"));
    r = row(path, "deleted", src_type, "absent", str(src, "sha256"), NULL, NULL, id);
    r2 = row(str(args, "destination"), dexists ? "modified" : "added",
             dexists ? row_type(str(dst, "type")) : "absent", src_type,
             dexists ? str(dst, "sha256") : NULL, str(src, "sha256"), NULL, id);
    if (!r2) {
      json_decref(r);
      return false;
    }
  } else {
    return false;
  }
  if (!r || json_array_append_new(rows, r) < 0) {
    json_decref(r2);
    return false;
  }
  return !r2 || json_array_append_new(rows, r2) == 0;
}

json_t *jb_batch_rows(const json_t *members) {
  json_t *rows = json_array();
  size_t i;
  const json_t *m;
  json_array_foreach (members, i, m) {
    if (!rows || !member_rows(m, rows)) {
      json_decref(rows);
      return NULL;
    }
  }
  return rows;
}

void jb_batch_digest(const json_t *rows, char hex[65]) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  size_t i;
  const json_t *r;
  json_array_foreach (rows, i, r) {
    json_t *l = json_pack("{s:O,s:O}", "path", json_object_get(r, "path"), "change",
                          json_object_get(r, "change"));
    static const char *const keys[] = {"oldSha256", "newSha256", "oldMode", "newMode", "newTarget"};
    for (size_t k = 0; l && k < sizeof keys / sizeof *keys; k++)
      json_object_set(l, keys[k], json_object_get(r, keys[k]) ?: json_null());
    char *line = l ? json_dumps(l, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (line) {
      crypto_hash_sha256_update(&st, (const unsigned char *)line, strlen(line));
      crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
    }
    free(line);
    json_decref(l);
  }
  unsigned char h[32];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* ---- the commit ---- */

static void fail(struct jb_mcp_error *e, int code, const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(struct jb_mcp_error *e, int code, const char *reason, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  e->code = code;
  e->data = json_pack("{s:s}", "reason", reason);
}

static void unavailable(struct jb_mcp_error *e, const jb_error *err) {
  jb_log(JB_LOG_ERROR, "commit_changeset: database error", "detail", err->msg, NULL);
  fail(e, JB_MCP_UNAVAILABLE, "unavailable", "the service is unavailable; try again");
}

/* jailbox:approval_request of pending batch changeset `op_id`. */
static void announce(struct jb_app *app, const char *job, long long op_id, const char *name,
                     const json_t *rows, const char *sha) {
  json_t *files = json_array();
  size_t i, n = json_array_size(rows);
  const json_t *r;
  json_array_foreach (rows, i, r) {
    if (i >= JB_BATCH_LISTED_MAX) break;
    json_array_append_new(files, json_pack("{s:O,s:O,s:O}", "path", json_object_get(r, "path"),
                                           "change", json_object_get(r, "change"), "approvable",
                                           json_object_get(r, "approvable")));
  }
  json_t *ev =
      json_pack("{s:s,s:I,s:s,s:s,s:s,s:s,s:I,s:I,s:o,s:b,s:s}", "jobId", job, "opId",
                (json_int_t)op_id, "tool", "changeset", "path", ".", "batch", name,
                "changesetSha256", sha, "total", (json_int_t)n, "approvableCount", (json_int_t)n,
                "files", files, "filesTruncated", n > JB_BATCH_LISTED_MAX, "askedBy", "mode");
  /* the event's bound: fewer files named until it fits */
  while (ev && jb_db_event_size(job, JB_EVENT_APPROVAL_REQUEST, ev) > JB_EVENT_MAX_BYTES &&
         json_array_size(json_object_get(ev, "files")) > 0) {
    json_t *f = json_object_get(ev, "files");
    json_array_remove(f, json_array_size(f) - 1);
    json_object_set_new(ev, "filesTruncated", json_true());
  }
  if (ev) jb_bus_publish(app->bus, job, JB_EVENT_APPROVAL_REQUEST, ev);
}

/* The members' op ids of `members` as a PostgreSQL bigint[] literal (new). */
static char *ids_literal(const json_t *members) {
  size_t n = json_array_size(members), used = 1;
  char *s = malloc(n * 22 + 3);
  if (!s) return NULL;
  s[0] = '{';
  for (size_t i = 0; i < n; i++)
    used += (size_t)sprintf(
        s + used, "%s%lld", i ? "," : "",
        (long long)json_integer_value(json_object_get(json_array_get(members, i), "opId")));
  s[used++] = '}';
  s[used] = '\0';
  return s;
}

/* One try at committing batch `name`: JB_OK with *op_id; JB_ERR_NOT_FOUND (empty);
 * JB_ERR_CONFLICT with `state` (empty: the batch changed, try again); else a failure. */
static int commit_once(struct jb_app *app, PGconn *c, const char *job, const char *name,
                       bool supervised, long long *op_id, char state[20], jb_error *err) {
  char *text = NULL, *members_lit = NULL, *args_text = NULL, *rows_text = NULL, *op_json = NULL;
  json_t *members = NULL, *rows = NULL, *args = NULL;
  int rc = jb_db_batch_members(c, job, name, &text, err);
  if (rc == JB_OK) {
    members = json_loads(text, 0, NULL);
    rows = members ? jb_batch_rows(members) : NULL;
    if (json_array_size(members) == 0)
      rc = JB_ERR_NOT_FOUND;
    else if (!rows)
      rc = jb_fail(err, EPROTO, "a staged op of the batch cannot be shown");
  }
  if (rc == JB_OK) {
    char sha[65];
    jb_batch_digest(rows, sha);
    json_t *ids = json_array();
    size_t i;
    const json_t *m;
    json_array_foreach (members, i, m) json_array_append(ids, json_object_get(m, "opId"));
    args = json_pack("{s:s,s:o,s:I,s:I,s:s}", "batch", name, "members", ids, "files",
                     (json_int_t)json_array_size(rows), "approvable",
                     (json_int_t)json_array_size(rows), "changesetSha256", sha);
    members_lit = ids_literal(members);
    args_text = args ? json_dumps(args, JSON_COMPACT) : NULL;
    rows_text = json_dumps(rows, JSON_COMPACT);
    rc = members_lit && args_text && rows_text
             ? jb_db_batch_commit(c, job, name, members_lit, args_text, rows_text, !supervised,
                                  op_id, &op_json, state, err)
             : jb_fail(err, ENOMEM, "out of memory");
    if (rc == JB_OK && supervised) announce(app, job, *op_id, name, rows, sha);
    if (rc == JB_OK) {
      json_t *op = json_loads(op_json, 0, NULL);
      if (op) jb_bus_publish(app->bus, job, JB_EVENT_OP, op);
    }
  }
  free(text);
  free(members_lit);
  free(args_text);
  free(rows_text);
  free(op_json);
  json_decref(members);
  json_decref(rows);
  json_decref(args);
  return rc;
}

/* The members' outcome of committed batch `op_id` once they have ended or the session has
 * (new: {state, session, members}), or NULL with *e. The handler thread's wait is counted
 * (server/pool.h) and the connection is back in the pool between looks. */
static json_t *await_outcome(struct jb_app *app, const char *job, long long op_id,
                             struct jb_progress *progress, struct jb_mcp_error *e) {
  bool began = !jb_pool_blocking() && jb_pool_block_begin() && jb_pool_blocking();
  json_t *out = NULL;
  for (;;) {
    jb_error err = {0};
    char *text = NULL;
    bool finished = false;
    PGconn *c = jb_db_acquire(app->db, &err);
    int rc = c ? jb_db_batch_outcome(c, job, op_id, &text, &finished, &err) : JB_ERR_FAIL;
    if (c) jb_db_release(app->db, c);
    json_decref(out);
    out = rc == JB_OK ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!out) {
      unavailable(e, &err);
      break;
    }
    const char *sess = str(out, "session");
    if (finished || !sess || !jb_state_is_live(sess)) break;
    bool asked = !strcmp(str(out, "state") ?: "", "pending");
    char msg[120];
    snprintf(msg, sizeof msg, "changeset %lld: %s", op_id,
             asked                     ? "waiting for the buyer's decision"
             : !strcmp(sess, "paused") ? "approved; held: the session is paused"
                                       : "approved; its ops run in the sandbox");
    jb_progress_tick(progress, msg, false);
    struct timespec ts = {0, POLL_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  if (began) jb_pool_block_end();
  return out;
}

/* The commit call's answer (new) of outcome `o` (borrowed) of batch `name`'s op `op_id`. */
static json_t *answer(const char *name, long long op_id, json_t *o) {
  long long applied = 0, rejected = 0, failed = 0;
  size_t i;
  json_t *m;
  json_array_foreach (json_object_get(o, "members"), i, m) {
    const char *st = str(m, "state") ?: "";
    applied += !strcmp(st, "done");
    rejected += !strcmp(st, "rejected");
    failed += !strcmp(st, "failed");
  }
  const char *op_state = str(o, "state") ?: "";
  size_t n = json_array_size(json_object_get(o, "members"));
  const char *state = !strcmp(op_state, "rejected")                  ? "rejected"
                      : failed > 0 || !strcmp(op_state, "failed")    ? "failed"
                      : (size_t)(applied + rejected) == n && applied ? "applied"
                      : (size_t)rejected == n                        ? "rejected"
                                                                     : "undecided";
  json_t *cs =
      json_pack("{s:I,s:s,s:s,s:I,s:I,s:I,s:O}", "opId", (json_int_t)op_id, "batch", name, "state",
                state, "applied", (json_int_t)applied, "rejected", (json_int_t)rejected, "failed",
                (json_int_t)failed, "members", json_object_get(o, "members"));
  char text[400];
  snprintf(text, sizeof text,
           "changeset %s (op %lld): %s — %lld applied, %lld rejected, %lld failed (see "
           "structuredContent.changeset.members)",
           name, op_id, state, applied, rejected, failed);
  return cs ? json_pack("{s:[{s:s,s:s}],s:{s:o},s:b}", "content", "type", "text", "text", text,
                        "structuredContent", "changeset", cs, "isError", 0)
            : NULL;
}

json_t *jb_batch_commit(struct jb_app *app, const char *job, json_t *args,
                        struct jb_progress *progress, struct jb_mcp_error *e) {
  static const char *const allowed[] = {"changeset", NULL};
  jb_error err = {0};
  const json_t *nm = json_object_get(args, "changeset");
  if (!json_is_object(args) || jb_json_only_keys(args, allowed, &err) < 0 || !nm) {
    fail(e, JB_MCP_INVALID, "bad_request", "commit_changeset takes {changeset: NAME}");
    return NULL;
  }
  if (!jb_batch_name_ok(nm)) {
    fail(e, JB_MCP_INVALID, "bad_request",
         "'changeset' must be a name of 1 to 64 letters, digits, '.', '_', '-'");
    return NULL;
  }
  const char *name = json_string_value(nm);
  PGconn *c = jb_db_acquire(app->db, &err);
  if (!c) {
    unavailable(e, &err);
    return NULL;
  }
  struct jb_session_facts sess = {0};
  long long op_id = 0;
  char state[20] = "";
  int rc = jb_db_session_facts(c, job, &sess, &err);
  bool supervised = sess.mode == JB_MODE_SUPERVISED;
  jb_session_facts_clear(&sess);
  for (int i = 0; rc == JB_OK && i < COMMIT_TRIES; i++) {
    rc = commit_once(app, c, job, name, supervised, &op_id, state, &err);
    if (rc != JB_ERR_CONFLICT || state[0]) break;
    rc = i + 1 < COMMIT_TRIES ? JB_OK : jb_fail(&err, EAGAIN, "the batch kept changing");
  }
  jb_db_release(app->db, c);
  if (rc == JB_ERR_NOT_FOUND) {
    fail(e, JB_MCP_INVALID, "bad_request",
         "changeset %s has no staged op: stage write, edit, mkdir, move or delete calls with "
         "changeset \"%s\" first",
         name, name);
    return NULL;
  }
  if (rc == JB_ERR_CONFLICT) {
    fail(e, JB_MCP_DENIED, "denied", "the session is %s: the changeset cannot be committed", state);
    return NULL;
  }
  if (rc != JB_OK) {
    unavailable(e, &err);
    return NULL;
  }
  jb_log(JB_LOG_INFO, "batch committed", "jobId", job, "changeset", name, NULL);
  json_t *o = await_outcome(app, job, op_id, progress, e);
  json_t *out = o ? answer(name, op_id, o) : NULL;
  json_decref(o);
  return out;
}
