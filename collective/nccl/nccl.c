/* collective/nccl/nccl.c - the `nccl` backend: NCCL communicators that never hang.
 *
 * Rendezvous: the node's (every rank has joined), then rank 0's unique id through the
 * node's KV store under the group's keys (deleted with the group). The communicator is
 * made non-blocking (config.blocking = 0) and polled against the join's deadline. Each op
 * is enqueued on the group's stream (or the caller's: the async form) and waited for by
 * polling a CUDA event, NCCL's async error and the group's dead mask against the op's
 * deadline; on expiry, a peer's death or an error the communicator is aborted
 * (ncclCommAbort), this rank marks itself out in the dead mask so its peers fail at once,
 * and the group is unusable. Before NCCL moves a byte, the ranks check that they agree on
 * the op (the step protocol of steps.h, as shm does); point to point, the receiver checks
 * a header the sender sends first.
 *
 * One process may drive several devices (init_devs: ndev > 1, the _multigpu forms): a
 * communicator of world * ndev ranks, one per device, ops issued in an NCCL group.
 */
#include "collective/nccl/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collective/shm/segment.h"
#include "collective/steps.h"
#include "core/clock.h"
#include "core/kv.h"
#include "core/reduce.h"
#include "core/status.h"

#define ID_KEY "nccl_id"
#define RING 64             /* async ops in flight per group; one more waits for the oldest */
#define HDRS 256            /* pinned point-to-point headers, reused round robin (> RING) */
#define SPIN_NS 50000       /* poll an op's event flat out this long, */
#define YIELD_NS 2000000    /* then yielding the CPU between polls this long, then nap */
#define NAP_NS 20000        /* between polls after that (1 ms after 10 ms) */
#define GRACE_NS 1000000000 /* a peer gone mid-wait: how long its part may still finish */

typedef struct pending {
    cudaEvent_t ev;
    int64_t deadline;
} pending;

typedef struct nstate {
    int ndev;
    int dev[TR__COLL_MAX_DEV];
    ncclComm_t comm[TR__COLL_MAX_DEV]; /* NULL once aborted or destroyed */
    cudaStream_t own[TR__COLL_MAX_DEV];
    cudaEvent_t done[TR__COLL_MAX_DEV];
    void *scratch[TR__COLL_MAX_DEV]; /* 64 device bytes: the barrier's word, p2p headers */
    uint64_t *hdr;                   /* HDRS pinned headers {count, dtype} */
    void *tmp;                       /* device copy of a send that overlaps its recv */
    size_t tmp_cap;
    unsigned hdr_next;
    int aborted;
    pthread_mutex_t mu; /* the communicator against the watchdog's abort; the ring */
    /* the async form */
    cudaStream_t user; /* NULL: ops wait on the group's stream */
    pending ring[RING];
    unsigned head, tail;
    int async_rc; /* the first failure the watchdog saw */
    char async_msg[300];
    pthread_t dog;
    int dog_started, stop;
    pthread_cond_t cv;
} nstate;

static nstate *S(tr_group *g) {
    return g->impl;
}

static tr__coll_hdr *H(tr_group *g) {
    return g->seg;
}

static const ncclDataType_t dtypes[] = {
    [TR_INT8] = ncclInt8,       [TR_UINT8] = ncclUint8,     [TR_INT32] = ncclInt32,
    [TR_INT64] = ncclInt64,     [TR_FLOAT16] = ncclFloat16, [TR_BFLOAT16] = ncclBfloat16,
    [TR_FLOAT32] = ncclFloat32, [TR_FLOAT64] = ncclFloat64,
};
static const ncclRedOp_t redops[] = {
    [TR_SUM] = ncclSum, [TR_PROD] = ncclProd, [TR_MIN] = ncclMin,
    [TR_MAX] = ncclMax, [TR_AVG] = ncclAvg,
};

static int code_of(ncclResult_t r) {
    switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return TR_EINVAL;
    case ncclRemoteError:
        return TR_EPEER_DIED;
    case ncclSystemError:
        return TR_EIO;
    default:
        return TR_EINTERNAL;
    }
}

