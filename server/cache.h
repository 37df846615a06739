/* cache.h — the read cache for GET /v1/jailbox/:jobId: per session, the rendered JSON and the
 * hashes of the tokens allowed to read it (its buyer tokens), plus the service token hashes.
 * PostgreSQL stays the source of truth: every change to a session, its ops or its tokens is
 * announced with NOTIFY jb_change (migration 004) and drops the entry on every instance.
 * While the listener is not connected (or its heartbeat goes unanswered for 2 s) the cache is
 * off, and no entry is trusted for more than 2 s: a change made elsewhere shows within that
 * bound even when notifications are lost, and normally within a few milliseconds. */
#ifndef JB_CACHE_H
#define JB_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct jb_cache;

/* A new, disabled cache holding at most `max_sessions` sessions. NULL on OOM. */
struct jb_cache *jb_cache_new(size_t max_sessions);
void jb_cache_free(struct jb_cache *c);

/* Turns the cache on or off; turning it either way empties it. Thread-safe. */
void jb_cache_set_enabled(struct jb_cache *c, bool on);

/* The invalidation stamp: take it BEFORE reading from the database, and hand it to
 * jb_cache_put, which stores nothing when any invalidation happened in between. */
uint64_t jb_cache_stamp(struct jb_cache *c);

/* Drops what is cached for `job_id`; "" drops the service token set. Thread-safe. */
void jb_cache_invalidate(struct jb_cache *c, const char *job_id);

/* When `job_id` is cached and `token_hash` (32 bytes) is one of its buyer tokens or a
 * service token, returns a new copy of its JSON (free it); NULL otherwise (a miss: ask the
 * database). Token hashes are compared in constant time. */
char *jb_cache_get_session(struct jb_cache *c, const char *job_id,
                           const unsigned char token_hash[32]);

/* Stores the JSON of `job_id` with its `n_readers` reader token hashes (32 bytes each,
 * concatenated), if the cache is on and nothing was invalidated since `stamp`. */
void jb_cache_put_session(struct jb_cache *c, uint64_t stamp, const char *job_id, const char *json,
                          const unsigned char *readers, size_t n_readers);

/* Whether the service token set is loaded; and storing it (`n` hashes of 32 bytes), under
 * the same stamp rule. */
bool jb_cache_has_service_set(struct jb_cache *c);
void jb_cache_put_service_set(struct jb_cache *c, uint64_t stamp, const unsigned char *hashes,
                              size_t n);

#endif
