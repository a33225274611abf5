/* collective/steps.c - see steps.h. */
#include "collective/steps.h"

#include <sched.h>
#include <stdio.h>

#include "core/clock.h"
#include "core/status.h"

#define SLICE_NS 10000000 /* re-check the dead mask this often while waiting */
#define SPIN_NS 100000    /* see tr__coll_spin_limit() */
#define PRE_SPINS 64      /* looks at the peer's post before the clock: tr__coll_wait_event */
#define YIELD_NS 20000    /* the same, with more ranks than cores */

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

/* How long shm ranks (TR__COLL_SPIN) may spin before sleeping when each has a core (MPI
 * spins for ever):
 * a step's work is at most a 256 KiB chunk (~15-30 us here), and a futex wake-up costs
 * 15-25 us plus the scheduler's delay. More ranks than cores: yield the core for up to
 * 20 us before sleeping, as MPI's ranks yield when oversubscribed (the rank awaited may be
 * waiting for this one's core; 4 ranks on 2 cores, 4 B allreduce: 6.4 us with core/wait's
 * short spin, 3.3 us yielding). A backend whose progress needs threads of its own (Gloo's
 * I/O thread: with peers spinning even 20 us, a gloo allgather of 4 B went from 0.15 to
 * 2-4 ms here, a scheduler tick): no long spin, only core/wait's short one. */
int64_t tr__coll_spin_limit(const tr_group *g) {
    if (!(g->be->flags & TR__COLL_SPIN)) return 0;
    static int cpus; /* computed once; every thread computes the same */
    int ncpu = __atomic_load_n(&cpus, __ATOMIC_RELAXED);
    if (!ncpu) {
        cpu_set_t set;
        ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
        __atomic_store_n(&cpus, ncpu, __ATOMIC_RELAXED);
    }
    return g->world <= ncpu ? SPIN_NS : -YIELD_NS;
}

/* Spinning for a rank that last ran on our own core only delays it: then sleep at once
 * (a yielding wait, with more ranks than cores, lets it run and stays).
 * Measured: the scheduler once put both ranks of a 1 MiB allreduce on one core, and each
 * of its 8 steps spent the whole spin (1.1 ms instead of 0.14). (Halving the spin after
 * each long wait instead starved it for good on a loaded machine: 64 MiB went from 14
 * to 130 ms.) */
int tr__coll_wait_event(tr_group *g, tr__event *ev, uint32_t seen, int peer, int64_t target,
                        int64_t deadline) {
    int64_t spin = g->spin_limit;
    if (g->cores_own)
        spin = SPIN_NS; /* all bound to cores of their own (as mpirun binds): the peer runs */
    else if (spin > 0 && __atomic_load_n(&H(g)->rk[peer].cpu, __ATOMIC_RELAXED) == sched_getcpu())
        spin = 0;
    /* A peer bound beside us mostly posts within a cache line's crossing (~0.05-0.5 us):
     * looked for first, before the clock reads that bound the wait (two, ~20 ns each, which
     * a post arriving meanwhile waited behind) */
    for (int i = 0; g->cores_own && i < PRE_SPINS; i++) {
        if (tr__event_seq(ev) != seen) return 0;
        tr__cpu_relax();
    }
    for (;;) {
        if (tr__event_seq(ev) != seen) return 0;
        int d = target >= 0 ? dead_behind(g, (uint32_t)target)
                : __atomic_load_n(&H(g)->dead, __ATOMIC_ACQUIRE) >> peer & 1 ? peer
                                                                             : -1;
        if (d >= 0) return dead_error(g, d);
        int64_t now = tr__now_ns();
        if (now >= deadline) return TR_ETIMEDOUT;
        int64_t slice = now + SLICE_NS;
        int rc = tr__event_wait_spin(ev, seen, slice < deadline ? slice : deadline, spin);
        if (rc && rc != TR_ETIMEDOUT) return rc; /* the futex failed: say so, do not spin */
    }
}

int tr__coll_wait_rank(tr_group *g, int q, uint32_t target, int64_t deadline) {
    tr__event *ev = &H(g)->rk[q].posted;
    for (;;) {
        uint32_t cur = tr__event_seq(ev);
        if ((int32_t)(cur - target) >= 0) return 0;
        int rc = tr__coll_wait_event(g, ev, cur, q, target, deadline);
        if (rc == TR_ETIMEDOUT)
            return tr__err(TR_ETIMEDOUT, "group '%s' rank %d: timed out waiting for rank %d",
                           g->name, g->rank, q);
        if (rc) return rc;
    }
}

int tr__coll_wait_all(tr_group *g, uint32_t target, int64_t deadline) {
    /* (known already: counters only grow; no look at the peers' lines) */
    if ((int32_t)(g->seen_all - target) >= 0) return 0;
    for (int q = 0; q < g->world; q++) {
        if (q == g->rank) continue;
        int rc = tr__coll_wait_rank(g, q, target, deadline);
        if (rc) return rc;
    }
    g->seen_all = target;
    return 0;
}

uint32_t tr__coll_my_step(tr_group *g) {
    return tr__event_seq(&H(g)->rk[g->rank].posted);
}
void tr__coll_note_pinned(tr_group *g) {
    cpu_set_t set;
    g->pinned = 0;
    /* As tr__coll_spin_limit: the long spin is TR__COLL_SPIN backends' only (shm's). A
     * gloo rank's I/O thread shares its core once the rank is bound, and a spin starves it
     * until the scheduler's tick (4 KiB allreduce: 4 ms), so gloo ranks record no binding. */
    if ((g->be->flags & TR__COLL_SPIN) && sched_getaffinity(0, sizeof set, &set) == 0 &&
        CPU_COUNT(&set) == 1)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set)) g->pinned = c + 1;
    __atomic_store_n(&H(g)->rk[g->rank].pinned, g->pinned, __ATOMIC_RELAXED);
}

