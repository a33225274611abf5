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
 * for step s (wait for all to have posted s before writing). A wait is on one rank's counter, so a
 * step costs one cache-line handoff per peer, not a barrier's two.
 *
 * The first step of every op waits for every rank and checks that all published the
 * same op (descriptors by op parity: no rank can be two ops ahead of a rank still
 * checking), so a mismatch is an error on every rank, never corrupted data.
 *
 * allreduce, broadcast and allgather of at most 16 bytes a rank (one step, tiny_op): each
 * rank's value rides on the cache line of its posted counter. At most 16 KiB (one step): each rank
 * copies its buffer into its slot; each reduces every slot in rank order. Larger (two steps per
 * chunk): each rank copies the other ranks' shares of the chunk into its slot; each reduces its own
 * share (its own part straight from its buffer) into its next slot and its result; each copies the
 * other shares out. Per rank: S(W-1)/W copied in, S read and S/W written by the
 * reduction, S(W-1)/W copied out.
 *
 * Single copy. allreduce, broadcast, allgather, gather and scatter of SINGLE_MIN bytes or
 * more read the data straight from the owner's buffer in its own memory
 * (process_vm_readv, as MPI's vader transport does with CMA): one copy instead of two
 * through the slots (allreduce: each rank reads its share of every peer's send, reduces
 * it, then reads the others' shares of their results, or, 2 ranks whose buffers are
 * apart, each reads the whole of the other's send: pair_preferred; broadcast: the root, which would
 * only wait, writes a share of every reader's buffer with process_vm_writev meanwhile). It needs
 * ptrace access to the peer (the same user; Yama or a seccomp filter may forbid it), so each rank
 * probes every other at join; such an op takes a first step in which each rank publishes where its
 * buffers are and whether it can and wants to read its peers (it can: allowed, a core of
 * its own, not off; it wants to: on, or by default the faster way so far, timed as the
 * group runs: begin_large, plan), and uses single copy if all can and one wants to
 * (else the slots, from the next step). The owner of a buffer does not return until
 * every reader has posted that it is done. What single copy needs (the probe, the
 * setting, the timings) is this rank's state behind g->impl (shm_state).
 *
 * Waits spin briefly then sleep on the counter's futex (core/wait); a waiting rank looks
 * at the dead mask at least every 10 ms and fails with TR_EPEER_DIED when a rank it
 * needs died before posting the step.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "collective/shm/shm.h"

#include "collective/group.h"
#include "collective/shm/segment.h"
#include "collective/steps.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/reduce.h"
#include "core/status.h"
#include "core/wait.h"

#define ONESHOT_BYTES (16u << 10) /* allreduce/reduce up to this: one step */
#define SINGLE_MIN (64u << 10)    /* single copy from this size */
#define SIZE_CLASSES 5            /* < 256 KiB, < 1 MiB, < 4 MiB, < 16 MiB, more */
#define SETTLE_OPS 8              /* ops a way takes to reach its speed below 16 MiB (cached), */
#define SETTLE_OPS_BIG 2          /* ...and from 16 MiB on (the first one is cold) */
#define EXPLORE_FIRST 64          /* then from this one, */
#define EXPLORE_MAX 4096          /* then twice as many on each time, then every 4096 */
#define KEEP 3                    /* a way's time: the least of its last 3 timed ops */
#define SWITCH_GAIN 0.9           /* the slots are taken while they take this fraction or less */
#define OP_KINDS 8                /* op kinds up to TR__COLL_SCATTER (group.h) */
#define PROBE_MAGIC 0x7472706f62652121ull
/* desc.single's bits past begin_large's (1 it can read its peers, 2 it wants to) */
#define SHARE_FAILED 4u /* this rank's share of a single-copy op is not there */
#define CAN_WRITE 8u    /* it can write its peers' memory too */
#define WANT_PAIR 16u   /* a 2-rank allreduce: it wants the pair's way (pair_allreduce) */
#define APART 32u       /* ...its send and recv are apart (the pair's way needs both's) */

/* This rank's state (g->impl): what single copy needs. */
typedef struct shm_state {
    uint64_t probe;       /* the word peers read to see whether they can */
    int can_read_all;     /* this process can read every peer's memory */
    int can_write_all;    /* ...and write it (a broadcast's root writes a share: CAN_WRITE) */
    int single_copy;      /* 1 on, 0 off, -1 (default) the faster (tr_group_set_single_copy) */
    uint64_t single_ops;  /* ops this rank did by single copy (tests look) */
    uint64_t root_writes; /* single-copy broadcasts whose root (this rank) wrote shares */
    uint64_t pair_ops;    /* single-copy allreduces the pair's way (tests look) */
    char *tmp;            /* a single-copy allreduce's peers' pieces (W x PIECE), kept */
    /* The default's choice: each way's last KEEP times per byte (ns; a ring), and how many
     * ops it has timed, by op kind and size class; how many large ops of each the default
     * has run (timed or not: the trials' schedule); the large op running (its kind, class,
     * way and start, once every rank has entered it; timed: counted) */
    double ns_per_byte[OP_KINDS][SIZE_CLASSES][2][KEEP];
    uint32_t timed[OP_KINDS][SIZE_CLASSES][2];
    uint32_t ops[OP_KINDS][SIZE_CLASSES];
    uint8_t fresh[OP_KINDS][SIZE_CLASSES];   /* its early trials: 1 the slots', 2 the pair's */
    uint8_t trying[OP_KINDS][SIZE_CLASSES];  /* the way a trial runs: the slots (1) or not;
                                              * the pair's (1) or by shares */
    int8_t last_way[OP_KINDS][SIZE_CLASSES]; /* the way of the last op timed (-1 none) */
    /* A 2-rank single-copy allreduce's two ways, timed the same way (by size class): 0
     * its shares in two steps (single_allreduce), 1 the pair's whole reads (pair_allreduce);
     * whether the running op goes (pair) and is timed so (pair_timing) */
    double pair_ns[SIZE_CLASSES][2][KEEP];
    uint32_t pair_n[SIZE_CLASSES][2];
    int8_t pair_last[SIZE_CLASSES];
    int pair, pair_timing;
    int timing, kind, cls, way;
    size_t bytes;
    int64_t t0;
} shm_state;

static tr__coll_hdr *H(tr_group *g) {
    return g->seg;
}
static shm_state *S(const tr_group *g) {
    return g->impl;
}
static char *slot(tr_group *g, int r, uint32_t step) {
    return tr__coll_slot(H(g), r, step);
}

enum { FROM_ALL = -1, FROM_NONE = -2 };

/* A large op's output (NT_MIN bytes or more on this rank) is written with streaming stores:
 * it is not in any cache, and an ordinary store first reads each line it writes (a 64 MiB
 * allgather between 2 ranks reads 128 MiB of its output for nothing). Near state, 3 runs:
 * allgather 64 MiB 10.8-11.7 -> 9.2-9.4 ms, broadcast 3.2-4.8 -> 2.7-2.8. (Writing the
 * slots so instead made their readers slower: 1 MiB allgather 64 -> 94-100 us.) Below it
 * the output may be read from the cache next: memcpy. The fence makes the stores visible
 * in order with this rank's next post, as an ordinary store's. */
#define NT_MIN (16u << 20)

static void copy_out(void *dst, const void *src, size_t n, int large) {
#if defined(__x86_64__)
    if (!large) {
        memcpy(dst, src, n);
        return;
    }
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; n -= 64, d += 64, s += 64) {
        __m128i x0 = _mm_loadu_si128((const __m128i *)s);
        __m128i x1 = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i x2 = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i x3 = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, x0);
        _mm_stream_si128((__m128i *)(d + 16), x1);
        _mm_stream_si128((__m128i *)(d + 32), x2);
        _mm_stream_si128((__m128i *)(d + 48), x3);
    }
    memcpy(d, s, n);
    _mm_sfence();
#else
    (void)large;
    memcpy(dst, src, n);
#endif
}

