/* keyring.h — the audit signing keyring: the active Ed25519 key that signs new audit entries.
 * Its secret half lives in one file, generated on first start as
 * <state_dir>/audit-signing.key (mode 0600) or given by JAILBOX_SIGNING_KEY_FILE; its public
 * half is published in audit_signing_keys, where every earlier key stays (retired) so that
 * old entries keep verifying. Rotation (api/audit.md "Rotation"): the new key file is put in
 * place on every host, `jailboxctl keys rotate --key FILE` publishes it, and each running
 * process takes it up from its key file (db/signer.h) — no restart.
 *
 * Key file: the 32-byte Ed25519 seed (RFC 8032 §5.1.5 private key) as 64 hex characters and
 * an optional newline, or as 32 raw bytes. It must be a regular file that only its owner can
 * read or write (no group/other permission bits), and is never followed through a symlink. */
#ifndef JB_LIB_KEYRING_H
#define JB_LIB_KEYRING_H

#include "lib/audit.h"
#include "lib/err.h"

#include <stdbool.h>

#define JB_KEY_FILE_NAME "audit-signing.key"

struct jb_keyring {
  unsigned char sk[JB_AUDIT_SK_LEN]; /* libsodium secret key: seed ‖ public key */
  unsigned char pk[JB_AUDIT_PK_LEN]; /* public key */
  char key_id[JB_AUDIT_KEY_ID_LEN + 1]; /* jb_audit_key_id(pk) */
  char path[4096]; /* the key file it came from ("" when made from a seed) */
};

/* Loads the active key: from `key_file` when that is non-NULL and non-empty (it must exist),
 * else from <state_dir>/audit-signing.key, generating that file (and `state_dir`, mode 0700)
 * when missing — written to a temporary file, fsynced, then linked into place so that a
 * half-written key is never read. On success *out is a new keyring (jb_keyring_free).
 * Returns 0, or -1 with `err` naming the file and the problem. */
int jb_keyring_load(struct jb_keyring **out, const char *state_dir, const char *key_file,
                    jb_error *err);

/* A keyring from a 32-byte seed (tests, benchmarks). New (jb_keyring_free); NULL on OOM or
 * when libsodium cannot initialise. */
struct jb_keyring *jb_keyring_from_seed(const unsigned char seed[32]);

/* Signs the 32-byte `hash` (Ed25519, RFC 8032) into `sig` (64 bytes). */
void jb_keyring_sign(const struct jb_keyring *k, const unsigned char hash[JB_AUDIT_HASH_LEN],
                     unsigned char sig[JB_AUDIT_SIG_LEN]);

/* Writes a freshly generated key to `path`, which must not exist (O_EXCL: an existing key is
 * never overwritten), mode 0600, fsynced, its directory too. The key's id goes to `new_id`
 * (17 bytes). 0, or -1 with `err` (EEXIST when the file exists). */
int jb_keyring_generate(const char *path, char new_id[JB_AUDIT_KEY_ID_LEN + 1], jb_error *err);

/* An inotify descriptor (non-blocking, close-on-exec) watching the directory of the key file
 * `path` for the changes that can replace the file's content: written and closed, renamed or
 * linked into place, created, deleted, permissions changed. Readable when something changed
 * there; empty it with jb_keyring_watch_drain. Returns the fd, or -1 with `err`. */
int jb_keyring_watch(const char *path, jb_error *err);

/* Reads and discards every pending event of a jb_keyring_watch descriptor. Returns true when
 * one of them named the key file's own name (or overflowed the queue). */
bool jb_keyring_watch_drain(int fd, const char *path);

/* Writes a freshly generated key to `path`, replacing an existing one atomically (temporary
 * file in the same directory, fsync, rename, fsync of the directory). The new key id goes to
 * `new_id` (17 bytes) and the replaced key's id, or "" when there was none, to `old_id`.
 * Only the file changes: the key is not published (see jb_keyring_generate and
 * `jailboxctl keys rotate`). 0 or -1 with `err`. */
int jb_keyring_rotate(const char *path, char new_id[JB_AUDIT_KEY_ID_LEN + 1],
                      char old_id[JB_AUDIT_KEY_ID_LEN + 1], jb_error *err);

/* Wipes the secret key and frees `k`. NULL is allowed. */
void jb_keyring_free(struct jb_keyring *k);

#endif
