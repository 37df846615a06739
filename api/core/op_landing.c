/* op_landing.c — the landing check of the file tools (jb_scan_landing, lib/scan.h): where a
 * write, an edit, a mkdir or a move puts an entry, is it a place a tool on the buyer's host
 * runs or reads for what to run? Checked are the path of a write or an edit, a mkdir's path
 * and each directory it may make on the way, a move's source (an entry that leaves such a
 * place lets another take its place, and moving `.git` away changes what git finds), its
 * destination and, for a directory, every entry of the tree as it would land under the
 * destination (the names come from the shim, bounded, and the move is bound to them:
 * `expectTree`), and a delete's path with, for a directory, every entry of its tree. A path is
 * also a landing on the covered place when the pre-scan found a
 * symbolic link there that resolves to it ("landing_link" entries of the session's pre-scan
 * flags: writing `scripts/hook.sh` writes the hook `.git/hooks/pre-commit -> ../../scripts/
 * hook.sh`). A flagged landing is refused as a flagged write is: an audit entry decided by
 * the scanner, a security alert, `flagged` for the agent — before any rule, reviewer or
 * buyer is asked. */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db/events.h"
#include "lib/scan.h"
#include "server/app.h"

/* A landing found: where, by which rule, through which covered link (or ""). */
struct landing {
  char path[JB_PATH_MAX + 2];
  char rule[JB_SCAN_ID_MAX + 1];
  char link[JB_PATH_MAX + 1];
};

/* Whether `path` (a directory when `is_dir`) is a covered link's target, below a target, or
 * (a directory) holds a target: the link's path into l->link. Case is ignored, as the path
 * rules ignore it: on a case-insensitive file system (the buyer's copy of the workspace on
 * one) "TOOLS/hooks/x" is "tools/hooks/x". */
static bool link_target_hit(const char *path, bool is_dir, const json_t *flagged,
                            struct landing *l) {
  size_t i, n = strlen(path);
  json_t *f;
  json_array_foreach (flagged, i, f) {
    if (strcmp(json_string_value(json_object_get(f, "kind")) ?: "", "landing_link")) continue;
    const char *t = json_string_value(json_object_get(f, "path"));
    const char *link = json_string_value(json_object_get(f, "link"));
    if (!t || !link) continue;
    size_t tn = strlen(t);
    bool hit = !strcmp(t, ".") ||
               (!strncasecmp(path, t, tn) && (path[tn] == '\0' || path[tn] == '/')) ||
               (is_dir && tn > n && !strncasecmp(t, path, n) && t[n] == '/');
    if (hit) {
      snprintf(l->link, sizeof l->link, "%s", link);
      return true;
    }
  }
  return false;
}

/* Whether `path` lies in a directory named .git (any case). The file tools never put an entry
 * there, not even git's own data that the path rules leave open for a writable command's git
 * commit: bytes written there by hand (a packed object and a replacement ref, an index entry,
 * HEAD naming another ref) make the buyer's git show or check out what the buyer never saw. */
static bool in_git_dir(const char *path) {
  for (const char *c = path; c; c = strchr(c, '/'), c = c ? c + 1 : NULL)
    if (!strncasecmp(c, ".git/", 5)) return true;
  return false;
}

/* Whether an entry landing at `path` (a directory when `is_dir`) is flagged: by the path
 * rules, in a .git directory, or through a covered link that resolves there. True with *l
 * filled. */
static bool landing_flagged(const struct op_call *call, const char *path, bool is_dir,
                            struct landing *l) {
  snprintf(l->path, sizeof l->path, "%s", path);
  l->link[0] = '\0';
  if (jb_scan_landing_in_use(path, is_dir, l->rule, sizeof l->rule)) return true;
  if (in_git_dir(path)) {
    snprintf(l->rule, sizeof l->rule, "git_config");
    return true;
  }
  /* as the buyer's file system may take it too (a fold of a letter, an ignored code point) */
  bool oom = false;
  char *folded = jb_scan_path_folded(path, &oom);
  bool hit = oom || link_target_hit(path, is_dir, call->sess.flagged, l) ||
             (folded && link_target_hit(folded, is_dir, call->sess.flagged, l));
  free(folded);
  if (oom) {
    snprintf(l->rule, sizeof l->rule, "scanner_unavailable");
    return true;
  }
  if (!hit) return false;
  /* the rule that covers the link (a directory link's target is a directory) */
  if (!jb_scan_landing_in_use(l->link, true, l->rule, sizeof l->rule))
    snprintf(l->rule, sizeof l->rule, "landing_link");
  return true;
}

