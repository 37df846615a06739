/* preimage_op.h — the pre-images of one op that changes files (write, edit, mkdir, move,
 * delete): taken on the host before the shim runs it (preimage_store.h), within the session's
 * budget, bound to what the shim replaces, and stored with the op's outcome as rows of the
 * preimages table and the `preimages` field of its audit entry (api/audit.md). */
#ifndef JB_SANDBOX_PREIMAGE_OP_H
#define JB_SANDBOX_PREIMAGE_OP_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>

#include "db/ops.h"
#include "lib/err.h"
#include "sandbox/proto/tool.h"

struct jb_worker;

#define JB_PREIMAGE_ROWS_MAX 100000 /* paths one op keeps at most (a recursive delete) */
#define JB_PREIMAGE_AUDIT_LISTED 100 /* rows listed in the op's audit entry at most */

/* One op's pre-images. */
struct jb_op_preimages {
  bool taken; /* rows were taken (the op changes files and its paths could be read) */
  bool recalled; /* the shim's recorded answer was used: the op ran before they were taken */
  json_t *rows; /* new: [{path, kind, sha256?, mode?, target?, fromPath?, bytes}] in the order
                   they are inserted (a rollback restores them newest first) */
  long long bytes; /* bytes their blobs added to the store */
  json_t *bind; /* new or NULL: members set on the shim's request (expectSha256, expectTree,
                   expectDestSha256) */
  json_t *refusal; /* new or NULL: {ok:false, error:{code, message}} — the op is not run */
  char job[129];
};

/* Takes the pre-images of claimed op `op` of `job` (tool `tool`, arguments `args`, borrowed)
 * on the host, before it runs: each path the op changes read beneath the workspace root (a
 * file's content kept in the store), the session's bytes (read on `c`, whose transaction holds
 * the session row: jb_db_op_claim) checked against JAILBOX_PREIMAGE_MAX_BYTES — over it
 * `pre->refusal` is set with the reason code preimage_budget. A path the shim refuses by the
 * same rules (a link on the way, a special file, a bad path) keeps nothing and is left to the
 * shim. A failure to keep a pre-image refuses the op (code internal). Fills `pre` (free with
 * preimage_op_free). Never fails as a whole. */
void preimage_op_take(struct jb_worker *w, PGconn *c, const char *job, const struct jb_op_claim *op,
                      enum jb_tool tool, json_t *args, struct jb_op_preimages *pre);

/* Sets on the shim's request `req` the checks that bind the pre-image to what the shim
 * replaces, each unless the op named it: expectSha256 (write, edit: the hash kept, "" when the
 * path was absent; a file's delete and a file's move: its hash), expectTree "file" and
 * expectDestSha256 (the hash kept of the file it replaces, "" when absent) for a file's move. */
void preimage_op_bind(const struct jb_op_preimages *pre, json_t *req);

/* At the op's settle, in its transaction on `c`: what the op left at each path is read again
 * (after_*), the rows whose path it did not change are dropped (their blobs removed), the
 * others inserted (db/preimages.h) and listed in `details` (its audit entry: preimages, and
 * preimagesCount + preimagesSha256 past JB_PREIMAGE_AUDIT_LISTED) — a failed op's too, when it
 * changed a path before it failed (a refusal keeps none, and lists none). JB_OK or JB_ERR_FAIL with `err` (the transaction is
 * then aborted). */
int preimage_op_settle(struct jb_worker *w, PGconn *c, const struct jb_op_claim *op, json_t *ans,
                       struct jb_op_preimages *pre, json_t *details, jb_error *err);

/* The SHA-256 (lowercase hex, 65 bytes with its NUL) of the JSON lines of `list`'s members:
 * each serialized JSON_COMPACT | JSON_SORT_KEYS and followed by "\n" — preimagesSha256 of an
 * op's entry and filesSha256 of a rollback's (api/audit.md). */
void preimage_lines_sha256(json_t *list, char hex[65]);

/* Frees what `pre` holds (not the blobs its rows name). */
void preimage_op_free(struct jb_op_preimages *pre);

#endif
