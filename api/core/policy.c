/* policy.c — approval rules on the op path and from the buyer (see policy.h): the rules
 * stage of a tool call (op_apply_rules, api/core/op_call.h) and the buyer's rule requests. */
#define _GNU_SOURCE
#include "api/core/policy.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/core/op_call.h"
#include "db/events.h"
#include "db/ops.h"
#include "db/policy.h"
#include "lib/log.h"
#include "lib/policy.h"
#include "server/app.h"
#include "server/bus.h"

#define POLICY_FILE_MAX (1024 * 1024) /* bytes of JAILBOX_POLICY_FILE */

/* The operator's rules (JAILBOX_POLICY_FILE): set once at start, read-only after. */
static json_t *operator_first; /* locked: before every session's rules */
static json_t *operator_last; /* the others: after them */

int jb_policy_operator_load(const char *path, jb_error *err) {
  if (!path || !path[0]) return 0;
  FILE *f = fopen(path, "re");
  if (!f) return jb_fail_errno(err, errno, "%s", path);
  char *text = malloc(POLICY_FILE_MAX + 1);
  size_t n = text ? fread(text, 1, POLICY_FILE_MAX + 1, f) : 0;
  int rerr = ferror(f);
  fclose(f);
  if (!text) return jb_fail(err, ENOMEM, "%s: out of memory", path);
  if (rerr || n > POLICY_FILE_MAX) {
    free(text);
    return jb_fail(err, EFBIG, "%s: %s", path,
                   rerr ? "cannot be read" : "over 1 MiB: not a policy file");
  }
  char msg[600];
  json_t *rules = jb_policy_file_parse(text, n, path, (long long)time(NULL), msg, sizeof msg);
  free(text);
  if (!rules) return jb_fail(err, EINVAL, "%s", msg);
  operator_first = json_array();
  operator_last = json_array();
  size_t i;
  json_t *r;
  json_array_foreach (rules, i, r) {
    json_object_set_new(r, "source", json_string("operator"));
    json_array_append(json_is_true(json_object_get(r, "locked")) ? operator_first : operator_last,
                      r);
  }
  json_decref(rules);
  jb_log(JB_LOG_INFO, "operator policy loaded", "file", path, NULL);
  return 0;
}

/* The operator's rule named `id`, or NULL. */
static const json_t *operator_rule(const char *id) {
  json_t *lists[2] = {operator_first, operator_last};
  for (int k = 0; k < 2; k++) {
    size_t i;
    json_t *r;
    json_array_foreach (lists[k], i, r)
      if (!strcmp(json_string_value(json_object_get(r, "id")) ?: "", id)) return r;
  }
  return NULL;
}

const char *jb_policy_operator_id_in(const json_t *rules) {
  size_t i;
  json_t *r;
  json_array_foreach ((json_t *)rules, i, r) {
    const char *id = json_string_value(json_object_get(r, "id"));
    if (id && operator_rule(id)) return id;
  }
  return NULL;
}

/* The rules that decide in session order: the operator's locked ones, `session` (stolen), the
 * operator's others. New. */
static json_t *with_operator(json_t *session) {
  if (!operator_first) return session;
  json_t *all = json_array();
  json_array_extend(all, operator_first);
  json_array_extend(all, session);
  json_array_extend(all, operator_last);
  json_decref(session);
  return all;
}

/* A database result of the rules of session `job` (reply.h jb_reply_db; a conflict is 409
 * conflict with `conflict`). */
static void db_reply(struct jb_reply *out, int rc, const jb_error *err, const char *job,
                     const char *conflict) {
  char nf[200];
  snprintf(nf, sizeof nf, "no session '%s'", job);
  jb_reply_db(out, rc, err, nf, conflict, NULL);
}

static void publish_head(struct jb_app *app, const char *job, const struct jb_audit_head *h) {
  if (h->seq > 0) jb_bus_publish(app->bus, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(h));
}

