/* head_announce.c — the schedule of the worker's audit-head announcements (see head_announce.h). */
#include "sandbox/worker/head_announce.h"

#include <stdio.h>
#include <string.h>

void jb_head_schedule_init(struct jb_head_schedule *s, long long interval_ms) {
  s->n = 0;
  s->interval_ms = interval_ms;
}

/* The slot of `job`, or NULL. */
static struct jb_head_slot *find(struct jb_head_schedule *s, const char *job) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->slot[i].job, job)) return &s->slot[i];
  return NULL;
}

int jb_head_committed(struct jb_head_schedule *s, const char *job, long long seq,
                      long long now_ms) {
  struct jb_head_slot *h = find(s, job);
  if (!h) {
    if (s->n < JB_HEAD_SLOTS) {
      h = &s->slot[s->n++];
    } else {
      for (size_t i = 0; i < s->n; i++)
        if (!s->slot[i].pending && (!h || s->slot[i].last_ms < h->last_ms)) h = &s->slot[i];
      if (!h) return -1;
    }
    /* new: due at once */
    *h = (struct jb_head_slot){.last_ms = now_ms - s->interval_ms};
    snprintf(h->job, sizeof h->job, "%s", job);
  }
  if (seq > h->seq) h->seq = seq;
  if (h->pending) return 1;
  h->pending = true;
  return 0;
}

bool jb_head_next(struct jb_head_schedule *s, long long now_ms, bool stopping, char job[129],
                  long long *after, long long *wake_ms) {
  struct jb_head_slot *due = NULL;
  long long next = now_ms + 1000;
  for (size_t i = 0; i < s->n; i++) {
    struct jb_head_slot *h = &s->slot[i];
    if (!h->pending) continue;
    if (stopping || h->last_ms + s->interval_ms <= now_ms) {
      if (!due || h->last_ms < due->last_ms) due = h; /* the longest waiting first */
    } else if (h->last_ms + s->interval_ms < next) {
      next = h->last_ms + s->interval_ms;
    }
  }
  *wake_ms = next;
  if (!due) return false;
  snprintf(job, 129, "%s", due->job);
  *after = due->announced;
  due->pending = false;
  due->last_ms = now_ms;
  return true;
}

void jb_head_done(struct jb_head_schedule *s, const char *job, bool ok, long long seq,
                  bool stopping) {
  struct jb_head_slot *h = find(s, job);
  if (ok) {
    if (h && seq > h->announced) h->announced = seq;
    return;
  }
  if (!stopping) {
    if (h) h->pending = true; /* again an interval after this try (last_ms) */
    return;
  }
  for (size_t i = 0; i < s->n; i++) s->slot[i].pending = false;
}
