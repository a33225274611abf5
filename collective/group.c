/* collective/group.c - group lifecycle and the op API (argument checks, then the
 * backend's ops table). Nothing here knows one backend from another: what a backend does,
 * and does not do, is its table's (group.h); which are built in, backends.c's. */
#include "collective/group.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collective/ops.h"
#include "collective/registry.h"
#include "collective/shm/segment.h"
#include "collective/steps.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/counters.h"
#include "core/reduce.h"
#include "core/log.h"
#include "core/status.h"
#include "core/trace.h"

/* This process's live groups, for tr_group_is_initialized. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static tr_group *live;

static void live_add(tr_group *g) {
    pthread_mutex_lock(&live_mu);
    g->live_next = live;
    live = g;
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(tr_group *g) {
    pthread_mutex_lock(&live_mu);
    for (tr_group **pp = &live; *pp; pp = &(*pp)->live_next) {
        if (*pp == g) {
            *pp = g->live_next;
            break;
        }
    }
    pthread_mutex_unlock(&live_mu);
}

void tr__group_hide(tr_group *g) {
    if (g) live_remove(g);
}

tr_group *tr__group_find(const char *node_path, const char *name) {
    if (!node_path || !name) return NULL;
    tr_group *found = NULL;
    pthread_mutex_lock(&live_mu);
    for (tr_group *g = live; g && !found; g = g->live_next)
        if (strcmp(g->name, name) == 0 && strcmp(g->node_path, node_path) == 0) found = g;
    pthread_mutex_unlock(&live_mu);
    return found;
}

int tr__group_is_initialized(const char *node_path, const char *name) {
    return tr__group_find(node_path, name) != NULL;
}

static int join(const char *node_path, size_t max_msg, int world, int rank,
                const tr__coll_backend_v2 *be, const char *name, uint64_t extra, const int *devs,
                int ndev, int timeout_ms, tr_group **out);

int tr__group_join(const char *node_path, size_t max_msg, int world, int rank, const char *backend,
                   const char *name, int timeout_ms, tr_group **out) {
    if (!out) return tr__err(TR_EINVAL, "tr_group_join: out is NULL");
    *out = NULL;
    if (!name || !tr__coll_name_ok(name, strlen(name)) || !backend || world < 1 ||
        world > TR__COLL_MAX_WORLD || rank < 0 || rank >= world)
        return tr__err(TR_EINVAL,
                       "tr_group_join: bad name (1-199 bytes, no '/'), backend, world (1..%d) or "
                       "rank",
                       TR__COLL_MAX_WORLD);
    const tr__coll_backend_v2 *be = tr__coll_backend_find(backend);
    if (!be)
        return tr__err(TR_EINVAL,
                       "tr_group_join: backend '%s' is not built into this "
                       "troupe (available: %s)",
                       backend, tr__coll_backends_built);
    return join(node_path, max_msg, world, rank, be, name, 0, NULL, 0, timeout_ms, out);
}

int tr__group_join_devs(const char *node_path, size_t max_msg, int world, int rank, const int *devs,
                        int ndev, const char *name, int timeout_ms, tr_group **out) {
    if (!out) return tr__err(TR_EINVAL, "tr_group_join_multigpu: out is NULL");
    *out = NULL;
    const tr__coll_backend_v2 *be = NULL;
    for (size_t i = 0; tr__coll_backends[i] && !be; i++)
        if (tr__coll_backends[i]->init_devs) be = tr__coll_backends[i];
    if (!be)
        return tr__err(TR_EINVAL,
                       "tr_group_join_multigpu: no backend built into this troupe drives several "
                       "devices (available: %s)",
                       tr__coll_backends_built);
    if (!name || !tr__coll_name_ok(name, strlen(name)) || world < 1 ||
        world * ndev > TR__COLL_MAX_WORLD * TR__COLL_MAX_DEV || world > TR__COLL_MAX_WORLD ||
        rank < 0 || rank >= world || !devs || ndev < 1 || ndev > TR__COLL_MAX_DEV)
        return tr__err(TR_EINVAL,
                       "tr_group_join_multigpu: bad name, world, rank or devices (1..%d)",
                       TR__COLL_MAX_DEV);
    for (int i = 0; i < ndev; i++)
        for (int j = 0; j < i; j++)
            if (devs[i] == devs[j])
                return tr__err(TR_EINVAL, "tr_group_join_multigpu: device %d twice", devs[i]);
    return join(node_path, max_msg, world, rank, be, name, 0, devs, ndev, timeout_ms, out);
}

/* No ops: a segment, its members and their dead mask (steps.h). */
static const tr__coll_backend_v2 segment_only = {.version = 2, .name = TR__COLL_SEGMENT_BACKEND};

