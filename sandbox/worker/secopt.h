/* secopt.h — Wall 2's security options as Docker holds them (HostConfig.SecurityOpt of
 * `docker inspect`), judged as Docker applies them. */
#ifndef JB_SANDBOX_WORKER_SECOPT_H
#define JB_SANDBOX_WORKER_SECOPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Judges the container's SecurityOpt array `opts` (borrowed; NULL or not an array: no
 * options) the way Docker's daemon applies it: in order, a later option of a kind overriding
 * an earlier one. *nnp: no-new-privileges is on — the last `no-new-privileges` option is bare
 * or has, after `=` or `:`, a value Go's strconv.ParseBool reads as true ("1", "t", "T",
 * "TRUE", "true", "True"). *seccomp_ours: the last `seccomp=` (or `seccomp:`) option's value is
 * `profile` (`profile_len` bytes) byte for byte — not another profile, not `unconfined`.
 * Options of other kinds are ignored. */
void jb_secopt_judge(const json_t *opts, const char *profile, size_t profile_len, bool *nnp,
                     bool *seccomp_ours);

#endif
