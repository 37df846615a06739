/* op_view.c — what the buyer (and the operator's reviewer) is shown of an op that waits for
 * a decision (api/core/op_call.h): the approval view, the diff preview kept with the op, and
 * the approval request announced once the op is stored. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/diff.h"
#include "db/events.h"
#include "db/ops.h"
#include "lib/log.h"
#include "lib/redact.h"
#include "server/app.h"
#include "server/config.h"

#define PREVIEW_MAX 2000 /* characters of a write shown in the approval request */

/* Shortens text field `key` of `ev` by at least `over` bytes (at a character's start) and sets
 * `flag` true; false when the field holds no text. */
static bool shorten_field(json_t *ev, const char *key, const char *flag, size_t over) {
  json_t *v = json_object_get(ev, key);
  size_t n = json_string_length(v);
  if (!json_is_string(v) || n == 0) return false;
  const char *p = json_string_value(v);
  json_object_set_new(ev, key, json_stringn(p, op_utf8_prefix(p, n, n > over ? n - over : 0)));
  json_object_set_new(ev, flag, json_true());
  return true;
}

/* Cuts the longest value of the approval request's "env" by at least `over` bytes (at a
 * character's start, "…" after it) and sets envTruncated true; false when no value is longer
 * than 16 bytes (the rest is the op's: GET …/ops). */
static bool shorten_env(json_t *ev, size_t over) {
  json_t *env = json_object_get(ev, "env");
  const char *k, *longest = NULL;
  json_t *v;
  size_t most = 16;
  json_object_foreach (env, k, v)
    if (json_string_length(v) > most) most = json_string_length(v), longest = k;
  if (!longest) return false;
  v = json_object_get(env, longest);
  const char *p = json_string_value(v);
  size_t keep = op_utf8_prefix(p, most, most > over + 16 ? most - over - 4 : 12);
  char *cut = NULL;
  if (asprintf(&cut, "%.*s…", (int)keep, p) < 0) return false;
  json_object_set_new(env, longest, json_string(cut));
  free(cut);
  json_object_set_new(ev, "envTruncated", json_true());
  return true;
}

/* Replaces the approval request's createsFolders (every folder from the first down to the
 * path's own: prefixes of the path) by the first one and their number (createsFoldersFrom,
 * createsFoldersCount); false when there is no list of two or more. */
static bool shorten_folders(json_t *ev) {
  json_t *f = json_object_get(ev, "createsFolders");
  if (json_array_size(f) < 2) return false;
  json_object_set(ev, "createsFoldersFrom", json_array_get(f, 0));
  json_object_set_new(ev, "createsFoldersCount", json_integer((json_int_t)json_array_size(f)));
  json_object_del(ev, "createsFolders");
  return true;
}

static void fit_event(const char *job, json_t *ev, json_t *diff) {
  json_t *d = json_incref(diff ? diff : json_null());
  for (;;) {
    json_object_set_new(ev, "diff", d);
    size_t size = jb_db_event_size(job, JB_EVENT_APPROVAL_REQUEST, ev);
    if (!size || size <= JB_EVENT_MAX_BYTES) return;
    size_t over = size - JB_EVENT_MAX_BYTES; /* a byte less of text is at least a byte less */
    size_t tl = json_string_length(json_object_get(d, "text"));
    if (json_is_object(d) && tl > 0) {
      d = jb_diff_shorten(d, tl > over ? tl - over : 0);
      if (d) continue;
    }
    d = json_null();
    json_object_set_new(ev, "diff", json_incref(d));
    /* then an exec's stdin preview, a write's preview, and last the path */
    if (shorten_field(ev, "stdinPreview", "stdinPreviewTruncated", over)) continue;
    if (shorten_env(ev, over)) continue;
    if (shorten_field(ev, "preview", "previewTruncated", over)) continue;
    if (shorten_folders(ev)) continue;
    op_fit_path(job, JB_EVENT_APPROVAL_REQUEST, ev);
    return;
  }
}

