/* collective/shm/shm.c - the shm backend: ranks on one node exchange data through the
 * group's pre-faulted segment, in chunks of up to one staging slot (256 KiB: measured best against
 * 32 KiB-1 MiB for allreduce and broadcast here).
 *
 * Steps, not barriers. Every op is a sequence of steps that every rank takes in lockstep.
 * In step s a rank writes what it contributes into its own slot of parity s & 1, bumps
 * its `posted` counter to s + 1, waits for the counters of the ranks it reads from, and
 * reads their slots of parity s & 1. The rule that makes slots safe to reuse: a rank
 * finishes reading step s before it posts step s + 1, so once every rank has posted s
 * steps, nobody reads the slots of step s - 2 any more, and a rank may write its slot
 * for step s (wait_all(s) before writing). A wait is on one rank's counter, so a step
 * costs one cache-line handoff per peer, not a barrier's two.
 *
 * The first step of every op waits for every rank and checks that all published the
 * same op (descriptors by op parity: no rank can be two ops ahead of a rank still
 * checking), so a mismatch is an error on every rank, never corrupted data.
 *
 * allreduce, at most 16 KiB (one step): each rank copies its buffer into its slot; each
 * reduces every slot in rank order. Larger (two steps per chunk): each rank copies the
 * other ranks' shares of the chunk into its slot; each reduces its own share (its own
 * part straight from its buffer) into its next slot and its result; each copies the
 * other shares out. Per rank: S(W-1)/W copied in, S read and S/W written by the
 * reduction, S(W-1)/W copied out.
 *
 * Waits spin briefly then sleep on the counter's futex (core/wait); a waiting rank looks
 * at the dead mask at least every 10 ms and fails with TR_EPEER_DIED when a rank it
 * needs died before posting the step.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "collective/group.h"
#include "collective/shm/segment.h"
#include "core/clock.h"
#include "core/reduce.h"
#include "core/status.h"
#include "core/wait.h"

#define SLICE_NS 10000000         /* re-check the dead mask this often while waiting */
#define SPIN_NS 100000            /* see spin_ns() */
#define ONESHOT_BYTES (16u << 10) /* allreduce/reduce up to this: one step */

static tr__coll_hdr *H(tr_group *g) {
    return g->seg;
}

static int dead_error(tr_group *g, int r) {
    return tr__err(TR_EPEER_DIED, "group '%s': rank %d (pid %d) died or destroyed the group",
                   g->name, r, (int)H(g)->pid[r]);
}

/* A rank that died or left fails a wait only if it had not reached `target`: one that
 * finished the op and left does not fail ranks still reading its last step. */
static int dead_behind(tr_group *g, uint32_t target) {
    tr__coll_hdr *h = H(g);
    uint64_t dead = __atomic_load_n(&h->dead, __ATOMIC_ACQUIRE);
    while (dead) {
        int r = __builtin_ctzll(dead);
        dead &= dead - 1;
        if ((int32_t)(tr__event_seq(&h->rk[r].posted) - target) < 0) return r;
    }
    return -1;
}

/* Ranks that each have a core spin this long before sleeping (MPI spins for ever): a
 * step's work is at most a 256 KiB chunk (~15-30 us here), and a futex wake-up costs 15-25 us
 * plus the scheduler's delay. More ranks than cores: the short yielding spin of core/wait. */
static int64_t spin_ns(tr_group *g) {
    static int cpus; /* computed once; every thread computes the same */
    int ncpu = __atomic_load_n(&cpus, __ATOMIC_RELAXED);
    if (!ncpu) {
        cpu_set_t set;
        ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        __atomic_store_n(&cpus, ncpu, __ATOMIC_RELAXED);
    }
    return g->world <= ncpu ? SPIN_NS : 0;
}

/* The one wait of this backend: until ev moves past `seen`, watching the dead mask
 * (at least every 10 ms: deaths do not touch ev) and the deadline. Fatal deaths: rank
 * `peer` if peer >= 0, else those behind step `target` (see dead_behind). */