static int post_and_wait(tr_group *g, uint32_t s, int first, int from, int64_t deadline);

/* Waits (bounded by the deadline, failing if q dies) for rank q's probe address: every
 * rank publishes it as it joins, and they all join at once. */
static int wait_probe(tr_group *g, int q, int64_t deadline) {
    tr__coll_hdr *h = H(g);
    while (!__atomic_load_n(&h->rk[q].probe, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&h->dead, __ATOMIC_ACQUIRE) >> q & 1)
            return tr__err(TR_EPEER_DIED, "group '%s': rank %d left while joining", g->name, q);
        if (tr__now_ns() >= deadline)
            return tr__err(TR_ETIMEDOUT, "group '%s': rank %d did not finish joining", g->name, q);
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Copies n bytes between mine (here) and addr in rank q's memory: into mine (write 0,
 * process_vm_readv) or from it (write 1, process_vm_writev). */
static int peer_copy(tr_group *g, int q, void *mine, uint64_t addr, size_t n, int write) {
    pid_t pid = H(g)->pid[q];
    size_t done = 0;
    while (done < n) {
        struct iovec l = {(char *)mine + done, n - done};
        struct iovec r = {(void *)(uintptr_t)(addr + done), n - done};
        ssize_t k = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return tr__err(TR_EIO, "group '%s': rank %d %s rank %d's buffer: %s", g->name, g->rank,
                           write ? "writing" : "reading", q,
                           k < 0 ? strerror(errno) : "nothing copied");
        done += (size_t)k;
    }
    return 0;
}

static int read_peer(tr_group *g, int q, void *dst, uint64_t addr, size_t n) {
    return peer_copy(g, q, dst, addr, n, 0);
}

static int write_peer(tr_group *g, int q, const void *src, uint64_t addr, size_t n) {
    return peer_copy(g, q, (void *)src, addr, n, 1);
}

/* Join: can this rank read (and write) every peer's memory? */
static int shm_init(tr_group *g, int64_t deadline) {
    tr__coll_hdr *h = H(g);
    shm_state *st = calloc(1, sizeof *st);
    if (!st) return tr__err(TR_ENOMEM, "group '%s': shm state", g->name);
    g->impl = st;
    st->single_copy = -1;
    memset(st->last_way, -1, sizeof st->last_way);
    memset(st->pair_last, -1, sizeof st->pair_last);
    st->probe = PROBE_MAGIC;
    __atomic_store_n(&h->rk[g->rank].probe, (uint64_t)(uintptr_t)&st->probe, __ATOMIC_RELEASE);
    int ok = g->world > 1, wok = ok;
    for (int q = 0; q < g->world; q++) {
        if (q == g->rank) continue;
        int rc = wait_probe(g, q, deadline);
        if (rc) return rc;
        uint64_t v = 0, magic = PROBE_MAGIC;
        if (ok) ok = read_peer(g, q, &v, h->rk[q].probe, sizeof v) == 0 && v == PROBE_MAGIC;
        /* (writes the word's own value: a seccomp filter may allow reads alone) */
        wok = ok && wok && write_peer(g, q, &magic, h->rk[q].probe, sizeof magic) == 0;
    }
    tr__err_clear();
    /* Every rank has recorded its binding before publishing its probe: do they all have a
     * core of their own? (Two sharing one, or one floating, and a long spin could keep the
     * core from the very rank awaited.) */
    g->cores_own = g->pinned != 0;
    for (int q = 0; q < g->world && g->cores_own; q++)
        for (int p = 0; p < q && g->cores_own; p++)
            if (!h->rk[q].pinned || h->rk[q].pinned == h->rk[p].pinned) g->cores_own = 0;
    st->can_read_all = ok;
    st->can_write_all = wok;
    return 0;
}

static void shm_fini(tr_group *g) {
    if (g->impl) free(S(g)->tmp);
    free(g->impl);
    g->impl = NULL;
}

static void shm_set_single_copy(tr_group *g, int on) {
    S(g)->single_copy = on;
}

uint64_t tr__shm_pair_ops(const tr_group *g) {
    return g && g->be == &tr__coll_shm_v2 && S(g) ? S(g)->pair_ops : 0;
}

uint64_t tr__shm_single_ops(const tr_group *g) {
    return g && g->be == &tr__coll_shm_v2 && S(g) ? S(g)->single_ops : 0;
}

uint64_t tr__shm_root_writes(const tr_group *g) {
    return g && g->be == &tr__coll_shm_v2 && S(g) ? S(g)->root_writes : 0;
}

static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    const char *x = a, *y = b;
    return an && bn && x < y + bn && y < x + an;
}

static int size_class(size_t bytes) {
    return bytes < (256u << 10)  ? 0
           : bytes < (1u << 20)  ? 1
           : bytes < (4u << 20)  ? 2
           : bytes < (16u << 20) ? 3
                                 : 4;
}

/* Where op n of a kind and size (counted from 0) is in a trial of len ops: 1 for its first
 * op, 2 for its second, ...; 0 outside. A trial begins at op `first` (0: none), and
 * `offset` ops after op 64, 128, ... 4096, and after each multiple of 4096. */
static uint32_t in_trial(uint32_t n, uint32_t first, uint32_t offset, uint32_t len) {
    if (first && n >= first && n - first < len) return n - first + 1;
    if (n < EXPLORE_FIRST + offset) return 0;
    for (uint32_t k = n - offset, d = 0; d < len && d <= k; d++) {
        uint32_t k0 = k - d;
        if (k0 >= EXPLORE_FIRST &&
            (k0 >= EXPLORE_MAX ? k0 % EXPLORE_MAX == 0 : (k0 & (k0 - 1)) == 0))
            return d + 1;
    }
    return 0;
}

/* What this process's groups have found on this host, by op kind and size class: 0 not
 * yet, 1 single copy the faster, 2 the slots (each group's verdict as it times both ways:
 * large_done). A new group starts from it (a benchmark or a job makes groups for one size
 * each), each rank from its own process's. */
