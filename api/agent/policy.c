/* policy.c — approval rules on the op path and from the buyer (see policy.h): the rules
 * stage of a tool call (op_apply_rules, api/agent/op_call.h) and the buyer's rule requests. */
#define _GNU_SOURCE
#include "api/agent/policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/agent/op_call.h"
#include "db/events.h"
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

static void reply_error(struct jb_policy_reply *out, int status, const char *code,
                        const char *msg) {
  out->status = status;
  out->code = code;
  snprintf(out->msg, sizeof out->msg, "%s", msg);
}

static void reply_db(struct jb_policy_reply *out, int rc, const char *msg, const jb_error *err,
                     const char *job) {
  if (rc == JB_ERR_NOT_FOUND) {
    out->status = 404;
    out->code = "not_found";
    snprintf(out->msg, sizeof out->msg, "no session '%s'", job);
  } else if (rc == JB_ERR_CONFLICT) {
    reply_error(out, 409, "conflict", msg);
  } else if (jb_signer_retired(out->msg, sizeof out->msg)) { /* every append is refused */
    jb_log(JB_LOG_ERROR, "rules: signing key retired", "jobId", job, "detail", err->msg, NULL);
    out->status = 503;
    out->code = "key_retired";
  } else {
    jb_log(JB_LOG_ERROR, "rules: database failure", "jobId", job, "detail", err->msg, NULL);
    reply_error(out, 503, "unavailable", "database unavailable");
  }
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
                  const char *by, long long op_id, struct jb_policy_reply *out) {
  char msg[400] = "";
  jb_error err = {0};
  struct jb_audit_head head = {0};
  int rc = jb_db_rules_add(c, jb_signer_key(app->signer), job, rules, by, op_id, &head, msg,
                           sizeof msg, &err);
  if (rc != JB_OK) {
    reply_db(out, rc, msg, &err, job);
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

void jb_policy_add(struct jb_app *app, PGconn *c, const char *job, const json_t *in,
                   struct jb_policy_reply *out) {
  memset(out, 0, sizeof *out);
  json_t *list = json_is_array(in) ? json_incref((json_t *)in) : json_pack("[O]", (json_t *)in);
  char msg[400];
  json_t *rules = jb_rules_check(list, 0, false, (long long)time(NULL), msg, sizeof msg);
  json_decref(list);
  if (!rules) {
    reply_error(out, 400, "bad_request", msg);
    return;
  }
  const char *id = jb_policy_operator_id_in(rules);
  if (id) {
    snprintf(msg, sizeof msg, "rule id \"%s\" is the operator's", id);
    reply_error(out, 409, "conflict", msg);
    json_decref(rules);
    return;
  }
  store(app, c, job, rules, "buyer", 0, out);
  json_decref(rules);
}

void jb_policy_list(struct jb_app *app, PGconn *c, const char *job, bool all,
                    struct jb_policy_reply *out) {
  memset(out, 0, sizeof *out);
  jb_error err = {0};
  json_t *rules = NULL;
  struct jb_audit_head head = {0};
  int rc = jb_db_rules_list(c, jb_signer_key(app->signer), job, all, &rules, &head, &err);
  if (rc != JB_OK) {
    reply_db(out, rc, "", &err, job);
    return;
  }
  publish_head(app, job, &head);
  out->status = 200;
  out->body = json_pack("{s:o}", "rules", with_operator(rules));
}

void jb_policy_revoke(struct jb_app *app, PGconn *c, const char *job, const char *rule_id,
                      struct jb_policy_reply *out) {
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
    reply_error(out, 409, "conflict", msg);
    return;
  }
  int rc = jb_db_rule_revoke(c, jb_signer_key(app->signer), job, rule_id, "buyer", &head, msg,
                             sizeof msg, &err);
  if (rc == JB_ERR_NOT_FOUND) {
    out->status = 404;
    out->code = "not_found";
    snprintf(out->msg, sizeof out->msg, "no rule '%.64s' in session '%s'", rule_id, job);
    return;
  }
  if (rc != JB_OK) {
    reply_db(out, rc, msg, &err, job);
    return;
  }
  publish_head(app, job, &head);
  announce(app, job, "revoked", rule_id, NULL, "buyer", 0);
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
                          .env = json_object_size(json_object_get(args, "env")) > 0};
  if (op->command) op->argv = NULL; /* a shell command's argv is the shell's */
}

