/* api/node/metrics.h - the node's Prometheus metrics (text exposition format 0.0.4), and
 * the HTTP server that shows them (core/http.h): /metrics, /api/v1/nodes.
 *
 * What the node knows itself (actors by state, the store, the cluster's nodes, its own
 * and its workers' CPU and memory) is read at each scrape. What workers do (calls and
 * their durations) they count in their entries of the node's board (objectstore/
 * segment.h, tr__board_count_call: relaxed atomic adds, no message); the node sums them by
 * class at each scrape, and keeps what a worker counted when it exits, so a counter never
 * goes down. No label names a worker, object or call (Ray #47289): a class, a state, a
 * bucket at most. */
#ifndef TR_API_NODE_METRICS_H
#define TR_API_NODE_METRICS_H

#include <stdint.h>

#include "actor/directory.h"
#include "api/node/cluster.h"
#include "collective/registry.h"
#include "core/buf.h"
#include "core/workerpool.h"
#include "objectstore/store.h"

typedef struct tr__metrics tr__metrics;

typedef struct tr__metrics_src {
    tr__directory **dir; /* (the node makes the directory after the metrics) */
    tr__store *store;
    tr__pool *pool;
    tr__groups *groups;
    tr__cluster **cluster; /* (set after the directory is made) */
    const char *trace_dir; /* every process's counters (core/trace.h); copied */
} tr__metrics_src;

/* Returns 0 or TR_ENOMEM. */
int tr__metrics_create(const tr__metrics_src *src, tr__metrics **out);
/* The directory's on_worker_exit hook (ctx: the tr__metrics): keeps what the worker of
 * actor id counted. */
void tr__metrics_worker_exited(void *ctx, const uint8_t id[16], const char *cls);
/* The totals the status page's history samples: calls run (every class, tasks too),
 * collective ops, and actors alive. */
void tr__metrics_totals(tr__metrics *m, uint64_t *calls, uint64_t *coll_ops, uint64_t *alive);
/* Removes the trace files of processes gone beyond those kept (core/trace.h), keeping
 * what they counted. */
void tr__metrics_prune(tr__metrics *m);
/* Appends the metrics, in Prometheus' text format. */
void tr__metrics_render(tr__metrics *m, tr__buf *out);
void tr__metrics_destroy(tr__metrics *m);

#endif