static int8_t host_way[OP_KINDS][SIZE_CLASSES];
/* ...and of a 2-rank allreduce of buffers apart by single copy, by size class: 0 not yet,
 * 1 by shares the faster, 2 the pair's way (a new group of that class starts from it) */
static int8_t host_pair[SIZE_CLASSES];

void tr__shm_set_host_way(int single) {
    for (int k = 0; k < OP_KINDS; k++)
        for (int c = 0; c < SIZE_CLASSES; c++)
            __atomic_store_n(&host_way[k][c],
                             (int8_t)(single < 0 ? 0
                                      : single   ? 1
                                                 : 2),
                             __ATOMIC_RELAXED);
    for (int c = 0; c < SIZE_CLASSES; c++)
        __atomic_store_n(&host_pair[c], (int8_t)0, __ATOMIC_RELAXED);
}

/* The verdict for kind at size class cls (1 the slots, 0 single copy, -1 none): this
 * process's there, else at the nearest class that has one (the smaller first). */
static int host_verdict(int kind, int cls) {
    for (int d = 0; d < SIZE_CLASSES; d++)
        for (int c = cls - d; c <= cls + d; c += d ? 2 * d : 1)
            if (c >= 0 && c < SIZE_CLASSES) {
                int v = __atomic_load_n(&host_way[kind][c], __ATOMIC_RELAXED);
                if (v) return v == 2;
            }
    return -1;
}

/* A way's time per byte: the least of its last KEEP (r, a ring; n: how many it has had),
 * or -1 before any. The least, not a mean: a way tried for a few ops reaches its speed
 * over them (the pair's way over ~4-6 ops on AMD family 26, as the reader's cache takes
 * in the peer's buffer), and the one running is judged the same way. */
static double least(const double *r, uint32_t n) {
    if (!n) return -1;
    double e = r[0];
    for (uint32_t i = 1; i < n && i < KEEP; i++)
        if (r[i] < e) e = r[i];
    return e;
}

/* Single copy's time per byte for kind at size class cls (-1: none yet): a 2-rank
 * allreduce of buffers apart (apart) by the faster of its two ways. */
static double single_ns(const shm_state *st, int kind, int cls, int apart) {
    double e = least(st->ns_per_byte[kind][cls][1], st->timed[kind][cls][1]);
    for (int v = 0; apart && kind == TR__COLL_ALLREDUCE && v < 2; v++) {
        double x = least(st->pair_ns[cls][v], st->pair_n[cls][v]);
        if (x >= 0 && (e < 0 || x < e)) e = x;
    }
    return e;
}

/* Whether a 2-rank single-copy allreduce of size class cls goes the pair's way (1: each
 * reads the whole of the other's send and reduces all of it, pair_allreduce) or by shares
 * (0: its share and then the other's result, single_allreduce), outside its trials: the
 * pair's while it takes 0.9 of the other's time or less (or it alone has been timed), else
 * this process's verdict, else by shares. Measured on AMD family 26, 1 MiB: 100-102
 * against 161 us when the two vCPUs sit far apart (the other's fresh result crosses
 * between their caches), 113-123 against 94-103 when near. */
static int pair_preferred(const shm_state *st, int cls) {
    double e0 = least(st->pair_ns[cls][0], st->pair_n[cls][0]);
    double e1 = least(st->pair_ns[cls][1], st->pair_n[cls][1]);
    if (e1 >= 0) return e0 < 0 || e1 < SWITCH_GAIN * e0;
    return __atomic_load_n(&host_pair[cls], __ATOMIC_RELAXED) == 2;
}

static int force_pair = -1; /* (tests: tr__shm_force_pair) */

void tr__shm_force_pair(int on) {
    __atomic_store_n(&force_pair, on < 0 ? -1 : on != 0, __ATOMIC_RELAXED);
}

/* The way of this rank's next large op of kind at size class cls: 1 single copy, 0 the
 * slots; *pair, a 2-rank allreduce of buffers apart (pairable) by single copy: the pair's
 * way. With single copy on, always single copy; by default, the faster, timed as the group
 * runs. Which way wins depends on the host: single copy by process_vm_readv, as MPI's
 * vader reads its peers, won on Intel hosts and on AMD family 25 (1 MiB allreduce 108
 * against 92-311 us, and when the host's two vCPUs sit far apart 340 against 850), but
 * the kernel's copy runs at a quarter of memcpy's speed on AMD family 26 (6.18), where
 * the slots' two copies win in both states (1 MiB allreduce 44-130 against 92-164 us,
 * 64 MiB 7.4 against 11.7 ms; docs/BENCHMARKS.md) but for the pair's way when far apart.
 * So a kind and size starts with what this process found on this host so far (host_way,
 * at its size or the nearest), else with single copy, and unless it found it at this
 * size, tries the other way once the first has run as many ops as a way takes to reach
 * its speed (below 16 MiB, 8: a buffer that fits in the caches is read warmer op by op,
 * e.g. a 1 MiB allgather by single copy 855, 200, 132, 184, 104, 103, 87, 92, then 84-86
 * us in the far state, and by the slots 1131, 123, 134, 123, 104, 101, 93, 89, then
 * 86-89; from 16 MiB, 2), for as many (a first trial); where the process knew
 * nothing of the kind, a pairable one then tries the pair's way, or by shares where the
 * pair's way is preferred, for as many again (unless it has a verdict on that); then each way is
 * tried again so, from op 64, 128, ... 4096, then every 4096 (in_trial), and the slots
 * are taken while they take 0.9 of single copy's time or less (the host may change: its
 * cores move apart and back). A trial op costs what the slower way does, so a long run of
 * ops tries rarely (docs/BENCHMARKS.md, session 18: trials in every 64 ops put 3 slow ops
 * in a 30-op median). Every rank decides on times of its own (they run the same ops, so
 * their trials coincide). A rank that does not wait for the others in one way (a
 * broadcast's root through the slots, a gather's senders) times that way short: so an op
 * goes by single copy where every rank can and any rank wants to (begin_large), and the
 * ranks whose times mean something decide. A way's first timing after a switch is not
 * counted (first touches). */
