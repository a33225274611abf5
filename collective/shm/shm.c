/* collective/shm/shm.c - the shm backend: ranks on one node exchange data through the
 * group's pre-faulted segment, in slot-sized (256 KiB) chunks so the working set stays
 * in cache.
 *
 * allreduce, per chunk: each rank copies its chunk into its slot; barrier; each rank
 * reduces its 1/world share of the chunk over every slot, in rank order, into the result
 * slot; barrier; each rank copies the result out. Each rank writes S and reads S plus
 * S*(world-1)/world bytes: the counts DESIGN.md asks for. The next chunk's (or op's)
 * first barrier keeps the result slot from being overwritten while a rank still copies.
 * broadcast, per chunk: the root copies into its own slot; barrier; the others copy
 * out; barrier.
 * The rule that keeps ops apart: before an op's first barrier a rank writes only its own
 * slot (nobody reads slots outside an op's barriers); the result slot is written only
 * between the first and second barrier, after everyone has copied the previous result.
 * Barrier: a counter and a generation event (core/wait: spin briefly, then futex). The
 * node sets a rank's bit in `dead` when a member dies or leaves; waiting ranks look at it
 * at least every 10 ms and fail with TR_EPEER_DIED.
 */
#include <stdio.h>
#include <string.h>

#include "collective/group.h"
#include "collective/shm/segment.h"
#include "core/clock.h"
#include "core/reduce.h"
#include "core/status.h"
#include "core/wait.h"

#define CHAN_SLICE_NS 10000000 /* re-check the dead mask this often while waiting */

static tr__coll_hdr *H(tr_group *g) {
    return g->seg;
}

static int dead_error(tr_group *g, uint64_t dead) {
    int r = __builtin_ctzll(dead);
    return tr__err(TR_EPEER_DIED, "group '%s': rank %d (pid %d) died or destroyed the group",
                   g->name, r, (int)H(g)->pid[r]);
}

/* The one wait of this backend: until ev moves past `seen`, looking at the dead bits in
 * `watch` at least every 10 ms (deaths do not touch ev) and giving up at the deadline. */
static int wait_watching(tr_group *g, tr__event *ev, uint32_t seen, uint64_t watch,
                         int64_t deadline) {
    tr__coll_hdr *h = H(g);
    for (;;) {
        if (tr__event_seq(ev) != seen) return 0;
        uint64_t dead = __atomic_load_n(&h->dead, __ATOMIC_ACQUIRE) & watch;
        if (dead) return dead_error(g, dead);
        int64_t now = tr__now_ns();
        if (now >= deadline) return tr__err(TR_ETIMEDOUT, "timed out");
        int64_t slice = now + CHAN_SLICE_NS;
        tr__event_wait(ev, seen, slice < deadline ? slice : deadline);
    }
}

static int shm_barrier(tr_group *g, int64_t deadline) {
    tr__coll_hdr *h = H(g);
    uint32_t seen = tr__event_seq(&h->gen);
    uint64_t dead = __atomic_load_n(&h->dead, __ATOMIC_ACQUIRE);
    if (dead) return dead_error(g, dead);
    if (__atomic_add_fetch(&h->arrived, 1, __ATOMIC_ACQ_REL) == h->world) {
        __atomic_store_n(&h->arrived, 0, __ATOMIC_RELEASE);
        tr__event_signal(&h->gen);
        return 0;
    }
    /* Only a completed barrier moves the generation, so a rank that completed it and then
     * left (marking itself in `dead`) does not fail the ones still waking up. */
    int rc = wait_watching(g, &h->gen, seen, ~0ull, deadline);
    if (rc == TR_ETIMEDOUT)
        return tr__err(TR_ETIMEDOUT,
                       "group '%s' rank %d: a barrier timed out (%u of %u ranks "
                       "arrived)",
                       g->name, g->rank, __atomic_load_n(&h->arrived, __ATOMIC_ACQUIRE), h->world);
    return rc;
}