/* The severity of rule `id` in the rules in use ("critical" when unknown). */
static const char *rule_severity(const char *id) {
  const struct jb_scan_rules *r = jb_scan_rules_in_use();
  for (size_t i = 0; r && i < jb_scan_rules_count(r); i++)
    if (!strcmp(jb_scan_rule_id(r, i), id)) return jb_scan_rule_severity(r, i);
  return "critical";
}

/* The text field `key` of `o` as "sha256:<hex of it>" (as op_fit_path does for "path"). */
static void field_as_hash(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v) || json_string_length(v) < 80) return;
  unsigned char h[32];
  char note[80] = "sha256:";
  crypto_hash_sha256(h, (const unsigned char *)json_string_value(v), json_string_length(v));
  sodium_bin2hex(note + 7, sizeof note - 7, h, sizeof h);
  json_object_set_new(o, key, json_string(note));
}

/* The alert `ev` made to fit one notification: the long paths it names (the landing, the
 * destination, the link, then the path) stand as their hashes, the audit entry keeps them. */
static void fit_alert(const char *job, json_t *ev) {
  size_t size = jb_db_event_size(job, JB_EVENT_SECURITY_ALERT, ev);
  if (!size || size <= JB_EVENT_MAX_BYTES) return;
  json_t *f = json_array_get(json_object_get(ev, "findings"), 0);
  field_as_hash(ev, "landing");
  field_as_hash(ev, "destination");
  field_as_hash(f, "landing");
  field_as_hash(f, "link");
  op_fit_path(job, JB_EVENT_SECURITY_ALERT, ev);
}

/* Refuses the call for landing `l`: audit entry (decidedBy scanner), security alert
 * (flagged_landing), `flagged` for the agent. */
static enum op_step refuse_landing(struct op_call *call, const struct landing *l) {
  const char *tool = jb_tool_name(call->tool);
  json_t *finding = json_pack("{s:s,s:s,s:s}", "rule", l->rule, "severity", rule_severity(l->rule),
                              "landing", l->path);
  if (finding && l->link[0]) json_object_set_new(finding, "link", json_string(l->link));
  json_t *findings = json_pack("[o?]", finding);
  json_t *rules = json_pack("[s]", l->rule);
  op_audit_refusal(call, call->path,
                   json_pack("{s:s,s:s,s:s,s:O?,s:O?,s:s,s:s?}", "error", "flagged", "decision",
                             "flagged", "decidedBy", "scanner", "rules", rules, "findings",
                             findings, "landing", l->path, "destination", call->dest));
  json_t *ev = json_pack("{s:s,s:s,s:s,s:s,s:s,s:O?,s:O?}", "jobId", call->job, "kind",
                         "flagged_landing", "tool", tool, "path", call->path, "landing", l->path,
                         "rules", rules, "findings", findings);
  if (ev && call->dest) json_object_set_new(ev, "destination", json_string(call->dest));
  json_decref(rules);
  json_decref(findings);
  if (ev) {
    fit_alert(call->job, ev);
    jb_bus_publish(call->app->bus, call->job, JB_EVENT_SECURITY_ALERT, ev);
  }
  op_error(call->e, JB_MCP_FLAGGED, "flagged",
           "the content scanner flagged this %s: %.300s%s%.300s would land where a tool on the "
           "buyer's host runs or reads what to run (%s)",
           tool, l->path, l->link[0] ? ", the target of " : "", l->link, l->rule);
  return OP_END;
}

enum op_step op_check_landing_path(struct op_call *call, const char *path, bool is_dir) {
  struct landing l;
  return landing_flagged(call, path, is_dir, &l) ? refuse_landing(call, &l) : OP_NEXT;
}

/* mkdir: the path and each directory above it that it may make. */
static enum op_step check_mkdir(struct op_call *call) {
  char p[JB_PATH_MAX + 1];
  snprintf(p, sizeof p, "%s", call->path);
  for (;;) {
    enum op_step s = op_check_landing_path(call, p, true);
    if (s != OP_NEXT) return s;
    char *slash = strrchr(p, '/');
    if (!slash) return OP_NEXT;
    *slash = '\0';
  }
}