static void nap(int64_t ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

/* Another rank's bit in the dead mask (the node sets it when a member dies or leaves; a
 * rank whose communicator was aborted sets its own). -1 if none. */
static int dead_peer(tr_group *g) {
    uint64_t dead = __atomic_load_n(&H(g)->dead, __ATOMIC_ACQUIRE) & ~(1ull << g->rank);
    return dead ? __builtin_ctzll(dead) : -1;
}

/* Aborts every communicator of the group (NCCL's kernels in flight exit), once; marks
 * this rank out so its peers fail now rather than at their deadline. Caller holds s->mu. */
static void abort_locked(tr_group *g, nstate *s) {
    if (s->aborted) return;
    s->aborted = 1;
    if (H(g)) __atomic_or_fetch(&H(g)->dead, 1ull << g->rank, __ATOMIC_SEQ_CST);
    for (int i = 0; i < s->ndev; i++)
        if (s->comm[i]) {
            ncclCommAbort(s->comm[i]);
            s->comm[i] = NULL;
        }
}

/* NCCL's last words for device i's communicator (before an abort frees it). */
static const char *last_error(nstate *s, int i) {
    const char *m = s->comm[i] ? ncclGetLastError(s->comm[i]) : NULL;
    return m && *m ? m : "no detail";
}

/* Fails the op: aborts, records the error. */
__attribute__((format(printf, 4, 5))) static int fail(tr_group *g, nstate *s, int code,
                                                      const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* The communicator goes: never TR_EINVAL (that leaves a group usable); a peer gone
     * is why NCCL failed, whatever NCCL calls it */
    if (code != TR_ETIMEDOUT && dead_peer(g) >= 0) code = TR_EPEER_DIED;
    if (code == TR_EINVAL) code = TR_EINTERNAL;
    pthread_mutex_lock(&s->mu);
    abort_locked(g, s);
    pthread_mutex_unlock(&s->mu);
    const char *hint = strstr(msg, "Duplicate GPU")
                           ? " (NCCL takes one rank of a communicator per GPU: give each rank a "
                             "GPU of its own; on one GPU, a distinct NCCL_HOSTID in each rank's "
                             "process makes them NCCL hosts of their own, joined over its "
                             "network transport)"
                           : "";
    return tr__err(code, "group '%s' (nccl, rank %d): %s; communicator aborted%s", g->name, g->rank,
                   msg, hint);
}

/* What stops a wait early: an async error, a peer gone for longer than GRACE_NS, the
 * deadline. 0 to go on. *gone_since: when a peer was first seen gone. */
static int check_stop(tr_group *g, nstate *s, int64_t deadline, int64_t *gone_since) {
    char why[300] = "";
    ncclResult_t bad = ncclSuccess;
    pthread_mutex_lock(&s->mu);
    int aborted = s->aborted;
    for (int i = 0; i < s->ndev && bad == ncclSuccess; i++) {
        ncclResult_t st = ncclSuccess;
        if (s->comm[i] && ncclCommGetAsyncError(s->comm[i], &st) == ncclSuccess &&
            st != ncclSuccess && st != ncclInProgress) {
            bad = st;
            snprintf(why, sizeof why, "%s", last_error(s, i));
        }
    }
    pthread_mutex_unlock(&s->mu);
    if (bad != ncclSuccess)
        return fail(g, s, code_of(bad), "NCCL: %s (%s)", ncclGetErrorString(bad), why);
    if (aborted) /* the watchdog's doing */
        return tr__err(s->async_rc ? s->async_rc : TR_ECLOSED, "group '%s': %s", g->name,
                       s->async_msg[0] ? s->async_msg : "the communicator was aborted");
    int64_t now = tr__now_ns();
    int peer = dead_peer(g);
    if (peer >= 0) {
        if (!*gone_since) *gone_since = now;
        if (now - *gone_since >= GRACE_NS) {
            return fail(g, s, TR_EPEER_DIED, "rank %d (pid %d) died, left or failed mid-op", peer,
                        (int)H(g)->pid[peer]);
        }
    }
    if (now >= deadline) return fail(g, s, TR_ETIMEDOUT, "the op timed out");
    return 0;
}

/* Until every event in evs has completed (or a stop). */
static int wait_events(tr_group *g, nstate *s, cudaEvent_t *evs, int n, int64_t deadline) {
    int64_t start = tr__now_ns(), gone_since = 0;
    for (unsigned polls = 0;; polls++) {
        int all = 1;
        for (int i = 0; i < n && all; i++) {
            cudaError_t ce = cudaEventQuery(evs[i]);
            if (ce == cudaErrorNotReady)
                all = 0;
            else if (ce != cudaSuccess)
                return fail(g, s, TR_EINTERNAL, "CUDA: %s (%s)", cudaGetErrorName(ce),
                            cudaGetErrorString(ce));
        }
        if (all) return 0;
        int64_t waited = tr__now_ns() - start;
        if (waited < SPIN_NS && polls % 64) continue;
        int rc = check_stop(g, s, deadline, &gone_since);
        if (rc) return rc;
        /* an op of up to 2 ms is seen done within a yield (a nap would add its own length
         * and the timer's slack, ~70 us: 12% of a 256 MiB copy on an H100), as
         * cudaStreamSynchronize's spin sees it; longer ones are napped on */
        if (waited >= YIELD_NS)
            nap(waited < 10000000 ? NAP_NS : 1000000);
        else if (waited >= SPIN_NS)
            sched_yield();
    }
}

/* Until device i's non-blocking communicator is done with what it was given. */
static int settle(tr_group *g, nstate *s, int i, int64_t deadline) {
    int64_t gone_since = 0, start = tr__now_ns();
    for (;;) {
        ncclResult_t st = ncclSuccess;
        char why[300] = "";
        pthread_mutex_lock(&s->mu);
        int aborted = s->aborted;
        if (!aborted) {
            ncclResult_t r = ncclCommGetAsyncError(s->comm[i], &st);
            if (r != ncclSuccess) st = r;
            if (st != ncclSuccess && st != ncclInProgress)
                snprintf(why, sizeof why, "%s", last_error(s, i));
        }
        pthread_mutex_unlock(&s->mu);
        if (st == ncclSuccess && !aborted) return 0;
        if (st != ncclSuccess && st != ncclInProgress)
            return fail(g, s, code_of(st), "NCCL: %s (%s)", ncclGetErrorString(st), why);
        int rc = check_stop(g, s, deadline, &gone_since); /* (says so if aborted) */
        if (rc) return rc;
        if (tr__now_ns() - start < 1000000)
            sched_yield();
        else
            nap(100000); /* an init takes seconds: do not take a core for it */
    }
}

static int cuda_fail(tr_group *g, nstate *s, cudaError_t ce, const char *what) {
    return fail(g, s, TR_EINTERNAL, "%s: %s", what, cudaGetErrorString(ce));
}

/* ---------------------------------------------------------------------- set-up */

/* Rank 0's id, and how many devices each process drives (all must agree). */
typedef struct id_msg {
    ncclUniqueId id;
    int32_t ndev;
} id_msg;

static int get_id(tr_group *g, int ndev, ncclUniqueId *out, int64_t deadline) {
    char key[256];
    id_msg m;
    memset(&m, 0, sizeof m);
    snprintf(key, sizeof key, "%s%s/%s", TR__COLL_KV_PREFIX, g->name, ID_KEY);
    if (g->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&m.id);
        if (r != ncclSuccess)
            return tr__err(TR_EINTERNAL, "group '%s': ncclGetUniqueId: %s", g->name,
                           ncclGetErrorString(r));
        m.ndev = ndev;
        *out = m.id;
        return tr__kv_client_put(g->node, key, &m, sizeof m);
    }
    for (;;) {
        int left = tr__ms_left(deadline);
        void *v = NULL;
        size_t n = 0;
        int rc = tr__kv_client_wait(g->node, key, left < 0 || left > 50 ? 50 : left, &v, &n);
        if (rc == 0) {
            if (n == sizeof m) memcpy(&m, v, n);
            free(v);
            if (n != sizeof m)
                return tr__err(TR_EPROTO, "group '%s': NCCL id of %zu bytes", g->name, n);
            if (m.ndev != ndev)
                return tr__err(TR_EINVAL,
                               "group '%s': rank 0 drives %d GPUs, rank %d drives %d: every "
                               "process must drive as many",
                               g->name, (int)m.ndev, g->rank, ndev);
            *out = m.id;
            return 0;
        }
        if (rc != TR_ENOTFOUND) return rc;
        if (dead_peer(g) == 0)
            return tr__err(TR_EPEER_DIED, "group '%s': rank 0 left before publishing its NCCL id",
                           g->name);
        if (tr__now_ns() >= deadline)
            return tr__err(TR_ETIMEDOUT, "group '%s': no NCCL id from rank 0 in time", g->name);
    }
}

