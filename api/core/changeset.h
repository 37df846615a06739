/* changeset.h — the buyer's decision on a changeset (an op of tool "changeset": what a
 * supervised writable command changed, held for the buyer, one row per path; migration 045)
 * and its view: which subset of the rows an approval may name (one check for every door),
 * the decision stored per row, and a page of its files. */
#ifndef JB_API_CORE_CHANGESET_H
#define JB_API_CORE_CHANGESET_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "api/core/reply.h"
#include "db/changeset_decide.h"
#include "lib/audit.h"

struct jb_app;

#define JB_CHANGESET_LISTED_MAX 100 /* paths a refusal names (then "pathsTruncated") */
#define JB_CHANGESET_PAGE_DEFAULT 200 /* files a page holds unless `limit` says */
#define JB_CHANGESET_PAGE_MAX 1000

/* Which rows of a changeset (`rows`, `n` of them, in idx order, idx 0..n-1) an approval
 * approves: `files` (borrowed; NULL: absent) names them by path, else every approvable row;
 * `digest` (NULL: absent) must equal `stored` (the op's args.changesetSha256). On success
 * returns 0 with approved[i] (n booleans, the caller's) set for each approved row; otherwise
 * -1 with the refusal in `out`, checked in this order:
 *   409 changed            `digest` given and not `stored`;
 *   422 empty_subset       `files` is [] (reject the op instead), or no row is approvable;
 *   422 duplicate          a path named twice (extra {paths});
 *   422 not_in_changeset   a path that is no row's (extra {paths});
 *   409 not_approvable     a named row that is not approvable (extra {paths});
 *   422 incomplete_subset  an approved row whose parent folder the changeset makes (a row
 *                          whose new type is dir and old type is not) is not approved, or an
 *                          approved row that removes a folder (old type dir, new type not)
 *                          while a row under it is not approved, or (a batch) a row
 *                          approved while another row of the same member op is not — a
 *                          move's two ends go together (extra {paths}: the approved rows
 *                          that cannot land alone).
 * `files` must be an array of strings (jb_control_check saw to it). extra {paths} lists at
 * most JB_CHANGESET_LISTED_MAX, with pathsTruncated when there were more. */
int jb_changeset_check_subset(const struct jb_cs_row *rows, size_t n, const json_t *files,
                              const char *digest, const char *stored, bool *approved,
                              struct jb_reply *out);

/* The approvedSha256 of an approval: lowercase hex SHA-256 (65 bytes with the NUL, into
 * `hex`) of the approved rows' paths, each followed by "\n", in idx order. */
void jb_changeset_approved_sha(const struct jb_cs_row *rows, size_t n, const bool *approved,
                               char hex[65]);

enum jb_changeset_decided {
  JB_CHANGESET_NOT_ONE, /* op_id is not a changeset and no changeset field was given: decide
                           it as any other op (nothing done, `out` untouched) */
  JB_CHANGESET_DONE, /* decided: *json_out the op (new), *head the chain head */
  JB_CHANGESET_LOST, /* not pending (decided already) or its session ended: `state` */
  JB_CHANGESET_REFUSED, /* the answer is in `out` */
};

/* Approves (`approve`) or rejects op `op_id` of session `job` when it is a changeset, for
 * `by` ("buyer" or "service"), with `reason` (nullable), `files` (borrowed; NULL: absent),
 * `digest` (NULL: absent) and `allow_similar` (must be NULL for a changeset: 400
 * bad_request). A rejection rejects every row. For another op, `files` or `digest` given is a
 * 400 bad_request; no op `op_id` with either given: 404 not_found. The decision, its rows and
 * its audit entry are stored in one transaction (db/changeset_decide.h). Returns which of
 * jb_changeset_decided happened; `out` is set only for JB_CHANGESET_REFUSED. */
enum jb_changeset_decided jb_changeset_decide(struct jb_app *app, PGconn *c, const char *job,
                                              long long op_id, bool approve, const char *reason,
                                              const json_t *files, const char *digest,
                                              const char *allow_similar, const char *by,
                                              char **json_out, char state[20],
                                              struct jb_audit_head *head, struct jb_reply *out);

/* A page of changeset files for GET /v1/jailbox/:jobId/ops/:opId/changeset and the
 * jailbox:changeset event: `q` (borrowed) is {opId, after?, limit?}, each an integer or a
 * string of digits (opId > 0; after >= -1, default -1; limit 1..JB_CHANGESET_PAGE_MAX,
 * default JB_CHANGESET_PAGE_DEFAULT); fields besides them are refused. Fills `out` (zeroed
 * first): 200 the page (db/changeset_decide.h jb_db_changeset_page), 400 bad_request,
 * 404 not_found (no such op, or not a changeset), 503. The caller checked the token. */
void jb_changeset_view(PGconn *c, const char *job, const json_t *q, struct jb_reply *out);

#endif