static int wait_watching(tr_group *g, tr__event *ev, uint32_t seen, int peer, uint32_t target,
                         int64_t deadline) {
    for (;;) {
        if (tr__event_seq(ev) != seen) return 0;
        int d = peer < 0 ? dead_behind(g, target)
                : __atomic_load_n(&H(g)->dead, __ATOMIC_ACQUIRE) >> peer & 1 ? peer
                                                                             : -1;
        if (d >= 0) return dead_error(g, d);
        int64_t now = tr__now_ns();
        if (now >= deadline) return TR_ETIMEDOUT;
        int64_t slice = now + SLICE_NS;
        tr__event_wait_spin(ev, seen, slice < deadline ? slice : deadline, spin_ns(g));
    }
}

/* Waits until rank q has posted `target` steps. */
static int wait_rank(tr_group *g, int q, uint32_t target, int64_t deadline) {
    tr__event *ev = &H(g)->rk[q].posted;
    for (;;) {
        uint32_t cur = tr__event_seq(ev);
        if ((int32_t)(cur - target) >= 0) return 0;
        int rc = wait_watching(g, ev, cur, -1, target, deadline);
        if (rc == TR_ETIMEDOUT)
            return tr__err(TR_ETIMEDOUT, "group '%s' rank %d: timed out waiting for rank %d",
                           g->name, g->rank, q);
        if (rc) return rc;
    }
}

static int wait_all(tr_group *g, uint32_t target, int64_t deadline) {
    for (int q = 0; q < g->world; q++) {
        if (q == g->rank) continue;
        int rc = wait_rank(g, q, target, deadline);
        if (rc) return rc;
    }
    return 0;
}

/* Steps this rank has posted: where it is in the lockstep. */
static uint32_t my_step(tr_group *g) {
    return tr__event_seq(&H(g)->rk[g->rank].posted);
}
static void post(tr_group *g) {
    tr__event_signal(&H(g)->rk[g->rank].posted);
}
static char *slot(tr_group *g, int r, uint32_t step) {
    return tr__coll_slot(H(g), r, step);
}