static void fini(tr_group *g);

/* devs[0..ndev): the devices this process drives; none (ndev 0): its current one. */
static int init_devs(tr_group *g, const int *devs, int ndev, int64_t deadline) {
    nstate *s = calloc(1, sizeof *s);
    if (!s) return tr__err(TR_ENOMEM, "nccl group");
    g->impl = s;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->ndev = ndev ? ndev : 1;
    int prev = 0, count = 0;
    cudaError_t ce = cudaGetDeviceCount(&count);
    if (ce == cudaSuccess && count > 0) ce = cudaGetDevice(&prev);
    if (ce != cudaSuccess || count == 0)
        return tr__err(TR_ERESOURCES, "group '%s': the nccl backend needs a CUDA device: %s",
                       g->name, ce != cudaSuccess ? cudaGetErrorString(ce) : "none visible");
    for (int i = 0; i < s->ndev; i++) {
        s->dev[i] = ndev ? devs[i] : prev;
        if (s->dev[i] < 0 || s->dev[i] >= count)
            return tr__err(TR_EINVAL, "group '%s': device %d (this process sees %d)", g->name,
                           s->dev[i], count);
    }
    ncclUniqueId id;
    int rc = get_id(g, s->ndev, &id, deadline);
    if (rc) return rc;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    cfg.commName = g->name;
    ncclResult_t r = ncclSuccess;
    if (s->ndev > 1) ncclGroupStart();
    for (int i = 0; i < s->ndev && (r == ncclSuccess || r == ncclInProgress); i++) {
        cudaSetDevice(s->dev[i]);
        r = ncclCommInitRankConfig(&s->comm[i], g->world * s->ndev, id, g->rank * s->ndev + i,
                                   &cfg);
    }
    if (s->ndev > 1) {
        ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess || r == ncclInProgress) r = e;
    }
    cudaSetDevice(prev);
    if (r != ncclSuccess && r != ncclInProgress)
        return fail(g, s, code_of(r), "ncclCommInitRankConfig: %s (%s)", ncclGetErrorString(r),
                    last_error(s, 0));
    for (int i = 0; i < s->ndev && !rc; i++)
        rc = settle(g, s, i, deadline);
    if (rc) return rc;
    for (int i = 0; i < s->ndev && !rc; i++) {
        cudaSetDevice(s->dev[i]);
        /* a blocking stream: ops wait for what the caller put on the default stream */
        if ((ce = cudaStreamCreate(&s->own[i])) ||
            (ce = cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming)) ||
            (ce = cudaMalloc(&s->scratch[i], 64)))
            rc = cuda_fail(g, s, ce, "setting up the group's stream");
    }
    for (int i = 0; i < RING && !rc; i++)
        if ((ce = cudaEventCreateWithFlags(&s->ring[i].ev, cudaEventDisableTiming)))
            rc = cuda_fail(g, s, ce, "async events");
    if (!rc && (ce = cudaMallocHost((void **)&s->hdr, HDRS * 2 * sizeof(uint64_t))))
        rc = cuda_fail(g, s, ce, "pinned headers");
    cudaSetDevice(prev);
    return rc;
}

