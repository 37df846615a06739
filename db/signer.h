/* signer.h — which key a process (jailboxd, jailbox-worker) signs its audit entries with, and
 * whether it may: the key file checked against audit_signing_keys at start, then watched.
 *
 * At start the key in the file must be the active one (jb_audit_key_adopt): an instance with
 * another key refuses to start, naming both, and never retires the active key; only on an
 * empty table does it publish its own. Afterwards a thread takes up a new key from the file
 * when the file changes (inotify on its directory), on jb_signer_poke (SIGHUP, NOTIFY jb_key)
 * and every two seconds: a key in the file that is published and not retired replaces the
 * signing key at once (atomically: a caller holds one keyring for one append); one that is
 * not published yet (the file was replaced before `jailboxctl keys rotate`) is waited for,
 * the old key signing meanwhile. The signing key's retirement time, as published, is kept:
 * from that moment jb_signer_retired() is true and every append of this process is refused by
 * the database (db/audit_store.c) — the REST and agent answers then name `key_retired`, and
 * /readyz answers 503, until the file holds the active key. One signer per process. */
#ifndef JB_DB_SIGNER_H
#define JB_DB_SIGNER_H

#include <stdbool.h>
#include <stddef.h>

#include "db/db.h"
#include "lib/err.h"
#include "lib/keyring.h"

struct jb_signer;

/* Loads the key (jb_keyring_load: `key_file`, else <state_dir>/audit-signing.key, generated
 * when missing), checks it against the database of `db` (borrowed; it must outlive the
 * signer) and starts the watching thread. `who` names the process in messages ("jailboxd").
 * Returns 0 and *out, or -1 with `err`: for a key that is not the active one the message
 * names both key ids, the file and the two ways out (share the active key file; rotate to
 * this key with `jailboxctl keys rotate --key FILE`). */
int jb_signer_open(struct jb_signer **out, struct jb_db *db, const char *state_dir,
                   const char *key_file, const char *who, jb_error *err);

/* The keyring that signs now: valid until jb_signer_close (a replaced keyring is kept, so a
 * caller that took it before a switch may finish its append with it). Thread-safe. */
const struct jb_keyring *jb_signer_key(struct jb_signer *s);

/* Asks the thread to read the key file and the keys' state again now (async-signal-safe:
 * one write to an eventfd). */
void jb_signer_poke(struct jb_signer *s);

/* True when this process's signing key is retired at this moment (its published retirement
 * has passed); `why` (may be NULL) then receives a sentence naming the key, the time, the
 * active key(s) and the fix. Thread-safe; false before jb_signer_open. */
bool jb_signer_retired(char *why, size_t len);

/* Stops the thread and frees every keyring it held (wiped). NULL allowed. */
void jb_signer_close(struct jb_signer *s);

#endif