/* bytes of the list of the folders a write or a move may make, as JSON: it goes into the op's
 * row, its approval and the audit entry of the op, whose canonical form holds 64 KiB at most
 * with the path (up to 4096 bytes, six a byte escaped) and the other details */
#define PARENTS_BYTES_MAX 16384

/* The folders above `path` by their paths ("a/b/c.txt": ["a", "a/b"]), new. */
static json_t *parents_of(const char *path) {
  json_t *all = json_array();
  for (const char *c = strchr(path, '/'); all && c; c = strchr(c + 1, '/'))
    if (json_array_append_new(all, json_stringn(path, (size_t)(c - path))) < 0) {
      json_decref(all);
      all = NULL;
    }
  return all;
}

/* Removes the first `n` items of array `a`. */
static void drop_first(json_t *a, size_t n) {
  while (n-- > 0 && json_array_size(a) > 0) json_array_remove(a, 0);
}

enum op_step op_check_parents(struct op_call *call, const char *path) {
  json_t *flag = json_object_get(call->args, "createParents");
  json_object_del(call->sargs, "createParents"); /* the agent's boolean, copied */
  if (json_is_false(flag)) return OP_NEXT;
  json_t *all = parents_of(path);
  if (!all) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  if (json_object_set_new(call->sargs, "createParents", all) < 0) { /* then `all` is held */
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "out of memory");
    return OP_END;
  }
  /* a long list (a deep path) is narrowed to the folders missing now, which must fit */
  size_t bytes = json_dumpb(all, NULL, 0, JSON_COMPACT), i;
  if (bytes > PARENTS_BYTES_MAX) {
    enum op_step s = op_parents_exact(call, NULL);
    if (s != OP_NEXT) return s;
    bytes = json_dumpb(all, NULL, 0, JSON_COMPACT);
  }
  if (bytes > PARENTS_BYTES_MAX) {
    op_error(call->e, JB_MCP_TOO_LARGE, "too_large",
             "the folders above %.300s are too many or too long to make with it (%zu bytes of "
             "their paths as JSON, at most %d): make them with mkdir first",
             path, bytes, PARENTS_BYTES_MAX);
    return OP_END;
  }
  /* a folder the landing check flags is made by no write or move: the deepest such one
   * decides (those above it exist when it does) */
  struct landing l, flagged;
  long deepest = -1;
  for (i = 0; i < json_array_size(all); i++)
    if (landing_flagged(call, json_string_value(json_array_get(all, i)), true, &l)) {
      deepest = (long)i;
      flagged = l;
    }
  if (deepest >= 0) {
    json_t *cur = NULL;
    enum op_step s = op_stat_path(call, flagged.path, false, &cur, true);
    bool exists = json_is_true(json_object_get(cur, "exists"));
    json_decref(cur);
    if (s == OP_NEXT && !exists) s = refuse_landing(call, &flagged);
    if (s != OP_NEXT) return s;
    drop_first(all, (size_t)deepest + 1); /* they exist: none is made */
  }
  return OP_NEXT;
}

enum op_step op_parents_exact(struct op_call *call, json_t *target) {
  json_t *allowed = json_object_get(call->sargs, "createParents");
  size_t lo = 0, hi = json_array_size(allowed);
  if (json_is_true(json_object_get(target, "exists"))) lo = hi; /* its folders exist */
  /* the folders before lo exist, from hi on they are missing (a folder exists only in one
   * that exists): a binary search, a stat a step */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    json_t *cur = NULL;
    enum op_step s =
        op_stat_path(call, json_string_value(json_array_get(allowed, mid)), false, &cur, true);
    bool exists = json_is_true(json_object_get(cur, "exists"));
    json_decref(cur);
    if (s != OP_NEXT) return s;
    if (exists)
      lo = mid + 1;
    else
      hi = mid;
  }
  drop_first(allowed, lo);
  return OP_NEXT;
}

/* The SHA-256 (hex) of tree names `entries` as the shim hashes them: each followed by NUL. */
static void names_sha(json_t *entries, char hex[65]) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  size_t i;
  json_t *x;
  json_array_foreach (entries, i, x) {
    crypto_hash_sha256_update(&st, (const unsigned char *)json_string_value(x),
                              json_string_length(x));
    crypto_hash_sha256_update(&st, (const unsigned char *)"", 1);
  }
  unsigned char h[32];
  crypto_hash_sha256_final(&st, h);
  sodium_bin2hex(hex, 65, h, sizeof h);
}