void tr__coll_note_cpu(tr_group *g) {
    __atomic_store_n(&H(g)->rk[g->rank].cpu, sched_getcpu(), __ATOMIC_RELAXED);
}

void tr__coll_post(tr_group *g) {
    tr__event_signal(&H(g)->rk[g->rank].posted);
    /* (after: where it runs is a hint to peers that share its CPU, not part of the step;
     * a rank bound to a core of its own never moves) */
    if (!g->cores_own) tr__coll_note_cpu(g);
}

const char *tr__coll_kind_name(uint32_t k) {
    static const char *names[] = {
        "?",         "barrier", "allreduce", "broadcast",      "reduce",
        "allgather", "gather",  "scatter",   "reduce_scatter", "alltoall"};
    return k < sizeof names / sizeof names[0] ? names[k] : "?";
}

void tr__coll_publish(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root,
                      size_t count) {
    g->seq++;
    tr__coll_desc *d = &H(g)->rk[g->rank].desc[g->seq & 1];
    d->seq = g->seq;
    d->kind = kind;
    d->dtype = (uint32_t)dtype;
    d->op = (uint32_t)op;
    d->root = root;
    d->count = count;
    d->addr = 0;
    d->single = 0;
    d->entered = 0;
}

void tr__coll_publish_single(tr_group *g, const void *addr, unsigned single) {
    tr__coll_desc *d = &H(g)->rk[g->rank].desc[g->seq & 1];
    d->addr = (uint64_t)(uintptr_t)addr;
    d->single = single;
}

/* What d and me disagree on, or NULL. */
static const char *differs(const tr__coll_desc *d, const tr__coll_desc *me) {
    return d->seq != me->seq       ? "the op sequence"
           : d->kind != me->kind   ? "the op"
           : d->count != me->count ? "count"
           : d->dtype != me->dtype ? "dtype"
           : d->op != me->op       ? "reduction op"
           : d->root != me->root   ? "root"
                                   : NULL;
}

int tr__coll_check_agree(tr_group *g) {
    tr__coll_hdr *h = H(g);
    const tr__coll_desc *me = &h->rk[g->rank].desc[g->seq & 1];
    for (int r = 0; r < g->world; r++) {
        const tr__coll_desc *d = &h->rk[r].desc[g->seq & 1];
        const char *what = differs(d, me);
        if (what)
            return tr__err(TR_EINVAL,
                           "group '%s': ranks disagree on %s (rank %d: %s count %llu dtype %u "
                           "op %u root %d; rank %d: %s count %llu dtype %u op %u root %d)",
                           g->name, what, r, tr__coll_kind_name(d->kind),
                           (unsigned long long)d->count, d->dtype, d->op, d->root, g->rank,
                           tr__coll_kind_name(me->kind), (unsigned long long)me->count, me->dtype,
                           me->op, me->root);
    }
    return 0;
}

/* What this rank, having posted its op, knows of the others: a rank that posted another
 * op (DISAGREES), every rank posted this one (AGREES), or not yet (UNKNOWN). The loads
 * are seq_cst for enter's sake (see there). */
int tr__coll_agree_known(tr_group *g) {
    tr__coll_hdr *h = H(g);
    const tr__coll_desc *me = &h->rk[g->rank].desc[g->seq & 1];
    int all = 1;
    for (int r = 0; r < g->world; r++) {
        uint32_t posted = __atomic_load_n(&h->rk[r].posted.seq, __ATOMIC_SEQ_CST);
        if ((int32_t)(posted - (g->agree_step + 1)) < 0)
            all = 0;
        else if (differs(&h->rk[r].desc[g->seq & 1], me))
            return TR__COLL_DISAGREES;
    }
    return all ? TR__COLL_AGREES : TR__COLL_UNKNOWN;
}

int tr__coll_agree_enter(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root,
                         size_t count) {
    tr__coll_hdr *h = H(g);
    tr__coll_publish(g, kind, dtype, op, root, count);
    g->agree_step = tr__coll_my_step(g);
    tr__coll_post(g);
    /* Of two ranks that disagree, the later to post sees the earlier: each posts (a
     * seq_cst increment), then reads the other's counter with a seq_cst load, which
     * cannot move before the post (Dekker's pattern, on x86 and arm64 alike). */
    int k = tr__coll_agree_known(g);
    h->rk[g->rank].desc[g->seq & 1].entered =
        k == TR__COLL_DISAGREES ? TR__COLL_STANDS_IN : TR__COLL_ENTERED;
    tr__coll_post(g);
    return k;
}

int tr__coll_agree_wait(tr_group *g, int64_t deadline) {
    int rc = tr__coll_wait_all(g, g->agree_step + 1, deadline);
    return rc ? rc : tr__coll_agree_known(g);
}

int tr__coll_agree_leave(tr_group *g, int64_t deadline) {
    int rc = tr__coll_wait_all(g, g->agree_step + 1, deadline);
    return rc ? rc : tr__coll_check_agree(g);
}

int tr__coll_agree_stand_in(tr_group *g, int64_t deadline, tr__coll_desc *out) {
    int rc = tr__coll_wait_all(g, g->agree_step + 2, deadline);
    if (rc) return rc;
    for (int r = 0; r < g->world; r++) {
        const tr__coll_desc *d = &H(g)->rk[r].desc[g->seq & 1];
        if (d->entered == TR__COLL_ENTERED) {
            *out = *d;
            return 1;
        }
    }
    return 0;
}
