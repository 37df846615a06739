/* audit_store.h — storage of the audit chain: appending signed entries (serialized per
 * session by a row lock on the session), sealing, loading a chain for export and
 * verification, and the published signing keys. The entry format is lib/audit.h. */
#ifndef JB_DB_AUDIT_STORE_H
#define JB_DB_AUDIT_STORE_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "db/db.h"
#include "lib/audit.h"
#include "lib/keyring.h"
#include "lib/err.h"

struct jb_keyring;

/* Appends an entry to the chain of session `job_id`, signed with the keyring's active key.
 * `operation` matches [a-z_]{1,32} and is not "seal" (use jb_audit_seal); `path` may be NULL;
 * `details` (borrowed; NULL = {}) follows the rules of jb_audit_canonical (integers only, no
 * reals). The timestamp is this process's clock (UTC, ms) when the entry is made.
 *
 * Transactions: inside the caller's open transaction (PQTRANS_INTRANS; it must be READ
 * COMMITTED, else the append is refused with EINVAL: the key's retirement is checked at the
 * statement's snapshot) the entry becomes
 * part of it — committed or rolled back with the caller's work, and the session's head row
 * (audit_heads) stays locked until then; otherwise the call runs and commits a transaction of
 * its own. Appends to one session are serialized by the lock on its head row; different
 * sessions never wait for each other. The sessions row itself is not locked: a caller that
 * needs it locked takes it first (FOR UPDATE), before it appends — the lock order of every
 * chain writer: session row, op row, head row. The head this process wrote last is
 * remembered, so that the next append to that session is one statement (which checks the
 * head is still that one: compare-and-set); when it is not, the head is read under the lock
 * and the append made again.
 *
 * Group commit: appends of one session made at once by threads of this process, each outside
 * a transaction and with the same keyring, are stored together — the first to arrive signs
 * them in arrival order and runs one statement and one commit on its own connection, while the
 * others wait (db/audit_store.c, api/audit.md). Each still returns once its own entry is
 * committed, with its own head; a malformed one fails alone; a failure of the statement fails
 * each of them as it would have failed alone. Session settings made on one connection only
 * (SET lock_timeout, statement_timeout) therefore bound only an append that goes alone or
 * leads: a caller that needs its own bound appends inside its own transaction (BEGIN, append,
 * COMMIT), which is never grouped.
 *
 * On JB_OK *out (may be NULL) receives the new head (seq, hash, signature, keyId); publish
 * it as JB_EVENT_AUDIT_HEAD (db/events.h, jb_audit_head_json) once the transaction has committed.
 * The keyring's key must be published and not retired at the entry's timestamp (the
 * verifier refuses such an entry as "retired key"): otherwise nothing is appended.
 *
 * Returns JB_OK; JB_ERR_NOT_FOUND when there is no such session; JB_ERR_CONFLICT when the
 * chain is sealed; JB_ERR_FAIL with `err` (bad arguments, a retired or unpublished key
 * (EKEYREVOKED, ENOKEY), database failure — inside a caller's transaction that transaction
 * is then aborted and must be rolled back). */
int jb_audit_append(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                    const char *operation, const char *path, json_t *details,
                    struct jb_audit_head *out, jb_error *err);

/* Appends the final `seal` entry, details {"entries": N, "head": hex}: N entries before
 * it, `head` the hash of the last of them (64 zeros when N = 0). Nothing can be appended
 * after it. Same transaction rules and results as jb_audit_append (JB_ERR_CONFLICT when
 * already sealed). */
int jb_audit_seal(PGconn *c, const struct jb_keyring *keys, const char *job_id,
                  struct jb_audit_head *out, jb_error *err);

/* An append made as one step of a caller's pipeline (jb_db_pipeline), for a caller that
 * knows the head it appends to: the entry, signed, and the parameters the step points at. */
struct jb_audit_pending {
  struct jb_audit_signed sig; /* canonical bytes (owned), hash, signature */
  struct jb_audit_head head; /* the head the append makes: seq, hash, signature, key id */
  unsigned char prev[JB_AUDIT_HASH_LEN];
  uint64_t seq_be, ts_be; /* binary int8 / timestamptz parameters (big-endian) */
  const char *vals[10];
  int lens[10];
  int fmts[10];
};