static int init(tr_group *g, int64_t deadline) {
    return init_devs(g, NULL, 0, deadline);
}

static void *watchdog(void *arg);

static void stop_watchdog(nstate *s) {
    if (!s->dog_started) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->dog, NULL);
    s->dog_started = 0;
}

/* Leaves cleanly when it can: the group's work finishes (bounded), then NCCL's finalize
 * (bounded), else an abort. */
static void fini(tr_group *g) {
    nstate *s = S(g);
    if (!s) return;
    stop_watchdog(s);
    int64_t deadline = tr__deadline(5000); /* or the latest async op's, if later */
    for (unsigned k = s->head; k != s->tail; k++)
        if (s->ring[k % RING].deadline > deadline) deadline = s->ring[k % RING].deadline;
    int ok = !s->aborted;
    for (int i = 0; i < s->ndev && ok; i++)
        if (s->own[i] && cudaEventRecord(s->done[i], s->own[i]) == cudaSuccess)
            ok = wait_events(g, s, &s->done[i], 1, deadline) == 0;
    if (ok && s->tail != s->head)
        ok = wait_events(g, s, &s->ring[(s->tail - 1) % RING].ev, 1, deadline) == 0;
    for (int i = 0; i < s->ndev && ok; i++) {
        ncclResult_t r = s->comm[i] ? ncclCommFinalize(s->comm[i]) : ncclSuccess;
        ok = (r == ncclSuccess || r == ncclInProgress) &&
             (!s->comm[i] || settle(g, s, i, deadline) == 0);
    }
    if (ok) {
        for (int i = 0; i < s->ndev; i++)
            if (s->comm[i]) ncclCommDestroy(s->comm[i]);
    } else {
        pthread_mutex_lock(&s->mu);
        abort_locked(g, s);
        pthread_mutex_unlock(&s->mu);
    }
    for (int i = 0; i < s->ndev; i++) {
        if (s->own[i]) cudaStreamDestroy(s->own[i]);
        if (s->done[i]) cudaEventDestroy(s->done[i]);
        if (s->scratch[i]) cudaFree(s->scratch[i]);
    }
    for (int i = 0; i < RING; i++)
        if (s->ring[i].ev) cudaEventDestroy(s->ring[i].ev);
    if (s->hdr) cudaFreeHost(s->hdr);
    if (s->tmp) cudaFree(s->tmp);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    g->impl = NULL;
}

/* ---------------------------------------------------------------------- ops */

/* Every rank posts its op and checks, once all have, that they agree: TR_EINVAL naming the
 * difference before any data moves (the group stays usable). */
static int agree(tr_group *g, uint32_t kind, tr_dtype dtype, tr_redop op, int root, size_t count,
                 int64_t deadline) {
    if (!g->checks) return 0;
    tr__coll_publish(g, kind, dtype, op, root, count);
    uint32_t s = tr__coll_my_step(g);
    tr__coll_post(g);
    int rc = tr__coll_wait_all(g, s + 1, deadline);
    return rc ? rc : tr__coll_check_agree(g);
}

typedef struct nop {
    int kind;
    const void *const *send;
    void *const *recv;
    size_t count;
    tr_dtype dtype;
    tr_redop op;
    int root;         /* a communicator rank, or the peer of a send/recv */
    const int *peers; /* a send to several peers at once (one NCCL group): n_peers > 0 */
    int n_peers;
} nop;

/* avg.cu: TR_AVG of signed integers is NCCL's sum, then this divides (0 or a cudaError_t) */
int tr__nccl_avg_divide(void *p, size_t n, int dtype, int by, cudaStream_t st);

static int signed_avg(tr_redop op, tr_dtype dt) {
    return op == TR_AVG && (dt == TR_INT8 || dt == TR_INT32 || dt == TR_INT64);
}