/* The jailbox:rule event: {jobId, action, ruleId, rule?, by, opId?}. */
static void announce(struct jb_app *app, const char *job, const char *action, const char *rule_id,
                     const json_t *rule, const char *by, long long op_id) {
  json_t *ev =
      json_pack("{s:s,s:s,s:s,s:s}", "jobId", job, "action", action, "ruleId", rule_id, "by", by);
  if (!ev) return;
  if (rule) json_object_set(ev, "rule", (json_t *)rule);
  if (op_id > 0) json_object_set_new(ev, "opId", json_integer(op_id));
  if (jb_db_event_size(job, JB_EVENT_RULE, ev) > JB_EVENT_MAX_BYTES)
    json_object_del(ev, "rule"); /* a long glob list: the id says which; GET …/rules has it */
  jb_bus_publish(app->bus, job, JB_EVENT_RULE, ev);
}

/* Stores the checked rules `rules` made by `by` and announces each. */
static void store(struct jb_app *app, PGconn *c, const char *job, const json_t *rules,
                  const char *by, long long op_id, struct jb_reply *out) {
  char msg[400] = "";
  jb_error err = {0};
  struct jb_audit_head head = {0};
  int rc = jb_db_rules_add(c, jb_signer_key(app->signer), job, rules, by, op_id, &head, msg,
                           sizeof msg, &err);
  jb_policy_rules_changed(job);
  if (rc != JB_OK) {
    db_reply(out, rc, &err, job, msg);
    return;
  }
  publish_head(app, job, &head);
  size_t i;
  json_t *r;
  json_array_foreach ((json_t *)rules, i, r)
    announce(app, job, "added", json_string_value(json_object_get(r, "id")), r, by, op_id);
  out->status = 201;
  out->body = json_pack("{s:O}", "rules", (json_t *)rules);
}

void jb_policy_add(struct jb_app *app, PGconn *c, const char *job, const json_t *in, const char *by,
                   struct jb_reply *out) {
  memset(out, 0, sizeof *out);
  json_t *list = json_is_array(in) ? json_incref((json_t *)in) : json_pack("[O]", (json_t *)in);
  char msg[400];
  json_t *rules = jb_rules_check(list, 0, false, (long long)time(NULL), msg, sizeof msg);
  json_decref(list);
  if (!rules) {
    jb_reply_fail(out, 400, "bad_request", "%s", msg);
    return;
  }
  const char *id = jb_policy_operator_id_in(rules);
  if (id) {
    snprintf(msg, sizeof msg, "rule id \"%s\" is the operator's", id);
    jb_reply_fail(out, 409, "conflict", "%s", msg);
    json_decref(rules);
    return;
  }
  store(app, c, job, rules, by, 0, out);
  json_decref(rules);
}

void jb_policy_list(struct jb_app *app, PGconn *c, const char *job, bool all,
                    struct jb_reply *out) {
  memset(out, 0, sizeof *out);
  jb_error err = {0};
  json_t *rules = NULL;
  struct jb_audit_head head = {0};
  int rc = jb_db_rules_list(c, jb_signer_key(app->signer), job, all, &rules, NULL, &head, &err);
  if (rc != JB_OK) {
    db_reply(out, rc, &err, job, "");
    return;
  }
  publish_head(app, job, &head);
  out->status = 200;
  out->body = json_pack("{s:o}", "rules", with_operator(rules));
}

