/* op_stage.c — the store of a batch's member (api/core/op_call.h op_stage): a write, edit,
 * mkdir, move or delete called with a `changeset` name has had every check of a supervised op
 * (paths, exclusions, scanner, the rules that deny, its target as it is now, its diff, the
 * expectations the worker checks before it runs it); it is stored 'staged' (db/batch.h),
 * announced to nobody and claimed by no worker, and the call answers at once. The batch is
 * reviewed as one changeset when commit_changeset commits it (api/core/batch.c). */
#define _GNU_SOURCE
#include "api/core/op_call.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db/batch.h"
#include "server/app.h"

/* {mode, exclude, flagged} as decided on, for a call decided on a copy (new), or NULL. */
static char *stage_expect(struct op_call *call) {
  if (!call->recheck) return NULL;
  json_t *x = op_direct_expect(&call->sess);
  char *t = x ? json_dumps(x, JSON_COMPACT) : NULL;
  json_decref(x);
  return t;
}

json_t *op_stage(struct op_call *call) {
  const char *name = json_string_value(json_object_get(call->args, "changeset"));
  char *args = json_dumps(call->sargs, JSON_COMPACT);
  char *diff = op_diff_kept_text(call);
  char *expect = stage_expect(call);
  struct jb_db_stage st = {.tool = jb_tool_name(call->tool),
                           .path = call->path,
                           .dest = call->dest,
                           .name = name,
                           .args_json = args,
                           .diff_json = diff,
                           .expect_json = expect};
  long long first = 0;
  jb_error err = {0};
  int rc = args && (expect || !call->recheck)
               ? jb_db_op_stage(call->c, call->job, &st, &call->op_id, &first, call->st, &err)
               : jb_fail(&err, ENOMEM, "out of memory");
  free(args);
  free(diff);
  free(expect);
  if (rc == JB_ERR_EXISTS) {
    op_error(call->e, JB_MCP_INVALID, "bad_request",
             "changeset %s holds op %lld on %.300s already: one op per path in a batch (commit "
             "it, or stage the whole new content in that op's place)",
             name, first, call->dest ? call->dest : call->path);
    json_object_set_new(call->e->data, "opId", json_integer((json_int_t)first));
    return NULL;
  }
  if (rc == JB_ERR_CONFLICT && !call->st[0]) {
    jb_op_session_changed(call->job);
    op_error(call->e, JB_MCP_UNAVAILABLE, "unavailable",
             "the session's settings changed meanwhile; try again");
    return NULL;
  }
  if (rc != JB_OK && op_insert_refused(call, rc, &err)) return NULL;
  json_t *sc =
      json_pack("{s:b,s:s,s:I,s:s,s:s}", "staged", 1, "changeset", name, "opId",
                (json_int_t)call->op_id, "tool", jb_tool_name(call->tool), "path", call->path);
  if (sc && call->dest) json_object_set_new(sc, "destination", json_string(call->dest));
  if (sc && json_is_object(call->diff)) json_object_set(sc, "diff", call->diff);
  char text[600];
  snprintf(text, sizeof text,
           "staged as op %lld in changeset %s: nothing is changed until commit_changeset "
           "{changeset: \"%s\"} and the buyer's approval",
           call->op_id, name, name);
  return sc ? json_pack("{s:[{s:s,s:s}],s:o,s:b}", "content", "type", "text", "text", text,
                        "structuredContent", sc, "isError", 0)
            : NULL;
}
