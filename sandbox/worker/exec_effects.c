/* exec_effects.c — a writable command's effects on its session's workspace (exec_effects.h):
 * the walks around it and the changes between them, what the file tools refuse removed, the
 * landing check, the change list kept beside the op and summarised in its entry. */
#define _GNU_SOURCE
#include "sandbox/worker/exec_effects.h"

#include <errno.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db/ops.h"
#include "db/sessions.h"

#define SNAPSHOT_MAX 250000 /* entries walked before and after a writable command */
#define CHANGES_MAX \
  10000 /* changes of a writable command listed (kept beside its op: ops.changes); all are
         * counted */
#define CHANGES_KEPT_BYTES (4 * 1024 * 1024) /* canonical bytes of the list kept, at most */
#define CHANGES_RESULT_MAX 1000 /* changes listed in the agent's result */

/* Monotonic time in milliseconds with microseconds, for the stage timings. */
static double mono_msf(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* The canonical bytes of JSON value `v` (new, NUL-ended, length in *len; NULL when out of
 * memory): by the rules of an entry's canonical bytes (api/audit.md "Canonical bytes":
 * json_dumps with JSON_COMPACT | JSON_SORT_KEYS), so that a verifier of the chain has them. */
static char *canonical_json(json_t *v, size_t *len) {
  char *t = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  if (t) *len = strlen(t);
  return t;
}

json_t *exec_changes_kept(json_t *changes, size_t total) {
  size_t n = json_array_size(changes), listed = 0, bytes = 2; /* "[" and "]" */
  json_int_t counts[7] = {0};
  static const char *const kinds[7] = {"added",   "deleted", "modified", "mode",
                                       "flagged", "removed", "restored"};
  for (; listed < n; listed++) {
    json_t *c = json_array_get(changes, listed);
    size_t cl = 0;
    char *ct = canonical_json(c, &cl);
    free(ct);
    if (!ct || bytes + cl + (listed ? 1 : 0) > CHANGES_KEPT_BYTES) break;
    bytes += cl + (listed ? 1 : 0);
    const char *change = json_string_value(json_object_get(c, "change"));
    for (int k = 0; k < 4; k++)
      if (change && !strcmp(change, kinds[k])) counts[k]++;
    if (json_object_get(c, "flagged")) counts[4]++;
    if (json_is_true(json_object_get(c, "removed"))) counts[5]++;
    if (json_is_true(json_object_get(c, "restored"))) counts[6]++;
  }
  json_t *list = json_array();
  for (size_t i = 0; list && i < listed; i++)
    if (json_array_append(list, json_array_get(changes, i)) < 0) json_array_clear(list);
  size_t cl = 0;
  char *canon = list ? canonical_json(list, &cl) : NULL;
  if (!canon) {
    json_decref(list);
    return NULL;
  }
  unsigned char h[32];
  char hx[65];
  crypto_hash_sha256(h, (const unsigned char *)canon, cl);
  sodium_bin2hex(hx, sizeof hx, h, sizeof h);
  free(canon);
  json_t *cj = json_object();
  for (int k = 0; k < 7; k++) json_object_set_new(cj, kinds[k], json_integer(counts[k]));
  return json_pack("{s:I,s:I,s:b,s:o,s:s,s:o}", "total", (json_int_t)total, "listed",
                   (json_int_t)listed, "truncated", listed < total, "counts", cj, "sha256", hx,
                   "list", list);
}

json_t *exec_changes_summary(json_t *kept) {
  json_t *s = kept ? json_copy(kept) : NULL;
  if (s) json_object_del(s, "list");
  return s;
}

json_t *exec_changes_for_result(json_t *kept) {
  json_t *list = json_object_get(kept, "list"), *out = json_array();
  for (size_t i = 0; out && i < json_array_size(list) && i < CHANGES_RESULT_MAX; i++)
    json_array_append(out, json_array_get(list, i));
  return out;
}

static int entry_by_path(const void *key, const void *e) {
  return strcmp((const char *)key, ((const struct jb_scan_entry *)e)->path);
}

/* The hard-linked names of a walk in one order: by file (device, inode), then the names that
 * were there before the command first, then by path. */
struct link_name {
  const struct jb_scan_entry *e;
  bool existed;
};