static ncclResult_t enqueue_one(nstate *s, int i, const nop *o, cudaStream_t st) {
    ncclComm_t c = s->comm[i];
    ncclDataType_t t = dtypes[o->dtype];
    ncclRedOp_t op = signed_avg(o->op, o->dtype) ? ncclSum : redops[o->op];
    const void *in = o->send ? o->send[i] : NULL;
    void *out = o->recv ? o->recv[i] : NULL;
    switch (o->kind) {
    case TR__COLL_BARRIER: /* the scratch's last word: p2p headers use its first 32 bytes */
        return ncclAllReduce((char *)s->scratch[i] + 48, (char *)s->scratch[i] + 48, 1, ncclInt32,
                             ncclSum, c, st);
    case TR__COLL_ALLREDUCE:
        return ncclAllReduce(in, out, o->count, t, op, c, st);
    case TR__COLL_BROADCAST:
        return ncclBroadcast(out, out, o->count, t, o->root, c, st);
    case TR__COLL_REDUCE:
        return ncclReduce(in, out, o->count, t, op, o->root, c, st);
    case TR__COLL_ALLGATHER:
        return ncclAllGather(in, out, o->count, t, c, st);
    case TR__COLL_GATHER:
        return ncclGather(in, out, o->count, t, o->root, c, st);
    case TR__COLL_SCATTER:
        return ncclScatter(in, out, o->count, t, o->root, c, st);
    case TR__COLL_REDUCE_SCATTER:
        return ncclReduceScatter(in, out, o->count, t, op, c, st);
    case TR__COLL_ALLTOALL:
        return ncclAlltoAll(in, out, o->count, t, c, st);
    case TR__COLL_SEND:
        if (!o->n_peers) return ncclSend(in, o->count, t, o->root, c, st);
        for (int k = 0; k < o->n_peers; k++) { /* (run() wraps them in one NCCL group) */
            ncclResult_t r = ncclSend(in, o->count, t, o->peers[k], c, st);
            if (r != ncclSuccess) return r;
        }
        return ncclSuccess;
    case TR__COLL_RECV:
        return ncclRecv(out, o->count, t, o->root, c, st);
    default:
        return ncclInvalidArgument;
    }
}

static void start_watchdog(tr_group *g, nstate *s);

/* Enqueues o on every device (an NCCL group when several), records each device's event,
 * then waits for them, or (the async form) hands them to the watchdog. */
static int run(tr_group *g, const nop *o, int64_t deadline) {
    nstate *s = S(g);
    pthread_mutex_lock(&s->mu);
    if (s->aborted) {
        int rc = s->async_rc ? s->async_rc : TR_ECLOSED;
        pthread_mutex_unlock(&s->mu);
        return tr__err(rc, "group '%s': the communicator was aborted: %s", g->name,
                       s->async_msg[0] ? s->async_msg : "an earlier op failed");
    }
    cudaStream_t user = s->user;
    if (user && s->tail - s->head == RING) {
        /* the ring is full: the oldest op must finish first */
        cudaEvent_t oldest = s->ring[s->head % RING].ev;
        pthread_mutex_unlock(&s->mu);
        int rc = wait_events(g, s, &oldest, 1, deadline);
        if (rc) return rc;
        pthread_mutex_lock(&s->mu);
        if (s->aborted) {
            pthread_mutex_unlock(&s->mu);
            return tr__err(s->async_rc ? s->async_rc : TR_ECLOSED, "group '%s': %s", g->name,
                           s->async_msg[0] ? s->async_msg : "the communicator was aborted");
        }
        if (s->tail - s->head == RING) s->head++;
    }
    int prev = 0;
    cudaGetDevice(&prev);
    ncclResult_t r = ncclSuccess;
    int grouped = s->ndev > 1 || o->n_peers > 1;
    if (grouped) ncclGroupStart();
    for (int i = 0; i < s->ndev && r == ncclSuccess; i++)
        r = enqueue_one(s, i, o, user ? user : s->own[i]);
    if (grouped) {
        ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess) r = e;
    }
    pthread_mutex_unlock(&s->mu);
    if (r != ncclSuccess && r != ncclInProgress) {
        cudaSetDevice(prev);
        return fail(g, s, code_of(r), "NCCL %s (%s)", ncclGetErrorString(r), last_error(s, 0));
    }
    int rc = 0;
    for (int i = 0; i < s->ndev && !rc; i++)
        rc = settle(g, s, i, deadline);
    if (rc) {
        cudaSetDevice(prev);
        return rc;
    }
    cudaError_t ce = cudaSuccess;
    int divide = signed_avg(o->op, o->dtype) &&
                 (o->kind == TR__COLL_ALLREDUCE || o->kind == TR__COLL_REDUCE ||
                  o->kind == TR__COLL_REDUCE_SCATTER);
    for (int i = 0; divide && i < s->ndev && ce == cudaSuccess; i++) {
        if (o->kind == TR__COLL_REDUCE && o->root != g->rank * s->ndev + i) continue;
        if (s->ndev > 1) cudaSetDevice(s->dev[i]);
        ce = (cudaError_t)tr__nccl_avg_divide(o->recv[i], o->count, (int)o->dtype,
                                              g->world * s->ndev, user ? user : s->own[i]);
    }
    if (ce != cudaSuccess) {
        cudaSetDevice(prev);
        return cuda_fail(g, s, ce, "the average's division");
    }
    if (user) {
        pthread_mutex_lock(&s->mu);
        pending *p = &s->ring[s->tail % RING];
        ce = cudaEventRecord(p->ev, user);
        if (ce == cudaSuccess) {
            p->deadline = deadline;
            s->tail++;
            pthread_cond_signal(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
        cudaSetDevice(prev);
        if (ce != cudaSuccess) return cuda_fail(g, s, ce, "recording the op's event");
        start_watchdog(g, s);
        return 0;
    }
    for (int i = 0; i < s->ndev && ce == cudaSuccess; i++) {
        if (s->ndev > 1) cudaSetDevice(s->dev[i]);
        ce = cudaEventRecord(s->done[i], s->own[i]);
    }
    cudaSetDevice(prev);
    if (ce != cudaSuccess) return cuda_fail(g, s, ce, "recording the op's event");
    return wait_events(g, s, s->done, s->ndev, deadline);
}

static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    return an && bn && (const char *)a < (const char *)b + bn &&
           (const char *)b < (const char *)a + an;
}