static int plan(shm_state *st, int kind, int cls, int pairable, int *pair) {
    uint32_t n = st->ops[kind][cls];
    if (st->ops[kind][cls] < UINT32_MAX) st->ops[kind][cls]++;
    int choose = st->single_copy < 0, verdict = host_verdict(kind, cls);
    if (n == 0) { /* (whether its first trials come early: decided once, at its first op; by
                   * default where this process has no verdict for the kind at this size (one
                   * at another size is where it starts), and the pair's too where it has
                   * none at any size, nor for the pair at this one) */
        int pair_early = pairable && !__atomic_load_n(&host_pair[cls], __ATOMIC_RELAXED) ? 2 : 0;
        int own = __atomic_load_n(&host_way[kind][cls], __ATOMIC_RELAXED) != 0;
        st->fresh[kind][cls] = (uint8_t)(!choose       ? pair_early
                                         : verdict < 0 ? 1 | pair_early
                                         : own         ? 0
                                                       : 1);
    }
    uint8_t fresh = st->fresh[kind][cls];
    double es = least(st->ns_per_byte[kind][cls][0], st->timed[kind][cls][0]);
    double e1 = single_ns(st, kind, cls, pairable);
    int slots = !choose ? 0 : es >= 0 && e1 >= 0 ? es < SWITCH_GAIN * e1 : verdict > 0;
    *pair = pairable && pair_preferred(st, cls);
    /* (a trial runs the way not preferred at its first op all along: the times it brings
     * may change which is meanwhile) */
    /* (a way starts, and each trial runs, for as many ops as a way takes to settle) */
    uint32_t len = cls < 3 ? SETTLE_OPS : SETTLE_OPS_BIG;
    uint32_t at = choose ? in_trial(n, fresh & 1 ? len : 0, 0, len) : 0;
    if (at == 1) st->trying[kind][cls] = (uint8_t)!slots;
    if (at) return !st->trying[kind][cls];
    at = pairable ? in_trial(n, fresh & 2 ? 2 * len : 0, len, len) : 0;
    if (at == 1) st->trying[kind][cls] = (uint8_t) !*pair;
    if (at) { /* (by single copy, its way not preferred at the trial's first op) */
        *pair = st->trying[kind][cls];
        return 1;
    }
    return !slots;
}

/* A large op's first step: publishes where this rank's data is and whether it can and
 * wants to read its peers directly (on, or by default the faster way: plan), then
 * waits for every rank and checks that they agree. Sets *single when every rank can and
 * one wants to; a rank with single copy off cannot. Returns the step the op goes on with;
 * the op ends with large_done. */
static int begin_large(tr_group *g, uint32_t *s, const void *addr, int mine, size_t bytes,
                       int64_t deadline, int *single) {
    /* With more ranks than cores, readers pinning the owner's pages at once queue on its
     * memory map, and the owner cannot run while they copy: the slots are faster there
     * (measured, 4 ranks on 2 cores, 1 MiB: broadcast 130 against 255 us). */
    shm_state *st = S(g);
    int kind = (int)H(g)->rk[g->rank].desc[g->seq & 1].kind, cls = size_class(bytes);
    int has_core = g->cores_own || g->spin_limit > 0;
    int can = mine && has_core && st->can_read_all && kind < OP_KINDS && st->single_copy != 0;
    st->timing = can && st->single_copy < 0;
    /* (a 2-rank allreduce: its recv's address is in addr2 already) */
    int two = kind == TR__COLL_ALLREDUCE && g->world == 2;
    const void *recv = (const void *)(uintptr_t)H(g)->rk[g->rank].desc[g->seq & 1].addr2;
    unsigned pair = two && !overlap(addr, bytes, recv, bytes) ? APART : 0u;
    int want = 0, wp = 0, forced = __atomic_load_n(&force_pair, __ATOMIC_RELAXED);
    if (can) want = plan(st, kind, cls, pair != 0, &wp);
    if (forced >= 0) wp = forced;
    if (pair && wp) pair |= WANT_PAIR;
    tr__coll_publish_single(g, addr,
                            (unsigned)(can | (can && want) << 1) |
                                (can && st->can_write_all ? CAN_WRITE : 0u) | pair);
    int rc = post_and_wait(g, *s, 1, FROM_ALL, deadline);
    if (rc) return rc;
    (*s)++;
    int all_can = 1, any_wants = 0, all_apart = two, any_pair = 0;
    for (int r = 0; r < g->world; r++) {
        uint32_t v = __atomic_load_n(&H(g)->rk[r].desc[g->seq & 1].single, __ATOMIC_RELAXED);
        all_can &= v & 1;
        any_wants |= (v & 2) != 0;
        all_apart &= (v & APART) != 0;
        any_pair |= (v & WANT_PAIR) != 0;
    }
    *single = all_can && any_wants;
    st->pair = *single && all_apart && any_pair;
    st->pair_timing = *single && all_apart && forced < 0;
    st->kind = kind;
    st->cls = cls;
    st->way = *single;
    st->bytes = bytes;
    st->t0 = tr__now_ns(); /* (every rank is in: the arrivals' spread is not timed) */
    return 0;
}

/* Way `way`'s time per byte x into its ring r (KEEP) and count *n, unless it is the first
 * after a switch from the way *last was (first touches: not counted); *last becomes way.
 * Whether it counted. */
static int add_timing(double *r, uint32_t *n, int8_t *last, int way, double x) {
    int again = way == *last;
    *last = (int8_t)way;
    if (!again) return 0;
    r[*n % KEEP] = x;
    if (*n < UINT32_MAX) (*n)++;
    return 1;
}

/* A large op's end: its time per byte, for the default's choice, and this process's
 * verdicts where both ways have times. Returns rc. */
static int large_done(tr_group *g, int rc) {
    shm_state *st = S(g);
    int timing = st->timing, pair_timing = st->pair_timing, k = st->kind, c = st->cls;
    st->timing = st->pair_timing = 0;
    if (!(timing || pair_timing) || rc || !st->bytes) return rc;
    double x = (double)(tr__now_ns() - st->t0) / (double)st->bytes;
    if (pair_timing) { /* (which of a 2-rank single-copy allreduce's ways, too) */
        add_timing(st->pair_ns[c][st->pair], &st->pair_n[c][st->pair], &st->pair_last[c], st->pair,
                   x);
        double e0 = least(st->pair_ns[c][0], st->pair_n[c][0]);
        double e1 = least(st->pair_ns[c][1], st->pair_n[c][1]);
        if (e0 >= 0 && e1 >= 0)
            __atomic_store_n(&host_pair[c], (int8_t)(e1 < SWITCH_GAIN * e0 ? 2 : 1),
                             __ATOMIC_RELAXED);
    }
    if (!timing || !add_timing(st->ns_per_byte[k][c][st->way], &st->timed[k][c][st->way],
                               &st->last_way[k][c], st->way, x))
        return rc;
    double es = least(st->ns_per_byte[k][c][0], st->timed[k][c][0]), e1 = single_ns(st, k, c, 1);
    if (es >= 0 && e1 >= 0)
        __atomic_store_n(&host_way[k][c], (int8_t)(es < SWITCH_GAIN * e1 ? 2 : 1),
                         __ATOMIC_RELAXED);
    return rc;
}

static uint64_t peer_addr(tr_group *g, int q) {
    return H(g)->rk[q].desc[g->seq & 1].addr;
}

/* Ends this rank's write of step s: posts it, then waits for the ranks it reads in step
 * s: every rank on an op's first step (then checks that all agree), else `from`: a rank,
 * FROM_ALL or FROM_NONE. */
static int post_and_wait(tr_group *g, uint32_t s, int first, int from, int64_t deadline) {
    tr__coll_post(g);
    if (first || from == FROM_ALL) {
        int rc = tr__coll_wait_all(g, s + 1, deadline);
        return !rc && first ? tr__coll_check_agree(g) : rc;
    }
    return from == FROM_NONE ? 0 : tr__coll_wait_rank(g, from, s + 1, deadline);
}