int tr__group_join_segment(const char *node_path, size_t max_msg, int world, int rank,
                           const char *name, uint64_t extra, int timeout_ms, tr_group **out) {
    if (!out) return tr__err(TR_EINVAL, "segment join: out is NULL");
    *out = NULL;
    if (!name || !tr__coll_name_ok(name, strlen(name)) || world < 1 || world > TR__COLL_MAX_WORLD ||
        rank < 0 || rank >= world || extra > TR__COLL_MAX_EXTRA)
        return tr__err(TR_EINVAL, "segment join: bad name, world, rank or size");
    return join(node_path, max_msg, world, rank, &segment_only, name, extra, NULL, 0, timeout_ms,
                out);
}

int tr__group_cancel_segment(const char *node_path, size_t max_msg, const char *name) {
    tr__nodeconn *node;
    int rc = tr__nodeconn_open(node_path, max_msg, &node);
    if (rc) return rc;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, name);
    rc = tr__nodeconn_call(node, TR__MSG_GROUP_CANCEL, &b, 5000, NULL);
    tr__buf_free(&b);
    tr__nodeconn_close(node);
    return rc;
}

/* A handle with its own connection to the node, and the defaults every group starts with. */
static int group_new(const char *node_path, size_t max_msg, const tr__coll_backend_v2 *be,
                     int world, int rank, const char *name, tr_group **out) {
    tr_group *g = calloc(1, sizeof *g);
    if (!g) return tr__err(TR_ENOMEM, "joining group '%s'", name);
    int rc = tr__nodeconn_open(node_path, max_msg, &g->node);
    if (rc) {
        free(g);
        return rc;
    }
    g->be = be;
    g->world = world;
    g->rank = rank;
    g->timeout_ms = TR__GROUP_DEFAULT_TIMEOUT_MS;
    g->checks = 1;
    snprintf(g->node_path, sizeof g->node_path, "%s", node_path);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->flow_key = tr__flight_flow_key(g->name); /* (what every op's bookkeeping needs) */
    g->cnt_backend = tr__cnt_backend(be->name);
    *out = g;
    return 0;
}

/* After the backend's init: device buffers go through host memory where the build can
 * stage them, the backend takes host memory only and this process sees a device (asked
 * once per process: where there is none, no pointer is ever looked at). */
static int stage_open(tr_group *g) {
    if (!tr__coll_device_stager || !(g->be->flags & TR__COLL_HOST_MEMORY)) return 0;
    return tr__coll_device_stager->open(g);
}

int tr__group_join_span(const char *node_path, size_t max_msg, int world, int rank,
                        const char *backend, const char *name, uint64_t nonce,
                        const char *const *nodes, int hier, int timeout_ms, tr_group **out) {
    if (!out) return tr__err(TR_EINVAL, "tr_group_open: out is NULL");
    *out = NULL;
    if (!name || !tr__coll_name_ok(name, strlen(name)) || world < 1 || world > TR__COLL_MAX_WORLD ||
        rank < 0 || rank >= world || !nodes)
        return tr__err(TR_EINVAL, "tr_group_open: bad name, world, rank or nodes");
    char host[64];
    const char *colon = strrchr(nodes[rank], ':');
    if (!colon || colon == nodes[rank] || (size_t)(colon - nodes[rank]) >= sizeof host)
        return tr__err(TR_EINVAL, "tr_group_open: rank %d's node '%s' is not IP:port", rank,
                       nodes[rank]);
    memcpy(host, nodes[rank], (size_t)(colon - nodes[rank]));
    host[colon - nodes[rank]] = '\0';
    const tr__coll_backend_v2 *be = tr__coll_backend_find(backend);
    if (!be || !be->init_span)
        return tr__err(TR_EINVAL,
                       "tr_group_open: group '%s' spans nodes, and backend '%s' joins ranks on "
                       "one node only (available: %s)",
                       name, backend ? backend : "(null)", tr__coll_backends_built);
    int64_t deadline = tr__deadline(timeout_ms < 0 ? TR__GROUP_FOREVER_MS : timeout_ms);
    tr_group *g;
    int rc = group_new(node_path, max_msg, be, world, rank, name, &g);
    if (rc) return rc;
    tr__coll_span span = {.nonce = nonce, .nodes = nodes, .host = host, .hier = hier};
    rc = be->init_span(g, &span, deadline);
    if (!rc) rc = stage_open(g);
    if (rc) {
        tr__group_destroy(g);
        return rc;
    }
    live_add(g);
    *out = g;
    return 0;
}

