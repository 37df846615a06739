/* op_supervise.c — a tool call that may wait (the supervise stage, api/core/op_call.h): it
 * takes its place among this process's calls that wait (op_wait.c); an edit is made into the
 * write it amounts to (the file read through the shim, the edits applied, the result scanned,
 * the write bound to the hash of what was read); and for a mutating tool of a supervised
 * session what the buyer is shown is made — the target as it is now (a stat through the shim:
 * the same rules; the op is refused if it changes meanwhile), the diff preview of a write or
 * an edit, a description of a mkdir, move or delete; the approval request is op_view.c's. The
 * session's approval rules (api/core/policy.c), then the operator's reviewer
 * (api/core/review.c), decide before the buyer is asked. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <sodium.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/diff.h"
#include "api/core/edit.h"
#include "api/core/escape.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/buf.h"
#include "lib/log.h"
#include "lib/metrics.h"
#include "lib/redact.h"
#include "lib/scan.h"
#include "server/app.h"
#include "server/config.h"
#include "server/pool.h"

#define EDIT_DIFF_MAX (256 * 1024) /* bytes of an edit's diff in its answer */

static enum op_step stat_path(struct op_call *call, const char *path, bool content, json_t **out,
                              bool missing_ok) {
  return op_stat_of(call, path, content, false, out, missing_ok);
}

/* The pending write's target as it is now into call->current (with its content for the diff
 * preview unless previews are off). */
static enum op_step stat_target(struct op_call *call) {
  bool parents = json_array_size(json_object_get(call->sargs, "createParents")) > 0;
  enum op_step s =
      stat_path(call, call->path, call->app->cfg && call->app->cfg->diff_preview_max > 0,
                &call->current, parents);
  /* the folders its write makes, shown to the buyer */
  if (s == OP_NEXT && parents) s = op_parents_exact(call, call->current);
  return s;
}

/* `path` as the stat `current` found it is a file with several hard links, or a symlink that
 * leads out of the workspace: the escape signal of that kind for `verb` ("write onto") on it.
 * True when one was raised. */
static bool signal_current(struct op_call *call, const char *verb, const char *path,
                           json_t *current) {
  json_t *links = json_object_get(current, "links");
  char detail[400];
  if (json_is_integer(links) && json_integer_value(links) > 1 &&
      !strcmp(json_string_value(json_object_get(current, "type")) ?: "", "file")) {
    snprintf(detail, sizeof detail, "%s %.300s, a file with %lld hard links", verb, path,
             (long long)json_integer_value(links));
    jb_escape_signal(call->app, call->job, JB_SIG_HARD_LINK, detail);
    return true;
  }
  if (json_is_true(json_object_get(current, "leadsOut"))) {
    snprintf(detail, sizeof detail, "%s %.300s, a symlink that leads out of the workspace", verb,
             path);
    jb_escape_signal(call->app, call->job, JB_SIG_SYMLINK_ESCAPE, detail);
    return true;
  }
  return false;
}

/* The target must not exist, or be a regular file with a single link: the shim would refuse
 * the write otherwise. One with more links, or a symlink leading out, is an escape signal. */
static enum op_step check_target(struct op_call *call) {
  json_t *current = call->current;
  const char *path = call->path;
  const char *cur = json_is_true(json_object_get(current, "exists"))
                        ? json_string_value(json_object_get(current, "sha256"))
                        : "";
  if (cur) {
    json_object_set_new(call->sargs, "expectSha256", json_string(cur));
    return OP_NEXT;
  }
  op_error(call->e, JB_MCP_DENIED, "denied", "%s is not a regular file with a single link", path);
  signal_current(call, call->tool == JB_TOOL_EDIT ? "edit of" : "write onto", path, current);
  return OP_END;
}

/* The diff (new) of replacing `current` (a stat op's result with the file's content) by
 * `data`, at most `max` bytes of diff text (lib/diff.h); JSON null with *why (static)
 * when there is none: the content did not come with the stat (over 1 MiB, or not a regular
 * file), either side is not UTF-8 text, the content read disagrees with its hash, or libgit2
 * failed. */