void jb_policy_similar(PGconn *c, const char *job, long long op_id, const char *key, json_t **rule,
                       struct jb_policy_reply *out) {
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
    reply_db(out, rc, "", &err, job);
    return;
  }
  if (strcmp(json_string_value(json_object_get(facts, "state")) ?: "", "pending")) {
    reply_error(out, 409, "conflict", "the op is not pending: nothing to approve");
    json_decref(facts);
    return;
  }
  struct jb_rule_op op;
  op_facts(facts, &op);
  char msg[400];
  *rule = jb_rule_similar(&op, key, msg, sizeof msg);
  json_decref(facts);
  if (!*rule) {
    reply_error(out, 400, "bad_request", msg);
    return;
  }
  out->status = 200;
}

int jb_policy_approve_similar(struct jb_app *app, PGconn *c, const char *job, long long op_id,
                              const char *reason, const json_t *rule, char **json, char state[20],
                              struct jb_policy_reply *out) {
  memset(out, 0, sizeof *out);
  char msg[400] = "";
  bool rule_failed = false;
  jb_error err = {0};
  struct jb_audit_head head = {0};
  int rc = jb_db_op_approve_similar(c, jb_signer_key(app->signer), job, op_id, reason, rule, json,
                                    state, &rule_failed, &head, msg, sizeof msg, &err);
  if (rc == JB_ERR_CONFLICT && rule_failed) reply_error(out, 409, "conflict", msg);
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

/* ---- the rules stage of a tool call ---- */

enum op_step op_apply_rules(struct op_call *call) {
  call->decided_by[0] = call->decision_reason[0] = '\0'; /* a call started over decides anew */
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
                          .env = json_object_size(json_object_get(sargs, "env")) > 0};
  for (int attempt = 0; attempt < 4; attempt++) {
    jb_error err = {0};
    json_t *rules = NULL;
    struct jb_audit_head head = {0};
    if (jb_db_rules_list(call->c, jb_signer_key(call->app->signer), call->job, false, &rules, &head,
                         &err) != JB_OK) {
      op_error_unavailable(call->e, &err);
      return OP_END;
    }
    publish_head(call->app, call->job, &head);
    rules = with_operator(rules);
    const json_t *hit = jb_rules_first_match(rules, &op, (long long)time(NULL));
    if (!hit) { /* the mode's default: as op_supervise decided */
      json_decref(rules);
      return OP_NEXT;
    }
    const char *id = json_string_value(json_object_get(hit, "id"));
    enum jb_rule_effect eff = jb_rule_effect_of(hit);
    if (json_object_get(hit, "uses")) {
      bool expired = false;
      struct jb_audit_head h2 = {0};
      int rc = jb_db_rule_use(call->c, jb_signer_key(call->app->signer), call->job, id, &expired,
                              &h2, &err);
      if (rc == JB_ERR_CONFLICT) { /* spent, revoked or expired meanwhile: decide again */
        json_decref(rules);
        continue;
      }
      if (rc != JB_OK) {
        json_decref(rules);
        op_error_unavailable(call->e, &err);
        return OP_END;
      }
      publish_head(call->app, call->job, &h2);
      if (expired) announce(call->app, call->job, "expired", id, NULL, "uses", 0);
    }
    snprintf(call->decided_by, sizeof call->decided_by, "rule:%s", id);
    snprintf(call->decision_reason, sizeof call->decision_reason, "%s by rule %s",
             eff == JB_RULE_ALLOW  ? "allowed"
             : eff == JB_RULE_DENY ? "denied"
                                   : "asked",
             id);
    json_decref(rules); /* `id` and `hit` are gone with it */
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
      call->decided_by[0] = '\0'; /* the buyer decides; the reason says which rule asked */
    } else {
      call->pending = false;
    }
    return OP_NEXT;
  }
  op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
           "the session's rules kept changing; try again");
  return OP_END;
}
