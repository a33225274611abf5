/* api/collective.c - troupe.h's collective groups: each public entry point checks its
 * runtime and forwards to collective/ (group lifecycle: group.h, declare.h; the ops:
 * ops.h), handing it the runtime's node connection, address and message limit. A
 * declaration asks the actor layer where each actor lives; collective/ decides the rest. */
#include <stdio.h>
#include <stdlib.h>

#include "actor/control.h"
#include "api/rt.h"
#include "collective/declare.h"
#include "collective/group.h"
#include "collective/ops.h"
#include "core/status.h"
#include "troupe/troupe.h"

#define CHECK_RT(rt, fn)                                                                           \
    do {                                                                                           \
        if (!(rt)) return tr__err(TR_EINVAL, fn ": runtime is NULL");                              \
    } while (0)

/* ------------------------------------------------------------------ groups */

TR_API int tr_group_join(tr_runtime *rt, int world, int rank, const char *backend, const char *name,
                         int timeout_ms, tr_group **out) {
    CHECK_RT(rt, "tr_group_join");
    return tr__group_join(rt->address, rt->cfg->max_msg, world, rank, backend, name, timeout_ms,
                          out);
}

TR_API int tr_group_join_multigpu(tr_runtime *rt, int world, int rank, const int *devices, int ndev,
                                  const char *name, int timeout_ms, tr_group **out) {
    CHECK_RT(rt, "tr_group_join_multigpu");
    return tr__group_join_devs(rt->address, rt->cfg->max_msg, world, rank, devices, ndev, name,
                               timeout_ms, out);
}

TR_API int tr_group_init(tr_runtime *rt, int world, int rank, const char *backend, const char *name,
                         int timeout_ms, tr_group **out) {
    return tr_group_join(rt, world, rank, backend, name, timeout_ms, out);
}

TR_API int tr_group_init_multigpu(tr_runtime *rt, int world, int rank, const int *devices, int ndev,
                                  const char *name, int timeout_ms, tr_group **out) {
    return tr_group_join_multigpu(rt, world, rank, devices, ndev, name, timeout_ms, out);
}

TR_API int tr_group_is_initialized(tr_runtime *rt, const char *name) {
    return rt ? tr__group_is_initialized(rt->address, name) : 0;
}

TR_API int tr_group_is_declared(tr_runtime *rt, const char *name) {
    CHECK_RT(rt, "tr_group_is_declared");
    return tr__group_declared(rt->node, name);
}

TR_API int tr_group_get(tr_runtime *rt, const char *name, tr_group **out) {
    CHECK_RT(rt, "tr_group_get");
    if (!out || !name) return tr__err(TR_EINVAL, "tr_group_get: NULL argument");
    *out = tr__group_find(rt->address, name);
    return *out ? 0 : tr__err(TR_ENOTFOUND, "this process has no live group named '%s'", name);
}

TR_API int tr_group_destroy(tr_group *g) {
    return tr__group_destroy(g);
}

/* Where each actor lives (the actor layer knows) and this node's cluster address; the
 * choice of backend and placement is collective/'s (tr__group_declare_placed). */
TR_API int tr_group_declare(tr_runtime *rt, const tr_actor_id *actors, size_t n, const int *ranks,
                            const char *backend, const char *name) {
    CHECK_RT(rt, "tr_group_declare");
    if (!actors || n == 0 || n > 64 || !backend || !name) /* (it says why) */
        return tr__group_declare_placed(rt->node, actors, n, ranks, backend, name, NULL, "", 0);
    /* where each actor lives: this node (its socket path) or another ("IP:port") */
    char(*nodes)[256] = calloc(n, sizeof *nodes);
    const char **at = calloc(n, sizeof *at);
    int rc = nodes && at ? 0 : tr__err(TR_ENOMEM, "tr_group_declare");
    for (size_t i = 0; i < n && !rc; i++) {
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        if ((rc = tr__actor_info(rt->node, actors[i], &d))) {
            rc = tr__err_wrap(rc, "tr_group_declare: actor %zu", i);
            break;
        }
        snprintf(nodes[i], sizeof nodes[i], "%s", d.node);
        at[i] = nodes[i];
    }
    /* in a cluster, every declaration goes in the cluster's store (the head's): a rank
     * on any node finds it there, and a later one of the name replaces it everywhere */
    char here[80] = "";
    int cluster = 0;
    if (!rc) {
        rc = tr__node_cluster_address(rt->node, here, sizeof here, NULL);
        cluster = rc == 0;
        if (rc == TR_ENOTFOUND) rc = 0; /* this node is in no cluster */
    }
    if (!rc)
        rc = tr__group_declare_placed(rt->node, actors, n, ranks, backend, name, at, here, cluster);
    free(nodes);
    free(at);
    return rc;
}