static json_t *current_diff(const char *path, json_t *current, const unsigned char *data,
                            size_t dlen, size_t max, const char **why) {
  bool exists = json_is_true(json_object_get(current, "exists"));
  json_t *jc = json_object_get(current, "content");
  const char *enc = json_string_value(json_object_get(current, "encoding"));
  *why = NULL;
  if (exists && (!json_is_string(jc) || !enc)) {
    *why = "the file's content is not read for a diff (over 1 MiB, or not a regular file)";
    return json_null();
  }
  const unsigned char *old = NULL;
  size_t olen = 0;
  if (exists && !strcmp(enc, "utf-8")) {
    old = (const unsigned char *)json_string_value(jc);
    olen = json_string_length(jc);
  } else if (exists) { /* base64: not text; no diff */
    *why = "binary: the file as it is now is not UTF-8 text";
    return json_null();
  }
  if (exists) { /* the shim is not trusted: the text shown must be the one the write replaces */
    unsigned char h[32];
    char hex[65];
    crypto_hash_sha256(h, old, olen);
    sodium_bin2hex(hex, sizeof hex, h, sizeof h);
    if (strcmp(hex, json_string_value(json_object_get(current, "sha256")) ?: "")) {
      jb_log(JB_LOG_WARN, "no diff: the stat's content does not match its sha256", "path", path,
             NULL);
      *why = "the file's content as read does not match its hash";
      return json_null();
    }
  }
  json_t *out = NULL;
  jb_error err = {0};
  if (jb_diff_preview(path, old, olen, exists, data, dlen, max, &out, &err) < 0) {
    jb_log(JB_LOG_WARN, "no diff", "path", path, "detail", err.msg, NULL);
    *why = "the diff could not be made";
    return json_null();
  }
  if (json_is_null(out)) *why = "binary: the file or the new content is not UTF-8 text";
  return out;
}

/* The diff preview (new; JSON null for binary content, or when the current content did not
 * come with the stat: over 1 MiB, or previews switched off) of a supervised write replacing
 * `current` (the stat op's result) by `data`. */
static json_t *write_diff(struct jb_app *app, const char *path, json_t *current,
                          const unsigned char *data, size_t dlen) {
  if (!app->cfg || app->cfg->diff_preview_max <= 0) return json_null();
  const char *why;
  return current_diff(path, current, data, dlen, (size_t)app->cfg->diff_preview_max, &why);
}

/* An edit of the file as call->current read it (its content, borrowed): applied (call->data,
 * call->replaced), or OP_END with the failing edit named in *call->e. */
static enum op_step apply_edits(struct op_call *call, const char *old, size_t olen) {
  json_t *list = json_object_get(call->args, "edits");
  size_t n = json_array_size(list);
  struct jb_edit edits[OP_EDITS_MAX];
  for (size_t i = 0; i < n && i < OP_EDITS_MAX; i++) {
    json_t *e = json_array_get(list, i);
    json_t *o = json_object_get(e, "oldText"), *nw = json_object_get(e, "newText");
    edits[i] = (struct jb_edit){.old_text = json_string_value(o),
                                .old_len = json_string_length(o),
                                .new_text = json_string_value(nw),
                                .new_len = json_string_length(nw),
                                .replace_all = json_is_true(json_object_get(e, "replaceAll"))};
  }
  struct jb_edit_failure f;
  if (jb_edit_apply((const unsigned char *)old, olen, edits, n, OP_FILE_MAX, &call->data,
                    &call->dlen, &call->replaced, &f) == 0)
    return OP_NEXT;
  char msg[300];
  jb_edit_failure_text(&f, n, OP_FILE_MAX, msg, sizeof msg);
  if (f.fault == JB_EDIT_NOMEM)
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "%s", msg);
  else if (f.fault == JB_EDIT_TOO_LARGE)
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large", "%s", msg);
  else
    op_error(call->e, JB_MCP_NO_MATCH, "no_match", "%s", msg);
  json_t *d =
      json_pack("{s:s,s:I,s:s}", "error", f.fault == JB_EDIT_TOO_LARGE ? "too_large" : "no_match",
                "edit", (json_int_t)f.index, "sha256", call->before_hex);
  if (f.fault == JB_EDIT_AMBIGUOUS)
    json_object_set_new(d, "found", json_integer((json_int_t)f.count));
  if (f.fault != JB_EDIT_NOMEM)
    op_audit_refusal(call, call->path, d);
  else
    json_decref(d);
  return OP_END;
}

/* An edit: the file read through the shim (a stat with its content: a regular single-link
 * file of at most 1 MiB, UTF-8 text), the edits applied, and — unless it is a dry run, whose
 * answer is the diff alone — the result scanned and made into the write's shim arguments
 * bound to the SHA-256 of what was read (the write is refused `changed` if the file moved on
 * before it runs). */