/* dst = src[0] op src[1] op ... op src[W-1], in rank order (every rank computes the same
 * bits), also stored in dst2 unless it is NULL (the last fold writes both). dst and dst2
 * may each be exactly one of the sources (in place), except that dst must not be src[q]
 * for q > 0 (it holds the partial result). */
static int reduce_into(void *dst, void *dst2, const char *const *src, int world, size_t n,
                       tr_dtype dtype, tr_redop op) {
    size_t bytes = n * tr__dtype_size(dtype);
    if (world == 1) {
        if (dst != src[0]) memcpy(dst, src[0], bytes);
        if (dst2 && dst2 != src[0]) memcpy(dst2, src[0], bytes);
        return 0;
    }
    int rc = 0;
    const void *acc = src[0];
    for (int q = 1; q < world && !rc; q++) {
        rc = tr__reduce_to(dst, q == world - 1 ? dst2 : NULL, acc, src[q], n, dtype, op);
        acc = dst;
    }
    if (!rc) rc = tr__reduce_finish(dst, n, dtype, op, world);
    if (!rc && dst2) rc = tr__reduce_finish(dst2, n, dtype, op, world);
    return rc;
}

static int shm_barrier_op(tr_group *g, int64_t deadline) {
    tr__coll_publish(g, TR__COLL_BARRIER, TR_UINT8, TR_SUM, -1, 0);
    return post_and_wait(g, tr__coll_my_step(g), 1, FROM_ALL, deadline);
}

/* allreduce by single copy, after begin_large published send: rank r reads its share of
 * every peer's send (piece by piece, into tmp) and reduces it, in rank order, into its
 * recv (whose address begin_large's step published too: addr2); once every rank has,
 * reads the other shares from the peers' recv; returns once every rank has read its
 * share. Per rank: 2S(W-1)/W read from the
 * peers by the kernel (one copy), S read and S/W written by the reduction. In place
 * (send == recv) works: nobody reads a share while its owner writes it. */
#define PIECE (256u << 10)
static int single_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                            tr_redop op, uint32_t s, int64_t deadline) {
    shm_state *st = S(g);
    size_t esz = tr__dtype_size(dtype), W = (size_t)g->world, me = (size_t)g->rank;
    size_t lo = count * me / W, hi = count * (me + 1) / W, per = PIECE / esz;
    int rc = 0;
    st->single_ops++;
    const char *src[TR__COLL_MAX_WORLD];
    for (size_t off = lo; off < hi && !rc; off += per) {
        size_t n = hi - off < per ? hi - off : per, nb = n * esz;
        for (size_t q = 0; q < W && !rc; q++) {
            char *t = st->tmp + q * PIECE;
            if (q != me)
                rc = read_peer(g, (int)q, t, peer_addr(g, (int)q) + off * esz, nb);
            else if (send == recv && me > 0) /* (the result must not overwrite it first) */
                memcpy(t, (const char *)send + off * esz, nb);
            else
                t = (char *)send + off * esz;
            src[q] = t;
        }
        if (!rc) rc = reduce_into((char *)recv + off * esz, NULL, src, g->world, n, dtype, op);
    }
    /* A rank that failed says so before its post, and still takes both steps (the others
     * wait for them): every rank then fails, none reads a share that is not there. */
    tr__coll_desc *mine = &H(g)->rk[g->rank].desc[g->seq & 1];
    if (rc) __atomic_store_n(&mine->single, mine->single | SHARE_FAILED, __ATOMIC_RELAXED);
    int done = post_and_wait(g, s, 0, FROM_ALL, deadline);
    if (!rc) rc = done;
    for (int q = 0; q < g->world && !rc; q++)
        if (__atomic_load_n(&H(g)->rk[q].desc[g->seq & 1].single, __ATOMIC_RELAXED) & SHARE_FAILED)
            rc = tr__err(TR_EIO,
                         "group '%s': rank %d could not make its share of a "
                         "single-copy allreduce",
                         g->name, q);
    for (size_t q = 0; q < W && !rc; q++) {
        size_t qlo = count * q / W, qhi = count * (q + 1) / W;
        if (q != me && qhi > qlo)
            rc = read_peer(g, (int)q, (char *)recv + qlo * esz,
                           H(g)->rk[q].desc[g->seq & 1].addr2 + qlo * esz, (qhi - qlo) * esz);
    }
    done = done ? done : post_and_wait(g, s + 1, 0, FROM_ALL, deadline);
    return rc ? rc : done;
}

/* allreduce (root -1) and reduce (the result at root only). */
/* A tiny op's signature: what every rank must agree on (the op's number, kind, root,
 * dtype, reduction op, count). */
static uint64_t tiny_sig(uint64_t seq, uint32_t kind, int root, tr_dtype dtype, tr_redop op,
                         size_t count) {
    return (seq & 0xffffffffu) << 32 | ((uint64_t)kind & 0xff) << 24 |
           ((uint64_t)(root + 1) & 0xff) << 16 | ((uint64_t)dtype & 0xff) << 8 |
           ((uint64_t)op & 0xf) << 5 | ((uint64_t)count & 0x1f);
}

/* allreduce by single copy between 2 ranks whose send and recv are apart (both): each
 * reads the whole of the other's send, piece by piece, and reduces it with its own into
 * its recv (src in rank order: both compute the same bits); then waits for the other to
 * have read its send. One step. */
static int pair_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                          tr_redop op, uint32_t s, int64_t deadline) {
    shm_state *st = S(g);
    size_t esz = tr__dtype_size(dtype), me = (size_t)g->rank, per = PIECE / esz;
    int q = 1 - g->rank, rc = 0;
    st->single_ops++;
    st->pair_ops++;
    const char *src[2];
    for (size_t off = 0; off < count && !rc; off += per) {
        size_t n = count - off < per ? count - off : per;
        rc = read_peer(g, q, st->tmp, peer_addr(g, q) + off * esz, n * esz);
        src[me] = (const char *)send + off * esz;
        src[q] = st->tmp;
        if (!rc) rc = reduce_into((char *)recv + off * esz, NULL, src, 2, n, dtype, op);
    }
    int done = post_and_wait(g, s, 0, FROM_ALL, deadline);
    return rc ? rc : done;
}

/* allreduce, broadcast and allgather of at most TR__COLL_TINY bytes a rank, in one step,
 * on the line peers wait on: each rank writes its value (broadcast: the root alone) and
 * the op's signature beside its posted counter (the op's parity), posts, waits for every
 * rank, and takes the peers' values from the lines its waits brought in: the sum in rank
 * order, the root's, or all of them. One cache-line handoff per peer, where the slots' way
 * took three or four (the counter, the descriptor for the agreement check, the slot).
 * Reuse: a rank writes parity p again two ops later, by when every peer has posted the op
 * between (whose first step waits for all), so has read this one. The caller published
 * the op (tr__coll_publish): a rank that disagrees is named from the descriptors. */
