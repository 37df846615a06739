/* explain.h — the session contract (sessions.walls, see walls.h) written for a person: which
 * walls stand with their settings, what was checked from inside, and the residual risks.
 * The "explain mode" of the layer-contract study; `jailboxctl explain JOB` is meant to print
 * this (today: `jailbox-worker --explain < contract.json`). */
#ifndef JB_SANDBOX_EXPLAIN_H
#define JB_SANDBOX_EXPLAIN_H

#include <jansson.h>
#include <stdio.h>

/* Writes `contract` (borrowed; the `walls` value of GET /v1/jailbox/:jobId, or the whole
 * session object, whose `walls` is then used) to `out` as plain text. Returns 0, or -1 when
 * it is not a contract. */
int jb_contract_explain(const json_t *contract, FILE *out);

#endif