void jb_policy_revoke(struct jb_app *app, PGconn *c, const char *job, const char *rule_id,
                      const char *by, struct jb_reply *out) {
  memset(out, 0, sizeof *out);
  char msg[400] = "";
  jb_error err = {0};
  struct jb_audit_head head = {0};
  const json_t *op_rule = operator_rule(rule_id);
  if (op_rule) {
    snprintf(msg, sizeof msg, "rule \"%.64s\" is the operator's%s", rule_id,
             json_is_true(json_object_get(op_rule, "locked"))
                 ? " and locked"
                 : "; add a rule of the session's to decide before it");
    jb_reply_fail(out, 409, "conflict", "%s", msg);
    return;
  }
  int rc = jb_db_rule_revoke(c, jb_signer_key(app->signer), job, rule_id, by, &head, msg,
                             sizeof msg, &err);
  jb_policy_rules_changed(job);
  if (rc == JB_ERR_NOT_FOUND) {
    out->status = 404;
    out->code = "not_found";
    snprintf(out->msg, sizeof out->msg, "no rule '%.64s' in session '%s'", rule_id, job);
    return;
  }
  if (rc != JB_OK) {
    db_reply(out, rc, &err, job, msg);
    return;
  }
  publish_head(app, job, &head);
  announce(app, job, "revoked", rule_id, NULL, by, 0);
  out->status = 200;
  out->body = json_pack("{s:s,s:s}", "ruleId", rule_id, "state", "revoked");
}

/* The rule facts of a stored op {tool, path, args} (borrowed into *op). */
static void op_facts(json_t *facts, struct jb_rule_op *op) {
  json_t *args = json_object_get(facts, "args");
  *op =
      (struct jb_rule_op){.tool = json_string_value(json_object_get(facts, "tool")),
                          .path = json_string_value(json_object_get(facts, "path")),
                          .dest = json_string_value(json_object_get(args, "destination")),
                          .argv = json_object_get(args, "argv"),
                          .command = json_string_value(json_object_get(args, "command")),
                          .size = json_is_integer(json_object_get(args, "size"))
                                      ? (long long)json_integer_value(json_object_get(args, "size"))
                                      : -1,
                          .env = json_object_size(json_object_get(args, "env")) > 0,
                          .writable = json_is_true(json_object_get(args, "writable")),
                          .env_vars = json_object_get(args, "env"),
                          .stdin_data = json_object_get(args, "stdin") != NULL};
  if (op->command) op->argv = NULL; /* a shell command's argv is the shell's */
}

void jb_policy_similar(PGconn *c, const char *job, long long op_id, const char *key, json_t **rule,
                       struct jb_reply *out) {
  memset(out, 0, sizeof *out);
  *rule = NULL;
  jb_error err = {0};
  json_t *facts = NULL;
  int rc = jb_db_op_facts(c, job, op_id, &facts, &err);
  if (rc == JB_ERR_NOT_FOUND) {
    out->status = 404;
    out->code = "not_found";
    snprintf(out->msg, sizeof out->msg, "no op %lld in session '%s'", op_id, job);
    return;
  }
  if (rc != JB_OK) {
    db_reply(out, rc, &err, job, "");
    return;
  }
  if (strcmp(json_string_value(json_object_get(facts, "state")) ?: "", "pending")) {
    jb_reply_fail(out, 409, "conflict", "%s", "the op is not pending: nothing to approve");
    json_decref(facts);
    return;
  }
  struct jb_rule_op op;
  op_facts(facts, &op);
  char msg[400];
  *rule = jb_rule_similar(&op, key, msg, sizeof msg);
  json_decref(facts);
  if (!*rule) {
    jb_reply_fail(out, 400, "bad_request", "%s", msg);
    return;
  }
  out->status = 200;
}

int jb_policy_approve_similar(struct jb_app *app, PGconn *c, const char *job, long long op_id,
                              const char *reason, const json_t *rule, char **json, char state[20],
                              struct jb_reply *out) {
  memset(out, 0, sizeof *out);
  char msg[400] = "";
  bool rule_failed = false;
  jb_error err = {0};
  struct jb_audit_head head = {0};
  int rc = jb_db_op_approve_similar(c, jb_signer_key(app->signer), job, op_id, reason, rule, json,
                                    state, &rule_failed, &head, msg, sizeof msg, &err);
  jb_policy_rules_changed(job);
  if (rc == JB_ERR_CONFLICT && rule_failed) jb_reply_fail(out, 409, "conflict", "%s", msg);
  if (rc == JB_ERR_FAIL)
    jb_log(JB_LOG_ERROR, "approve with a rule: database failure", "jobId", job, "detail", err.msg,
           NULL);
  if (rc != JB_OK) return rc;
  publish_head(app, job, &head);
  const char *id = json_string_value(json_object_get(rule, "id"));
  announce(app, job, "added", id, rule, "allowSimilar", op_id);
  out->status = 201;
  out->body = json_deep_copy(rule);
  return JB_OK;
}

