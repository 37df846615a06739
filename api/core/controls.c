/* controls.c — the table of control schemas and their one checker (see controls.h). */
#define _GNU_SOURCE
#include "api/core/controls.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/err.h"
#include "lib/json.h"

enum field_kind {
  F_REASON, /* string 0..1024, printable */
  F_OPID, /* integer > 0, or a string of digits */
  F_SIMILAR, /* string 1..32, printable */
  F_MODE, /* "supervised" | "unsupervised" */
  F_RULES, /* "rules": an array (checked by lib/policy.h later) */
  F_RULE, /* "rule": an object (checked by lib/policy.h later) */
  F_RULE_ID, /* string 1..64, printable */
  F_EXCLUDE, /* array of at most 256 globs of 1..1024 bytes, no control characters */
  F_TO, /* rollback's "to": an op id (as F_OPID) */
  F_FORCE, /* rollback's "force": a boolean */
  F_DRY_RUN, /* rollback's "dryRun": a boolean */
  F_FILES, /* approve's "files": the paths of a changeset approved */
  F_CS_SHA, /* approve's "changesetSha256": 64 lowercase hex */
};

struct field {
  const char *name;
  enum field_kind kind;
  bool required;
  bool path; /* REST takes it from the path */
};

struct schema {
  const char *event;
  unsigned roles; /* the jb_role values that may send it */
  struct field fields[6]; /* ended by a NULL name */
};

#define REASON \
  { "reason", F_REASON, false, false }
#define OPID \
  { "opId", F_OPID, true, true }
#define B JB_ROLE_BUYER
#define SB (JB_ROLE_SERVICE | JB_ROLE_BUYER) /* the operator too (the service token) */

static const struct schema schemas[JB_CONTROL_COUNT] = {
    [JB_CONTROL_PAUSE] = {"jailbox:pause", SB, {REASON}},
    [JB_CONTROL_RESUME] = {"jailbox:resume", SB, {REASON}},
    [JB_CONTROL_ABORT] = {"jailbox:abort", SB, {REASON}},
    [JB_CONTROL_ACCEPT] = {"jailbox:accept", B, {REASON}},
    [JB_CONTROL_APPROVE] = {"jailbox:approve",
                            B,
                            {OPID,
                             REASON,
                             {"allowSimilar", F_SIMILAR, false, false},
                             {"changesetSha256", F_CS_SHA, false, false},
                             {"files", F_FILES, false, false}}},
    [JB_CONTROL_REJECT] = {"jailbox:reject", B, {OPID, REASON}},
    [JB_CONTROL_KILL] = {"jailbox:kill", SB, {OPID, REASON}},
    [JB_CONTROL_MODE] = {"jailbox:mode", B, {{"mode", F_MODE, true, false}}},
    [JB_CONTROL_RULE_ADD] = {"jailbox:rule_add",
                             SB,
                             {{"rules", F_RULES, false, false}, {"rule", F_RULE, false, false}}},
    [JB_CONTROL_RULE_REVOKE] = {"jailbox:rule_revoke", SB, {{"ruleId", F_RULE_ID, true, true}}},
    [JB_CONTROL_PRE_SCAN_DONE] = {"jailbox:pre_scan_done",
                                  B,
                                  {{"exclude", F_EXCLUDE, false, false}}},
    [JB_CONTROL_EFFECTS_CLEAR] = {"jailbox:effects_clear", B, {REASON}},
    [JB_CONTROL_ROLLBACK] = {"jailbox:rollback",
                             SB,
                             {{"to", F_TO, false, false},
                              {"force", F_FORCE, false, false},
                              {"dryRun", F_DRY_RUN, false, false},
                              REASON}},
};

const char *jb_control_event(enum jb_control ctl) {
  return ctl >= 0 && ctl < JB_CONTROL_COUNT ? schemas[ctl].event : NULL;
}

enum jb_control jb_control_from_event(const char *event) {
  for (int i = 0; event && i < JB_CONTROL_COUNT; i++)
    if (strcmp(schemas[i].event, event) == 0) return (enum jb_control)i;
  return JB_CONTROL_COUNT;
}