static const char *kind_name(uint32_t k) {
    static const char *names[] = {
        "?",         "barrier", "allreduce", "broadcast",      "reduce",
        "allgather", "gather",  "scatter",   "reduce_scatter", "alltoall"};
    return k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/* Publishes this rank's view of the op; after the next barrier every rank checks that
 * all agree, so a mismatch is an error on every rank, never corrupted data. */
static void publish(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root,
                    size_t count) {
    tr__coll_desc *d = &H(g)->desc[g->rank];
    d->seq = g->seq;
    d->kind = kind;
    d->dtype = (uint32_t)dtype;
    d->op = (uint32_t)op;
    d->root = root;
    d->count = count;
}

static int check_agree(tr_group *g) {
    tr__coll_hdr *h = H(g);
    const tr__coll_desc *me = &h->desc[g->rank];
    for (int r = 0; r < g->world; r++) {
        const tr__coll_desc *d = &h->desc[r];
        const char *what = d->seq != me->seq       ? "the op sequence"
                           : d->kind != me->kind   ? "the op"
                           : d->count != me->count ? "count"
                           : d->dtype != me->dtype ? "dtype"
                           : d->op != me->op       ? "reduction op"
                           : d->root != me->root   ? "root"
                                                   : NULL;
        if (what)
            return tr__err(TR_EINVAL,
                           "group '%s': ranks disagree on %s (rank %d: %s count %llu dtype %u "
                           "op %u root %d; rank %d: %s count %llu dtype %u op %u root %d)",
                           g->name, what, r, kind_name(d->kind), (unsigned long long)d->count,
                           d->dtype, d->op, d->root, g->rank, kind_name(me->kind),
                           (unsigned long long)me->count, me->dtype, me->op, me->root);
    }
    return 0;
}

static int shm_barrier_op(tr_group *g, int64_t deadline) {
    g->seq++;
    publish(g, TR__COLL_BARRIER, TR_UINT8, TR_SUM, -1, 0);
    int rc = shm_barrier(g, deadline);
    int agree = rc ? 0 : check_agree(g);
    /* a second barrier: nobody may publish the next op's descriptor while others check */
    if (!rc) rc = shm_barrier(g, deadline);
    return rc ? rc : agree;
}

static int shm_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                         tr_redop op, int64_t deadline) {
    tr__coll_hdr *h = H(g);
    size_t esz = tr_dtype_size(dtype), per = h->slot / esz;
    g->seq++;
    publish(g, TR__COLL_ALLREDUCE, dtype, op, -1, count);
    char *result = tr__coll_slot(h, g->world);
    size_t off = 0;
    do { /* at least once: a count of 0 still synchronises and checks agreement */
        size_t n = count - off < per ? count - off : per;
        if (n) memcpy(tr__coll_slot(h, g->rank), (const char *)send + off * esz, n * esz);
        int rc = shm_barrier(g, deadline);
        if (!rc && off == 0) rc = check_agree(g);
        if (rc) return rc;
        size_t lo = n * (size_t)g->rank / (size_t)g->world;
        size_t hi = n * (size_t)(g->rank + 1) / (size_t)g->world;
        if (hi > lo) {
            memcpy(result + lo * esz, tr__coll_slot(h, 0) + lo * esz, (hi - lo) * esz);
            for (int r = 1; r < g->world && !rc; r++)
                rc = tr__reduce(result + lo * esz, tr__coll_slot(h, r) + lo * esz, hi - lo, dtype,
                                op);
            if (!rc) rc = tr__reduce_finish(result + lo * esz, hi - lo, dtype, op, g->world);
        }
        int brc = shm_barrier(g, deadline);
        if (rc || brc) return rc ? rc : brc;
        if (n) memcpy((char *)recv + off * esz, result, n * esz);
        off += n;
    } while (off < count);
    return 0;
}

static int shm_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                         int64_t deadline) {
    tr__coll_hdr *h = H(g);
    size_t esz = tr_dtype_size(dtype), per = h->slot / esz;
    g->seq++;
    publish(g, TR__COLL_BROADCAST, dtype, TR_SUM, root, count);
    char *src = tr__coll_slot(h, root);
    size_t off = 0;
    do {
        size_t n = count - off < per ? count - off : per;
        if (g->rank == root && n) memcpy(src, (char *)buf + off * esz, n * esz);
        int rc = shm_barrier(g, deadline);
        if (!rc && off == 0) rc = check_agree(g);
        if (rc) return rc;
        if (g->rank != root && n) memcpy((char *)buf + off * esz, src, n * esz);
        if ((rc = shm_barrier(g, deadline))) return rc;
        off += n;
    } while (off < count);
    return 0;
}

