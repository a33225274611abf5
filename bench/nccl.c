/* bench/nccl.c - the nccl backend beside raw NCCL, in one run (--config=cuda).
 *
 * One rank per visible GPU (threads of this process, each with its device; --world N
 * caps it). With one GPU, also two ranks on it as two NCCL hosts (two actors, each with
 * its own NCCL_HOSTID, so NCCL takes them as two machines and joins them over its socket
 * transport; names end in _2hosts, sizes up to 64 MiB; --no-hosts skips it, --only-hosts
 * runs it alone; --no-checks turns the agreement check off, names ending in _nochecks). For
 * allreduce, allgather and broadcast at 4 B .. 256 MiB: troupe's op (the agreement check,
 * the enqueue, the polled wait with its deadline) and the raw NCCL call on a communicator
 * of its own followed by cudaStreamSynchronize, interleaved round by round; the median
 * over rounds of each round's mean time per op. Bus bandwidth as nccl-tests computes it
 * (allreduce: algbw * 2(n-1)/n; allgather: * (n-1)/n, its size the whole output;
 * broadcast: * 1), so with one GPU allreduce and allgather have no bus traffic and only
 * the times mean anything. Then device buffers through shm: two ranks on GPU 0, 1 MiB and
 * 64 MiB allreduces of device memory (staged through pinned host memory) beside the same
 * on host memory: the staging's cost.
 *
 * Without the CUDA build, or without a GPU, it says so and measures nothing.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"

#ifndef TR_WITH_CUDA
int main(int argc, char **argv) {
    bench_init(argc, argv);
    fprintf(stderr, "bench/nccl: built without CUDA: build with --config=cuda\n");
    return 0;
}
#else
#include <cuda_runtime.h>
#include <nccl.h>

#define ROUNDS 7
#define MAX_W 8

enum { ALLREDUCE, ALLGATHER, BROADCAST, NOPS };
static const char *op_names[NOPS] = {"allreduce", "allgather", "broadcast"};

static const size_t sizes[] = {4, 4096, 65536, 1 << 20, 16 << 20, 64 << 20, 256 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static tr_runtime *rt;
static int W;
static int checks = 1; /* --no-checks: tr_group_set_checks(g, 0), as MPI and NCCL */
static ncclUniqueId raw_id;
static pthread_barrier_t bar;
/* per (op, size, round): mean us per op, troupe and raw; written by rank 0 */
static double t_troupe[NOPS][NSIZES][ROUNDS], t_raw[NOPS][NSIZES][ROUNDS];