/* NCCL's in-place layouts are its own (allgather: send at recv + rank * count; alltoall:
 * none); any other overlap of send and recv (troupe's in place is send == recv) goes
 * through a device copy of send, on the op's stream. */
static int unalias(tr_group *g, nstate *s, int kind, const void **send, const void *recv,
                   size_t count, tr_dtype dtype, int root) {
    size_t n = count * tr__dtype_size(dtype), W = (size_t)g->world;
    size_t in = 0, out = 0;
    int me_root = root == g->rank;
    switch (kind) {
    case TR__COLL_ALLGATHER:
        in = n, out = W * n;
        break;
    case TR__COLL_GATHER:
        in = n, out = me_root ? W * n : 0;
        break;
    case TR__COLL_SCATTER:
        in = me_root ? W * n : 0, out = n;
        break;
    case TR__COLL_REDUCE_SCATTER:
        in = W * n, out = n;
        break;
    case TR__COLL_ALLTOALL:
        in = out = W * n;
        break;
    default:
        return 0; /* allreduce, reduce, broadcast: NCCL takes send == recv */
    }
    if (!overlap(*send, in, recv, out)) return 0;
    cudaError_t ce = cudaSuccess;
    if (in > s->tmp_cap) {
        if (s->tmp) cudaFree(s->tmp);
        s->tmp = NULL;
        s->tmp_cap = 0;
        int prev = 0;
        cudaGetDevice(&prev);
        cudaSetDevice(s->dev[0]);
        ce = cudaMalloc(&s->tmp, in);
        cudaSetDevice(prev);
        if (ce) return cuda_fail(g, s, ce, "room for an in-place op");
        s->tmp_cap = in;
    }
    ce =
        cudaMemcpyAsync(s->tmp, *send, in, cudaMemcpyDeviceToDevice, s->user ? s->user : s->own[0]);
    if (ce != cudaSuccess) return cuda_fail(g, s, ce, "copying an in-place op's input");
    *send = s->tmp;
    return 0;
}

static int single(tr_group *g, int kind, const void *send, void *recv, size_t count, tr_dtype dtype,
                  tr_redop op, int root, int64_t deadline) {
    if (S(g)->ndev > 1)
        return tr__err(TR_EINVAL, "group '%s' drives %d GPUs: use the _multigpu ops", g->name,
                       S(g)->ndev);
    int rc = agree(g, (uint32_t)kind, dtype, op, root, count, deadline);
    if (!rc) rc = unalias(g, S(g), kind, &send, recv, count, dtype, root);
    if (rc) return rc;
    nop o = {kind, &send, &recv, count, dtype, op, root, NULL, 0};
    return run(g, &o, deadline);
}

static int n_barrier(tr_group *g, int64_t deadline) {
    return single(g, TR__COLL_BARRIER, NULL, NULL, 0, TR_UINT8, TR_SUM, -1, deadline);
}

static int n_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                       tr_redop op, int64_t deadline) {
    return single(g, TR__COLL_ALLREDUCE, send, recv, count, dtype, op, -1, deadline);
}

static int n_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                       int64_t deadline) {
    return single(g, TR__COLL_BROADCAST, buf, buf, count, dtype, TR_SUM, root, deadline);
}

static int n_data_op(tr_group *g, const tr__coll_args *a, int64_t deadline) {
    return single(g, a->kind, a->send, a->recv, a->count, a->dtype, a->op, a->root, deadline);
}

/* Point to point: with checks on, the sender first sends {count, dtype}; a receiver that
 * expected another takes the data into scratch memory and says so (TR_EINVAL, on the
 * receiver only, as gloo). */
static uint64_t *next_hdr(nstate *s) {
    return &s->hdr[2 * (s->hdr_next++ % HDRS)];
}

