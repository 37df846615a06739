/* signer.c — the signing key of this process: start-up check, the watching thread, the
 * switch to a rotated key, the retired state (see signer.h). */
#define _GNU_SOURCE
#include "db/signer.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "db/audit_store.h"
#include "lib/log.h"

#define CHECK_EVERY_MS 2000

struct jb_signer {
  struct jb_db *db;
  char who[32];
  char path[4096];
  _Atomic(struct jb_keyring *) cur;
  struct jb_keyring **old; /* replaced keyrings, kept until close */
  size_t n_old;
  int watch_fd, event_fd;
  pthread_t thread;
  bool running;
  atomic_bool stop;
  char last_note[512]; /* the last warning logged, so that a state is logged once */
};

/* What jb_signer_retired reads: the signing key's retirement (ms since the epoch, INT64_MAX:
 * none) and the sentence for it. */
static _Atomic long long retire_ms = INT64_MAX;
static pthread_mutex_t why_lock = PTHREAD_MUTEX_INITIALIZER;
static char why_text[640];

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

bool jb_signer_retired(char *why, size_t len) {
  if (now_ms() < atomic_load(&retire_ms)) return false;
  if (why && len) {
    pthread_mutex_lock(&why_lock);
    snprintf(why, len, "%s", why_text);
    pthread_mutex_unlock(&why_lock);
  }
  return true;
}

/* Records the retirement of the signing key `k` as read in `st`. */
static void note_retirement(const struct jb_signer *s, const struct jb_keyring *k,
                            const struct jb_audit_key_status *st) {
  pthread_mutex_lock(&why_lock);
  snprintf(why_text, sizeof why_text,
           "this instance's audit signing key %s (file %s) is retired as of %s; the active key "
           "is %s: put the active key in the key file (it is read again when it changes, or on "
           "SIGHUP)",
           k->key_id, s->path, st->retired_at, st->active[0] ? st->active : "none");
  pthread_mutex_unlock(&why_lock);
  atomic_store(&retire_ms, st->retired_ms);
}

/* Logs `msg` at `level` unless it is the one logged last. */
static void note(struct jb_signer *s, enum jb_log_level level, const char *msg, const char *k1,
                 const char *v1, const char *k2, const char *v2) {
  char line[512];
  snprintf(line, sizeof line, "%s|%s|%s", msg, v1 ? v1 : "", v2 ? v2 : "");
  if (strcmp(line, s->last_note) == 0) return;
  snprintf(s->last_note, sizeof s->last_note, "%s", line);
  jb_log(level, msg, "process", s->who, k1, v1, k2, v2, NULL);
}

/* One look at the key file and the keys' state. */
static void check(struct jb_signer *s) {
  jb_error err = {0};
  struct jb_keyring *cur = atomic_load(&s->cur), *file = NULL;
  if (jb_keyring_load(&file, NULL, s->path, &err) < 0) {
    note(s, JB_LOG_WARN, "key file unreadable; signing with the key read before", "key_id",
         cur->key_id, "detail", err.msg);
    file = NULL;
  }
  PGconn *c = jb_db_acquire(s->db, &err);
  if (!c) {
    jb_keyring_free(file);
    return; /* the database is away: appends fail on their own; look again later */
  }
  struct jb_audit_key_status st;
  if (file && strcmp(file->key_id, cur->key_id) != 0) {
    if (jb_audit_key_status(c, file->key_id, file->pk, &st, &err) == JB_OK && st.published &&
        st.retired_ms == INT64_MAX) {
      if (s->n_old % 8 == 0) {
        struct jb_keyring **v = realloc(s->old, (s->n_old + 8) * sizeof *v);
        if (!v) {
          jb_keyring_free(file);
          jb_db_release(s->db, c);
          return;
        }
        s->old = v;
      }
      s->old[s->n_old++] = cur;
      atomic_store(&s->cur, file);
      jb_log(JB_LOG_INFO, "audit signing key switched", "process", s->who, "key_id", file->key_id,
             "replaced", cur->key_id, NULL);
      s->last_note[0] = '\0';
      cur = file;
      file = NULL;
    } else if (err.msg[0] == '\0') {
      note(s, JB_LOG_WARN,
           st.published ? "key file holds a retired key; signing with the key read before"
                        : "key file holds a key not published yet (jailboxctl keys rotate --key "
                          "FILE publishes it); signing with the key read before",
           "file_key_id", file->key_id, "key_id", cur->key_id);
    }
  }
  jb_keyring_free(file);
  memset(&err, 0, sizeof err);
  if (jb_audit_key_status(c, cur->key_id, cur->pk, &st, &err) == JB_OK) {
    if (st.retired_ms != INT64_MAX) {
      note_retirement(s, cur, &st);
      if (now_ms() >= st.retired_ms)
        note(s, JB_LOG_ERROR,
             "audit signing key retired: writes are refused until the key file "
             "holds the active key",
             "key_id", cur->key_id, "active", st.active);
    } else {
      atomic_store(&retire_ms, INT64_MAX);
    }
  }
  jb_db_release(s->db, c);
}