unsigned jb_control_roles(enum jb_control ctl) {
  return ctl >= 0 && ctl < JB_CONTROL_COUNT ? schemas[ctl].roles : 0;
}

bool jb_control_operator_needs_reason(enum jb_control ctl) {
  return ctl == JB_CONTROL_PAUSE || ctl == JB_CONTROL_RESUME || ctl == JB_CONTROL_ABORT ||
         ctl == JB_CONTROL_ROLLBACK;
}

bool jb_control_on_ended(enum jb_control ctl) { return ctl == JB_CONTROL_ROLLBACK; }

const char *jb_control_path_field(enum jb_control ctl) {
  if (ctl < 0 || ctl >= JB_CONTROL_COUNT) return NULL;
  for (const struct field *f = schemas[ctl].fields; f->name; f++)
    if (f->path) return f->name;
  return NULL;
}

/* One field's value `v` (present) checked into `out`. 0, or -1 with `err`. */
static int check_field(const struct field *f, const json_t *obj, const json_t *v,
                       struct jb_control_args *out, jb_error *err) {
  const char *str = NULL;
  switch (f->kind) {
    case F_REASON:
      return jb_json_get_string(obj, f->name, 0, 1024, true, &out->reason, err);
    case F_SIMILAR:
      return jb_json_get_string(obj, f->name, 1, 32, true, &out->allow_similar, err);
    case F_RULE_ID:
      if (jb_json_get_string(obj, f->name, 1, 64, true, &out->rule_id, err) < 0)
        return jb_fail(err, EINVAL, "field 'ruleId' must be a string of 1 to 64 characters");
      return 0;
    case F_MODE:
      if (jb_json_get_string(obj, f->name, 1, 32, true, &str, err) < 0 ||
          (strcmp(str, "supervised") != 0 && strcmp(str, "unsupervised") != 0))
        return jb_fail(err, EINVAL, "field 'mode' must be 'supervised' or 'unsupervised'");
      out->mode = str;
      return 0;
    case F_FORCE:
    case F_DRY_RUN:
      if (!json_is_boolean(v)) return jb_fail(err, EINVAL, "field '%s' must be a boolean", f->name);
      *(f->kind == F_FORCE ? &out->force : &out->dry_run) = json_is_true(v);
      return 0;
    case F_TO:
    case F_OPID: {
      long long op = 0;
      if (json_is_integer(v)) {
        op = json_integer_value(v);
      } else if (json_is_string(v)) {
        const char *t = json_string_value(v);
        char *end;
        errno = 0;
        op = isdigit((unsigned char)t[0]) ? strtoll(t, &end, 10) : 0;
        if (errno || !isdigit((unsigned char)t[0]) || *end) op = 0;
      } else {
        return jb_fail(err, EINVAL, "field '%s' must be a positive integer", f->name);
      }
      if (op <= 0) return jb_fail(err, EINVAL, "field '%s' must be a positive integer", f->name);
      *(f->kind == F_TO ? &out->to : &out->op_id) = op;
      return 0;
    }
    case F_RULES:
      if (!json_is_array(v)) return jb_fail(err, EINVAL, "field 'rules' must be an array of rules");
      out->rules = (json_t *)v;
      return 0;
    case F_RULE:
      if (!json_is_object(v))
        return jb_fail(err, EINVAL, "field 'rule' must be a rule (an object)");
      if (!out->rules) out->rules = (json_t *)v;
      return 0;
    case F_CS_SHA:
      if (!json_is_string(v) || json_string_length(v) != 64 ||
          strspn(json_string_value(v), "0123456789abcdef") != 64)
        return jb_fail(err, EINVAL, "field 'changesetSha256' must be 64 lowercase hex digits");
      out->changeset_sha256 = json_string_value(v);
      return 0;
    case F_FILES: {
      if (!json_is_array(v) || json_array_size(v) > JB_CONTROL_FILES_MAX)
        return jb_fail(err, EINVAL, "field 'files' must be an array of at most %d paths",
                       JB_CONTROL_FILES_MAX);
      size_t i;
      json_t *g;
      json_array_foreach (v, i, g) {
        size_t n = json_string_length(g);
        if (!json_is_string(g) || n == 0 || n > 4096 || strlen(json_string_value(g)) != n)
          return jb_fail(err, EINVAL, "files[%zu] must be a path of 1 to 4096 bytes without NUL",
                         i);
      }
      out->files = (json_t *)v;
      return 0;
    }
    case F_EXCLUDE: {
      if (!json_is_array(v))
        return jb_fail(err, EINVAL, "field 'exclude' must be an array of globs");
      if (json_array_size(v) > 256)
        return jb_fail(err, EINVAL, "field 'exclude' has over 256 globs");
      size_t i;
      json_t *g;
      json_array_foreach (v, i, g) {
        const char *t = json_string_value(g);
        size_t n = json_string_length(g);
        if (!t || n == 0 || n > 1024 || strlen(t) != n)
          return jb_fail(err, EINVAL,
                         "exclude[%zu] must be a string of 1 to 1024 bytes without NUL", i);
        for (size_t k = 0; k < n; k++)
          if ((unsigned char)t[k] < 0x20 || t[k] == 0x7f)
            return jb_fail(err, EINVAL, "exclude[%zu] has a control character", i);
      }
      out->exclude = (json_t *)v;
      return 0;
    }
  }
  return jb_fail(err, EINVAL, "unknown field kind");
}

