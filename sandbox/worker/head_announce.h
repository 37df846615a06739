/* head_announce.h — when the worker announces the audit heads that its direct reads, lists and
 * stats committed without a NOTIFY (db/ops.h jb_db_op_direct_store): per session at once when
 * its head was last announced an interval or more ago, else when the interval is up, then the
 * newest head committed by then (db/events.h jb_db_announce_audit_head) — and across sessions
 * the one waiting longest first, so that sessions whose agents read in a loop cannot keep the
 * others' heads from ever being announced when the announcer falls behind. The schedule only:
 * the caller (sandbox/worker/heads.c) locks it, sends, and passes the time. */
#ifndef JB_SANDBOX_HEAD_ANNOUNCE_H
#define JB_SANDBOX_HEAD_ANNOUNCE_H

#include <stdbool.h>
#include <stddef.h>

#define JB_HEAD_SLOTS 1024 /* sessions remembered; the one announced longest ago makes room */

struct jb_head_slot {
  char job[129];
  long long seq; /* newest head committed unannounced */
  long long announced; /* newest head announced */
  long long last_ms; /* when it was last announced (or made due), ms on the caller's clock */
  bool pending;
};

struct jb_head_schedule {
  struct jb_head_slot slot[JB_HEAD_SLOTS];
  size_t n;
  long long interval_ms;
};

/* Empties `s`; at most one announcement per session every `interval_ms` ms. */
void jb_head_schedule_init(struct jb_head_schedule *s, long long interval_ms);

/* Head `seq` of session `job` was committed without an announcement, at `now_ms`. 0 when the
 * session now waits and did not before (the announcer must be woken: the time it sleeps to
 * does not count this session), 1 when it was already waiting (its time is counted: no wake —
 * a read loop would otherwise wake the announcer at every read), or -1 when every slot holds
 * a session still waiting (nothing is recorded: the announcer is far behind). */
int jb_head_committed(struct jb_head_schedule *s, const char *job, long long seq, long long now_ms);

/* The announcement to make at `now_ms`: true with `job` (129 bytes) and *after (the newest head
 * already announced for it: announce only one over it) — the slot is no longer waiting and
 * counts as announced now; false when none is due, with *wake_ms the time the next one is
 * (now_ms + 1000 when none waits). Of the sessions due, the one whose head was announced
 * longest ago goes first. With `stopping`, every waiting session is due. */
bool jb_head_next(struct jb_head_schedule *s, long long now_ms, bool stopping, char job[129],
                  long long *after, long long *wake_ms);

/* The announcement jb_head_next handed out for `job` ended: `ok` with `seq` the newest head it
 * found (and announced when over *after), or failed — then it is tried again an interval
 * later, unless `stopping`: then it and every other waiting announcement are given up (their
 * heads are in the database; a database that failed now would make each try wait out a
 * connect timeout and hold up the worker's exit). */
void jb_head_done(struct jb_head_schedule *s, const char *job, bool ok, long long seq,
                  bool stopping);

#endif