static int by_file(const void *a, const void *b) {
  const struct link_name *x = a, *y = b;
  if (x->e->dev != y->e->dev) return x->e->dev < y->e->dev ? -1 : 1;
  if (x->e->ino != y->e->ino) return x->e->ino < y->e->ino ? -1 : 1;
  if (x->existed != y->existed) return x->existed ? -1 : 1;
  return strcmp(x->e->path, y->e->path);
}

/* Removes entry `e` the command left (`kind`: what it is), marks it in `changes` (flagged,
 * removed) and keeps the first one's description in `what`. */
static void remove_left(struct jb_worker *w, struct jb_session *s, const struct jb_scan_entry *e,
                        const char *kind, json_t *changes, char *what, size_t wsize) {
  jb_error re = {0};
  bool removed = jb_workspace_remove(s->workspace, e->path, &re) == 0 || re.code == ENOENT;
  slog(w, JB_LOG_WARN, s->job_id, "exec left an entry the file tools refuse", "path", e->path,
       "kind", kind, "removed", removed ? "yes" : re.msg, NULL);
  size_t k;
  json_t *c, *pj = jb_scan_path_json(e->path); /* as the changes name it */
  json_array_foreach (changes, k, c)
    if (pj && json_equal(json_object_get(c, "path"), pj)) {
      json_object_set_new(c, "flagged", json_string(kind));
      json_object_set_new(c, "removed", json_boolean(removed));
    }
  if (!what[0]) {
    json_t *tj = e->type == 'l' && e->detail ? jb_scan_path_json(e->detail) : NULL;
    snprintf(what, wsize, "%s %.200s%s%.60s", kind, pj ? json_string_value(pj) : "?",
             tj ? " -> " : "", tj ? json_string_value(tj) : "");
    json_decref(tj);
    /* (a character split by the cuts above is clipped with the detail: db/escape.c) */
  }
  json_decref(pj);
}

/* The bounds of the walks around a writable command (the worker's settings). */
static struct jb_walk_limits effects_limits(const struct jb_worker *w) {
  return (struct jb_walk_limits){
      .max_entries = w->set.effects_max_entries ? w->set.effects_max_entries : SNAPSHOT_MAX,
      .hash_max = w->prescan_hash_max,
      .hash_budget = (long long)w->set.effects_hash_max_mib << 20,
      .time_ms = w->set.effects_max_ms};
}

/* The bounds of the stat-only sweeps around a writable command (the worker's settings);
 * `since_ns` as jb_sweep_limits. */
static struct jb_sweep_limits sweep_limits(const struct jb_worker *w, long long since_ns) {
  return (struct jb_sweep_limits){
      .max_entries = w->set.effects_sweep_max_entries ? w->set.effects_sweep_max_entries : 2000000,
      .time_ms = w->set.effects_sweep_max_ms,
      .since_ns = since_ns};
}

/* The places the git configurations of the work trees in `before` (the root's and each one
 * whose .git/config the walk saw) make git's own, into `places` (JB_GIT_PLACES_MAX), made the
 * calling thread's for the landing check (jb_landing_places) until the effects are judged. */
static void git_places(const char *root, const struct jb_scan_snapshot *before,
                       struct jb_git_place *places) {
  size_t n = jb_git_config_places(root, "", places, JB_GIT_PLACES_MAX);
  for (size_t i = 0; i < before->n && n < JB_GIT_PLACES_MAX; i++) {
    const char *p = before->v[i].path;
    size_t l = strlen(p);
    if (before->v[i].type != 'f' || l <= 12 || strcmp(p + l - 12, "/.git/config")) continue;
    char repo[PATH_MAX];
    snprintf(repo, sizeof repo, "%.*s", (int)(l - 12), p);
    n += jb_git_config_places(root, repo, places + n, JB_GIT_PLACES_MAX - n);
  }
  jb_landing_places(places, n);
}

int exec_effects_before(struct jb_worker *w, struct jb_session *s, struct jb_scan_snapshot *before,
                        struct jb_git_place *places, struct jb_preimage **pre, jb_error *err) {
  struct jb_walk_limits lim = effects_limits(w);
  struct jb_scan_snapshot *prev = atomic_exchange(&s->effects_prev, NULL);
  int rc = jb_workspace_snapshot_since(s->workspace, &lim, prev, before, err);
  jb_scan_snapshot_free(prev);
  free(prev);
  if (rc == 0) git_places(s->workspace, before, places);
  double t0 = mono_msf();
  struct jb_sweep_limits sl = sweep_limits(w, 0);
  if (rc == 0 && jb_preimage_take_swept(s->workspace, before, &sl, pre, err) < 0) {
    jb_scan_snapshot_free(before);
    rc = -1;
  }
  char ms[32]; /* what the landing check costs (bench/exec) */
  snprintf(ms, sizeof ms, "%.1f", mono_msf() - t0);
  slog(w, JB_LOG_INFO, s->job_id, "exec landing timings", "preimageMs", ms, NULL);
  return rc;
}

