/* exec_none.c — the exec op on a worker built without a spawner channel
 * (sandbox/worker/exec.h absent): a claimed exec fails `unavailable` with its audit entry, and
 * there is no command to signal. sandbox/worker/CMakeLists.txt builds exec_op.c instead once
 * exec.h is there. */
#include "db/ops.h"
#include "sandbox/worker/worker.h"

int exec_op_run(struct jb_worker *w, PGconn *c, const char *job, struct jb_op_claim *op,
                int *signal, char *detail, size_t dsize, jb_error *err) {
  (void)detail;
  (void)dsize;
  *signal = -1;
  json_t *d = json_pack("{s:s,s:b,s:s,s:o,s:i}", "decision", op->decision, "ok", 0, "error",
                        "unavailable", "changes", json_array(), "redactions", 0);
  struct jb_audit_head head;
  int rc = jb_db_op_complete(c, w->keys, job, op, false,
                             "{\"ok\":false,\"error\":{\"code\":\"unavailable\",\"message\":"
                             "\"this worker cannot run commands\"}}",
                             d, &head, err);
  json_decref(d);
  if (rc == JB_OK) worker_publish(w, c, job, JB_EVENT_AUDIT_HEAD, jb_audit_head_json(&head));
  return rc;
}

void exec_op_signal(struct jb_worker *w, const char *job, long long op_id, const char *what) {
  (void)w;
  (void)job;
  (void)op_id;
  (void)what;
}