static int join(const char *node_path, size_t max_msg, int world, int rank,
                const tr__coll_backend_v2 *be, const char *name, uint64_t extra, const int *devs,
                int ndev, int timeout_ms, tr_group **out) {
    const char *backend = be->name;
    /* One deadline for the whole join: the node's rendezvous and the backend's own set-up
     * share it, so a join never waits longer than its timeout. */
    int64_t deadline = tr__deadline(timeout_ms < 0 ? TR__GROUP_FOREVER_MS : timeout_ms);
    tr_group *g;
    int rc = group_new(node_path, max_msg, be, world, rank, name, &g);
    if (rc) return rc;
    tr__nodeconn *node = g->node;
    g->spin_limit = tr__coll_spin_limit(g);
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    if (extra) {
        tr__enc_str(&b, "bytes");
        tr__enc_uint(&b, extra);
    }
    tr__enc_str(&b, "name");
    tr__enc_str(&b, name);
    tr__enc_str(&b, "backend");
    tr__enc_str(&b, backend);
    tr__enc_str(&b, "world");
    tr__enc_int(&b, world);
    tr__enc_str(&b, "rank");
    tr__enc_int(&b, rank);
    int wait_ms = tr__ms_left(deadline);
    tr__enc_str(&b, "wait_ms");
    tr__enc_int(&b, wait_ms);
    tr__enc_map_close(&b, m);
    tr__reply r;
    int fd = -1;
    /* The node answers once every rank has joined (or the wait ends): that is the
     * rendezvous. The reply's own timeout leaves the node time to say so. */
    rc = tr__nodeconn_call_fd(node, TR__MSG_GROUP_JOIN, &b, wait_ms + 10000, &r, &fd);
    tr__buf_free(&b);
    if (rc) {
        tr__nodeconn_close(node);
        free(g);
        return rc;
    }
    uint64_t size = 0;
    rc = tr__get_uint(r.root, "size", &size);
    tr__reply_free(&r);
    int data = (be->flags & TR__COLL_SEG_DATA) != 0;
    if (!rc && (fd < 0 || size != tr__coll_seg_size(world, data) + extra))
        rc = tr__err(TR_EPROTO, "group join: no segment, or a segment of the wrong size");
    if (!rc) {
        g->seg = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (g->seg == MAP_FAILED) {
            g->seg = NULL;
            rc = tr__err(TR_ENOMEM, "mapping the group segment");
        } else {
            g->seg_size = size;
            tr__coll_hdr *h = g->seg;
            if (h->magic != TR__COLL_MAGIC || h->world != (uint32_t)world ||
                h->slot != (data ? TR__COLL_SLOT : 0) || h->size != size)
                rc = tr__err(TR_EPROTO, "group segment header is invalid");
            else
                tr__coll_note_pinned(g);
        }
    }
    if (fd >= 0) close(fd);
    if (!rc && ndev)
        rc = be->init_devs(g, devs, ndev, deadline);
    else if (!rc && be->init)
        rc = be->init(g, deadline);
    if (!rc) rc = stage_open(g);
    if (rc) {
        tr__group_destroy(g);
        return rc;
    }
    if (be != &segment_only) live_add(g); /* tr_group_is_initialized: users' groups only */
    *out = g;
    return 0;
}