static enum op_step supervise_edit(struct op_call *call, bool dry) {
  enum op_step s = stat_path(call, call->path, true, &call->current, false);
  if (s != OP_NEXT) return s;
  json_t *cur = call->current;
  if (!json_is_true(json_object_get(cur, "exists"))) {
    op_error(call->e, JB_MCP_NOT_FOUND, "not_found",
             "%.300s does not exist; use write to create a file", call->path);
    return OP_END;
  }
  const char *type = json_string_value(json_object_get(cur, "type")) ?: "";
  const char *sha = json_string_value(json_object_get(cur, "sha256"));
  if (strcmp(type, "file") || !sha) {
    if (!strcmp(type, "dir"))
      op_error(call->e, JB_MCP_DENIED, "denied", "%.300s is a directory", call->path);
    else
      op_error(call->e, JB_MCP_DENIED, "denied", "%.300s is not a regular file with a single link",
               call->path);
    signal_current(call, "edit of", call->path, cur);
    return OP_END;
  }
  json_t *jc = json_object_get(cur, "content");
  const char *enc = json_string_value(json_object_get(cur, "encoding")) ?: "";
  if (!json_is_string(jc)) {
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large",
             "%.300s is %lld bytes; edit takes files up to %d bytes (read it in ranges and write"
             " it whole)",
             call->path, (long long)json_integer_value(json_object_get(cur, "size")), OP_FILE_MAX);
    return OP_END;
  }
  if (strcmp(enc, "utf-8")) {
    op_error(call->e, JB_MCP_DENIED, "denied",
             "%.300s is not UTF-8 text; edit works on text (use write with base64)", call->path);
    return OP_END;
  }
  const char *old = json_string_value(jc);
  size_t olen = json_string_length(jc);
  op_sha256_hex(old, olen, call->before_hex);
  if (strcmp(call->before_hex,
             sha)) { /* the shim is not trusted: what is edited is what is bound */
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "the file's content and hash disagree; try again");
    return OP_END;
  }
  s = apply_edits(call, old, olen);
  if (s != OP_NEXT) return s;
  op_sha256_hex(call->data, call->dlen, call->sha_hex);
  json_t *diff = NULL;
  jb_error err = {0};
  if (jb_diff_preview(call->path, (const unsigned char *)old, olen, true, call->data, call->dlen,
                      EDIT_DIFF_MAX, &diff, &err) < 0) {
    jb_log(JB_LOG_WARN, "no diff of an edit", "path", call->path, "detail", err.msg, NULL);
    diff = json_null();
  }
  call->diff = diff;
  size_t n = json_array_size(json_object_get(call->args, "edits"));
  if (dry) {
    call->ans =
        json_pack("{s:b,s:{s:b,s:s,s:I,s:I,s:s,s:s,s:I,s:O}}", "ok", 1, "result", "dryRun", 1,
                  "path", call->path, "edits", (json_int_t)n, "replaced",
                  (json_int_t)call->replaced, "sha256Before", call->before_hex, "sha256After",
                  call->sha_hex, "size", (json_int_t)call->dlen, "diff", call->diff);
    return call->ans ? OP_ANSWERED : OP_END;
  }
  /* the write the edit amounts to: text as text unless JSON cannot carry it */
  json_t *content = memchr(call->data, '\0', call->dlen)
                        ? NULL
                        : json_stringn((const char *)call->data, call->dlen);
  if (!content) {
    size_t blen = sodium_base64_encoded_len(call->dlen, sodium_base64_VARIANT_ORIGINAL);
    char *b = malloc(blen);
    if (b) {
      sodium_bin2base64(b, blen, call->data, call->dlen, sodium_base64_VARIANT_ORIGINAL);
      content = json_string(b);
      free(b);
    }
  }
  call->sargs = json_pack("{s:o?,s:s,s:s,s:I,s:I}", "content", content, "encoding",
                          json_is_string(content) && !memchr(call->data, '\0', call->dlen) &&
                                  json_string_length(content) == call->dlen &&
                                  !memcmp(json_string_value(content), call->data, call->dlen)
                              ? "utf-8"
                              : "base64",
                          "expectSha256", call->before_hex, "edits", (json_int_t)n, "replaced",
                          (json_int_t)call->replaced);
  if (!call->sargs || !json_object_get(call->sargs, "content")) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  if (json_array_size(call->sess.exclude) > 0)
    json_object_set(call->sargs, "exclude", call->sess.exclude);
  return op_scan_content(call);
}