static int tiny_op(tr_group *g, uint32_t kind, const void *send, void *recv, size_t count,
                   tr_dtype dtype, tr_redop op, int root, int64_t deadline) {
    tr__coll_hdr *h = H(g);
    size_t bytes = count * tr__dtype_size(dtype);
    uint32_t s = tr__coll_my_step(g);
    int rc = tr__coll_wait_all(g, s, deadline); /* (known: the op before waited for all) */
    if (rc) return rc;
    int p = (int)(g->seq & 1), me = g->rank;
    uint64_t sig = tiny_sig(g->seq, kind, root, dtype, op, count);
    unsigned char mine[TR__COLL_TINY]; /* (recv may hold send: the sources must not move) */
    tr__coll_tiny *t = &h->rk[me].tiny[p];
    if (kind != TR__COLL_BROADCAST || me == root) {
        memcpy(mine, send, bytes);
        memcpy(t->data, mine, bytes);
    }
    t->sig = sig; /* (published by the post's release) */
    tr__coll_post(g);
    /* every rank's post first, even where one disagrees: no rank may begin the next op
     * (and publish over this op's parity) while another still checks this one */
    if ((rc = tr__coll_wait_all(g, s + 1, deadline))) return rc;
    const char *src[TR__COLL_MAX_WORLD];
    for (int q = 0; q < g->world; q++) {
        if (q == me) {
            src[q] = (const char *)mine;
            continue;
        }
        if (h->rk[q].tiny[p].sig != sig) { /* another op there: say which, as the slots do */
            rc = tr__coll_check_agree(g);
            return rc ? rc
                      : tr__err(TR_EINVAL, "group '%s': rank %d posted another op", g->name, q);
        }
        src[q] = (const char *)h->rk[q].tiny[p].data;
    }
    if (kind == TR__COLL_BROADCAST) {
        if (me != root) memcpy(recv, src[root], bytes);
        return 0;
    }
    if (kind == TR__COLL_ALLGATHER) {
        for (int q = 0; q < g->world; q++)
            memcpy((char *)recv + (size_t)q * bytes, src[q], bytes);
        return 0;
    }
    return reduce_into(recv, NULL, src, g->world, count, dtype, op);
}

static int allreduce_to(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        tr_redop op, int root, int64_t deadline) {
    size_t esz = tr__dtype_size(dtype), W = (size_t)g->world, me = (size_t)g->rank;
    tr__coll_publish(g, root < 0 ? TR__COLL_ALLREDUCE : TR__COLL_REDUCE, dtype, op, root, count);
    uint32_t s = tr__coll_my_step(g);
    int out = root < 0 || root == g->rank, rc;
    const char *src[TR__COLL_MAX_WORLD];
    if (root < 0 && W > 1 && count && count * esz <= TR__COLL_TINY)
        return tiny_op(g, TR__COLL_ALLREDUCE, send, recv, count, dtype, op, -1, deadline);
    if (W == 1 || count * esz <= ONESHOT_BYTES) {
        if (W > 1 && count) {
            if ((rc = tr__coll_wait_all(g, s, deadline))) return rc;
            memcpy(slot(g, g->rank, s), send, count * esz);
        }
        if ((rc = post_and_wait(g, s, 1, FROM_ALL, deadline)) || !out || !count) return rc;
        if (W == 1) {
            if (recv != send) memcpy(recv, send, count * esz);
            return tr__reduce_finish(recv, count, dtype, op, 1);
        }
        for (size_t q = 0; q < W; q++)
            src[q] = slot(g, (int)q, s);
        return reduce_into(recv, NULL, src, g->world, count, dtype, op);
    }
    int first = 1, single;
    if (root < 0 && count * esz >= SINGLE_MIN) {
        /* (a recv that overlaps send other than exactly cannot be written while read) */
        int ok = send == recv || !overlap(send, count * esz, recv, count * esz);
        shm_state *st = S(g); /* (its pieces' buffer first: a rank without it cannot) */
        if (ok && !st->tmp) st->tmp = malloc(W * PIECE);
        ok = ok && st->tmp;
        /* (recv's address for the peers' second reads: begin_large's post publishes it) */
        H(g)->rk[g->rank].desc[g->seq & 1].addr2 = (uint64_t)(uintptr_t)recv;
        if ((rc = begin_large(g, &s, send, ok, count * esz, deadline, &single))) return rc;
        first = 0;
        if (single && S(g)->pair)
            return large_done(g, pair_allreduce(g, send, recv, count, dtype, op, s, deadline));
        if (single)
            return large_done(g, single_allreduce(g, send, recv, count, dtype, op, s, deadline));
    }
    size_t per = H(g)->slot / esz;
    for (size_t off = 0; off < count; off += per) {
        size_t n = count - off < per ? count - off : per, lo = n * me / W, hi = n * (me + 1) / W;
        const char *in = (const char *)send + off * esz;
        char *res = out ? (char *)recv + off * esz : NULL;
        /* step A: the other ranks' shares of this chunk */
        if ((rc = tr__coll_wait_all(g, s, deadline))) return rc;
        char *mine = slot(g, g->rank, s);
        memcpy(mine, in, lo * esz);
        memcpy(mine + hi * esz, in + hi * esz, (n - hi) * esz);
        if ((rc = post_and_wait(g, s, first && off == 0, FROM_ALL, deadline))) return rc;
        /* step B: this rank's share, reduced into its next slot (everyone has posted s + 1:
         * nobody reads that slot's step s - 1 any more) */
        s++;
        char *share = slot(g, g->rank, s) + lo * esz;
        for (size_t q = 0; q < W; q++)
            src[q] = q == me ? in + lo * esz : slot(g, (int)q, s - 1) + lo * esz;
        if (hi > lo && (rc = reduce_into(share, out ? res + lo * esz : NULL, src, g->world, hi - lo,
                                         dtype, op)))
            return rc;
        if ((rc = post_and_wait(g, s, 0, out ? FROM_ALL : FROM_NONE, deadline))) return rc;
        for (size_t q = 0; q < W && out; q++) {
            size_t qlo = n * q / W, qhi = n * (q + 1) / W;
            if (q != me) memcpy(res + qlo * esz, slot(g, (int)q, s) + qlo * esz, (qhi - qlo) * esz);
        }
        s++;
    }
    return first ? 0 : large_done(g, 0); /* (the slots' way, timed) */
}

static int shm_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                         tr_redop op, int64_t deadline) {
    return allreduce_to(g, send, recv, count, dtype, op, -1, deadline);
}

/* Where a single-copy broadcast splits rank q's buffer: the root writes [0, split), q
 * reads [split, bytes). Each of the W ranks copies about bytes (W - 1) / W, where the
 * readers alone copied bytes each while the root waited. The split falls on a cache line
 * of q's buffer, so the two writers never share one. */
static size_t co_split(tr_group *g, int q, size_t bytes) {
    uint64_t a = peer_addr(g, q), end = (a + bytes / (size_t)g->world + 63) & ~(uint64_t)63;
    return end - a < bytes ? (size_t)(end - a) : bytes;
}