int tr__group_destroy(tr_group *g) {
    if (!g) return 0;
    int rc = 0;
    tr__book_flush(); /* (its last op's accounting) */
    live_remove(g);
    if (g->impl && g->be->fini) g->be->fini(g);
    if (g->stage) tr__coll_device_stager->close(g);
    if (g->seg) {
        tr__buf b = TR__BUF_INIT;
        tr__enc_map(&b, 2);
        tr__enc_str(&b, "name");
        tr__enc_str(&b, g->name);
        tr__enc_str(&b, "rank");
        tr__enc_int(&b, g->rank);
        rc = tr__nodeconn_call(g->node, TR__MSG_GROUP_LEAVE, &b, 5000, NULL);
        if (rc) rc = tr__err_wrap(rc, "tr_group_destroy: group '%s': telling the node", g->name);
        tr__buf_free(&b);
        munmap(g->seg, g->seg_size);
    }
    tr__nodeconn_close(g->node);
    free(g);
    return rc;
}

/* Every op starts here: is the group usable, and what does its timeout mean. */
static int begin(tr_group *g, int *timeout_ms) {
    if (!g) return tr__err(TR_EINVAL, "group is NULL");
    if (g->broken)
        return tr__err(g->broken, "group '%s' is unusable after an earlier failure: %s", g->name,
                       g->broken_msg);
    if (*timeout_ms == TR_GROUP_TIMEOUT) *timeout_ms = g->timeout_ms;
    if (*timeout_ms < TR_FOREVER)
        return tr__err(TR_EINVAL,
                       "group '%s': timeout %d ms (want >= 0, TR_FOREVER or "
                       "TR_GROUP_TIMEOUT)",
                       g->name, *timeout_ms);
    return 0;
}

/* count elements of dtype, times `mult` buffers, must fit a size_t (0: bad dtype too). */
static int fits(size_t count, tr_dtype dtype, size_t mult) {
    size_t esz = tr__dtype_size(dtype);
    return esz && count <= SIZE_MAX / esz / mult;
}

int tr__group_set_checks(tr_group *g, int on) {
    if (!g) return tr__err(TR_EINVAL, "tr_group_set_checks: NULL group");
    g->checks = on != 0;
    return 0;
}

int tr__group_set_single_copy(tr_group *g, int on) {
    if (!g) return tr__err(TR_EINVAL, "tr_group_set_single_copy: NULL group");
    if (on < -1 || on > 1)
        return tr__err(TR_EINVAL, "tr_group_set_single_copy: %d (want 1, 0 or -1)", on);
    if (g->be->set_single_copy) g->be->set_single_copy(g, on); /* (others ignore it) */
    return 0;
}

int tr__group_set_timeout(tr_group *g, int timeout_ms) {
    if (!g || timeout_ms < TR_FOREVER)
        return tr__err(TR_EINVAL, "tr_group_set_timeout: NULL group or timeout below TR_FOREVER");
    g->timeout_ms = timeout_ms;
    return 0;
}

/* Every op ends here. A failed op leaves ranks at different points of the protocol: the
 * group is unusable from then on, and says why. Disagreeing arguments, TR_EINVAL, leave
 * every rank at the same point, the group usable and every buffer as it was (shm catches
 * them before any rank moves; gloo's ranks finish the op first, steps.h, on scratch or
 * with their output copied aside: gloo.cc checked). A backend may mark the group broken
 * itself. */
static int finish(tr_group *g, int rc) {
    if (rc && rc != TR_EINVAL) {
        g->broken = rc;
        snprintf(g->broken_msg, sizeof g->broken_msg, "%s", tr__last_error());
    }
    return rc;
}

int tr__group_rank(const tr_group *g) {
    return g ? g->rank : TR_EINVAL;
}

int tr__group_size(const tr_group *g) {
    return g ? g->world : TR_EINVAL;
}