/* What `current` (a stat result) is, in words: "file (12 bytes)", "directory", "symlink". */
static void what_is(json_t *current, char *buf, size_t size) {
  const char *type = json_string_value(json_object_get(current, "type")) ?: "entry";
  if (!strcmp(type, "file"))
    snprintf(buf, size, "file (%lld bytes)",
             (long long)json_integer_value(json_object_get(current, "size")));
  else
    snprintf(buf, size, "%s", !strcmp(type, "dir") ? "directory" : type);
}

/* The expectation {path, exists, type?, sha256?} the worker checks `path` against before it
 * runs the approved op (sandbox/worker/relay.c): the op is refused `changed` otherwise. */
static json_t *expectation(const char *path, json_t *current) {
  bool exists = json_is_true(json_object_get(current, "exists"));
  json_t *x = json_pack("{s:s,s:b}", "path", path, "exists", exists);
  if (exists) {
    json_t *t = json_object_get(current, "type"), *h = json_object_get(current, "sha256");
    if (json_is_string(t)) json_object_set(x, "type", t);
    if (json_is_string(h)) json_object_set(x, "sha256", h);
  }
  return x;
}

/* A supervised mkdir, move or delete: its target(s) as they are now, what the buyer is told
 * it will do (call->describe), what the worker checks before it runs it ("expectCurrent" in
 * its arguments); refused at once what the shim would refuse anyway (no such source, a
 * destination in the way, a directory without recursive, a symlink leading out, a hard link). */
static enum op_step supervise_change(struct op_call *call) {
  /* a move's source was had for its landing check (op_landing.c) */
  enum op_step s = call->current ? OP_NEXT
                                 : stat_path(call, call->path, false, &call->current,
                                             call->tool == JB_TOOL_MKDIR);
  if (s == OP_NEXT && call->tool == JB_TOOL_MOVE)
    s = stat_path(call, call->dest, false, &call->current2, true);
  if (s == OP_NEXT && call->tool == JB_TOOL_MOVE) /* the folders it makes, shown to the buyer */
    s = op_parents_exact(call, call->current2);
  if (s != OP_NEXT) return s;
  const char *path = call->path;
  json_t *cur = call->current;
  bool exists = json_is_true(json_object_get(cur, "exists"));
  const char *type = json_string_value(json_object_get(cur, "type")) ?: "";
  char what[80], buf[9000];
  what_is(cur, what, sizeof what);
  json_t *expect = json_array();
  json_array_append_new(expect, expectation(path, cur));
  switch (call->tool) {
    case JB_TOOL_MKDIR:
      if (exists && strcmp(type, "dir")) {
        op_error(call->e, JB_MCP_EXISTS, "exists", "%.300s exists and is a %s", path, what);
        json_decref(expect);
        return OP_END;
      }
      snprintf(buf, sizeof buf,
               exists ? "create directory %.4100s (it exists already: nothing to do)"
                      : "create directory %.4100s (and any missing parents)",
               path);
      break;
    case JB_TOOL_MOVE: {
      bool dexists = json_is_true(json_object_get(call->current2, "exists"));
      bool overwrite = json_is_true(json_object_get(call->args, "overwrite"));
      if (!exists) {
        op_error(call->e, JB_MCP_NOT_FOUND, "not_found", "%.300s does not exist", path);
        json_decref(expect);
        return OP_END;
      }
      if (signal_current(call, "move of", path, cur) ||
          signal_current(call, "move onto", call->dest, call->current2)) {
        op_error(call->e, JB_MCP_DENIED, "denied",
                 "a hard-linked file or a symlink leading out cannot be moved or replaced");
        json_decref(expect);
        return OP_END;
      }
      if (dexists && !overwrite) {
        op_error(call->e, JB_MCP_EXISTS, "exists", "%.300s exists; set overwrite to replace a file",
                 call->dest);
        json_decref(expect);
        return OP_END;
      }
      char dwhat[80];
      what_is(call->current2, dwhat, sizeof dwhat);
      json_array_append_new(expect, expectation(call->dest, call->current2));
      size_t nf = json_array_size(json_object_get(call->sargs, "createParents"));
      snprintf(buf, sizeof buf, "move %s %.4000s to %.4000s%s%s%s%s", what, path, call->dest,
               dexists ? " (replacing the " : "", dexists ? dwhat : "", dexists ? " there)" : "",
               nf ? " (creating the missing folders above it)" : "");
      break;
    }
    default: { /* delete */
      bool recursive = json_is_true(json_object_get(call->args, "recursive"));
      if (!exists) {
        op_error(call->e, JB_MCP_NOT_FOUND, "not_found", "%.300s does not exist", path);
        json_decref(expect);
        return OP_END;
      }
      if (signal_current(call, "delete of", path, cur)) {
        op_error(call->e, JB_MCP_DENIED, "denied",
                 "%.300s is a hard-linked file or a symlink leading out: not deleted", path);
        json_decref(expect);
        return OP_END;
      }
      if (!strcmp(type, "dir") && !recursive) {
        op_error(call->e, JB_MCP_DENIED, "denied",
                 "%.300s is a directory; set recursive to delete it with everything in it", path);
        json_decref(expect);
        return OP_END;
      }
      snprintf(buf, sizeof buf, "delete %s %.4100s%s", what, path,
               !strcmp(type, "dir") ? " and everything in it (recursive)" : "");
    }
  }
  call->describe = strdup(buf);
  json_object_set_new(call->sargs, "expectCurrent", expect);
  return call->describe ? OP_NEXT : OP_END;
}

