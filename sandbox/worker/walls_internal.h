/* walls_internal.h — what walls.c shares with the two files above it, walls_launch.c (the
 * launch) and walls_probe.c (the probe): the checks of the walls as they stand, the contract's
 * time stamp and the filters' hash. Only these three files include it. */
#ifndef JB_SANDBOX_WORKER_WALLS_INTERNAL_H
#define JB_SANDBOX_WORKER_WALLS_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "sandbox/worker/walls.h"
#include "lib/err.h"

/* Checks on the jailed process's own view. Appends "what is wrong" to `problems` of the wall
 * concerned. */
struct check {
  json_t *problems[JB_WALL_COUNT];
};

/* Wall-clock time, ms since the epoch. */
long long walls_epoch_ms(void);

/* `ms` (since the epoch) as ISO 8601 UTC with milliseconds ("2026-01-02T03:04:05.678Z") into
 * `buf` of `len` bytes. */
void walls_iso8601(long long ms, char *buf, size_t len);

/* SHA-256 of `len` bytes at `data`, as 64 lowercase hex digits and a NUL into `out`. */
void walls_sha256_hex(const void *data, size_t len, char out[65]);

/* Checks the shim's status `st` (borrowed: the jailed process's own view) against the walls
 * built (`gvisor`, `bwrap`), appending what is wrong to `c`. `later`: the shim has served ops
 * since its launch and may hold the workspace open. */
void walls_check_status(const json_t *st, bool gvisor, bool bwrap, bool later, struct check *c);

/* Reads container `id` with `docker inspect` and checks Wall 2's settings (and Wall 1's
 * runtime when `gvisor`), appending what is wrong to `c`. Returns the settings the contract
 * reports (new reference), or NULL with `err` when Docker could not be asked. */
json_t *walls_inspect_settings(const struct jb_walls_config *cfg, const char *id, bool gvisor,
                               struct check *c, jb_error *err);

#endif