/* ---- this process's copies of the sessions' rules ----
 *
 * The rules stage decides on a compiled copy of a session's live rules (the operator's
 * included) read with the session's rules_version (migration 024), kept here between calls so
 * that an op costs no read of the rules and no parse. A copy is never trusted alone: the op's
 * insert compares the version it was decided on with the session's, holding the session row
 * (db/ops.h jb_db_op_create_decided), and a call decided on an older copy starts over on the
 * database's rules — a rule changed on another instance costs this one a second decision,
 * never a wrong one. A rule changed here drops the copy at once. A copy is read again when one
 * of its rules' expiresAt comes (the read marks it expired, with its audit entry), and before
 * a deny it decides is said (a refusal stores no op whose insert would check it). */

#define RULES_SLOTS 64
struct rules_copy {
  int refs; /* the slot's and each caller's; atomic */
  long long version;
  struct jb_rules *rs;
};

static struct {
  pthread_mutex_t lock;
  struct {
    char job[129];
    struct rules_copy *copy; /* NULL: none */
  } slot[RULES_SLOTS];
} rules_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static size_t rules_slot(const char *job) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)job; *p; p++) h = (h ^ *p) * 16777619u;
  return h % RULES_SLOTS;
}

static void copy_release(struct rules_copy *cp) {
  if (cp && __atomic_sub_fetch(&cp->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    jb_rules_free(cp->rs);
    free(cp);
  }
}

/* `job`'s copy with a reference for the caller, or NULL. */
static struct rules_copy *copy_get(const char *job) {
  size_t i = rules_slot(job);
  pthread_mutex_lock(&rules_cache.lock);
  struct rules_copy *cp = !strcmp(rules_cache.slot[i].job, job) ? rules_cache.slot[i].copy : NULL;
  if (cp) __atomic_add_fetch(&cp->refs, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_unlock(&rules_cache.lock);
  return cp;
}

/* Keeps `cp` (the caller's reference stays the caller's) as `job`'s copy unless the slot holds
 * a newer version of the same session's rules. NULL: drops `job`'s copy. */
static void copy_put(const char *job, struct rules_copy *cp) {
  size_t i = rules_slot(job);
  struct rules_copy *old = NULL;
  pthread_mutex_lock(&rules_cache.lock);
  bool same = !strcmp(rules_cache.slot[i].job, job);
  if (!cp ? same
          : !same || !rules_cache.slot[i].copy ||
                rules_cache.slot[i].copy->version <= cp->version) {
    old = rules_cache.slot[i].copy;
    rules_cache.slot[i].copy = cp;
    if (cp) __atomic_add_fetch(&cp->refs, 1, __ATOMIC_ACQ_REL);
    snprintf(rules_cache.slot[i].job, sizeof rules_cache.slot[i].job, "%s", cp ? job : "");
  }
  pthread_mutex_unlock(&rules_cache.lock);
  copy_release(old);
}

void jb_policy_rules_changed(const char *job) { copy_put(job, NULL); }

/* `job`'s live rules read from the database now, compiled (new reference), kept as the copy. */
static struct rules_copy *copy_read(struct op_call *call, jb_error *err) {
  json_t *rules = NULL;
  struct jb_audit_head head = {0};
  long long version = 0;
  if (jb_db_rules_list(call->c, jb_signer_key(call->app->signer), call->job, false, &rules,
                       &version, &head, err) != JB_OK)
    return NULL;
  publish_head(call->app, call->job, &head); /* rules whose expiresAt passed were expired */
  rules = with_operator(rules);
  struct rules_copy *cp = calloc(1, sizeof *cp);
  if (cp) {
    cp->refs = 1;
    cp->version = version;
    cp->rs = jb_rules_compile(rules);
  }
  json_decref(rules);
  if (!cp || !cp->rs) {
    free(cp);
    jb_fail(err, ENOMEM, "out of memory");
    return NULL;
  }
  copy_put(call->job, cp);
  return cp;
}

/* ---- the rules stage of a tool call ---- */

/* The rule of `rs` that decides `call` at `now` given `i`, the one its own op matched (-1:
 * none): a write's or a move's folders (createParents) are each checked as a mkdir of it,
 * and the strictest decides — a deny of one refuses the call, an ask makes an allowed or
 * undecided call ask. *folder_hit: a folder met a deny or ask rule. */
static long strictest_with_folders(const struct jb_rules *rs, const struct op_call *call, long i,
                                   long long now, bool *folder_hit) {
  *folder_hit = false;
  if (call->tool != JB_TOOL_WRITE && call->tool != JB_TOOL_MOVE) return i;
  if (i >= 0 && jb_rules_effect(rs, (size_t)i) == JB_RULE_DENY) return i;
  size_t k;
  json_t *f;
  json_array_foreach (json_object_get(call->sargs, "createParents"), k, f) {
    struct jb_rule_op mk = {.tool = "mkdir", .path = json_string_value(f), .size = -1};
    long j = mk.path ? jb_rules_match(rs, &mk, now) : -1;
    if (j < 0) continue;
    enum jb_rule_effect ej = jb_rules_effect(rs, (size_t)j);
    if (ej == JB_RULE_ALLOW) continue;
    *folder_hit = true;
    if (ej == JB_RULE_DENY) return j;
    if (i < 0 || jb_rules_effect(rs, (size_t)i) == JB_RULE_ALLOW) i = j;
  }
  return i;
}

enum op_step op_apply_rules(struct op_call *call) {
  /* a call started over decides anew */
  call->decided_by[0] = call->decision_reason[0] = call->asked_by[0] = '\0';
  call->reviewed = false;
  call->use_rule[0] = '\0';
  call->ruled = false;
  if (!jb_tool_mutates(call->tool)) return OP_NEXT;
  if (!call->c) { /* lost on the way (op_await could not have it again) */
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable", "the service is unavailable; try again");
    return OP_END;
  }
  json_t *sargs = call->sargs;
  const char *command = json_string_value(json_object_get(sargs, "command"));
  struct jb_rule_op op = {.tool = jb_tool_name(call->tool),
                          .path = call->path,
                          .dest = call->dest,
                          .argv = command ? NULL : json_object_get(sargs, "argv"),
                          .command = command,
                          .size = call->tool == JB_TOOL_WRITE || call->tool == JB_TOOL_EDIT
                                      ? (long long)call->dlen
                                      : -1,
                          .env = json_object_size(json_object_get(sargs, "env")) > 0,
                          .writable = json_is_true(json_object_get(sargs, "writable")),
                          .env_vars = json_object_get(sargs, "env"),
                          .stdin_data = json_object_get(sargs, "stdin") != NULL};
  long long now = (long long)time(NULL);
  jb_error err = {0};
  struct rules_copy *cp = call->fresh ? NULL : copy_get(call->job);
  bool from_db = false, narrowed = false;
  for (;;) {
    /* a rule's time came: read them again, which marks it expired (its audit entry) */
    if (cp && !from_db && now >= jb_rules_next_expiry(cp->rs)) {
      copy_release(cp);
      cp = NULL;
    }
    if (!cp) {
      if (!(cp = copy_read(call, &err))) {
        op_error_unavailable(call->e, &err);
        return OP_END;
      }
      from_db = true;
    }
    bool folder_hit;
    long i =
        strictest_with_folders(cp->rs, call, jb_rules_match(cp->rs, &op, now), now, &folder_hit);
    if (folder_hit && !narrowed) { /* only the folders missing now are made: those decide */
      copy_release(cp);
      cp = NULL;
      narrowed = true;
      enum op_step s = op_parents_exact(call, NULL);
      if (s != OP_NEXT) return s;
      if (!call->c) { /* its stats waited without it and could not have it again */
        op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
                 "the service is unavailable; try again");
        return OP_END;
      }
      continue;
    }
    /* a deny stores no op whose insert would check the version: said on rules read now */
    if (i >= 0 && jb_rules_effect(cp->rs, (size_t)i) == JB_RULE_DENY && !from_db) {
      copy_release(cp);
      cp = NULL;
      continue;
    }
    call->ruled = true;
    call->rules_version = cp->version;
    if (i < 0) { /* the mode's default: as op_supervise decided */
      copy_release(cp);
      return OP_NEXT;
    }
    const char *id = jb_rules_id(cp->rs, (size_t)i);
    enum jb_rule_effect eff = jb_rules_effect(cp->rs, (size_t)i);
    if (jb_rules_counts_uses(cp->rs, (size_t)i))
      snprintf(call->use_rule, sizeof call->use_rule, "%s", id);
    snprintf(call->decided_by, sizeof call->decided_by, "rule:%s", id);
    snprintf(call->decision_reason, sizeof call->decision_reason, "%s by rule %s",
             eff == JB_RULE_ALLOW  ? "allowed"
             : eff == JB_RULE_DENY ? "denied"
                                   : "asked",
             id);
    copy_release(cp); /* `id` is gone with it */
    if (eff == JB_RULE_DENY) {
      op_error(call->e, JB_MCP_DENIED, "denied", "denied by rule %s of this session",
               call->decided_by + 5);
      op_audit_refusal(call, call->path,
                       json_pack("{s:s,s:s,s:s}", "error", "denied", "decidedBy", call->decided_by,
                                 "reason", call->decision_reason));
      return OP_END;
    }
    if (eff == JB_RULE_ASK) {
      call->pending = true;
      snprintf(call->asked_by, sizeof call->asked_by, "%s", call->decided_by);
      call->decided_by[0] = '\0'; /* the buyer decides; the reason says which rule asked */
    } else {
      call->pending = false;
    }
    return OP_NEXT;
  }
}

int op_insert_ruled(struct op_call *call, const char *args_text, const char *expect,
                    bool *rules_stale, jb_error *err) {
  *rules_stale = false;
  cleanup_free char *diff = call->pending ? op_diff_kept_text(call) : NULL;
  const char *by = call->decided_by[0] ? call->decided_by : NULL;
  const char *reason = call->decision_reason[0] ? call->decision_reason : NULL;
  int rc;
  if (call->ruled && call->use_rule[0]) {
    struct jb_op_new op = {.tool = jb_tool_name(call->tool),
                           .path = call->path,
                           .args_json = args_text,
                           .pending = call->pending,
                           .expect_json = expect,
                           .decided_by = by,
                           .reason = reason,
                           .diff_json = diff};
    bool expired = false;
    struct jb_audit_head head = {0};
    rc = jb_db_op_create_used(call->c, jb_signer_key(call->app->signer), call->job, &op,
                              call->rules_version, call->use_rule, rules_stale, &expired, &head,
                              &call->op_id, call->st, err);
    if (rc == JB_OK && expired) {
      jb_policy_rules_changed(call->job);
      publish_head(call->app, call->job, &head);
      announce(call->app, call->job, "expired", call->use_rule, NULL, "uses", 0);
    }
  } else {
    rc = jb_db_op_create_decided(call->c, call->job, jb_tool_name(call->tool), call->path,
                                 args_text, call->pending, expect, by, reason,
                                 call->ruled ? call->rules_version : -1, diff, rules_stale,
                                 &call->op_id, call->st, err);
  }
  if (*rules_stale) jb_policy_rules_changed(call->job);
  return rc;
}