/* reduce (into the root), allgather, gather, scatter, reduce_scatter, alltoall. Per
 * chunk: each rank fills its own slot (the root fills every slot for scatter); barrier;
 * each rank reads what it needs from the slots; barrier. reduce goes through the
 * allreduce shape (reduce in shares into the result slot), copied out by the root only. */
static int shm_data_op(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    tr__coll_hdr *h = H(g);
    size_t esz = tr_dtype_size(a->dtype), per = h->slot / esz, W = (size_t)g->world;
    size_t me = (size_t)g->rank, count = a->count;
    int k = a->kind;
    g->seq++;
    publish(g, (uint32_t)k, a->dtype, a->op, a->root, count);
    const char *send = a->send;
    char *recv = a->recv;
    /* elements of one rank's buffer moved per chunk */
    size_t step = (k == TR__COLL_REDUCE_SCATTER || k == TR__COLL_ALLTOALL) ? per / W : per;
    char *result = tr__coll_slot(h, g->world);
    size_t off = 0;
    do {
        size_t n = count - off < step ? count - off : step;
        char *mine = tr__coll_slot(h, g->rank);
        if (n) switch (k) {
            case TR__COLL_REDUCE:
            case TR__COLL_ALLGATHER:
            case TR__COLL_GATHER:
                memcpy(mine, send + off * esz, n * esz);
                break;
            case TR__COLL_SCATTER:
                if ((int)me == a->root)
                    for (size_t d = 0; d < W; d++)
                        memcpy(tr__coll_slot(h, (int)d), send + (d * count + off) * esz, n * esz);
                break;
            default: /* reduce_scatter, alltoall: the piece for each destination */
                for (size_t d = 0; d < W; d++)
                    memcpy(mine + d * n * esz, send + (d * count + off) * esz, n * esz);
            }
        int rc = shm_barrier(g, deadline);
        if (!rc && off == 0) rc = check_agree(g);
        if (rc) return rc;
        switch (k) {
        case TR__COLL_REDUCE: {
            size_t lo = n * me / W, hi = n * (me + 1) / W;
            if (hi > lo) {
                memcpy(result + lo * esz, tr__coll_slot(h, 0) + lo * esz, (hi - lo) * esz);
                for (int r = 1; r < g->world && !rc; r++)
                    rc = tr__reduce(result + lo * esz, tr__coll_slot(h, r) + lo * esz, hi - lo,
                                    a->dtype, a->op);
                if (!rc)
                    rc = tr__reduce_finish(result + lo * esz, hi - lo, a->dtype, a->op, g->world);
            }
            int brc = shm_barrier(g, deadline);
            if (rc || brc) return rc ? rc : brc;
            if ((int)me == a->root && n) memcpy(recv + off * esz, result, n * esz);
            off += n;
            continue; /* the next chunk's first barrier protects the result slot */
        }
        case TR__COLL_ALLGATHER:
        case TR__COLL_GATHER:
            if (k == TR__COLL_ALLGATHER || (int)me == a->root)
                for (size_t j = 0; j < W && n; j++)
                    memcpy(recv + (j * count + off) * esz, tr__coll_slot(h, (int)j), n * esz);
            break;
        case TR__COLL_SCATTER:
            if (n) memcpy(recv + off * esz, mine, n * esz);
            break;
        case TR__COLL_REDUCE_SCATTER:
            if (n) {
                memcpy(recv + off * esz, tr__coll_slot(h, 0) + me * n * esz, n * esz);
                for (int r = 1; r < g->world && !rc; r++)
                    rc = tr__reduce(recv + off * esz, tr__coll_slot(h, r) + me * n * esz, n,
                                    a->dtype, a->op);
                if (!rc) rc = tr__reduce_finish(recv + off * esz, n, a->dtype, a->op, g->world);
            }
            break;
        default: /* alltoall */
            for (size_t j = 0; j < W && n; j++)
                memcpy(recv + (j * count + off) * esz, tr__coll_slot(h, (int)j) + me * n * esz,
                       n * esz);
        }
        int brc = shm_barrier(g, deadline);
        if (rc || brc) return rc ? rc : brc;
        off += n;
    } while (off < count);
    return 0;
}