#define ENV_SHOWN_MAX 1024 /* bytes of a variable's value shown to the buyer; more: cut, noted */

/* Whether variable name `name` says its value is a secret: it holds TOKEN, SECRET, PASSWORD,
 * PASSWD, KEY, CREDENTIAL, AUTH, COOKIE or SESSION, case ignored. */
static bool env_name_secret(const char *name) {
  static const char *const words[] = {"TOKEN",      "SECRET", "PASSWORD", "PASSWD", "KEY",
                                      "CREDENTIAL", "AUTH",   "COOKIE",   "SESSION"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
    if (strcasestr(name, words[i])) return true;
  return false;
}

/* How the buyer is shown the value `v` of variable `name` (new string): "[REDACTED:name]" for
 * a secret-looking name, "[REDACTED:<rule>]" when a `secret` or `redact` rule of the scanner
 * in use (lib/redact.h) matches it (or "[REDACTED:unavailable]" when it cannot be checked),
 * else the value, cut at ENV_SHOWN_MAX bytes with "… (N bytes)" after it. NULL out of memory. */
static json_t *env_value_shown(const char *name, json_t *v) {
  if (env_name_secret(name)) return json_string("[REDACTED:name]");
  const char *val = json_string_value(v);
  size_t n = json_string_length(v);
  struct jb_redactor *rd = NULL;
  jb_error err = {0};
  struct jb_buf out;
  jb_buf_init(&out, n + 4096);
  const struct jb_scan_rules *rules = jb_scan_rules_in_use();
  int rc = rules ? jb_redactor_new(rules, &rd, &err) : -1;
  if (rc == 0)
    rc = jb_redactor_feed(rd, (const unsigned char *)(val ? val : ""), n, true, &out, &err);
  const struct jb_redaction *rec = NULL;
  size_t found = rc == 0 ? jb_redactor_records(rd, &rec) : 0;
  char mark[160];
  snprintf(mark, sizeof mark, "[REDACTED:%.128s]",
           rc < 0                     ? "unavailable"
           : found > 0 && rec[0].rule ? rec[0].rule
                                      : "secret");
  bool masked = rc < 0 || (rd && jb_redactor_count(rd) > 0);
  jb_redactor_free(rd);
  jb_buf_free(&out);
  if (masked) return json_string(mark);
  if (n <= ENV_SHOWN_MAX) return json_incref(v);
  size_t cut = op_utf8_prefix(val, n, ENV_SHOWN_MAX);
  char tail[48];
  snprintf(tail, sizeof tail, "… (%zu bytes)", n);
  json_t *s = json_stringn(val, cut);
  char *joined = NULL;
  if (s && asprintf(&joined, "%s%s", json_string_value(s), tail) < 0) joined = NULL;
  json_decref(s);
  json_t *out_s = joined ? json_string(joined) : NULL;
  free(joined);
  return out_s;
}

/* The exec's variables as the buyer is shown them ({NAME: shown value}, env_value_shown; new),
 * or NULL when it sets none or out of memory. */
static json_t *env_shown(const json_t *env) {
  if (json_object_size(env) == 0) return NULL;
  json_t *o = json_object();
  const char *k;
  json_t *v;
  json_object_foreach ((json_t *)env, k, v) {
    if (!o || json_object_set_new(o, k, env_value_shown(k, v)) < 0) {
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* A supervised exec: what the buyer is told it will run (call->describe) — the program and
 * its arguments, where, the variables it adds (names in the description; their values, masked
 * where they look secret, as "envShown" beside the op's arguments for the approval request and
 * the pending op's view), whether the workspace is writable for it. */
static enum op_step supervise_exec(struct op_call *call) {
  json_t *a = call->sargs;
  json_t *env = json_object_get(a, "env");
  if (json_object_size(env) > 0) {
    json_t *shown = env_shown(env);
    if (!shown || json_object_set_new(a, "envShown", shown) < 0) {
      op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
      return OP_END;
    }
  }
  char buf[9000];
  size_t n = 0;
  /* appends to buf, never past its end */
#define ADD(...)                                                                       \
  do {                                                                                 \
    if (n < sizeof buf - 1) {                                                          \
      int k_ = snprintf(buf + n, sizeof buf - n, __VA_ARGS__);                         \
      n = k_ < 0 ? n : n + (size_t)k_ >= sizeof buf ? sizeof buf - 1 : n + (size_t)k_; \
    }                                                                                  \
  } while (0)
  const char *cmd = json_string_value(json_object_get(a, "command"));
  if (cmd) {
    ADD("run shell command: %.4000s", cmd);
  } else {
    ADD("run");
    size_t i;
    json_t *x;
    json_array_foreach (json_object_get(a, "argv"), i, x) {
      if (n >= 4100) {
        ADD(" ...");
        break;
      }
      ADD(" %.2000s", json_string_value(x));
    }
  }
  ADD(" in %.4100s%s", json_string_value(json_object_get(a, "cwd")) ?: ".",
      json_is_true(json_object_get(a, "writable")) ? " with the workspace writable"
                                                   : " (workspace read-only)");
  const char *k;
  json_t *v;
  bool first = true;
  json_object_foreach (json_object_get(a, "env"), k, v) {
    ADD("%s%.128s", first ? "; env: " : ", ", k);
    first = false;
  }
#undef ADD
  call->describe = strdup(buf);
  if (!call->describe) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  return OP_NEXT;
}

/* A writable exec of a supervised session, with changesets on (JAILBOX_CHANGESETS
 * "supervised"): "changeset": true in its stored arguments, so that its worker runs it on an
 * overlay and holds what it changed for the buyer as one op of tool "changeset" — whether the
 * command itself was approved by the buyer, a rule or the reviewer. */
static enum op_step mark_changeset(struct op_call *call) {
  const char *setting = call->app->cfg ? call->app->cfg->changesets : "supervised";
  if (call->sess.mode != JB_MODE_SUPERVISED || !setting || strcmp(setting, "supervised") ||
      !json_is_true(json_object_get(call->sargs, "writable")))
    return OP_NEXT;
  if (json_object_set_new(call->sargs, "changeset", json_true()) < 0) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  return OP_NEXT;
}

enum op_step op_supervise(struct op_call *call) {
  /* a read or list of an active session waits for nobody: the worker runs it within
   * OP_RUN_TIMEOUT_MS, so it takes a place only if it meets a pause (op_await); an exec runs
   * as long as its timeout */
  bool bounded = call->tool != JB_TOOL_WRITE && call->tool != JB_TOOL_EXEC &&
                 call->sess.state == JB_SESSION_ACTIVE;
  enum op_step s = bounded ? OP_NEXT : op_take_waiting_place(call);
  if (s != OP_NEXT) return s;
  bool dry = call->tool == JB_TOOL_EDIT && json_is_true(json_object_get(call->args, "dryRun"));
  /* a batch's member: every check of a supervised op, then held for the batch's one review */
  call->staged = !dry && jb_tool_mutates(call->tool) && call->tool != JB_TOOL_EXEC &&
                 json_is_string(json_object_get(call->args, "changeset"));
  call->pending = jb_tool_mutates(call->tool) && call->sess.mode == JB_MODE_SUPERVISED && !dry;
  bool by_mode = call->pending;
  if (call->tool == JB_TOOL_EDIT) {
    s = supervise_edit(call, dry); /* scanned there: the rules see what the edit leaves */
    if (s == OP_NEXT && call->staged)
      json_object_set(call->sargs, "changeset", json_object_get(call->args, "changeset"));
    if (s == OP_NEXT) s = op_apply_rules(call); /* a deny rule refuses a member too */
    if (call->staged) return s; /* the batch is reviewed as one, when it is committed */
    /* an ask rule in an unsupervised session: a wait for the buyer the mode did not make */
    if (s == OP_NEXT && call->pending && !by_mode) s = op_take_waiting_place(call);
    if (s == OP_NEXT) s = op_review(call); /* on what the buyer would be shown */
    return s;
  }
  if (call->tool == JB_TOOL_MKDIR || call->tool == JB_TOOL_MOVE || call->tool == JB_TOOL_DELETE ||
      call->tool == JB_TOOL_WRITE) {
    s = op_check_landing(call); /* before any rule, reviewer or buyer */
    if (s != OP_NEXT) return s;
  }
  if (jb_tool_mutates(call->tool)) {
    s = op_apply_rules(call);
    if (s == OP_NEXT && call->pending && !by_mode) s = op_take_waiting_place(call);
    if (s != OP_NEXT) return s;
  }
  if (call->staged) call->pending = true; /* shown as a pending op is: its target, its diff */
  if (call->tool == JB_TOOL_EXEC) {
    s = mark_changeset(call);
    if (s != OP_NEXT) return s;
  }
  if (!call->pending) return OP_NEXT;
  if (call->tool == JB_TOOL_EXEC) {
    s = supervise_exec(call);
  } else if (call->tool != JB_TOOL_WRITE) {
    s = supervise_change(call);
  } else {
    s = stat_target(call);
    if (s == OP_NEXT) s = check_target(call);
    if (s == OP_NEXT)
      call->diff = write_diff(call->app, call->path, call->current, call->data, call->dlen);
  }
  if (s == OP_NEXT && !call->staged) s = op_review(call); /* on what the buyer would be shown */
  return s;
}

/* Puts `diff` (borrowed; NULL: none) into the approval request `ev` so that the event fits
 * one notification (JB_EVENT_MAX_BYTES): the diff is cut shorter first (truncated; the op row
 * keeps it whole), then left out, then the content preview is cut (previewTruncated) — text
 * of control characters takes six bytes a byte escaped. */

/* ---- the whole diff of a pending write or edit (GET /v1/jailbox/:jobId/ops/:opId/diff) ---- */

static json_t *diff_fail(struct jb_op_diff_fail *f, int status, const char *code, const char *state,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static json_t *diff_fail(struct jb_op_diff_fail *f, int status, const char *code, const char *state,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->msg, sizeof f->msg, fmt, ap);
  va_end(ap);
  f->status = status;
  snprintf(f->code, sizeof f->code, "%s", code);
  snprintf(f->state, sizeof f->state, "%s", state ? state : "");
  return NULL;
}

/* The proposed content of a pending write or edit (its arguments `args`, borrowed): *data
 * borrowed from them (utf-8) or decoded into *owned (base64). False when it cannot be read. */
static bool proposed_content(json_t *args, const unsigned char **data, size_t *dlen,
                             unsigned char **owned) {
  json_t *jc = json_object_get(args, "content");
  if (!json_is_string(jc)) return false;
  const char *txt = json_string_value(jc);
  size_t n = json_string_length(jc);
  if (strcmp(json_string_value(json_object_get(args, "encoding")) ?: "utf-8", "base64")) {
    *data = (const unsigned char *)txt;
    *dlen = n;
    return true;
  }
  *owned = malloc(n / 4 * 3 + 3);
  if (!*owned || sodium_base642bin(*owned, n / 4 * 3 + 3, txt, n, "\n\r ", dlen, NULL,
                                   sodium_base64_VARIANT_ORIGINAL) != 0)
    return false;
  *data = *owned;
  return true;
}

static atomic_long diffs_reading; /* whole diffs of this process waiting for their stat */

/* A place for a whole diff's stat: one of the places of the calls that wait
 * (op_take_waiting_place), and of those at most half (at least one) for whole diffs, so that a
 * buyer's requests on a sandbox that does not answer cannot take every place an agent's wait
 * needs. True when taken (then *counted is set and diffs_reading counts it; op_call_release
 * gives the waiting place back). */
static bool diff_take_place(struct op_call *call, bool *counted) {
  long places = call->app->cfg ? call->app->cfg->max_waiting_calls : 1;
  long max = places / 2 < 1 ? 1 : places / 2;
  *counted = false;
  if (atomic_fetch_add(&diffs_reading, 1) >= max) {
    atomic_fetch_sub(&diffs_reading, 1);
    return false;
  }
  if (op_take_waiting_place(call) != OP_NEXT) {
    atomic_fetch_sub(&diffs_reading, 1);
    return false;
  }
  *counted = true;
  return true;
}

json_t *jb_op_full_diff(struct jb_app *app, const char *job, long long op_id, size_t max,
                        struct jb_op_diff_fail *fail) {
  *fail = (struct jb_op_diff_fail){0};
  struct jb_mcp_error e = {0};
  struct op_call call = {
      .app = app, .job = job, .tool = JB_TOOL_STAT, .e = &e, .fresh = true, .buyer_wait = true};
  struct jb_op_args_row row = {0};
  json_t *args = NULL, *out = NULL;
  unsigned char *owned = NULL;
  const unsigned char *data = NULL;
  size_t dlen = 0;
  jb_error err = {0};
  int rc = JB_ERR_FAIL;
  bool placed = false;
  call.c = jb_db_acquire(app->db, &err);
  if (call.c) rc = jb_db_op_pending_args(call.c, job, op_id, &row, &err);
  if (rc == JB_ERR_NOT_FOUND) {
    diff_fail(fail, 404, "not_found", NULL, "no op %lld in session '%s'", op_id, job);
  } else if (rc != JB_OK) {
    jb_log(JB_LOG_WARN, "whole diff: database unavailable", "jobId", job, "detail", err.msg, NULL);
    diff_fail(fail, 503, "database_unavailable", NULL, "the database is unavailable; try again");
  } else if (strcmp(row.tool, "write") && strcmp(row.tool, "edit")) {
    diff_fail(fail, 409, "no_diff", row.state,
              "op %lld is a %s: only a write or an edit has a diff", op_id, row.tool);
  } else if (strcmp(row.state, "pending")) {
    diff_fail(fail, 409, "invalid_state", row.state,
              "op %lld is %s: only a pending op's diff can be made; its content is no longer kept"
              " (the audit entry keeps its sha256)",
              op_id, row.state);
  } else if (strcmp(row.session_state, "active")) {
    diff_fail(fail, 409, "invalid_state", row.session_state,
              "the session is %s: the file is read through its sandbox only while it is active",
              row.session_state);
  } else if (!(args = json_loads(row.args, 0, NULL)) ||
             !proposed_content(args, &data, &dlen, &owned)) {
    diff_fail(fail, 503, "unavailable", NULL, "op %lld's content cannot be read", op_id);
  } else if (jb_db_session_facts(call.c, job, &call.sess, &err) != JB_OK) {
    diff_fail(fail, 503, "database_unavailable", NULL, "the database is unavailable; try again");
  } else if (!diff_take_place(&call, &placed)) {
    diff_fail(fail, 503, "unavailable", NULL,
              "too many whole diffs or waiting calls on this server; try again");
  } else if (stat_path(&call, row.path, true, &call.current, false) != OP_NEXT) {
    const char *reason = json_string_value(json_object_get(e.data, "reason")) ?: "unavailable";
    if (e.code == JB_MCP_UNAVAILABLE)
      diff_fail(fail, 503, "unavailable", NULL, "%s", e.message);
    else
      diff_fail(fail, 409, "unreadable", NULL, "the file cannot be read (%s): %s", reason,
                e.message);
  } else {
    const char *why = NULL;
    json_t *cur = call.current;
    bool exists = json_is_true(json_object_get(cur, "exists"));
    const char *sha = json_string_value(json_object_get(cur, "sha256"));
    const char *expect = json_string_value(json_object_get(args, "expectSha256"));
    json_t *diff = current_diff(row.path, cur, data, dlen, max, &why);
    out = json_pack("{s:I,s:s,s:s,s:o,s:b,s:s?,s:b}", "opId", (json_int_t)op_id, "tool", row.tool,
                    "path", row.path, "diff", diff, "exists", exists, "currentSha256",
                    exists ? sha : NULL, "changed",
                    expect && strcmp(expect, exists && sha ? sha : ""));
    if (out && why) json_object_set_new(out, "reason", json_string(why));
    if (!out) diff_fail(fail, 500, "internal", NULL, "out of memory");
  }
  json_decref(e.data);
  op_call_release(&call);
  if (placed) atomic_fetch_sub(&diffs_reading, 1);
  jb_op_args_row_clear(&row);
  json_decref(args);
  free(owned);
  return out;
}
