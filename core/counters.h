/* core/counters.h - what a process counts for its node's metrics (api/node/metrics.c),
 * in shared memory the node reads: a worker points tr__coll_counters_self at its entry on
 * the node's board (objectstore/segment.h) once it has one; until then (and in drivers)
 * nothing is counted. Relaxed atomic adds: no lock, no message.
 *
 * Collective ops, by backend and kind: how many, the bytes each rank gave (count times
 * the dtype's size), the time each took on this rank, and how many failed, timed out or
 * saw a peer die. */
#ifndef TR_CORE_COUNTERS_H
#define TR_CORE_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

/* Backends, as counted: shm, gloo, nccl, and any other. */
enum { TR__CNT_SHM, TR__CNT_GLOO, TR__CNT_NCCL, TR__CNT_OTHER, TR__CNT_BACKENDS };
/* Op kinds: collective/group.h's TR__COLL_* (1..11), 0 unused. */
#define TR__CNT_OPS 12

typedef struct tr__coll_counters {
    uint64_t ops[TR__CNT_BACKENDS][TR__CNT_OPS];
    uint64_t bytes[TR__CNT_BACKENDS][TR__CNT_OPS];
    uint64_t ns[TR__CNT_BACKENDS][TR__CNT_OPS];
    uint64_t errors[TR__CNT_BACKENDS];
    uint64_t timeouts[TR__CNT_BACKENDS];
    uint64_t peer_deaths[TR__CNT_BACKENDS];
} tr__coll_counters;

/* This process's counters (NULL: none). */
extern tr__coll_counters *tr__coll_counters_self;

/* The counted index of a backend's name. */
int tr__cnt_backend(const char *name);
/* Counts one collective op of kind (TR__COLL_*) on backend (tr__cnt_backend's) that took
 * ns and ended with rc (0, or a code: TR_ETIMEDOUT and TR_EPEER_DIED are counted apart). */
void tr__cnt_coll(int backend, int kind, uint64_t bytes, uint64_t ns, int rc);
/* Adds from's counts into to (not atomically: a copy the node owns) and, if clear, zeroes
 * from. */
void tr__cnt_coll_add(tr__coll_counters *to, tr__coll_counters *from, int clear);

#endif
