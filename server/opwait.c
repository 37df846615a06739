/* opwait.c — wake-ups of calls waiting on an op (see opwait.h). A plain list under one mutex:
 * a process has at most JAILBOX_MAX_WAITING_CALLS waiting calls (256 by default) and a few
 * more on the handler threads, so a walk is at most a few hundred steps. */
#define _GNU_SOURCE
#include "server/opwait.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db/ops.h"

struct jb_opwait {
  pthread_mutex_t lock;
  bool up;
  struct jb_opwait_ticket *head;
};

struct jb_opwait *jb_opwait_new(void) {
  struct jb_opwait *w = calloc(1, sizeof *w);
  if (w) pthread_mutex_init(&w->lock, NULL);
  return w;
}

void jb_opwait_free(struct jb_opwait *w) {
  if (!w) return;
  pthread_mutex_destroy(&w->lock);
  free(w);
}

void jb_opwait_set_up(struct jb_opwait *w, bool up) {
  if (!w) return;
  pthread_mutex_lock(&w->lock);
  w->up = up;
  for (struct jb_opwait_ticket *t = w->head; t; t = t->next) {
    t->fired = true;
    pthread_cond_signal(&t->cond);
  }
  pthread_mutex_unlock(&w->lock);
}

void jb_opwait_register(struct jb_opwait *w, struct jb_opwait_ticket *t, const char *job_id,
                        long long op_id) {
  snprintf(t->job_id, sizeof t->job_id, "%s", job_id);
  t->op_id = op_id;
  t->fired = false;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&t->cond, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_lock(&w->lock);
  t->next = w->head;
  w->head = t;
  pthread_mutex_unlock(&w->lock);
}

void jb_opwait_set_op(struct jb_opwait *w, struct jb_opwait_ticket *t, long long op_id) {
  pthread_mutex_lock(&w->lock);
  t->op_id = op_id;
  pthread_mutex_unlock(&w->lock);
}

void jb_opwait_unregister(struct jb_opwait *w, struct jb_opwait_ticket *t) {
  pthread_mutex_lock(&w->lock);
  for (struct jb_opwait_ticket **p = &w->head; *p; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      break;
    }
  pthread_mutex_unlock(&w->lock);
  pthread_cond_destroy(&t->cond);
}

bool jb_opwait_wait(struct jb_opwait *w, struct jb_opwait_ticket *t, long timeout_ms,
                    long fallback_ms) {
  pthread_mutex_lock(&w->lock);
  long ms = !w->up && fallback_ms < timeout_ms ? fallback_ms : timeout_ms;
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += ms / 1000;
  until.tv_nsec += (ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  while (!t->fired)
    if (pthread_cond_timedwait(&t->cond, &w->lock, &until) != 0) break;
  bool fired = t->fired;
  t->fired = false;
  pthread_mutex_unlock(&w->lock);
  return fired;
}

void jb_opwait_notify(struct jb_opwait *w, const char *job_id, long long op_id) {
  if (!w) return;
  pthread_mutex_lock(&w->lock);
  for (struct jb_opwait_ticket *t = w->head; t; t = t->next)
    if ((op_id == 0 || t->op_id < 0 || t->op_id == op_id) && strcmp(t->job_id, job_id) == 0) {
      t->fired = true;
      pthread_cond_signal(&t->cond);
    }
  pthread_mutex_unlock(&w->lock);
}

int jb_opwait_notify_payload(struct jb_opwait *w, const char *payload) {
  long long op_id;
  char state[20];
  const char *job;
  if (jb_op_notice_parse(payload, &op_id, state, &job) < 0) return -1;
  /* an op queued (stored, or approved by the buyer) is the worker's business; waking its
   * call for it would cost a read of a row that has not changed yet */
  if (op_id != 0 && jb_op_state_from_name(state) == JB_OP_APPROVED) return 0;
  jb_opwait_notify(w, job, op_id);
  return 0;
}