#define CUDA(x)                                                                                    \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define NCCL(x)                                                                                    \
    do {                                                                                           \
        ncclResult_t r_ = (x);                                                                     \
        if (r_ != ncclSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #x, ncclGetErrorString(r_));                               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ops per timed round; fewer for two hosts, whose ops go through sockets */
static int iters_for(size_t bytes, int hosts) {
    if (hosts) return bytes <= 65536 ? 100 : bytes <= (1 << 20) ? 10 : bytes <= (16 << 20) ? 3 : 2;
    return bytes <= 65536 ? 1000 : bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 40 : 10;
}

static void troupe_op(tr_group *g, int op, void *s, void *r, size_t count) {
    if (op == ALLREDUCE)
        CHECK(tr_allreduce(g, s, r, count, TR_FLOAT32, TR_SUM, 60000));
    else if (op == ALLGATHER)
        CHECK(tr_allgather(g, s, r, count, TR_FLOAT32, 60000));
    else
        CHECK(tr_broadcast(g, r, count, TR_FLOAT32, 0, 60000));
}

static void raw_op(ncclComm_t c, cudaStream_t st, int op, void *s, void *r, size_t count) {
    if (op == ALLREDUCE)
        NCCL(ncclAllReduce(s, r, count, ncclFloat32, ncclSum, c, st));
    else if (op == ALLGATHER)
        NCCL(ncclAllGather(s, r, count, ncclFloat32, c, st));
    else
        NCCL(ncclBroadcast(r, r, count, ncclFloat32, 0, c, st));
    CUDA(cudaStreamSynchronize(st));
}

/* One rank's run: troupe's op and the raw one, interleaved round by round. ranks that are
 * threads of this process meet at a pthread barrier; ranks that are actors (two NCCL hosts
 * on one GPU) at a one-element raw allreduce. Rank 0 writes the times. */
typedef struct {
    tr_runtime *rt;
    int rank, world, threads, checks;
    const ncclUniqueId *id;
    const char *group;
    size_t max_size;
    ncclComm_t raw;
    cudaStream_t st;
    float *one;
    double (*t_tr)[NSIZES][ROUNDS], (*t_rw)[NSIZES][ROUNDS];
} rank_run;

static void rank_sync(rank_run *k) {
    if (k->threads) {
        pthread_barrier_wait(&bar);
        return;
    }
    NCCL(ncclAllReduce(k->one, k->one, 1, ncclFloat32, ncclSum, k->raw, k->st));
    CUDA(cudaStreamSynchronize(k->st));
}

static void run_rank(rank_run *k) {
    tr_group *g;
    CHECK(tr_group_join(k->rt, k->world, k->rank, "nccl", k->group, 120000, &g));
    CHECK(tr_group_set_checks(g, k->checks));
    NCCL(ncclCommInitRank(&k->raw, k->world, *k->id, k->rank));
    CUDA(cudaStreamCreateWithFlags(&k->st, cudaStreamNonBlocking));
    CUDA(cudaMalloc((void **)&k->one, sizeof(float)));
    void *s, *r;
    CUDA(cudaMalloc(&s, k->max_size));
    CUDA(cudaMalloc(&r, k->max_size * (size_t)k->world));
    CUDA(cudaMemset(s, 0, k->max_size));
    CUDA(cudaMemset(r, 0, k->max_size * (size_t)k->world));
    for (int op = 0; op < NOPS; op++)
        for (size_t i = 0; i < NSIZES && sizes[i] <= k->max_size; i++) {
            /* allgather's size is its whole output (nccl-tests): count per rank */
            size_t count = sizes[i] / 4 / (op == ALLGATHER ? (size_t)k->world : 1);
            if (!count) count = 1;
            int n = iters_for(sizes[i], !k->threads);
            for (int w = 0; w < (k->threads ? 5 : 2); w++) {
                troupe_op(g, op, s, r, count);
                raw_op(k->raw, k->st, op, s, r, count);
            }
            for (int round = 0; round < ROUNDS; round++) {
                rank_sync(k);
                double t0 = bench_now_us();
                for (int j = 0; j < n; j++)
                    troupe_op(g, op, s, r, count);
                double t1 = bench_now_us();
                rank_sync(k);
                double t2 = bench_now_us();
                for (int j = 0; j < n; j++)
                    raw_op(k->raw, k->st, op, s, r, count);
                double t3 = bench_now_us();
                if (k->rank == 0) {
                    k->t_tr[op][i][round] = (t1 - t0) / n;
                    k->t_rw[op][i][round] = (t3 - t2) / n;
                }
            }
            if (k->rank == 0 && !k->threads) /* (a worker's stderr is the node's) */
                fprintf(stderr, "bench/nccl: two hosts: %s of %zu B: %.1f us (raw %.1f us)\n",
                        op_names[op], sizes[i], k->t_tr[op][i][0], k->t_rw[op][i][0]);
        }
    rank_sync(k);
    ncclCommDestroy(k->raw);
    tr_group_destroy(g);
    cudaFree(s);
    cudaFree(r);
    cudaFree(k->one);
    cudaStreamDestroy(k->st);
}

static void *rank_main(void *arg) {
    int rank = (int)(intptr_t)arg;
    CUDA(cudaSetDevice(rank));
    rank_run k = {.rt = rt,
                  .rank = rank,
                  .world = W,
                  .threads = 1,
                  .checks = checks,
                  .id = &raw_id,
                  .group = "bench_nccl",
                  .max_size = sizes[NSIZES - 1],
                  .t_tr = t_troupe,
                  .t_rw = t_raw};
    run_rank(&k);
    return NULL;
}

/* --- two ranks on one GPU as two NCCL hosts: each an actor (a process of its own, half
 * the GPU) with its own NCCL_HOSTID, so NCCL accepts them and joins them over its network
 * transport (sockets), as it would two machines. Up to 64 MiB. */
#define HOSTS_MAX_SIZE ((size_t)64 << 20)
typedef struct {
    int rank, checks;
    ncclUniqueId id;
} hosts_arg;

static int m_hosts_rank(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    if (len != sizeof(hosts_arg)) return tr_ctx_error(ctx, "hosts_rank: wants a hosts_arg");
    hosts_arg a;
    memcpy(&a, args, sizeof a);
    char host[64];
    snprintf(host, sizeof host, "troupe-bench-host-%d", a.rank);
    setenv("NCCL_HOSTID", host, 1); /* before this process's first NCCL call */
    CUDA(cudaSetDevice(0));
    static double tt[NOPS][NSIZES][ROUNDS], tw[NOPS][NSIZES][ROUNDS];
    rank_run k = {.rt = tr_ctx_runtime(ctx),
                  .rank = a.rank,
                  .world = 2,
                  .checks = a.checks,
                  .id = &a.id,
                  .group = "bench_nccl_hosts",
                  .max_size = HOSTS_MAX_SIZE,
                  .t_tr = tt,
                  .t_rw = tw};
    run_rank(&k);
    double out[2][NOPS][NSIZES][ROUNDS];
    memcpy(out[0], tt, sizeof tt);
    memcpy(out[1], tw, sizeof tw);
    return tr_ctx_reply(ctx, out, sizeof out);
}

static const tr_method_def hosts_methods[] = {{"run", m_hosts_rank}};

/* Runs the two actors; rank 0's times land in t_troupe and t_raw. 0: done. */
static int run_hosts(void) {
    hosts_arg a[2];
    NCCL(ncclGetUniqueId(&a[0].id));
    tr_actor_id as[2];
    tr_ref calls[2];
    for (int r = 0; r < 2; r++) {
        tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
        o.num_gpus = 0.5;
        CHECK(tr_actor_create(rt, "NcclHost", &o, NULL, 0, &as[r]));
        a[r].rank = r;
        a[r].checks = checks;
        a[r].id = a[0].id;
        CHECK(tr_call(rt, as[r], "run", &a[r], sizeof a[r], &calls[r]));
    }
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        const void *d;
        size_t n;
        int rc = tr_get(rt, calls[r], 600000, &d, &n);
        if (rc || n != 2 * sizeof t_troupe) {
            fprintf(stderr, "bench/nccl: two hosts, rank %d: %s\n", r,
                    rc ? tr_last_error() : "a reply of the wrong size");
            bad = 1;
        } else if (r == 0) {
            memcpy(t_troupe, d, sizeof t_troupe);
            memcpy(t_raw, (const char *)d + sizeof t_troupe, sizeof t_raw);
        }
        tr_ref_release(rt, calls[r]);
        tr_actor_kill(rt, as[r], 1);
    }
    return bad;
}

static const char *size_name(size_t b, char buf[32]) {
    if (b >= (1 << 20))
        snprintf(buf, 32, "%zuMiB", b >> 20);
    else if (b >= 1024)
        snprintf(buf, 32, "%zuKiB", b >> 10);
    else
        snprintf(buf, 32, "%zuB", b);
    return buf;
}

static double bus_factor(int op) {
    return op == ALLREDUCE ? 2.0 * (W - 1) / W : op == ALLGATHER ? (double)(W - 1) / W : 1.0;
}

/* --- device buffers through shm: two ranks on GPU 0 */
static double staged_us[2][2][ROUNDS]; /* [size 1 MiB, 64 MiB][host, device][round] */

static void *staged_main(void *arg) {
    int rank = (int)(intptr_t)arg;
    CUDA(cudaSetDevice(0));
    tr_group *g;
    CHECK(tr_group_join(rt, 2, rank, "shm", "bench_staged", 60000, &g));
    size_t big = 64 << 20;
    void *dev, *host = malloc(big);
    CUDA(cudaMalloc(&dev, big));
    CUDA(cudaMemset(dev, 0, big));
    memset(host, 0, big);
    for (int k = 0; k < 2; k++) {
        size_t count = (k ? big : (1 << 20)) / 4;
        int n = k ? 5 : 50;
        for (int round = 0; round < ROUNDS; round++)
            for (int on_dev = 0; on_dev < 2; on_dev++) {
                void *b = on_dev ? dev : host;
                CHECK(tr_allreduce(g, b, b, count, TR_FLOAT32, TR_SUM, 60000));
                pthread_barrier_wait(&bar);
                double t0 = bench_now_us();
                for (int i = 0; i < n; i++)
                    CHECK(tr_allreduce(g, b, b, count, TR_FLOAT32, TR_SUM, 60000));
                if (rank == 0) staged_us[k][on_dev][round] = (bench_now_us() - t0) / n;
            }
    }
    pthread_barrier_wait(&bar);
    tr_group_destroy(g);
    cudaFree(dev);
    free(host);
    return NULL;
}

static void report_rounds(const char *name, double *v, const char *unit) {
    double tmp[ROUNDS];
    memcpy(tmp, v, sizeof tmp);
    double med = bench_percentile(tmp, ROUNDS, 50);
    bench_report_spread(name, med, tmp[0], tmp[ROUNDS - 1], ROUNDS, unit);
}

/* The times of t_troupe and t_raw for a world of w ranks (sizes up to max), each name
 * ending in suffix. */
static void report_ops(int w, size_t max, const char *suffix) {
    char name[128], sz[32];
    W = w; /* bus_factor's */
    for (int op = 0; op < NOPS; op++)
        for (size_t k = 0; k < NSIZES && sizes[k] <= max; k++) {
            size_name(sizes[k], sz);
            double tr[ROUNDS], rw[ROUNDS], ratio[ROUNDS];
            for (int i = 0; i < ROUNDS; i++) {
                tr[i] = t_troupe[op][k][i];
                rw[i] = t_raw[op][k][i];
                ratio[i] = rw[i] / tr[i]; /* troupe's bandwidth / raw's, round by round */
            }
            if (sizes[k] <= 65536) {
                snprintf(name, sizeof name, "nccl_%s_us_p50_%s_troupe%s", op_names[op], sz, suffix);
                report_rounds(name, tr, "us");
                snprintf(name, sizeof name, "nccl_%s_us_p50_%s_raw%s", op_names[op], sz, suffix);
                report_rounds(name, rw, "us");
                double over[ROUNDS];
                for (int i = 0; i < ROUNDS; i++)
                    over[i] = tr[i] - rw[i];
                snprintf(name, sizeof name, "nccl_%s_overhead_us_%s%s", op_names[op], sz, suffix);
                report_rounds(name, over, "us");
            } else {
                double bw_t[ROUNDS], bw_r[ROUNDS];
                for (int i = 0; i < ROUNDS; i++) {
                    bw_t[i] = (double)sizes[k] / tr[i] / 1e3 *
                              (W > 1 || op == BROADCAST ? bus_factor(op) : 1.0);
                    bw_r[i] = (double)sizes[k] / rw[i] / 1e3 *
                              (W > 1 || op == BROADCAST ? bus_factor(op) : 1.0);
                }
                const char *kind = W > 1 || op == BROADCAST ? "busbw" : "algbw";
                snprintf(name, sizeof name, "nccl_%s_%s_gbps_%s_troupe%s", op_names[op], kind, sz,
                         suffix);
                report_rounds(name, bw_t, "GB/s");
                snprintf(name, sizeof name, "nccl_%s_%s_gbps_%s_raw%s", op_names[op], kind, sz,
                         suffix);
                report_rounds(name, bw_r, "GB/s");
                snprintf(name, sizeof name, "nccl_%s_troupe_over_raw_%s%s", op_names[op], sz,
                         suffix);
                report_rounds(name, ratio, "x");
            }
        }
}

int main(int argc, char **argv) {
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "NcclHost";
    cls.methods = hosts_methods;
    cls.n_methods = 1;
    CHECK(tr_config_add_class(cfg, &cls));
    tr_worker_main(cfg); /* in an actor's process: runs it, never returns */
    bench_init(argc, argv);
    int max_w = MAX_W, hosts = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--world") == 0 && i + 1 < argc) max_w = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--no-hosts") == 0) hosts = 0;
        if (strcmp(argv[i], "--only-hosts") == 0) hosts = 2;
        if (strcmp(argv[i], "--no-checks") == 0) checks = 0;
    }
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        fprintf(stderr, "bench/nccl: no CUDA device here (%s): nothing measured\n",
                cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    if (max_w > MAX_W) max_w = MAX_W;
    W = ngpu < max_w ? ngpu : max_w;
    if (W < 1) W = 1;
    CHECK(tr_init(cfg, &rt));
    int nv = 0, world = W;
    ncclGetVersion(&nv);
    fprintf(stderr, "bench/nccl: %d rank(s), one per GPU; NCCL %d\n", W, nv);
    pthread_t th[MAX_W];
    if (hosts < 2) {
        NCCL(ncclGetUniqueId(&raw_id));
        pthread_barrier_init(&bar, NULL, (unsigned)W);
        for (int r = 0; r < W; r++)
            pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
        for (int r = 0; r < W; r++)
            pthread_join(th[r], NULL);
        pthread_barrier_destroy(&bar);
        report_ops(world, sizes[NSIZES - 1], checks ? "" : "_nochecks");
    }
    /* one GPU: two ranks as two NCCL hosts (--no-hosts: not) */
    if (hosts && ngpu == 1) {
        fprintf(stderr, "bench/nccl: 2 ranks on GPU 0 as two NCCL hosts (NCCL_HOSTID), over "
                        "NCCL's socket transport\n");
        memset(t_troupe, 0, sizeof t_troupe);
        memset(t_raw, 0, sizeof t_raw);
        if (run_hosts() == 0)
            report_ops(2, HOSTS_MAX_SIZE, checks ? "_2hosts" : "_2hosts_nochecks");
    }
    if (hosts == 2) {
        tr_shutdown(rt);
        tr_config_destroy(cfg);
        return 0;
    }
    char name[96];
    pthread_barrier_init(&bar, NULL, 2);
    for (int r = 0; r < 2; r++)
        pthread_create(&th[r], NULL, staged_main, (void *)(intptr_t)r);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int k = 0; k < 2; k++) {
        const char *sz2 = k ? "64MiB" : "1MiB";
        double ratio[ROUNDS];
        for (int i = 0; i < ROUNDS; i++)
            ratio[i] = staged_us[k][1][i] / staged_us[k][0][i];
        snprintf(name, sizeof name, "shm_allreduce_us_%s_host", sz2);
        report_rounds(name, staged_us[k][0], "us");
        snprintf(name, sizeof name, "shm_allreduce_us_%s_device_staged", sz2);
        report_rounds(name, staged_us[k][1], "us");
        snprintf(name, sizeof name, "shm_staged_over_host_%s", sz2);
        report_rounds(name, ratio, "x");
    }
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    return 0;
}
#endif