/* broadcast by single copy, after begin_large published every rank's buf: each other rank
 * reads the root's buffer; where the root can write every peer's memory (CAN_WRITE), it
 * writes the first share of each peer's buffer itself meanwhile (co_split). The root
 * returns once every reader is done; a reader, once the root is done writing (and fails
 * if the root's writes did: SHARE_FAILED). */
static int single_broadcast(tr_group *g, void *buf, size_t bytes, int root, uint32_t s,
                            int64_t deadline) {
    tr__coll_desc *d = H(g)->rk[root].desc + (g->seq & 1);
    int co = (__atomic_load_n(&d->single, __ATOMIC_RELAXED) & CAN_WRITE) != 0, rc = 0;
    S(g)->single_ops++;
    if (g->rank != root) {
        size_t f = co ? co_split(g, g->rank, bytes) : 0;
        rc = read_peer(g, root, (char *)buf + f, peer_addr(g, root) + f, bytes - f);
        int done = post_and_wait(g, s, 0, co ? root : FROM_NONE, deadline);
        if (!rc && !done && co && (__atomic_load_n(&d->single, __ATOMIC_RELAXED) & SHARE_FAILED))
            rc = tr__err(TR_EIO,
                         "group '%s': the broadcast's root (rank %d) could not write "
                         "this rank's buffer",
                         g->name, root);
        return rc ? rc : done;
    }
    S(g)->root_writes += (uint64_t)co;
    for (int q = 0; q < g->world && co && !rc; q++)
        if (q != root) rc = write_peer(g, q, buf, peer_addr(g, q), co_split(g, q, bytes));
    if (rc) __atomic_store_n(&d->single, d->single | SHARE_FAILED, __ATOMIC_RELAXED);
    int done = post_and_wait(g, s, 0, FROM_ALL, deadline);
    return rc ? rc : done;
}

/* Per chunk (one step): the root copies into its slot; the others copy out. Large: single
 * copy (single_broadcast). */
static int shm_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                         int64_t deadline) {
    size_t bytes = count * tr__dtype_size(dtype), off = 0;
    size_t per = H(g)->slot;
    tr__coll_publish(g, TR__COLL_BROADCAST, dtype, TR_SUM, root, count);
    if (g->world > 1 && bytes && bytes <= TR__COLL_TINY)
        return tiny_op(g, TR__COLL_BROADCAST, buf, buf, count, dtype, TR_SUM, root, deadline);
    uint32_t s = tr__coll_my_step(g);
    int is_root = g->rank == root, rc, first = 1, single;
    if (g->world > 1 && bytes >= SINGLE_MIN) {
        if ((rc = begin_large(g, &s, buf, 1, bytes, deadline, &single))) return rc;
        first = 0;
        if (single) return large_done(g, single_broadcast(g, buf, bytes, root, s, deadline));
    }
    do {
        size_t n = bytes - off < per ? bytes - off : per;
        if (is_root && n) {
            if ((rc = tr__coll_wait_all(g, s, deadline))) return rc;
            memcpy(slot(g, root, s), (char *)buf + off, n);
        }
        if ((rc = post_and_wait(g, s, first && off == 0, is_root ? FROM_NONE : root, deadline)))
            return rc;
        if (!is_root && n) copy_out((char *)buf + off, slot(g, root, s), n, bytes >= NT_MIN);
        s++;
        off += n;
    } while (off < bytes);
    return first ? 0 : large_done(g, 0); /* (the slots' way, timed) */
}

/* allgather, gather and scatter by single copy, after begin_large: each rank reads what it
 * needs from the owners' buffers, posts, and waits for the readers of its own. */
static int single_copy(tr_group *g, const tr__coll_args *a, uint32_t s, int64_t deadline) {
    int k = a->kind, root = a->root, me = g->rank, W = g->world, rc = 0;
    size_t nb = a->count * tr__dtype_size(a->dtype);
    char *recv = a->recv;
    S(g)->single_ops++;
    if (k == TR__COLL_SCATTER) {
        if (me == root) {
            if (recv != (char *)a->send + me * nb) memmove(recv, (char *)a->send + me * nb, nb);
        } else {
            rc = read_peer(g, root, recv, peer_addr(g, root) + (uint64_t)me * nb, nb);
        }
        int done = post_and_wait(g, s, 0, me == root ? FROM_ALL : FROM_NONE, deadline);
        return rc ? rc : done;
    }
    int reads = k == TR__COLL_ALLGATHER || me == root; /* gather: the root alone */
    if (reads && recv + (size_t)me * nb != (const char *)a->send)
        copy_out(recv + (size_t)me * nb, a->send, nb, nb * (size_t)W >= NT_MIN);
    for (int q = 0; q < W && reads && !rc; q++)
        if (q != me) rc = read_peer(g, q, recv + (size_t)q * nb, peer_addr(g, q), nb);
    /* allgather: everyone waits for every reader; gather: the others wait for the root */
    int from = k == TR__COLL_ALLGATHER ? FROM_ALL : me == root ? FROM_NONE : root;
    int done = post_and_wait(g, s, 0, from, deadline);
    return rc ? rc : done;
}

/* reduce (through allreduce_to), allgather, gather, scatter, reduce_scatter, alltoall.
 * Per chunk (one step): each rank writes its part into its slot (only the root, for
 * scatter: a piece per rank); each reads what it needs from the slots. */