static const char *kind_name(uint32_t k) {
    static const char *names[] = {
        "?",         "barrier", "allreduce", "broadcast",      "reduce",
        "allgather", "gather",  "scatter",   "reduce_scatter", "alltoall"};
    return k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/* Publishes this rank's view of its next op (before the op's first post). */
static void publish(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root,
                    size_t count) {
    g->seq++;
    tr__coll_desc *d = &H(g)->rk[g->rank].desc[g->seq & 1];
    d->seq = g->seq;
    d->kind = kind;
    d->dtype = (uint32_t)dtype;
    d->op = (uint32_t)op;
    d->root = root;
    d->count = count;
}

/* After the op's first wait_all: does every rank agree with this one? */
static int check_agree(tr_group *g) {
    tr__coll_hdr *h = H(g);
    const tr__coll_desc *me = &h->rk[g->rank].desc[g->seq & 1];
    for (int r = 0; r < g->world; r++) {
        const tr__coll_desc *d = &h->rk[r].desc[g->seq & 1];
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

enum { FROM_ALL = -1, FROM_NONE = -2 };

/* Ends this rank's write of step s: posts it, then waits for the ranks it reads in step
 * s: every rank on an op's first step (then checks that all agree), else `from`: a rank,
 * FROM_ALL or FROM_NONE. */
static int post_and_wait(tr_group *g, uint32_t s, int first, int from, int64_t deadline) {
    post(g);
    if (first || from == FROM_ALL) {
        int rc = wait_all(g, s + 1, deadline);
        return !rc && first ? check_agree(g) : rc;
    }
    return from == FROM_NONE ? 0 : wait_rank(g, from, s + 1, deadline);
}

/* dst = src[0] op src[1] op ... op src[W-1], in rank order (every rank computes the same
 * bits); dst may be src[0], no other. */
static int reduce_into(void *dst, const char *const *src, int world, size_t n, tr_dtype dtype,
                       tr_redop op) {
    if (world == 1) {
        if (dst != src[0]) memcpy(dst, src[0], n * tr_dtype_size(dtype));
        return 0;
    }
    int rc = tr__reduce3(dst, src[0], src[1], n, dtype, op);
    for (int q = 2; q < world && !rc; q++)
        rc = tr__reduce(dst, src[q], n, dtype, op);
    return rc ? rc : tr__reduce_finish(dst, n, dtype, op, world);
}

static int shm_barrier_op(tr_group *g, int64_t deadline) {
    publish(g, TR__COLL_BARRIER, TR_UINT8, TR_SUM, -1, 0);
    return post_and_wait(g, my_step(g), 1, FROM_ALL, deadline);
}

/* allreduce (root -1) and reduce (the result at root only). */
static int allreduce_to(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        tr_redop op, int root, int64_t deadline) {
    size_t esz = tr_dtype_size(dtype), W = (size_t)g->world, me = (size_t)g->rank;
    publish(g, root < 0 ? TR__COLL_ALLREDUCE : TR__COLL_REDUCE, dtype, op, root, count);
    uint32_t s = my_step(g);
    int out = root < 0 || root == g->rank, rc;
    const char *src[TR__COLL_MAX_WORLD];
    if (W == 1 || count * esz <= ONESHOT_BYTES) {
        if (W > 1 && count) {
            if ((rc = wait_all(g, s, deadline))) return rc;
            memcpy(slot(g, g->rank, s), send, count * esz);
        }
        if ((rc = post_and_wait(g, s, 1, FROM_ALL, deadline)) || !out || !count) return rc;
        if (W == 1) {
            if (recv != send) memcpy(recv, send, count * esz);
            return tr__reduce_finish(recv, count, dtype, op, 1);
        }
        for (size_t q = 0; q < W; q++)
            src[q] = slot(g, (int)q, s);
        return reduce_into(recv, src, g->world, count, dtype, op);
    }
    size_t per = H(g)->slot / esz;
    for (size_t off = 0; off < count; off += per) {
        size_t n = count - off < per ? count - off : per, lo = n * me / W, hi = n * (me + 1) / W;
        const char *in = (const char *)send + off * esz;
        char *res = out ? (char *)recv + off * esz : NULL;
        /* step A: the other ranks' shares of this chunk */
        if ((rc = wait_all(g, s, deadline))) return rc;
        char *mine = slot(g, g->rank, s);
        memcpy(mine, in, lo * esz);
        memcpy(mine + hi * esz, in + hi * esz, (n - hi) * esz);
        if ((rc = post_and_wait(g, s, off == 0, FROM_ALL, deadline))) return rc;
        /* step B: this rank's share, reduced into its next slot (everyone has posted s + 1:
         * nobody reads that slot's step s - 1 any more) */
        s++;
        char *share = slot(g, g->rank, s) + lo * esz;
        for (size_t q = 0; q < W; q++)
            src[q] = q == me ? in + lo * esz : slot(g, (int)q, s - 1) + lo * esz;
        if (hi > lo && (rc = reduce_into(share, src, g->world, hi - lo, dtype, op))) return rc;
        if (out) memcpy(res + lo * esz, share, (hi - lo) * esz);
        if ((rc = post_and_wait(g, s, 0, out ? FROM_ALL : FROM_NONE, deadline))) return rc;
        for (size_t q = 0; q < W && out; q++) {
            size_t qlo = n * q / W, qhi = n * (q + 1) / W;
            if (q != me) memcpy(res + qlo * esz, slot(g, (int)q, s) + qlo * esz, (qhi - qlo) * esz);
        }
        s++;
    }
    return 0;
}

static int shm_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                         tr_redop op, int64_t deadline) {
    return allreduce_to(g, send, recv, count, dtype, op, -1, deadline);
}

/* Per chunk (one step): the root copies into its slot; the others copy out. */
static int shm_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                         int64_t deadline) {
    size_t bytes = count * tr_dtype_size(dtype), off = 0;
    size_t per = H(g)->slot;
    publish(g, TR__COLL_BROADCAST, dtype, TR_SUM, root, count);
    uint32_t s = my_step(g);
    int is_root = g->rank == root, rc;
    do {
        size_t n = bytes - off < per ? bytes - off : per;
        if (is_root && n) {
            if ((rc = wait_all(g, s, deadline))) return rc;
            memcpy(slot(g, root, s), (char *)buf + off, n);
        }
        if ((rc = post_and_wait(g, s, off == 0, is_root ? FROM_NONE : root, deadline))) return rc;
        if (!is_root && n) memcpy((char *)buf + off, slot(g, root, s), n);
        s++;
        off += n;
    } while (off < bytes);
    return 0;
}

/* reduce (through allreduce_to), allgather, gather, scatter, reduce_scatter, alltoall.
 * Per chunk (one step): each rank writes its part into its slot (only the root, for
 * scatter: a piece per rank); each reads what it needs from the slots. */
static int shm_data_op(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    int k = a->kind, root = a->root, is_root = g->rank == root;
    if (k == TR__COLL_REDUCE)
        return allreduce_to(g, a->send, a->recv, a->count, a->dtype, a->op, root, deadline);
    size_t esz = tr_dtype_size(a->dtype), W = (size_t)g->world, me = (size_t)g->rank;
    size_t count = a->count, per = H(g)->slot / esz;
    int pieces = k == TR__COLL_REDUCE_SCATTER || k == TR__COLL_ALLTOALL || k == TR__COLL_SCATTER;
    if (pieces) per /= W; /* elements of each destination's piece per chunk */
    publish(g, (uint32_t)k, a->dtype, a->op, root, count);
    uint32_t s = my_step(g);
    const char *send = a->send;
    char *recv = a->recv;
    const char *src[TR__COLL_MAX_WORLD];
    size_t off = 0;
    int rc;
    do {
        size_t n = count - off < per ? count - off : per, nb = n * esz;
        if (nb && (k != TR__COLL_SCATTER || is_root)) {
            if ((rc = wait_all(g, s, deadline))) return rc;
            char *mine = slot(g, g->rank, s);
            if (!pieces) {
                memcpy(mine, send + off * esz, nb);
            } else {
                for (size_t d = 0; d < W; d++)
                    memcpy(mine + d * nb, send + (d * count + off) * esz, nb);
            }
        }
        int from = k == TR__COLL_GATHER    ? (is_root ? FROM_ALL : FROM_NONE)
                   : k == TR__COLL_SCATTER ? (is_root ? FROM_NONE : root)
                                           : FROM_ALL;
        if ((rc = post_and_wait(g, s, off == 0, from, deadline))) return rc;
        if (nb) switch (k) {
            case TR__COLL_ALLGATHER:
            case TR__COLL_GATHER:
                for (size_t q = 0; q < W && (k == TR__COLL_ALLGATHER || is_root); q++)
                    memcpy(recv + (q * count + off) * esz, slot(g, (int)q, s), nb);
                break;
            case TR__COLL_SCATTER:
                memcpy(recv + off * esz, slot(g, root, s) + me * nb, nb);
                break;
            case TR__COLL_REDUCE_SCATTER:
                for (size_t q = 0; q < W; q++)
                    src[q] = slot(g, (int)q, s) + me * nb;
                if (n && (rc = reduce_into(recv + off * esz, src, g->world, n, a->dtype, a->op)))
                    return rc;
                break;
            default: /* alltoall */
                for (size_t q = 0; q < W; q++)
                    memcpy(recv + (q * count + off) * esz, slot(g, (int)q, s) + me * nb, nb);
            }
        s++;
        off += n;
    } while (off < count);
    return 0;
}

/* Waits until ev moves past `seen`, watching the peer's life and the deadline. */
static int chan_wait(tr_group *g, tr__event *ev, uint32_t seen, int peer, int64_t deadline) {
    int rc = wait_watching(g, ev, seen, peer, 0, deadline);
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