/* The head this process appended last to `job_id` (the cache jb_audit_append keeps): true with
 * *seq and `hash` (32 bytes) when known. What it says may be stale (another process or thread
 * appended since): an append built on it then changes nothing. Thread-safe. */
bool jb_audit_head_peek(const char *job_id, long long *seq, unsigned char hash[JB_AUDIT_HASH_LEN]);

/* Builds entry `head` + 1 of `job_id` on `prev` (the hash of entry `head`; anything when
 * `head` is 0), signed with the keyring's active key, timestamped now, and fills *step with
 * the append's statement — the compare-and-set of jb_audit_append, which fails (an error:
 * the rest of the pipeline, its COMMIT too, is skipped) unless the session's head is still
 * `head`/`prev`, the chain is not sealed and the key is published and not retired — pointing
 * into *p. Run the step in the caller's transaction, after the session row is locked, before
 * the COMMIT. Arguments as jb_audit_append
 * (`operation` "seal" builds the seal entry). Returns 0 (then call jb_audit_append_settle
 * exactly once), or -1 with `err`. */
int jb_audit_append_step(const struct jb_keyring *keys, const char *job_id, const char *operation,
                         const char *path, json_t *details, long long head,
                         const unsigned char prev[JB_AUDIT_HASH_LEN], struct jb_audit_pending *p,
                         struct jb_db_step *step, jb_error *err);

/* Ends a pending append: with `appended` (its transaction committed) the head cache moves to
 * the new entry and *out (may be NULL) receives it; otherwise the cached head of `job_id` is
 * forgotten. Frees what *p holds. */
void jb_audit_append_settle(const char *job_id, struct jb_audit_pending *p, bool appended,
                            struct jb_audit_head *out);

/* A session's stored chain. */
struct jb_audit_chain {
  char state[20]; /* sessions.state */
  bool ended; /* state is accepted, aborted or failed */
  struct jb_audit_head stored; /* audit_heads.seq / hash */
  struct jb_audit_entry *entries; /* in seq order; every field read from its own column
                                      but details, which only the canonical bytes hold
                                      (jb_audit_canonical_details); those verbatim */
  size_t n;
};

/* Reads the session row and every audit entry of `job_id` from one snapshot (a REPEATABLE
 * READ transaction of its own when the connection is idle). Entries whose columns cannot be
 * read become malformed entries (the verifier reports them). Fills *out (release with
 * jb_audit_chain_free). JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL with `err`. */
int jb_audit_chain_load(PGconn *c, const char *job_id, struct jb_audit_chain *out, jb_error *err);

void jb_audit_chain_free(struct jb_audit_chain *ch);

/* Starts a read-only REPEATABLE READ transaction on the idle connection `c`, so that the
 * session row and every page read next come from one snapshot; end it with jb_db_rollback.
 * JB_OK or JB_ERR_FAIL with `err`. */
int jb_audit_snapshot_begin(PGconn *c, jb_error *err);

/* Reads the session and head rows of `job_id` into `out` (state, ended, stored head; no
 * entries). JB_OK, JB_ERR_NOT_FOUND, JB_ERR_FAIL with `err`. */
int jb_audit_session_read(PGconn *c, const char *job_id, struct jb_audit_chain *out, jb_error *err);

/* One page of a chain, for reading it in bounded memory: at most `limit` entries of
 * `job_id` with seq > `after_seq`, in seq order, every field from its own column (details
 * from the canonical bytes, jb_audit_canonical_details) and the canonical bytes verbatim (a row that cannot be read becomes a malformed entry, keeping its
 * seq). One statement, inside the caller's transaction when there is one (REPEATABLE READ
 * gives one snapshot across pages); without one, each page sees the chain as it is then.
 * *out is a new array of *n entries (jb_audit_entries_free; *n = 0: nothing after
 * after_seq). JB_OK or JB_ERR_FAIL with `err`. */
int jb_audit_entries_page(PGconn *c, const char *job_id, long long after_seq, int limit,
                          struct jb_audit_entry **out, size_t *n, jb_error *err);

