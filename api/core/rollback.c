/* rollback.c — the rollback request, its state and its summary (see rollback.h). */
#include "api/core/rollback.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/changes.h"
#include "db/sessions.h"
#include "server/bus.h"

int jb_rollback_decide(const struct jb_rollback_facts *f, long long to, struct jb_reply *out) {
  if (!f->to_found)
    return jb_reply_fail(out, 404, "no_such_op",
                         "op %lld is not an op of this session ('to' names the last op whose "
                         "effects stay)",
                         to);
  enum jb_session_state st = jb_session_state_from_name(f->state);
  if (st == JB_SESSION_ACCEPTED || f->preimages_gone)
    return jb_reply_fail(out, 410, "preimages_gone",
                         "the session's pre-images are gone (it was accepted, or ended longer "
                         "ago than JAILBOX_PREIMAGE_RETENTION_S): nothing can be rolled back");
  if (f->sealed)
    return jb_reply_fail(out, 409, "chain_sealed",
                         "the session's audit chain is sealed (or its seal is pending): a "
                         "rollback now would restore files that no entry of the chain records");
  if (st != JB_SESSION_PAUSED && st != JB_SESSION_DONE && st != JB_SESSION_ABORTED &&
      st != JB_SESSION_FAILED) {
    jb_reply_fail(out, 409, "not_paused",
                  "pause the session first: a rollback runs on a paused or ended session, and "
                  "this one is %s",
                  f->state);
    snprintf(out->state, sizeof out->state, "%s", f->state);
    return -1;
  }
  if (f->rollback_running)
    return jb_reply_fail(out, 409, "rollback_running",
                         "rollback %lld of this session is queued or running: wait for it to end "
                         "(GET …/rollbacks/%lld)",
                         f->rollback_running, f->rollback_running);
  if (f->ops_running)
    return jb_reply_fail(out, 409, "ops_running",
                         "%lld op%s of this session %s approved or running: pause first and let "
                         "%s end (or kill %s)",
                         f->ops_running, f->ops_running == 1 ? "" : "s",
                         f->ops_running == 1 ? "is" : "are", f->ops_running == 1 ? "it" : "them",
                         f->ops_running == 1 ? "it" : "them");
  json_t *ids = json_loads(f->not_restorable ? f->not_restorable : "[]", 0, NULL);
  if (!ids) return jb_reply_fail(out, 500, "internal", "out of memory");
  size_t n = json_array_size(ids);
  if (n == 0) {
    json_decref(ids);
    return 0;
  }
  long long newest = (long long)json_integer_value(json_array_get(ids, n - 1));
  jb_reply_fail(out, 409, "not_restorable",
                "%zu op%s over op %lld changed files without pre-images (writable commands, or "
                "ops run before a worker restart could keep them; listed in opIds, the newest "
                "is %lld): a rollback past %s cannot restore the workspace; roll back to op "
                "%lld or later",
                n, n == 1 ? "" : "s", to, newest, n == 1 ? "it" : "them", newest);
  json_decref(out->extra);
  out->extra = json_pack("{s:o}", "opIds", ids);
  return -1;
}

/* The decision inside the queueing transaction: the reply is where the refusal goes. */
struct decide_ctx {
  long long to;
  struct jb_reply *out;
};

static int decide_cb(const struct jb_rollback_facts *f, void *ctx) {
  struct decide_ctx *d = ctx;
  return jb_rollback_decide(f, d->to, d->out);
}

static void no_session(struct jb_reply *out, int rc, const jb_error *err, const char *job) {
  char nf[200];
  snprintf(nf, sizeof nf, "no session '%s'", job);
  jb_reply_db(out, rc, err, nf, "", NULL);
}

/* Takes the JSON text `json` (freed) as a 200 answer `status`. */
static void json_answer(struct jb_reply *out, int status, char *json) {
  json_t *o = json ? json_loads(json, 0, NULL) : NULL;
  free(json);
  jb_reply_ok(out, status, o);
}