/* Waits until ev moves past `seen`, watching the peer's life and the deadline. */
static int chan_wait(tr_group *g, tr__event *ev, uint32_t seen, int peer, int64_t deadline) {
    int rc = wait_watching(g, ev, seen, 1ull << peer, deadline);
    if (rc == TR_ETIMEDOUT)
        return tr__err(TR_ETIMEDOUT, "group '%s': rank %d waited for rank %d in vain", g->name,
                       g->rank, peer);
    return rc;
}

/* send: 64 KiB chunks through the (me -> dst) channel; each waits for the previous to be
 * consumed; returns once the receiver has taken the last one (so a mismatch it detects
 * is reported here too). */
static int shm_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                    int64_t deadline) {
    tr__coll_hdr *h = H(g);
    tr__coll_chan *ch = tr__coll_chan_of(h, g->rank, dst);
    char *cb = tr__coll_chan_buf(h, g->rank, dst);
    size_t bytes = count * tr_dtype_size(dtype), off = 0;
    do {
        uint32_t p = tr__event_seq(&ch->posted);
        int rc = tr__event_seq(&ch->consumed) == p
                     ? 0
                     : chan_wait(g, &ch->consumed, p - 1, dst, deadline);
        if (rc) return rc;
        if (ch->error)
            return tr__err(TR_EINVAL,
                           "group '%s': rank %d refused what rank %d sent (count or "
                           "dtype differ)",
                           g->name, dst, g->rank);
        size_t n = bytes - off < TR__COLL_CHAN ? bytes - off : TR__COLL_CHAN;
        if (n) memcpy(cb, (const char *)buf + off, n);
        ch->bytes = n;
        ch->count = count;
        ch->dtype = (uint32_t)dtype;
        tr__event_signal(&ch->posted);
        off += n;
    } while (off < bytes);
    uint32_t p = tr__event_seq(&ch->posted);
    int rc =
        tr__event_seq(&ch->consumed) == p ? 0 : chan_wait(g, &ch->consumed, p - 1, dst, deadline);
    if (!rc && ch->error)
        rc = tr__err(TR_EINVAL,
                     "group '%s': rank %d refused what rank %d sent (count or dtype "
                     "differ)",
                     g->name, dst, g->rank);
    return rc;
}

static int shm_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src,
                    int64_t deadline) {
    tr__coll_hdr *h = H(g);
    tr__coll_chan *ch = tr__coll_chan_of(h, src, g->rank);
    char *cb = tr__coll_chan_buf(h, src, g->rank);
    size_t bytes = count * tr_dtype_size(dtype), off = 0;
    do {
        uint32_t c = tr__event_seq(&ch->consumed);
        int rc = tr__event_seq(&ch->posted) != c ? 0 : chan_wait(g, &ch->posted, c, src, deadline);
        if (rc) return rc;
        if (ch->count != count || ch->dtype != (uint32_t)dtype || ch->bytes > TR__COLL_CHAN ||
            off + ch->bytes > bytes) {
            unsigned long long sc = ch->count;
            unsigned sd = ch->dtype;
            ch->error = 1; /* the channel is unusable from now on; the sender learns it */
            tr__event_signal(&ch->consumed);
            return tr__err(TR_EINVAL,
                           "group '%s': rank %d sent %llu elements of dtype %u, rank %d expected "
                           "%zu of dtype %d",
                           g->name, src, sc, sd, g->rank, count, (int)dtype);
        }
        if (ch->bytes) memcpy((char *)buf + off, cb, ch->bytes);
        off += ch->bytes;
        tr__event_signal(&ch->consumed);
    } while (off < bytes);
    return 0;
}

const tr__coll_backend_v1 tr__coll_shm_v1 = {
    .version = 1,
    .name = "shm",
    .init = NULL,
    .fini = NULL,
    .barrier = shm_barrier_op,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .data_op = shm_data_op,
    .send = shm_send,
    .recv = shm_recv,
};