/* An op's arguments to its backend's entry. */
static int dispatch(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    switch (a->kind) {
    case TR__COLL_BARRIER:
        return g->be->barrier(g, deadline);
    case TR__COLL_ALLREDUCE:
        return g->be->allreduce(g, a->send, a->recv, a->count, a->dtype, a->op, deadline);
    case TR__COLL_BROADCAST:
        return g->be->broadcast(g, a->recv, a->count, a->dtype, a->root, deadline);
    case TR__COLL_SEND:
        return g->be->send(g, a->send, a->count, a->dtype, a->root, deadline);
    case TR__COLL_RECV:
        return g->be->recv(g, a->recv, a->count, a->dtype, a->root, deadline);
    default:
        return g->be->data_op(g, a, deadline);
    }
}

/* Every checked op runs here, and ends: device buffers on a backend that takes host memory
 * go through the stager's pinned host memory (g->stage: see stage_open). */
static int run_op(tr_group *g, const tr__coll_args *a, int timeout_ms) {
    /* (one clock read at each end: a read costs ~25 ns here, a tiny op's own work ~100) */
    int64_t t0 = tr__now_ns();
    int64_t deadline = timeout_ms < 0 ? TR__NO_DEADLINE : t0 + (int64_t)timeout_ms * 1000000;
    /* (the flight recorder: this rank's ring of its last ops in this group) */
    tr__flight_op *fl = tr__flight_begin(g->name, g->be->name, g->rank, g->world, a->kind, a->dtype,
                                         a->count, a->root, t0);
    tr__flight_started(fl, t0);
    /* (its number, read while the op holds the entry: once it has ended, another thread's
     * new group may take the slot) */
    uint64_t fl_seq = fl ? fl->seq : 0;
    int rc = g->stage ? finish(g, tr__coll_device_stager->run(g, a, deadline, dispatch))
                      : finish(g, dispatch(g, a, deadline));
    int64_t t1 = tr__now_ns();
    tr__flight_end(fl, rc, t1);
    /* (the node's metrics: ops, bytes and time by backend and kind; the timeline: the op,
     * linked to the other ranks' by its number in the group; on a worker's call's thread
     * gathered and sent out later, off the path of what the caller does next:
     * tr__book_coll) */
    tr__book_coll(g->cnt_backend, (int)a->kind, (uint64_t)a->count * tr__dtype_size(a->dtype), t0,
                  t1, fl ? tr__flight_flow_at(g->flow_key, fl_seq) : 0, rc);
    if (rc == TR_ETIMEDOUT || rc == TR_EPEER_DIED) { /* every rank's ring, and a verdict */
        char session[200];
        const char *slash = strrchr(g->node_path, '/');
        snprintf(session, sizeof session, "%.*s", slash ? (int)(slash - g->node_path) : 0,
                 g->node_path);
        char why[400];
        snprintf(why, sizeof why, "%s", tr__last_error());
        if (slash && tr__flight_dump(session, g->name, rc == TR_ETIMEDOUT ? "timeout" : "peer died",
                                     NULL, 0))
            TR_LOG_DEBUG("COLL-FLIGHT", "no dump: %s", tr__last_error());
        tr__err(rc, "%s", why); /* (the op's error, as it was) */
    }
    return rc;
}

int tr__group_barrier(tr_group *g, int timeout_ms) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    tr__coll_args a = {TR__COLL_BARRIER, NULL, NULL, 0, TR_UINT8, TR_SUM, -1};
    return run_op(g, &a, timeout_ms);
}

int tr__group_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        tr_redop op, int timeout_ms) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    if (!fits(count, dtype, 1) || (unsigned)op > TR_AVG || (count && (!send || !recv)))
        return tr__err(TR_EINVAL, "tr_allreduce: bad dtype, count, op or buffer");
    tr__coll_args a = {TR__COLL_ALLREDUCE, send, recv, count, dtype, op, -1};
    return run_op(g, &a, timeout_ms);
}

int tr__group_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                        int timeout_ms) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    if (!fits(count, dtype, 1) || (count && !buf) || root < 0 || root >= g->world)
        return tr__err(TR_EINVAL, "tr_broadcast: bad dtype, count, buffer or root");
    tr__coll_args a = {TR__COLL_BROADCAST, buf, buf, count, dtype, TR_SUM, root};
    return run_op(g, &a, timeout_ms);
}