/* Every entry of the tree of a directory (call->current's "tree": the names the shim listed)
 * as it lands under `under` (a move's destination) or as it is (a delete: the path itself).
 * OP_NEXT with `entries` set to them (borrowed), or a refusal. */
static enum op_step check_tree_under(struct op_call *call, const char *under,
                                     json_t **entries_out) {
  json_t *entries = json_object_get(json_object_get(call->current, "tree"), "entries");
  if (!json_is_array(entries)) {
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "the tree of %.300s could not be had to check where it lands", call->path);
    return OP_END;
  }
  size_t i;
  json_t *x;
  char p[2 * JB_PATH_MAX + 4];
  json_array_foreach (entries, i, x) {
    const char *name = json_string_value(x);
    size_t n = json_string_length(x);
    if (!name || n == 0 || strlen(name) != n) continue; /* hashed below all the same */
    bool dir = name[n - 1] == '/';
    int k = snprintf(p, sizeof p, "%s/%.*s", under, (int)(n - dir), name);
    if (k < 0 || (size_t)k >= sizeof p) continue; /* the shim refuses the move: over PATH_MAX */
    enum op_step s = op_check_landing_path(call, p, dir);
    if (s != OP_NEXT) return s;
  }
  *entries_out = entries;
  return OP_NEXT;
}

/* A directory's move: every entry of its tree as it lands under the destination; the move
 * bound to those names. */
static enum op_step check_tree(struct op_call *call) {
  json_t *entries = NULL;
  enum op_step s = check_tree_under(call, call->dest, &entries);
  if (s != OP_NEXT) return s;
  char hex[65];
  names_sha(entries, hex);
  json_object_set_new(call->sargs, "expectTree", json_string(hex));
  /* the names stay out of what the buyer is shown of the source (the approval request) */
  json_object_del(call->current, "tree");
  return OP_NEXT;
}

/* move: the source as it is (a stat op with its tree), both ends, and a directory's tree. */
static enum op_step check_move(struct op_call *call) {
  enum op_step s = op_stat_path(call, call->path, true, &call->current, false);
  if (s != OP_NEXT) return s;
  bool dir = !strcmp(json_string_value(json_object_get(call->current, "type")) ?: "", "dir");
  s = op_check_landing_path(call, call->path, dir);
  if (s == OP_NEXT) s = op_check_landing_path(call, call->dest, dir);
  if (s == OP_NEXT) s = op_check_parents(call, call->dest);
  if (s == OP_NEXT && dir) return check_tree(call);
  /* a file (or nothing: the move fails not_found): bound to moving no directory */
  if (s == OP_NEXT) json_object_set_new(call->sargs, "expectTree", json_string("file"));
  return s;
}

/* delete: an entry that leaves a covered place (a hook, git's config, a workflow) changes what
 * the buyer's tools run as much as one that lands there — removing a hook that scans commits
 * for secrets, or making room for a link in its place: the path and, for a directory, every
 * entry of its tree as it is (a tree over the shim's bound is refused, as a move's is). */
static enum op_step check_delete(struct op_call *call) {
  enum op_step s = op_stat_path(call, call->path, true, &call->current, false);
  if (s != OP_NEXT) return s;
  const char *type = json_string_value(json_object_get(call->current, "type")) ?: "";
  bool dir = !strcmp(type, "dir");
  /* a link is judged as a directory too: it may stand for one (.husky -> hooks) */
  s = op_check_landing_path(call, call->path, dir || !strcmp(type, "symlink"));
  json_t *entries = NULL;
  if (s == OP_NEXT && dir) s = check_tree_under(call, call->path, &entries);
  json_object_del(call->current, "tree"); /* not shown in the approval request */
  return s;
}

enum op_step op_check_landing(struct op_call *call) {
  switch (call->tool) {
    case JB_TOOL_WRITE: /* its path was checked with its content (op_scan_content) */
      return op_check_parents(call, call->path);
    case JB_TOOL_EDIT:
      return op_check_landing_path(call, call->path, false);
    case JB_TOOL_MKDIR:
      return check_mkdir(call);
    case JB_TOOL_MOVE:
      return check_move(call);
    case JB_TOOL_DELETE:
      return check_delete(call);
    default:
      return OP_NEXT;
  }
}