void exec_hold_writable(struct jb_worker *w, const char *job, const char *why) {
  jb_error err = {0};
  cleanup_conn struct worker_conn conn = worker_conn(w, &err);
  if (!conn.pg || jb_db_session_effects_incomplete(conn.pg, job, why, &err) != JB_OK)
    slog(w, JB_LOG_ERROR, job, err.msg, "step", "hold writable commands", NULL);
}

int exec_writable_held(PGconn *c, const char *job, char *why, size_t wsize) {
  jb_error err = {0};
  int rc = jb_db_session_effects_held(c, job, why, wsize, &err);
  if (rc != JB_OK) snprintf(why, wsize, "%s", err.msg);
  return rc != JB_OK ? -1 : why[0] ? 1 : 0;
}

/* The symbolic links of `after` that lead out, each resolved against the tree as it now is
 * (jb_scan_link_resolve): one the command made or changed is removed; for one it did not,
 * the links it made or changed on its way are removed (what the buyer had stays; when only a
 * directory the command made takes it out, it is named in `what` and left). A link that led
 * out as it was before the command (nothing on its way changed) was flagged before. */
static void links_out(struct jb_worker *w, struct jb_session *s,
                      const struct jb_scan_snapshot *after, const bool *changed, json_t *changes,
                      char *what, size_t wsize) {
  for (size_t i = 0; i < after->n; i++) {
    const struct jb_scan_entry *e = &after->v[i];
    if (e->type != 'l') continue;
    bool touched = false;
    size_t via[64], nvia = 0;
    bool out = jb_scan_link_resolve(after, i, changed, &touched, via, 64, &nvia) != 0 ||
               (e->kind && !strcmp(e->kind, "symlink_outside"));
    if (!out && changed[i]) out = jb_workspace_link_leaves(s->workspace, e->path) != 0;
    if (!out || !touched) continue;
    if (changed[i]) {
      remove_left(w, s, e, "symlink_outside", changes, what, wsize);
      continue;
    }
    bool any = false;
    for (size_t k = 1; k < nvia; k++)
      if (changed[via[k]]) {
        remove_left(w, s, &after->v[via[k]], "symlink_outside", changes, what, wsize);
        any = true;
      }
    if (!any && !what[0])
      snprintf(what, wsize,
               "symlink_outside %.200s now leads out through a directory the "
               "command made",
               e->path);
  }
}