int jb_control_check(enum jb_control ctl, const json_t *obj, struct jb_control_args *out, char *msg,
                     size_t len) {
  memset(out, 0, sizeof *out);
  jb_error err = {0};
  if (ctl < 0 || ctl >= JB_CONTROL_COUNT) {
    snprintf(msg, len, "unknown control");
    return -1;
  }
  const struct schema *sc = &schemas[ctl];
  if (obj && !json_is_object(obj)) {
    snprintf(msg, len, "the argument must be an object");
    return -1;
  }
  const char *allowed[7] = {NULL};
  size_t n = 0;
  for (const struct field *f = sc->fields; f->name; f++) allowed[n++] = f->name;
  if (obj && jb_json_only_keys(obj, allowed, &err) < 0) {
    snprintf(msg, len, "%s", err.msg);
    return -1;
  }
  for (const struct field *f = sc->fields; f->name; f++) {
    const json_t *v = obj ? json_object_get(obj, f->name) : NULL;
    if (!v) {
      if (f->required) {
        snprintf(msg, len, "field '%s' is required", f->name);
        return -1;
      }
      continue;
    }
    if (check_field(f, obj, v, out, &err) < 0) {
      snprintf(msg, len, "%s", err.msg);
      return -1;
    }
  }
  if (ctl == JB_CONTROL_RULE_ADD && !out->rules) {
    snprintf(msg, len, "give 'rules' (an array of rules) or 'rule' (a rule)");
    return -1;
  }
  return 0;
}

json_t *jb_control_rest_form(enum jb_control ctl, const char *body, size_t body_len,
                             const char *path_value, char *msg, size_t len) {
  jb_error err = {0};
  json_t *o =
      body_len ? jb_json_parse_object(body, body_len, JB_JSON_MAX_DEPTH, &err) : json_object();
  if (!o) {
    snprintf(msg, len, "%s", err.msg[0] ? err.msg : "out of memory");
    return NULL;
  }
  const char *pf = jb_control_path_field(ctl);
  if (pf && json_object_get(o, pf)) { /* the path names it: not the body's field */
    snprintf(msg, len, "unknown field '%s'", pf);
    json_decref(o);
    return NULL;
  }
  if (pf && path_value) {
    bool digits = path_value[0] != '\0';
    for (const char *p = path_value; *p && digits; p++) digits = isdigit((unsigned char)*p);
    char *end;
    errno = 0;
    long long v = digits ? strtoll(path_value, &end, 10) : 0;
    json_t *val = ctl != JB_CONTROL_RULE_REVOKE && digits && !errno ? json_integer(v)
                                                                    : json_string(path_value);
    if (!val || json_object_set_new(o, pf, val) < 0) {
      snprintf(msg, len, "field '%s' is not valid UTF-8", pf);
      json_decref(o);
      return NULL;
    }
  }
  return o;
}
