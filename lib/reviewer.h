/* reviewer.h — the operator's op reviewer, seen from the wire: its address checked at start,
 * one review request sent (an HTTPS webhook through libcurl, or a program given the request on
 * stdin) within a deadline, and its answer read as untrusted input. Every failure is the
 * verdict "ask" with a sentence saying what went wrong: a reviewer never allows by failing.
 * What the request holds and when it is sent is api/core/review.c's. */
#ifndef JB_REVIEWER_H
#define JB_REVIEWER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "lib/err.h"

#define JB_REVIEW_REASON_MAX 500 /* bytes of a reviewer's reason kept (cut at a character) */
#define JB_REVIEW_ANSWER_MAX (64 * 1024) /* bytes of an answer read; more: "ask" */
#define JB_REVIEW_ANSWER_DEPTH 8 /* nesting of an answer's JSON */

enum jb_review_verdict { JB_REVIEW_ASK = 0, JB_REVIEW_ALLOW, JB_REVIEW_DENY };

/* A review's outcome. */
struct jb_review {
  enum jb_review_verdict verdict;
  bool failed; /* the reviewer could not be asked or did not answer well: verdict ask, and
                * `reason` says why (jailboxd's words, not the reviewer's) */
  char reason[JB_REVIEW_REASON_MAX + 1]; /* UTF-8 without control characters; may be "" */
  bool cut; /* ended early by its jb_review_cut (failed too): the caller is shutting down */
};

/* When a review still running is cut short: once the time `*at_ms` (CLOCK_MONOTONIC ms; 0: not
 * set — it may be set while the review runs, from another thread) less `before_ms` has come.
 * For a server's shutdown grace. */
struct jb_review_cut {
  const _Atomic long long *at_ms;
  long before_ms;
};

/* The verdict's name: "allow", "deny", "ask". Static. */
const char *jb_review_verdict_name(enum jb_review_verdict v);

/* Checks the reviewer's webhook address: an absolute https:// URL with a host; http:// only
 * to a literal loopback address (127.0.0.0/8 or [::1]), where no one else can read the
 * request. No fragment. 0, or -1 with `err` saying what is wrong without repeating the URL
 * (it may hold credentials). */
int jb_review_url_check(const char *url, jb_error *err);

/* Checks the reviewer program: an absolute path of an executable regular file. 0, or -1. */
int jb_review_cmd_check(const char *path, jb_error *err);

/* Once in the process, before any thread sends a review (curl_global_init). 0, or -1. */
int jb_review_global_init(jb_error *err);

/* Reads a reviewer's answer (`len` bytes at `body`, untrusted) into *out:
 * {"verdict": "allow"|"deny"|"ask", "reason"?: string|null} — other keys are ignored — as
 * JSON of at most JB_REVIEW_ANSWER_MAX bytes (lib/json.h: no duplicate keys, at most
 * JB_REVIEW_ANSWER_DEPTH deep). The reason's control characters (C0, DEL, C1) become spaces
 * and it is cut to JB_REVIEW_REASON_MAX bytes at a character's start. Anything else is
 * verdict ask with out->failed and the fault in out->reason. */
void jb_review_parse(const char *body, size_t len, struct jb_review *out);

/* POSTs `body` (`len` bytes of JSON) to `url` (checked with jb_review_url_check) with
 * Content-Type application/json, connecting and answering within `timeout_ms` in all,
 * without proxies or redirects, and reads a 2xx answer with jb_review_parse. Timeout,
 * connection or TLS error, another status, an answer over JB_REVIEW_ANSWER_MAX: ask, failed,
 * with the reason ("reviewer timed out after 5000 ms"). `cut` (NULL: none) may end it earlier:
 * ask, failed and out->cut. Blocks the calling thread only. */
void jb_review_http(const char *url, const char *body, size_t len, long timeout_ms,
                    const struct jb_review_cut *cut, struct jb_review *out);

/* Runs program `path` (no shell, no arguments; a new session; stdin the `len` bytes of
 * `body`, stdout read, stderr /dev/null; environment PATH and LANG only; no fd of jailboxd
 * but 0-2) and reads its stdout with jb_review_parse once it exits 0. Not finished within
 * `timeout_ms`, or cut short by `cut` (NULL: none; then out->cut too): its process group is
 * killed (SIGKILL) and the verdict is ask; a non-zero exit, a signal, an answer over
 * JB_REVIEW_ANSWER_MAX: ask, failed. */
void jb_review_cmd(const char *path, const char *body, size_t len, long timeout_ms,
                   const struct jb_review_cut *cut, struct jb_review *out);

#endif