static void dry_run(PGconn *c, const char *job, long long to, struct jb_reply *out) {
  jb_error err = {0};
  struct jb_rollback_facts f;
  int rc = jb_db_rollback_facts(c, job, to, &f, &err);
  if (rc != JB_OK) {
    no_session(out, rc, &err, job);
    return;
  }
  int ok = jb_rollback_decide(&f, to, out);
  jb_rollback_facts_free(&f);
  if (ok < 0) return;
  char *json = NULL;
  rc = jb_db_rollback_plan(c, job, to, &json, &err);
  if (rc != JB_OK) {
    no_session(out, rc, &err, job);
    return;
  }
  json_answer(out, 200, json);
}

void jb_rollback_request(struct jb_app *app, PGconn *c, const char *job, const char *actor,
                         const struct jb_control_args *a, struct jb_reply *out) {
  if (a->dry_run) {
    dry_run(c, job, a->to, out);
    return;
  }
  json_t *payload = json_pack("{s:o,s:b,s:s}", "to", a->to ? json_integer(a->to) : json_null(),
                              "force", a->force, "by", actor);
  if (payload && a->reason && a->reason[0])
    json_object_set_new(payload, "reason", json_string(a->reason));
  char *text = payload ? json_dumps(payload, JSON_COMPACT) : NULL;
  json_decref(payload);
  if (!text) {
    jb_reply_fail(out, 500, "internal", "out of memory");
    return;
  }
  jb_error err = {0};
  long long id = 0;
  struct decide_ctx d = {.to = a->to, .out = out};
  int rc = jb_db_rollback_queue(c, job, a->to, text, decide_cb, &d, &id, &err);
  free(text);
  if (rc == JB_ERR_CONFLICT) return; /* jb_rollback_decide filled `out` */
  if (rc != JB_OK) {
    no_session(out, rc, &err, job);
    return;
  }
  if (jb_reply_ok(out, 202,
                  json_pack("{s:I,s:s}", "rollbackId", (json_int_t)id, "state", "queued")) == 0)
    jb_bus_publish(
        app->bus, job, JB_EVENT_ROLLBACK,
        json_pack("{s:s,s:I,s:s,s:o,s:b,s:s}", "jobId", job, "rollbackId", (json_int_t)id, "state",
                  "queued", "to", a->to ? json_integer(a->to) : json_null(), "force", a->force,
                  "actor", actor));
}

void jb_rollback_get(PGconn *c, const char *job, const char *id_text, struct jb_reply *out) {
  *out = (struct jb_reply){0};
  char *end;
  errno = 0;
  long long id = id_text && isdigit((unsigned char)id_text[0]) ? strtoll(id_text, &end, 10) : 0;
  if (errno || id <= 0 || *end) {
    jb_reply_fail(out, 404, "not_found", "no rollback '%s' of session '%s'", id_text, job);
    return;
  }
  jb_error err = {0};
  char *json = NULL, nf[200];
  int rc = jb_db_rollback_get(c, job, id, &json, &err);
  snprintf(nf, sizeof nf, "no rollback %lld of session '%s'", id, job);
  if (jb_reply_db(out, rc, &err, nf, "", NULL) == 0) json_answer(out, 200, json);
}

void jb_rollback_changes(PGconn *c, const char *job, struct jb_reply *out) {
  *out = (struct jb_reply){0};
  jb_error err = {0};
  char *json = NULL;
  int rc = jb_db_changes_list(c, job, &json, &err);
  struct jb_rollback_facts f = {0};
  if (rc == JB_OK) rc = jb_db_rollback_facts(c, job, 0, &f, &err);
  if (rc != JB_OK) {
    free(json);
    no_session(out, rc, &err, job);
    return;
  }
  struct jb_reply why = {0};
  bool available = jb_rollback_decide(&f, 0, &why) == 0;
  json_t *rb =
      json_pack("{s:b,s:I}", "available", available, "wouldUndo", (json_int_t)f.would_undo);
  if (rb && !available) json_object_set_new(rb, "why", json_string(why.code));
  jb_reply_release(&why);
  jb_rollback_facts_free(&f);
  json_t *doc = json_loads(json, 0, NULL);
  free(json);
  if (!doc || !rb || json_object_set_new(doc, "rollback", rb) < 0) {
    json_decref(doc);
    jb_reply_fail(out, 500, "internal", "out of memory");
    return;
  }
  jb_reply_ok(out, 200, doc);
}