static int data_op(tr_group *g, tr__coll_args *a, int timeout_ms, const char *fn) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    int rooted =
        a->kind == TR__COLL_REDUCE || a->kind == TR__COLL_GATHER || a->kind == TR__COLL_SCATTER;
    int me_root = rooted && a->root == g->rank;
    /* which buffers this rank must supply */
    int need_send = a->kind != TR__COLL_SCATTER || me_root;
    int need_recv = !(a->kind == TR__COLL_REDUCE || a->kind == TR__COLL_GATHER) || me_root;
    if (!fits(a->count, a->dtype, (size_t)g->world) || (unsigned)a->op > TR_AVG ||
        (rooted && (a->root < 0 || a->root >= g->world)) ||
        (a->count && ((need_send && !a->send) || (need_recv && !a->recv))))
        return tr__err(TR_EINVAL, "%s: bad dtype, count, op, root or buffer", fn);
    if (!rooted) a->root = -1;
    if (!g->be->data_op) return tr__err(TR_EINVAL, "%s: not in backend %s", fn, g->be->name);
    return run_op(g, a, timeout_ms);
}

int tr__group_reduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     tr_redop op, int root, int timeout_ms) {
    tr__coll_args a = {TR__COLL_REDUCE, send, recv, count, dtype, op, root};
    return data_op(g, &a, timeout_ms, "tr_reduce");
}

int tr__group_allgather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        int timeout_ms) {
    tr__coll_args a = {TR__COLL_ALLGATHER, send, recv, count, dtype, TR_SUM, -1};
    return data_op(g, &a, timeout_ms, "tr_allgather");
}

int tr__group_gather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     int root, int timeout_ms) {
    tr__coll_args a = {TR__COLL_GATHER, send, recv, count, dtype, TR_SUM, root};
    return data_op(g, &a, timeout_ms, "tr_gather");
}

int tr__group_scatter(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                      int root, int timeout_ms) {
    tr__coll_args a = {TR__COLL_SCATTER, send, recv, count, dtype, TR_SUM, root};
    return data_op(g, &a, timeout_ms, "tr_scatter");
}

int tr__group_reduce_scatter(tr_group *g, const void *send, void *recv, size_t count,
                             tr_dtype dtype, tr_redop op, int timeout_ms) {
    tr__coll_args a = {TR__COLL_REDUCE_SCATTER, send, recv, count, dtype, op, -1};
    return data_op(g, &a, timeout_ms, "tr_reduce_scatter");
}

int tr__group_alltoall(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                       int timeout_ms) {
    tr__coll_args a = {TR__COLL_ALLTOALL, send, recv, count, dtype, TR_SUM, -1};
    return data_op(g, &a, timeout_ms, "tr_alltoall");
}

int tr__group_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                   int timeout_ms) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    if (!fits(count, dtype, 1) || (count && !buf) || dst < 0 || dst >= g->world || dst == g->rank)
        return tr__err(TR_EINVAL, "tr_send: bad dtype, buffer or destination");
    tr__coll_args a = {TR__COLL_SEND, buf, NULL, count, dtype, TR_SUM, dst};
    return run_op(g, &a, timeout_ms);
}

int tr__group_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int timeout_ms) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    if (!fits(count, dtype, 1) || (count && !buf) || src < 0 || src >= g->world || src == g->rank)
        return tr__err(TR_EINVAL, "tr_recv: bad dtype, buffer or source");
    tr__coll_args a = {TR__COLL_RECV, NULL, buf, count, dtype, TR_SUM, src};
    return run_op(g, &a, timeout_ms);
}

/* ------------------------------------------------------------------ multi-device and async */

/* Checks a _multigpu op's arrays (n = the group's devices): each entry non-NULL where the
 * op uses it (need: 1 every device, 2 the root device only, 0 never). */
static int arrays_ok(const void *const *v, int n, int need, int root_dev) {
    if (need == 0) return 1;
    if (!v) return 0;
    for (int i = 0; i < n; i++)
        if (!v[i] && (need == 1 || i == root_dev)) return 0;
    return 1;
}

