/* cache.c — the session read cache (see cache.h): a chained hash table under one mutex. */
#include "server/cache.h"
#include "lib/metrics.h"

#include <pthread.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUCKETS 4096

/* An entry is trusted this long at most, even while the listener looks healthy. */
#define TTL_MS 2000
/* Memory bounds: a session view larger than this is never cached, and all entries together
 * stay under MAX_BYTES (past it the cache starts over). */
#define MAX_ENTRY_BYTES (64 * 1024)
#define MAX_BYTES (64L * 1024 * 1024)

struct entry {
  struct entry *next;
  long long expires; /* monotonic ms */
  char *job_id;
  char *json;
  unsigned char *readers; /* n_readers * 32 bytes */
  size_t n_readers;
};

struct jb_cache {
  pthread_mutex_t lock;
  bool enabled;
  uint64_t stamp; /* bumped by every invalidation and every enable/disable */
  size_t count, max;
  size_t bytes; /* JSON and reader hashes held by all entries */
  struct entry *buckets[BUCKETS];
  bool service_loaded;
  unsigned char *service; /* n_service * 32 bytes */
  size_t n_service;
};

/* FNV-1a, 64 bit. */
static size_t bucket_of(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return (size_t)(h % BUCKETS);
}

static size_t entry_bytes(const struct entry *e) {
  return sizeof *e + strlen(e->job_id) + strlen(e->json) + e->n_readers * 32;
}

static void free_entry(struct entry *e) {
  free(e->job_id);
  free(e->json);
  free(e->readers);
  free(e);
}

static void clear_locked(struct jb_cache *c) {
  for (size_t i = 0; i < BUCKETS; i++) {
    struct entry *e = c->buckets[i];
    while (e) {
      struct entry *n = e->next;
      free_entry(e);
      e = n;
    }
    c->buckets[i] = NULL;
  }
  c->count = 0;
  c->bytes = 0;
  free(c->service);
  c->service = NULL;
  c->n_service = 0;
  c->service_loaded = false;
}

struct jb_cache *jb_cache_new(size_t max_sessions) {
  struct jb_cache *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  pthread_mutex_init(&c->lock, NULL);
  c->max = max_sessions;
  return c;
}

void jb_cache_free(struct jb_cache *c) {
  if (!c) return;
  clear_locked(c);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

void jb_cache_set_enabled(struct jb_cache *c, bool on) {
  pthread_mutex_lock(&c->lock);
  clear_locked(c);
  c->enabled = on;
  c->stamp++;
  pthread_mutex_unlock(&c->lock);
}

uint64_t jb_cache_stamp(struct jb_cache *c) {
  pthread_mutex_lock(&c->lock);
  uint64_t s = c->stamp;
  pthread_mutex_unlock(&c->lock);
  return s;
}

void jb_cache_invalidate(struct jb_cache *c, const char *job_id) {
  pthread_mutex_lock(&c->lock);
  c->stamp++;
  if (!job_id[0]) {
    free(c->service);
    c->service = NULL;
    c->n_service = 0;
    c->service_loaded = false;
  } else {
    struct entry **pp = &c->buckets[bucket_of(job_id)];
    while (*pp) {
      if (strcmp((*pp)->job_id, job_id) == 0) {
        struct entry *e = *pp;
        *pp = e->next;
        c->bytes -= entry_bytes(e);
        free_entry(e);
        c->count--;
        break;
      }
      pp = &(*pp)->next;
    }
  }
  pthread_mutex_unlock(&c->lock);
}

static bool hash_in(const unsigned char *set, size_t n, const unsigned char h[32]) {
  bool found = false;
  for (size_t i = 0; i < n; i++) found |= sodium_memcmp(set + i * 32, h, 32) == 0;
  return found;
}

char *jb_cache_get_session(struct jb_cache *c, const char *job_id,
                           const unsigned char token_hash[32]) {
  char *out = NULL;
  pthread_mutex_lock(&c->lock);
  if (c->enabled) {
    for (struct entry **pp = &c->buckets[bucket_of(job_id)]; *pp; pp = &(*pp)->next) {
      struct entry *e = *pp;
      if (strcmp(e->job_id, job_id) != 0) continue;
      if (e->expires < jb_now_ms()) { /* expired: drop it now */
        *pp = e->next;
        c->bytes -= entry_bytes(e);
        free_entry(e);
        c->count--;
        break;
      }
      if (hash_in(e->readers, e->n_readers, token_hash) ||
          (c->service_loaded && hash_in(c->service, c->n_service, token_hash)))
        out = strdup(e->json);
      break;
    }
  }
  pthread_mutex_unlock(&c->lock);
  return out;
}

void jb_cache_put_session(struct jb_cache *c, uint64_t stamp, const char *job_id, const char *json,
                          const unsigned char *readers, size_t n_readers) {
  if (strlen(json) > MAX_ENTRY_BYTES) return;
  struct entry *e = calloc(1, sizeof *e);
  if (!e) return;
  e->job_id = strdup(job_id);
  e->json = strdup(json);
  e->readers = n_readers ? malloc(n_readers * 32) : NULL;
  if (!e->job_id || !e->json || (n_readers && !e->readers)) {
    free_entry(e);
    return;
  }
  if (n_readers) memcpy(e->readers, readers, n_readers * 32);
  e->n_readers = n_readers;
  pthread_mutex_lock(&c->lock);
  if (!c->enabled || c->stamp != stamp) {
    pthread_mutex_unlock(&c->lock);
    free_entry(e);
    return;
  }
  size_t b = bucket_of(job_id);
  for (struct entry **pp = &c->buckets[b]; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->job_id, job_id) == 0) {
      struct entry *old = *pp;
      *pp = old->next;
      c->bytes -= entry_bytes(old);
      free_entry(old);
      c->count--;
      break;
    }
  if (c->count >= c->max || c->bytes + entry_bytes(e) > MAX_BYTES) { /* full: start over */
    bool svc = c->service_loaded;
    unsigned char *sv = c->service;
    size_t ns = c->n_service;
    c->service = NULL;
    clear_locked(c);
    c->service = sv, c->n_service = ns, c->service_loaded = svc;
  }
  e->expires = jb_now_ms() + TTL_MS;
  c->bytes += entry_bytes(e);
  e->next = c->buckets[b];
  c->buckets[b] = e;
  c->count++;
  pthread_mutex_unlock(&c->lock);
}

bool jb_cache_has_service_set(struct jb_cache *c) {
  pthread_mutex_lock(&c->lock);
  bool r = c->enabled && c->service_loaded;
  pthread_mutex_unlock(&c->lock);
  return r;
}

void jb_cache_put_service_set(struct jb_cache *c, uint64_t stamp, const unsigned char *hashes,
                              size_t n) {
  unsigned char *copy = n ? malloc(n * 32) : NULL;
  if (n && !copy) return;
  if (n) memcpy(copy, hashes, n * 32);
  pthread_mutex_lock(&c->lock);
  if (c->enabled && c->stamp == stamp) {
    free(c->service);
    c->service = copy;
    c->n_service = n;
    c->service_loaded = true;
    copy = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  free(copy);
}