json_t *exec_workspace_effects(struct jb_worker *w, struct jb_session *s,
                               const struct jb_scan_snapshot *before, const struct jb_preimage *pre,
                               size_t *total, bool *incomplete, bool *swept_out, int *sig,
                               char *what, size_t wsize) {
  struct jb_scan_snapshot after;
  jb_error err = {0};
  *incomplete = before->truncated;
  *swept_out = false;
  bool changed_ok = true; /* the links were judged */
  what[0] = '\0';
  struct jb_walk_limits lim = effects_limits(w);
  char alert[400];
  if (jb_workspace_snapshot_since(s->workspace, &lim, before, &after, &err) < 0) {
    slog(w, JB_LOG_WARN, s->job_id, "exec: the workspace could not be read after the command",
         "error", err.msg, NULL);
    *incomplete = true;
    snprintf(what, wsize, "the workspace could not be read after a writable command");
    exec_hold_writable(w, s->job_id, what);
    snprintf(alert, sizeof alert, "exec: %s", what);
    raise_alert_now(w, s->job_id, JB_SIG_DENIED_PATH, alert);
    return NULL;
  }
  bool cut = after.truncated;
  json_t *changes = jb_scan_changes(before, &after, CHANGES_MAX, total);
  struct link_name *links = calloc(after.n ? after.n : 1, sizeof *links);
  bool *changed = calloc(after.n ? after.n : 1, sizeof *changed);
  size_t nlinks = 0;
  for (size_t i = 0; i < after.n && changed; i++) {
    const struct jb_scan_entry *e = &after.v[i];
    const struct jb_scan_entry *b =
        before->n ? bsearch(e->path, before->v, before->n, sizeof *before->v, entry_by_path) : NULL;
    changed[i] = jb_scan_entry_changed(before, &after, i);
    if (e->kind && !strcmp(e->kind, "hardlink")) {
      if (links) links[nlinks++] = (struct link_name){.e = e, .existed = b != NULL};
      continue;
    }
    if (!changed[i] && (!b || b->type == e->type)) continue; /* as it was: the buyer's */
    if (e->type != 'l' && e->kind && strcmp(e->kind, "too_large") &&
        strcmp(e->kind, "symlink_outside")) /* fifo, socket, device */
      remove_left(w, s, e, e->kind, changes, what, wsize);
  }
  double t0 = mono_msf();
  if (changed)
    links_out(w, s, &after, changed, changes, what, wsize);
  else
    changed_ok = false; /* out of memory: the links were not judged */
  free(changed);
  if (links && nlinks > 1) qsort(links, nlinks, sizeof *links, by_file);
  for (size_t i = 0; links && i < nlinks; i++) {
    bool keeper =
        i == 0 || links[i - 1].e->dev != links[i].e->dev || links[i - 1].e->ino != links[i].e->ino;
    if (!keeper && !links[i].existed)
      remove_left(w, s, links[i].e, "hardlink", changes, what, wsize);
  }
  free(links);
  struct jb_landing_outcome lo;
  jb_landing_undo(s->workspace, before, &after, pre, changes, &lo);
  /* a walk cut after the command: what lies past the cut is swept for landings (stat only) */
  char sweep_why[48] = "";
  bool swept = false;
  if ((cut || before->truncated) && !lo.incomplete) {
    /* (a ctime a tick late, as git's racy-git rule) */
    struct jb_sweep_limits sl = sweep_limits(w, before->started_ns - 2000000000LL);
    double ts = mono_msf();
    swept = jb_landing_sweep(s->workspace, before, &after, pre, &sl, changes, &lo, sweep_why,
                             sizeof sweep_why);
    char sms[32];
    snprintf(sms, sizeof sms, "%.1f", mono_msf() - ts);
    slog(w, JB_LOG_INFO, s->job_id, "exec landing sweep", "sweepMs", sms, "whole",
         swept ? "yes" : sweep_why, NULL);
  }
  char ms[32]; /* what the landing check and the links cost (bench/exec) */
  snprintf(ms, sizeof ms, "%.1f", mono_msf() - t0);
  slog(w, JB_LOG_INFO, s->job_id, "exec landing timings", "checksMs", ms, NULL);
  *incomplete = lo.incomplete || ((cut || before->truncated) && !swept) || !changed_ok;
  *swept_out = swept;
  const char *why = after.why[0]     ? after.why
                    : before->why[0] ? before->why
                    : lo.incomplete  ? "pre-image over its bound"
                                     : "";
  char first[300];
  snprintf(first, sizeof first, "%s", what[0] ? what : lo.first);
  if (*incomplete) { /* said first, whatever else was found */
    slog(w, JB_LOG_WARN, s->job_id, "exec: the walk of the workspace was not whole", "why", why,
         "sweep", sweep_why, NULL);
    snprintf(what, wsize,
             "effects incomplete (%s)%s%s%s: what the command left past the walk was not "
             "checked%s%.200s",
             why, sweep_why[0] ? ", sweep cut (" : "", sweep_why, sweep_why[0] ? ")" : "",
             first[0] ? "; " : "", first);
  } else if ((cut || before->truncated) && first[0]) {
    snprintf(what, wsize, "walk cut (%s), the rest swept for landings: %.200s", why, first);
  } else {
    snprintf(what, wsize, "%s", first);
  }
  if (*incomplete) exec_hold_writable(w, s->job_id, what);
  if (what[0]) {
    snprintf(alert, sizeof alert, "exec: %s", what);
    raise_alert_now(w, s->job_id, JB_SIG_DENIED_PATH, alert);
  }
  *sig = -1;
  struct jb_scan_snapshot *keep = malloc(sizeof *keep);
  if (keep)
    *keep = after;
  else
    jb_scan_snapshot_free(&after);
  struct jb_scan_snapshot *old = atomic_exchange(&s->effects_prev, keep);
  jb_scan_snapshot_free(old);
  free(old);
  return changes;
}