static int n_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                  int64_t deadline) {
    nstate *s = S(g);
    if (s->ndev > 1)
        return tr__err(TR_EINVAL, "group '%s' drives %d GPUs: send/recv are single-GPU", g->name,
                       s->ndev);
    if (g->checks) {
        uint64_t *h = next_hdr(s);
        h[0] = count;
        h[1] = (uint64_t)dtype;
        cudaStream_t st = s->user ? s->user : s->own[0];
        cudaError_t ce = cudaMemcpyAsync(s->scratch[0], h, 16, cudaMemcpyHostToDevice, st);
        if (ce != cudaSuccess) return cuda_fail(g, s, ce, "the send's header");
        const void *hb = s->scratch[0];
        nop o = {TR__COLL_SEND, &hb, NULL, 16, TR_UINT8, TR_SUM, dst, NULL, 0};
        int rc = run(g, &o, deadline);
        if (rc) return rc;
    }
    nop o = {TR__COLL_SEND, &buf, NULL, count, dtype, TR_SUM, dst, NULL, 0};
    return run(g, &o, deadline);
}

static int n_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int64_t deadline) {
    nstate *s = S(g);
    if (s->ndev > 1)
        return tr__err(TR_EINVAL, "group '%s' drives %d GPUs: send/recv are single-GPU", g->name,
                       s->ndev);
    if (g->checks) {
        void *hb = (char *)s->scratch[0] + 16;
        nop o = {TR__COLL_RECV, NULL, &hb, 16, TR_UINT8, TR_SUM, src, NULL, 0};
        cudaStream_t saved = s->user;
        s->user = NULL; /* the receiver must see the header: it waits */
        int rc = run(g, &o, deadline);
        s->user = saved;
        if (rc) return rc;
        uint64_t *h = next_hdr(s);
        cudaError_t ce = cudaMemcpyAsync(h, hb, 16, cudaMemcpyDeviceToHost, s->own[0]);
        if (ce == cudaSuccess) ce = cudaStreamSynchronize(s->own[0]);
        if (ce != cudaSuccess) return cuda_fail(g, s, ce, "the receive's header");
        if (h[0] != count || h[1] != (uint64_t)dtype) {
            size_t esz = h[1] <= TR_FLOAT64 ? tr__dtype_size((tr_dtype)h[1]) : 0;
            if (!esz || h[0] > (1ull << 40) / esz)
                return fail(g, s, TR_EPROTO, "a malformed header from rank %d", src);
            void *sink = NULL;
            int prev = 0;
            cudaGetDevice(&prev);
            cudaSetDevice(s->dev[0]);
            ce = cudaMalloc(&sink, h[0] ? h[0] * esz : 1);
            cudaSetDevice(prev);
            if (ce) return cuda_fail(g, s, ce, "room for a refused message");
            nop d = {TR__COLL_RECV, NULL, &sink, h[0], (tr_dtype)h[1], TR_SUM, src, NULL, 0};
            saved = s->user;
            s->user = NULL;
            rc = run(g, &d, deadline);
            s->user = saved;
            cudaFree(sink);
            if (rc) return rc;
            return tr__err(TR_EINVAL,
                           "group '%s': rank %d sent %llu elements of dtype %llu; rank %d "
                           "expected %zu of dtype %d",
                           g->name, src, (unsigned long long)h[0], (unsigned long long)h[1],
                           g->rank, count, (int)dtype);
        }
    }
    nop o = {TR__COLL_RECV, NULL, &buf, count, dtype, TR_SUM, src, NULL, 0};
    return run(g, &o, deadline);
}

int tr__nccl_send_many(tr_group *g, const void *buf, size_t bytes, const int *dst, int n,
                       int64_t deadline) {
    nstate *s = S(g);
    if (s->ndev > 1 || s->user || n < 1)
        return tr__err(TR_EINVAL, "group '%s': a send to many is single-GPU and waits", g->name);
    nop o = {TR__COLL_SEND, &buf, NULL, bytes, TR_UINT8, TR_SUM, dst[0], dst, n};
    return run(g, &o, deadline);
}

/* One op over this process's devices: send[i] and recv[i] on device i; root is a rank of
 * the communicator (process rank * ndev + device index), or -1. */
static int n_multi(tr_group *g, int kind, const void *const *send, void *const *recv, size_t count,
                   tr_dtype dtype, tr_redop op, int root, int64_t deadline) {
    nstate *s = S(g);
    int rc = agree(g, (uint32_t)kind, dtype, op, root, count, deadline);
    if (rc) return rc;
    if (s->user)
        return tr__err(TR_EINVAL, "group '%s': the async form is for single-GPU groups", g->name);
    nop o = {kind, send, recv, count, dtype, op, root, NULL, 0};
    return run(g, &o, deadline);
}

/* ---------------------------------------------------------------------- async */

