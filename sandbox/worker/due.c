/* due.c — the ring of sessions due for their queued ops (w->due): what the runners of relay.c
 * take their next session from, and what a command's end (commands.c) and the notifications
 * add to. */
#include <stdio.h>
#include <string.h>

#include "sandbox/worker/worker.h"

/* Makes `max` claims of session `job` due: added to what its entry asks already when it is
 * due or on a runner, else a new entry at the end (dropped when the ring is full: the sweep
 * comes back to it). */
void due_add(struct jb_worker *w, const char *job, int max) {
  pthread_mutex_lock(&w->due.lock);
  bool found = false;
  for (int r = 0; r < JB_QUEUED_RUNNERS && !found; r++)
    if (!strcmp(w->due.running[r].job, job)) {
      w->due.again[r] = w->due.again[r] + max > 1000 ? 1000 : w->due.again[r] + max;
      found = true;
    }
  for (size_t i = 0; i < w->due.n && !found; i++) {
    struct jb_due *d = &w->due.ring[(w->due.head + i) % JB_WORKER_SESSIONS_MAX];
    if (!strcmp(d->job, job)) {
      d->budget = d->budget + max > 1000 ? 1000 : d->budget + max;
      found = true;
    }
  }
  if (!found && w->due.n < JB_WORKER_SESSIONS_MAX) {
    struct jb_due *d = &w->due.ring[(w->due.head + w->due.n++) % JB_WORKER_SESSIONS_MAX];
    snprintf(d->job, sizeof d->job, "%s", job);
    d->budget = max;
    pthread_cond_signal(&w->due.cond);
  }
  pthread_mutex_unlock(&w->due.lock);
}

void run_queued_session(struct jb_worker *w, const char *job) { due_add(w, job, 1000); }