/* A published key as stored. */
struct jb_audit_key_row {
  struct jb_audit_pubkey key;
  char created_at[32]; /* ISO 8601 UTC, ms */
  char retired_at[32]; /* "" while the key is active */
};

/* Every published key, oldest first. *out is new (free it), *n its length.
 * JB_OK or JB_ERR_FAIL with `err`. */
int jb_audit_keys_load(PGconn *c, struct jb_audit_key_row **out, size_t *n, jb_error *err);

/* Publishes `pk` as the active key `key_id` and, when `retire_others`, retires every other
 * active key at once (tests/audit_driver.c races it with appends; operators rotate with
 * jb_audit_key_rotate), in one transaction, under an exclusive lock of audit_signing_keys (which every
 * append reads, so that no append races the retirement). The retirement time is the later of
 * the next millisecond of this process's clock after the lock and 1 ms after the newest
 * timestamp among the sessions' stored heads — so an entry committed before the retirement
 * is stamped before it even when its writer's clock was ahead of this one or this one was
 * stepped back. Residual: two writers of one session whose clocks differ, the earlier entry
 * from the clock ahead, by more than the time between their appends. Publishing a key that is already active changes nothing. A retired key is
 * never made active again: its entries are valid only before its retiredAt (api/audit.md),
 * so it is refused with EKEYREVOKED. JB_OK or JB_ERR_FAIL with `err`. */
int jb_audit_key_publish(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                         bool retire_others, jb_error *err);

/* Start-up check of the key an instance (jailboxd or jailbox-worker) signs with, under a lock
 * that serializes it with other starts and rotations: an empty audit_signing_keys gets `pk`
 * published as its first, active key; a published key that is not retired is adopted as it
 * is. Nothing else is changed: a start never retires a key. `active` (`active_len` bytes)
 * receives the ids of the keys that may sign ("a, b") when the key is refused. Returns JB_OK;
 * JB_ERR_CONFLICT (EKEYREJECTED) when other keys are published but not this one; JB_ERR_FAIL
 * with EKEYREVOKED when the key is retired (also when its retirement is still to come: the
 * rotation that scheduled it made another key active), EEXIST when the id is published with
 * another public key, or a database failure; always with `err`. */
int jb_audit_key_adopt(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                       char *active, size_t active_len, jb_error *err);

/* The explicit rotation (jailboxctl keys rotate): in one transaction, under the exclusive lock
 * of jb_audit_key_publish, publishes `pk` as the active key `key_id` (a key published already
 * and not retired is kept as it is), sets the retirement of every other key not yet retired
 * to `grace_ms` after the next millisecond of this process's clock (0: at once; at most 7
 * days), but never before 1 ms after the newest stored head entry, and sends NOTIFY jb_key
 * (payload: the new key id) so that running instances look at their key files at once. The
 * retired ids go to `retired` ("a, b"; "" when none), the retirement time to `retire_at`
 * (ISO 8601 UTC, ms; 32 bytes). Entries stamped before that time stay valid with the old key
 * (api/audit.md "Key validity"), so instances that take up the new key within the grace lose
 * no write. Returns JB_OK, or JB_ERR_FAIL with `err`: EKEYREVOKED when `key_id` was retired,
 * EEXIST when its id is published with another public key, ERANGE for the grace. */
int jb_audit_key_rotate(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                        long long grace_ms, char *retired, size_t retired_len, char retire_at[32],
                        jb_error *err);

/* What audit_signing_keys says of one key (db/signer.c reads it to decide which key signs). */
struct jb_audit_key_status {
  bool published; /* the id is published with this public key */
  long long retired_ms; /* retirement, ms since the Unix epoch; INT64_MAX when none */
  char retired_at[32]; /* the same as ISO 8601 UTC, "" when none */
  char active[256]; /* the ids of the keys not retired ("a, b"), for messages */
};

/* Reads the state of `key_id` (public key `pk`) into *out. JB_OK or JB_ERR_FAIL with `err`. */
int jb_audit_key_status(PGconn *c, const char *key_id, const unsigned char pk[JB_AUDIT_PK_LEN],
                        struct jb_audit_key_status *out, jb_error *err);

#endif