static void *watchdog(void *arg) {
    tr_group *g = arg;
    nstate *s = S(g);
    int64_t gone_since = 0;
    cudaSetDevice(s->dev[0]); /* not device 0's context by default */
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (s->head == s->tail || s->aborted) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pending *p = &s->ring[s->head % RING];
        cudaError_t ce = cudaEventQuery(p->ev);
        if (ce == cudaSuccess) {
            s->head++;
            gone_since = 0;
            continue;
        }
        int code = 0;
        char msg[300] = "";
        if (ce != cudaErrorNotReady) {
            code = TR_EINTERNAL;
            snprintf(msg, sizeof msg, "CUDA: %s", cudaGetErrorString(ce));
        } else {
            ncclResult_t st = ncclSuccess;
            int64_t now = tr__now_ns();
            int peer = dead_peer(g);
            if (peer >= 0 && !gone_since) gone_since = now;
            if (ncclCommGetAsyncError(s->comm[0], &st) == ncclSuccess && st != ncclSuccess &&
                st != ncclInProgress) {
                code = code_of(st);
                snprintf(msg, sizeof msg, "NCCL: %s (%s)", ncclGetErrorString(st),
                         last_error(s, 0));
            } else if (peer >= 0 && now - gone_since >= GRACE_NS) {
                code = TR_EPEER_DIED;
                snprintf(msg, sizeof msg, "rank %d died, left or failed mid-op", peer);
            } else if (now >= p->deadline) {
                code = TR_ETIMEDOUT;
                snprintf(msg, sizeof msg, "an async op timed out");
            }
        }
        if (code) {
            s->async_rc = code;
            snprintf(s->async_msg, sizeof s->async_msg, "%s", msg);
            abort_locked(g, s);
            s->head = s->tail;
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        nap(NAP_NS);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void start_watchdog(tr_group *g, nstate *s) {
    if (s->dog_started) return;
    s->dog_started = pthread_create(&s->dog, NULL, watchdog, g) == 0;
}

/* The async form: ops enqueue on `stream` (a cudaStream_t; NULL: the group's own, and ops
 * wait) and return once enqueued; the watchdog aborts the communicator when one passes its
 * deadline, a peer dies or NCCL reports an error. */
static int n_set_stream(tr_group *g, void *stream) {
    nstate *s = S(g);
    if (s->ndev > 1 && stream)
        return tr__err(TR_EINVAL, "group '%s': the async form is for single-GPU groups", g->name);
    if (stream && !s->dog_started) {
        start_watchdog(g, s);
        if (!s->dog_started)
            return tr__err(TR_ENOMEM, "group '%s': cannot start the async form's watchdog",
                           g->name);
    }
    pthread_mutex_lock(&s->mu);
    cudaStream_t old = s->user ? s->user : s->own[0];
    cudaStream_t to = stream ? (cudaStream_t)stream : s->own[0];
    cudaError_t ce = cudaSuccess;
    if (old != to && !s->aborted) { /* what is enqueued on the old stream comes first */
        ce = cudaEventRecord(s->done[0], old);
        if (ce == cudaSuccess) ce = cudaStreamWaitEvent(to, s->done[0], 0);
    }
    if (ce == cudaSuccess) s->user = (cudaStream_t)stream;
    pthread_mutex_unlock(&s->mu);
    if (ce == cudaSuccess) return 0;
    cudaGetLastError();
    return tr__err(TR_EINVAL, "group '%s': that stream: %s", g->name, cudaGetErrorString(ce));
}

/* Until every op enqueued so far has finished: 0, or the first failure. */
static int n_synchronize(tr_group *g, int64_t deadline) {
    nstate *s = S(g);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int aborted = s->aborted, code = s->async_rc, idle = s->head == s->tail;
        cudaEvent_t last = idle ? NULL : s->ring[(s->tail - 1) % RING].ev;
        pthread_mutex_unlock(&s->mu);
        if (aborted)
            return tr__err(code ? code : TR_ECLOSED, "group '%s': %s", g->name,
                           s->async_msg[0] ? s->async_msg : "the communicator was aborted");
        if (idle) return 0;
        cudaError_t ce = cudaEventQuery(last);
        if (ce == cudaSuccess) {
            /* in order on one stream; the watchdog retires them */
            pthread_mutex_lock(&s->mu);
            if (!s->aborted) s->head = s->tail;
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        if (ce != cudaErrorNotReady) return cuda_fail(g, s, ce, "synchronize");
        if (tr__now_ns() >= deadline) /* the ops' own deadlines are the watchdog's */
            return tr__err(TR_ETIMEDOUT, "group '%s': the enqueued ops have not finished yet",
                           g->name);
        nap(NAP_NS);
    }
}

static int n_devices(const tr_group *g) {
    return ((const nstate *)g->impl)->ndev;
}

const tr__coll_backend_v2 tr__coll_nccl_v2 = {
    .version = 2,
    .name = "nccl",
    .init = init,
    .fini = fini,
    .barrier = n_barrier,
    .allreduce = n_allreduce,
    .broadcast = n_broadcast,
    .data_op = n_data_op,
    .send = n_send,
    .recv = n_recv,
    .init_devs = init_devs,
    .devices = n_devices,
    .multigpu = n_multi,
    .set_stream = n_set_stream,
    .synchronize = n_synchronize,
};
