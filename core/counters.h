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

/* A histogram of durations: how many, how many failed, their sum, and how many fell in
 * each bucket (bucket i: at most tr__hist_bound_ns[i]; the last: longer). Relaxed atomic
 * adds (tr__hist_add). */
#define TR__HIST_BUCKETS 14
extern const uint64_t tr__hist_bound_ns[TR__HIST_BUCKETS - 1];
typedef struct tr__hist {
    uint64_t n, errors, ns;
    uint64_t bucket[TR__HIST_BUCKETS];
} tr__hist;
void tr__hist_add(tr__hist *h, uint64_t ns, int err);
/* The same into a thread's own histogram (plain adds), and that one added into a shared one
 * (relaxed atomic adds of what it holds), then zeroed: a hot loop counts at a line's cost. */
void tr__hist_add_local(tr__hist *h, uint64_t ns, int err);
void tr__hist_merge(tr__hist *to, tr__hist *from);
/* Adds from into to (not atomically: a copy of the reader's) and, if clear, zeroes from. */
void tr__hist_sum(tr__hist *to, tr__hist *from, int clear);

/* What every process (driver, worker, the node itself) counts in its trace file's header
 * (core/trace.h) for its node's metrics, which sum every file of the session (and keep
 * what the files removed since had counted: tr__proc_cnt_add). Relaxed atomic adds. */
typedef struct tr__proc_counters {
    int64_t calls_pending; /* a gauge: its calls to actors held, queued or in flight */
    uint64_t pulls, pull_bytes, pull_errors; /* objects pulled from other nodes */
    uint64_t rpc_errors;                     /* gRPC calls and streams that failed */
    uint64_t graph_execs;                    /* compiled graphs' executions it began */
    tr__hist steps;                          /* compiled graphs' steps it ran */
    tr__hist coll[TR__CNT_BACKENDS];         /* its collective ops' durations */
} tr__proc_counters;
/* Adds from's counters (not the gauge) into to; from is read with relaxed loads. */
void tr__proc_cnt_add(tr__proc_counters *to, const tr__proc_counters *from);

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