static int shm_data_op(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    int k = a->kind, root = a->root, is_root = g->rank == root;
    if (k == TR__COLL_REDUCE)
        return allreduce_to(g, a->send, a->recv, a->count, a->dtype, a->op, root, deadline);
    size_t esz = tr__dtype_size(a->dtype), W = (size_t)g->world, me = (size_t)g->rank;
    size_t count = a->count, per = H(g)->slot / esz;
    int pieces = k == TR__COLL_REDUCE_SCATTER || k == TR__COLL_ALLTOALL || k == TR__COLL_SCATTER;
    if (pieces) per /= W; /* elements of each destination's piece per chunk */
    tr__coll_publish(g, (uint32_t)k, a->dtype, a->op, root, count);
    if (k == TR__COLL_ALLGATHER && W > 1 && count && count * esz <= TR__COLL_TINY)
        return tiny_op(g, TR__COLL_ALLGATHER, a->send, a->recv, count, a->dtype, a->op, -1,
                       deadline);
    uint32_t s = tr__coll_my_step(g);
    const char *send = a->send;
    char *recv = a->recv;
    const char *src[TR__COLL_MAX_WORLD];
    size_t off = 0;
    int rc, first = 1, single;
    int direct = k == TR__COLL_ALLGATHER || k == TR__COLL_GATHER || k == TR__COLL_SCATTER;
    /* (allgather, gather's root: each piece into recv; a 16 MiB output or more streams) */
    int gathers = k == TR__COLL_ALLGATHER || (k == TR__COLL_GATHER && is_root);
    int apart = gathers && !overlap(send, count * esz, recv, W * count * esz);
    int big = count * esz * W >= NT_MIN;
    if (direct && W > 1 && count * esz >= SINGLE_MIN) {
        /* whose buffer is read: every rank's send (allgather, gather), the root's (scatter);
         * a rank whose send overlaps its recv cannot let it be read while it writes */
        size_t all = W * count * esz;
        int has_send = k != TR__COLL_SCATTER || is_root;
        int has_recv = k == TR__COLL_ALLGATHER || (k == TR__COLL_GATHER ? is_root : 1);
        int ok = !(has_send && has_recv &&
                   overlap(send, k == TR__COLL_SCATTER ? all : count * esz, recv,
                           k == TR__COLL_SCATTER ? count * esz : all));
        if ((rc = begin_large(g, &s, send, ok, count * esz, deadline, &single))) return rc;
        first = 0;
        if (single) return large_done(g, single_copy(g, a, s, deadline));
    }
    do {
        size_t n = count - off < per ? count - off : per, nb = n * esz;
        if (nb && (k != TR__COLL_SCATTER || is_root)) {
            if ((rc = tr__coll_wait_all(g, s, deadline))) return rc;
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
        /* A gatherer's own piece goes straight from its send while its peers post (from
         * its slot after the wait, where send and recv overlap, or the step checks the
         * op): 2 ranks, 1 MiB, near: 67 -> 52 us */
        int early = gathers && nb && apart && !(first && off == 0);
        if (early) {
            tr__coll_post(g);
            copy_out(recv + (me * count + off) * esz, send + off * esz, nb, big);
            if ((rc = tr__coll_wait_all(g, s + 1, deadline))) return rc;
        } else if ((rc = post_and_wait(g, s, first && off == 0, from, deadline))) {
            return rc;
        }
        if (nb) switch (k) {
            case TR__COLL_ALLGATHER:
            case TR__COLL_GATHER:
                for (size_t q = 0; q < W && gathers; q++)
                    if (!early || q != me)
                        copy_out(recv + (q * count + off) * esz, slot(g, (int)q, s), nb, big);
                break;
            case TR__COLL_SCATTER:
                memcpy(recv + off * esz, slot(g, root, s) + me * nb, nb);
                break;
            case TR__COLL_REDUCE_SCATTER:
                for (size_t q = 0; q < W; q++)
                    src[q] = slot(g, (int)q, s) + me * nb;
                if (n &&
                    (rc = reduce_into(recv + off * esz, NULL, src, g->world, n, a->dtype, a->op)))
                    return rc;
                break;
            default: /* alltoall */
                for (size_t q = 0; q < W; q++)
                    memcpy(recv + (q * count + off) * esz, slot(g, (int)q, s) + me * nb, nb);
            }
        s++;
        off += n;
    } while (off < count);
    return first ? 0 : large_done(g, 0); /* (the slots' way, timed) */
}

/* Waits until ev moves past `seen`, watching the peer's life and the deadline. */
static int chan_wait(tr_group *g, tr__event *ev, uint32_t seen, int peer, int64_t deadline) {
    int rc = tr__coll_wait_event(g, ev, seen, peer, -1, deadline);
    if (rc == TR_ETIMEDOUT)
        return tr__err(TR_ETIMEDOUT, "group '%s': rank %d waited for rank %d in vain", g->name,
                       g->rank, peer);
    return rc;
}

/* The receiver refused this message (on its first chunk: count and dtype ride on every
 * chunk) and consumed it; clearing the flag leaves the channel in step for the next. */
static int refused(tr_group *g, tr__coll_chan *ch, int dst) {
    ch->error = 0;
    return tr__err(TR_EINVAL,
                   "group '%s': rank %d refused what rank %d sent (count or dtype differ)", g->name,
                   dst, g->rank);
}

/* send: chunks of the channel's size (64 KiB up to 8 ranks) through the (me -> dst) channel; each
 * waits for the previous to be consumed; returns once the receiver has taken the last one (so a
 * mismatch it detects is reported here too). */
static int shm_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                    int64_t deadline) {
    tr__coll_hdr *h = H(g);
    tr__coll_chan *ch = tr__coll_chan_of(h, g->rank, dst);
    char *cb = tr__coll_chan_buf(h, g->rank, dst);
    size_t bytes = count * tr__dtype_size(dtype), off = 0;
    do {
        uint32_t p = tr__event_seq(&ch->posted);
        int rc = tr__event_seq(&ch->consumed) == p
                     ? 0
                     : chan_wait(g, &ch->consumed, p - 1, dst, deadline);
        if (rc) return rc;
        if (ch->error) return refused(g, ch, dst);
        size_t chan = tr__coll_chan_size(g->world);
        size_t n = bytes - off < chan ? bytes - off : chan;
        if (n) memcpy(cb, (const char *)buf + off, n);
        ch->bytes = n;
        ch->count = count;
        ch->dtype = (uint32_t)dtype;
        tr__coll_note_cpu(g);
        tr__event_signal(&ch->posted);
        off += n;
    } while (off < bytes);
    uint32_t p = tr__event_seq(&ch->posted);
    int rc =
        tr__event_seq(&ch->consumed) == p ? 0 : chan_wait(g, &ch->consumed, p - 1, dst, deadline);
    return !rc && ch->error ? refused(g, ch, dst) : rc;
}

static int shm_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src,
                    int64_t deadline) {
    tr__coll_hdr *h = H(g);
    tr__coll_chan *ch = tr__coll_chan_of(h, src, g->rank);
    char *cb = tr__coll_chan_buf(h, src, g->rank);
    size_t bytes = count * tr__dtype_size(dtype), off = 0;
    do {
        uint32_t c = tr__event_seq(&ch->consumed);
        int rc = tr__event_seq(&ch->posted) != c ? 0 : chan_wait(g, &ch->posted, c, src, deadline);
        if (rc) return rc;
        if (ch->count != count || ch->dtype != (uint32_t)dtype ||
            ch->bytes > tr__coll_chan_size(g->world) || off + ch->bytes > bytes) {
            unsigned long long sc = ch->count;
            unsigned sd = ch->dtype;
            ch->error = 1; /* the sender reports it and clears it (see refused) */
            tr__event_signal(&ch->consumed);
            return tr__err(TR_EINVAL,
                           "group '%s': rank %d sent %llu elements of dtype %u, rank %d expected "
                           "%zu of dtype %d",
                           g->name, src, sc, sd, g->rank, count, (int)dtype);
        }
        if (ch->bytes) memcpy((char *)buf + off, cb, ch->bytes);
        off += ch->bytes;
        tr__coll_note_cpu(g);
        tr__event_signal(&ch->consumed);
    } while (off < bytes);
    return 0;
}

const tr__coll_backend_v2 tr__coll_shm_v2 = {
    .version = 2,
    .name = "shm",
    .init = shm_init,
    .fini = shm_fini,
    .barrier = shm_barrier_op,
    .allreduce = shm_allreduce,
    .broadcast = shm_broadcast,
    .data_op = shm_data_op,
    .send = shm_send,
    .recv = shm_recv,
    .flags = TR__COLL_HOST_MEMORY | TR__COLL_SEG_DATA | TR__COLL_SPIN,
    .set_single_copy = shm_set_single_copy,
};