static void *watch_main(void *arg) {
  struct jb_signer *s = arg;
  while (!atomic_load(&s->stop)) {
    struct pollfd p[2] = {{.fd = s->event_fd, .events = POLLIN},
                          {.fd = s->watch_fd, .events = POLLIN}};
    int n = poll(p, s->watch_fd >= 0 ? 2 : 1, CHECK_EVERY_MS);
    if (n < 0 && errno != EINTR) break;
    if (atomic_load(&s->stop)) break;
    uint64_t v;
    if (n > 0 && (p[0].revents & POLLIN)) (void)!read(s->event_fd, &v, sizeof v);
    if (n > 0 && s->watch_fd >= 0 && (p[1].revents & POLLIN))
      (void)jb_keyring_watch_drain(s->watch_fd, s->path);
    check(s);
  }
  return NULL;
}

int jb_signer_open(struct jb_signer **out, struct jb_db *db, const char *state_dir,
                   const char *key_file, const char *who, jb_error *err) {
  struct jb_signer *s = calloc(1, sizeof *s);
  if (!s) return jb_fail(err, ENOMEM, "out of memory");
  s->db = db;
  s->watch_fd = s->event_fd = -1;
  snprintf(s->who, sizeof s->who, "%s", who);
  struct jb_keyring *k = NULL;
  if (jb_keyring_load(&k, state_dir, key_file, err) < 0) {
    free(s);
    return -1;
  }
  snprintf(s->path, sizeof s->path, "%s", k->path);
  atomic_store(&s->cur, k);
  PGconn *c = jb_db_acquire(db, err);
  char active[256] = "";
  int rc = c ? jb_audit_key_adopt(c, k->key_id, k->pk, active, sizeof active, err) : JB_ERR_FAIL;
  jb_db_release(db, c);
  if (rc == JB_ERR_CONFLICT) {
    jb_fail(err, EKEYREJECTED,
            "the audit signing key %s of %s (file %s) is not the active key %s; a start never "
            "retires the active key. Either give this instance the active key file (the one "
            "the running instances use), or make %s the active key with `jailboxctl keys "
            "rotate --key %s` (the running instances take it up from their key files)",
            k->key_id, who, s->path, active[0] ? active : "(none)", k->key_id, s->path);
  } else if (rc != JB_OK && err->code == EKEYREVOKED) {
    jb_error_wrap(err,
                  "the audit signing key of %s (file %s) may not sign: put the active key in "
                  "the key file, or rotate to a new key with `jailboxctl keys rotate --key "
                  "NEWFILE`",
                  who, s->path);
  } else if (rc != JB_OK) {
    jb_error_wrap(err, "checking the audit signing key %s", k->key_id);
  }
  if (rc != JB_OK) {
    jb_keyring_free(k);
    free(s);
    return -1;
  }
  jb_error werr = {0};
  s->watch_fd = jb_keyring_watch(s->path, &werr);
  if (s->watch_fd < 0) /* still checked every CHECK_EVERY_MS */
    jb_log(JB_LOG_WARN, "key file not watched", "detail", werr.msg, NULL);
  s->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->event_fd < 0 || pthread_create(&s->thread, NULL, watch_main, s) != 0) {
    jb_fail(err, errno ? errno : EAGAIN, "cannot start the key watcher");
    if (s->event_fd >= 0) close(s->event_fd);
    if (s->watch_fd >= 0) close(s->watch_fd);
    jb_keyring_free(k);
    free(s);
    return -1;
  }
  s->running = true;
  atomic_store(&retire_ms, INT64_MAX);
  *out = s;
  return 0;
}

const struct jb_keyring *jb_signer_key(struct jb_signer *s) {
  return s ? atomic_load(&s->cur) : NULL;
}

void jb_signer_poke(struct jb_signer *s) {
  if (!s || s->event_fd < 0) return;
  uint64_t one = 1;
  (void)!write(s->event_fd, &one, sizeof one);
}

void jb_signer_close(struct jb_signer *s) {
  if (!s) return;
  if (s->running) {
    atomic_store(&s->stop, true);
    jb_signer_poke(s);
    pthread_join(s->thread, NULL);
  }
  if (s->event_fd >= 0) close(s->event_fd);
  if (s->watch_fd >= 0) close(s->watch_fd);
  jb_keyring_free(atomic_load(&s->cur));
  for (size_t i = 0; i < s->n_old; i++) jb_keyring_free(s->old[i]);
  free(s->old);
  free(s);
}