static int multi(tr_group *g, int kind, const void *const *send, void *const *recv, size_t count,
                 tr_dtype dtype, tr_redop op, int root_rank, int root_gpu, int timeout_ms,
                 const char *fn) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    if (!g->be->multigpu)
        return tr__err(TR_EINVAL,
                       "%s: group '%s' is a %s group, which has no multi-GPU ops (backends built "
                       "in: %s)",
                       fn, g->name, g->be->name, tr__coll_backends_built);
    int n = g->be->devices(g), rooted = root_rank >= 0;
    int root_here = rooted && root_rank == g->rank;
    size_t mult = (size_t)g->world * (size_t)n;
    int need_recv = kind == TR__COLL_REDUCE ? (root_here ? 2 : 0) : 1;
    if (!fits(count, dtype, mult) || (unsigned)op > TR_AVG ||
        (rooted && (root_rank >= g->world || root_gpu < 0 || root_gpu >= n)) ||
        (count && (!arrays_ok(send, n, 1, -1) ||
                   !arrays_ok((const void *const *)recv, n, need_recv, root_gpu))))
        return tr__err(TR_EINVAL, "%s: bad dtype, count, op, root or buffers (%d per process)", fn,
                       n);
    int root = rooted ? root_rank * n + root_gpu : -1;
    return finish(
        g, g->be->multigpu(g, kind, send, recv, count, dtype, op, root, tr__deadline(timeout_ms)));
}

int tr__group_allreduce_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, tr_redop op, int timeout_ms) {
    return multi(g, TR__COLL_ALLREDUCE, send, recv, count, dtype, op, -1, 0, timeout_ms,
                 "tr_allreduce_multigpu");
}

int tr__group_broadcast_multigpu(tr_group *g, void *const *bufs, size_t count, tr_dtype dtype,
                                 int root_rank, int root_gpu, int timeout_ms) {
    if (root_rank < 0) return tr__err(TR_EINVAL, "tr_broadcast_multigpu: root rank %d", root_rank);
    return multi(g, TR__COLL_BROADCAST, (const void *const *)bufs, bufs, count, dtype, TR_SUM,
                 root_rank, root_gpu, timeout_ms, "tr_broadcast_multigpu");
}

int tr__group_reduce_multigpu(tr_group *g, const void *const *send, void *const *recv, size_t count,
                              tr_dtype dtype, tr_redop op, int root_rank, int root_gpu,
                              int timeout_ms) {
    if (root_rank < 0) return tr__err(TR_EINVAL, "tr_reduce_multigpu: root rank %d", root_rank);
    return multi(g, TR__COLL_REDUCE, send, recv, count, dtype, op, root_rank, root_gpu, timeout_ms,
                 "tr_reduce_multigpu");
}

int tr__group_allgather_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, int timeout_ms) {
    return multi(g, TR__COLL_ALLGATHER, send, recv, count, dtype, TR_SUM, -1, 0, timeout_ms,
                 "tr_allgather_multigpu");
}

int tr__group_reduce_scatter_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                      size_t count, tr_dtype dtype, tr_redop op, int timeout_ms) {
    return multi(g, TR__COLL_REDUCE_SCATTER, send, recv, count, dtype, op, -1, 0, timeout_ms,
                 "tr_reduce_scatter_multigpu");
}

int tr__group_set_stream(tr_group *g, void *stream) {
    if (!g) return tr__err(TR_EINVAL, "tr_group_set_stream: NULL group");
    if (!g->be->set_stream)
        return tr__err(TR_EINVAL,
                       "tr_group_set_stream: group '%s' is a %s group, which has no "
                       "async form",
                       g->name, g->be->name);
    return g->be->set_stream(g, stream);
}

int tr__group_synchronize(tr_group *g, int timeout_ms) {
    int rc = begin(g, &timeout_ms);
    if (rc) return rc;
    if (!g->be->synchronize) return 0; /* the backend's ops have finished when they return */
    rc = g->be->synchronize(g, tr__deadline(timeout_ms));
    return rc == TR_ETIMEDOUT ? rc : finish(g, rc); /* (its own timeout: the ops go on) */
}