json_t *op_approval_view(struct op_call *call) {
  const char *job = call->job;
  const char *tool = jb_tool_name(call->tool);
  json_t *ev;
  if (call->tool == JB_TOOL_WRITE || call->tool == JB_TOOL_EDIT) {
    size_t dlen = call->dlen;
    bool text_ok = !memchr(call->data, '\0', dlen);
    json_t *preview =
        text_ok ? json_stringn((const char *)call->data, dlen < PREVIEW_MAX ? dlen : PREVIEW_MAX)
                : NULL;
    const char *cur = json_string_value(json_object_get(call->current, "sha256"));
    ev = json_pack("{s:s,s:s,s:s,s:I,s:s,s:s,s:o,s:b,s:s?,s:b}", "jobId", job, "tool", tool, "path",
                   call->path, "size", (json_int_t)dlen, "sha256", call->sha_hex, "verdict",
                   "clean", "preview", preview ? preview : json_null(), "previewTruncated",
                   dlen > PREVIEW_MAX, "currentSha256", cur, "exists",
                   json_is_true(json_object_get(call->current, "exists")));
    if (ev && call->tool == JB_TOOL_EDIT) {
      json_object_set_new(
          ev, "edits",
          json_integer((json_int_t)json_array_size(json_object_get(call->args, "edits"))));
      json_object_set_new(ev, "replaced", json_integer((json_int_t)call->replaced));
    }
  } else if (call->tool == JB_TOOL_EXEC) {
    json_t *a = call->sargs, *names = json_array();
    const char *k;
    json_t *v;
    json_object_foreach (json_object_get(a, "env"), k, v) { /* sorted, as GET …/ops has them */
      size_t at = json_array_size(names);
      while (at > 0 && strcmp(json_string_value(json_array_get(names, at - 1)), k) > 0) at--;
      json_array_insert_new(names, at, json_string(k));
    }
    ev = json_pack("{s:s,s:s,s:s,s:s,s:O,s:O?,s:s,s:o,s:b,s:O}", "jobId", job, "tool", tool, "path",
                   call->path, "description", call->describe ? call->describe : tool, "argv",
                   json_object_get(a, "argv"), "command", json_object_get(a, "command"), "cwd",
                   call->path, "envNames", names, "writable",
                   json_is_true(json_object_get(a, "writable")), "timeoutMs",
                   json_object_get(a, "timeoutMs"));
    json_t *shown = json_object_get(a, "envShown"); /* the values, masked (supervise_exec) */
    if (ev) json_object_set_new(ev, "env", shown ? json_deep_copy(shown) : json_null());
    json_t *in = json_object_get(a, "stdin");
    if (ev && json_is_string(in)) { /* what a shell on stdin would run: shown, as a write is */
      const char *txt = json_string_value(in);
      size_t n = json_string_length(in), cut = op_utf8_prefix(txt, n, PREVIEW_MAX);
      unsigned char h[crypto_hash_sha256_BYTES];
      char hex[2 * sizeof h + 1];
      crypto_hash_sha256(h, (const unsigned char *)txt, n);
      sodium_bin2hex(hex, sizeof hex, h, sizeof h);
      json_object_set_new(ev, "stdinBytes", json_integer((json_int_t)n));
      json_object_set_new(ev, "stdinSha256", json_string(hex));
      json_object_set_new(ev, "stdinPreview", json_stringn(txt, cut));
      json_object_set_new(ev, "stdinPreviewTruncated", json_boolean(cut < n));
    } else if (ev) {
      json_object_set_new(ev, "stdinBytes", json_integer(0));
    }
  } else {
    ev = json_pack("{s:s,s:s,s:s,s:s,s:O}", "jobId", job, "tool", tool, "path", call->path,
                   "description", call->describe ? call->describe : tool, "current", call->current);
    if (ev && call->dest) {
      json_object_set_new(ev, "destination", json_string(call->dest));
      json_object_set_new(ev, "overwrite",
                          json_boolean(json_is_true(json_object_get(call->args, "overwrite"))));
      if (call->current2) json_object_set(ev, "destinationCurrent", call->current2);
    }
    if (ev && call->tool == JB_TOOL_DELETE)
      json_object_set_new(ev, "recursive",
                          json_boolean(json_is_true(json_object_get(call->args, "recursive"))));
  }
  /* a write's or a move's missing folders that it makes (op_parents_exact): as many as shown */
  json_t *folders = json_object_get(call->sargs, "createParents");
  if (ev && json_array_size(folders) > 0 &&
      (call->tool == JB_TOOL_WRITE || call->tool == JB_TOOL_MOVE))
    json_object_set(ev, "createsFolders", folders);
  return ev;
}

char *op_diff_kept_text(const struct op_call *call) {
  /* at most JAILBOX_DIFF_PREVIEW_MAX bytes of diff text (an edit's own diff, in its answer, may
   * be longer: EDIT_DIFF_MAX) */
  json_t *kept = json_is_object(call->diff) && call->app->cfg->diff_preview_max > 0
                     ? jb_diff_shorten(call->diff, (size_t)call->app->cfg->diff_preview_max)
                     : NULL;
  char *text = json_is_object(kept) ? json_dumps(kept, JSON_COMPACT) : NULL;
  json_decref(kept);
  return text;
}

void op_announce_approval(struct op_call *call) {
  const char *job = call->job;
  json_t *ev = op_approval_view(call);
  if (ev) {
    json_object_set_new(ev, "opId", json_integer((json_int_t)call->op_id));
    json_object_set_new(ev, "askedBy", json_string(call->asked_by[0] ? call->asked_by : "mode"));
    if (call->reviewed)
      json_object_set_new(
          ev, "reviewer",
          json_pack("{s:s,s:s,s:b}", "verdict", jb_review_verdict_name(call->review.verdict),
                    "reason", call->review.reason, "failed", call->review.failed));
  }
  if (!ev) {
    jb_log(JB_LOG_WARN, "approval request not announced: out of memory", "jobId", job, NULL);
    return;
  }
  fit_event(job, ev, call->diff);
  jb_bus_publish(call->app->bus, job, JB_EVENT_APPROVAL_REQUEST, ev);
}