TR_API int tr_group_open(tr_runtime *rt, const char *name, int timeout_ms, tr_group **out) {
    CHECK_RT(rt, "tr_group_open");
    return tr__group_open(rt->node, rt->address, rt->cfg->max_msg, rt->is_actor ? &rt->self : NULL,
                          name, timeout_ms, out);
}

TR_API int tr_group_rank(const tr_group *g) {
    return tr__group_rank(g);
}

TR_API int tr_group_size(const tr_group *g) {
    return tr__group_size(g);
}

TR_API int tr_group_set_timeout(tr_group *g, int timeout_ms) {
    return tr__group_set_timeout(g, timeout_ms);
}

TR_API int tr_group_set_checks(tr_group *g, int on) {
    return tr__group_set_checks(g, on);
}

TR_API int tr_group_set_single_copy(tr_group *g, int on) {
    return tr__group_set_single_copy(g, on);
}

/* ------------------------------------------------------------------ ops */

TR_API int tr_barrier(tr_group *g, int timeout_ms) {
    return tr__group_barrier(g, timeout_ms);
}

TR_API int tr_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        tr_redop op, int timeout_ms) {
    return tr__group_allreduce(g, send, recv, count, dtype, op, timeout_ms);
}

TR_API int tr_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                        int timeout_ms) {
    return tr__group_broadcast(g, buf, count, dtype, root, timeout_ms);
}

TR_API int tr_reduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     tr_redop op, int root, int timeout_ms) {
    return tr__group_reduce(g, send, recv, count, dtype, op, root, timeout_ms);
}

TR_API int tr_allgather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        int timeout_ms) {
    return tr__group_allgather(g, send, recv, count, dtype, timeout_ms);
}

TR_API int tr_gather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     int root, int timeout_ms) {
    return tr__group_gather(g, send, recv, count, dtype, root, timeout_ms);
}

TR_API int tr_scatter(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                      int root, int timeout_ms) {
    return tr__group_scatter(g, send, recv, count, dtype, root, timeout_ms);
}

TR_API int tr_reduce_scatter(tr_group *g, const void *send, void *recv, size_t count,
                             tr_dtype dtype, tr_redop op, int timeout_ms) {
    return tr__group_reduce_scatter(g, send, recv, count, dtype, op, timeout_ms);
}

TR_API int tr_alltoall(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                       int timeout_ms) {
    return tr__group_alltoall(g, send, recv, count, dtype, timeout_ms);
}

TR_API int tr_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                   int timeout_ms) {
    return tr__group_send(g, buf, count, dtype, dst, timeout_ms);
}

TR_API int tr_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int timeout_ms) {
    return tr__group_recv(g, buf, count, dtype, src, timeout_ms);
}

/* ------------------------------------------------------------------ multi-device, async */

TR_API int tr_allreduce_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, tr_redop op, int timeout_ms) {
    return tr__group_allreduce_multigpu(g, send, recv, count, dtype, op, timeout_ms);
}

TR_API int tr_broadcast_multigpu(tr_group *g, void *const *bufs, size_t count, tr_dtype dtype,
                                 int root_rank, int root_gpu, int timeout_ms) {
    return tr__group_broadcast_multigpu(g, bufs, count, dtype, root_rank, root_gpu, timeout_ms);
}

TR_API int tr_reduce_multigpu(tr_group *g, const void *const *send, void *const *recv, size_t count,
                              tr_dtype dtype, tr_redop op, int root_rank, int root_gpu,
                              int timeout_ms) {
    return tr__group_reduce_multigpu(g, send, recv, count, dtype, op, root_rank, root_gpu,
                                     timeout_ms);
}

TR_API int tr_allgather_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, int timeout_ms) {
    return tr__group_allgather_multigpu(g, send, recv, count, dtype, timeout_ms);
}

TR_API int tr_reduce_scatter_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                      size_t count, tr_dtype dtype, tr_redop op, int timeout_ms) {
    return tr__group_reduce_scatter_multigpu(g, send, recv, count, dtype, op, timeout_ms);
}

TR_API int tr_group_set_stream(tr_group *g, void *stream) {
    return tr__group_set_stream(g, stream);
}

TR_API int tr_group_synchronize(tr_group *g, int timeout_ms) {
    return tr__group_synchronize(g, timeout_ms);
}
