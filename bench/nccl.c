/* bench/nccl.c - the nccl backend beside raw NCCL, in one run (--config=cuda).
 *
 * One rank per visible GPU (threads of this process, each with its device; --world N
 * caps it). For allreduce, allgather and broadcast at 4 B .. 256 MiB: troupe's op (the
 * agreement check, the enqueue, the polled wait with its deadline) and the raw NCCL call
 * on a communicator of its own followed by cudaStreamSynchronize, interleaved round by
 * round; the median over rounds of each round's mean time per op. Bus bandwidth as
 * nccl-tests computes it (allreduce: algbw * 2(n-1)/n; allgather: * (n-1)/n, its size the
 * whole output; broadcast: * 1), so with one GPU allreduce and allgather have no bus
 * traffic and only the times mean anything. Then device buffers through shm: two ranks on
 * GPU 0, 1 MiB and 64 MiB allreduces of device memory (staged through pinned host memory)
 * beside the same on host memory: the staging's cost.
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

static int iters_for(size_t bytes) {
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

static void *rank_main(void *arg) {
    int rank = (int)(intptr_t)arg;
    CUDA(cudaSetDevice(rank));
    tr_group *g;
    CHECK(tr_group_join(rt, W, rank, "nccl", "bench_nccl", 120000, &g));
    ncclComm_t raw;
    NCCL(ncclCommInitRank(&raw, W, raw_id, rank));
    cudaStream_t st;
    CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    size_t max = sizes[NSIZES - 1];
    void *s, *r;
    CUDA(cudaMalloc(&s, max));
    CUDA(cudaMalloc(&r, max * (size_t)W));
    CUDA(cudaMemset(s, 0, max));
    CUDA(cudaMemset(r, 0, max * (size_t)W));
    for (int op = 0; op < NOPS; op++)
        for (size_t k = 0; k < NSIZES; k++) {
            /* allgather's size is its whole output (nccl-tests): count per rank */
            size_t count = sizes[k] / 4 / (op == ALLGATHER ? (size_t)W : 1);
            if (!count) count = 1;
            int n = iters_for(sizes[k]);
            for (int i = 0; i < 5; i++) {
                troupe_op(g, op, s, r, count);
                raw_op(raw, st, op, s, r, count);
            }
            for (int round = 0; round < ROUNDS; round++) {
                pthread_barrier_wait(&bar);
                double t0 = bench_now_us();
                for (int i = 0; i < n; i++)
                    troupe_op(g, op, s, r, count);
                double t1 = bench_now_us();
                pthread_barrier_wait(&bar);
                double t2 = bench_now_us();
                for (int i = 0; i < n; i++)
                    raw_op(raw, st, op, s, r, count);
                double t3 = bench_now_us();
                if (rank == 0) {
                    t_troupe[op][k][round] = (t1 - t0) / n;
                    t_raw[op][k][round] = (t3 - t2) / n;
                }
            }
        }
    pthread_barrier_wait(&bar);
    ncclCommDestroy(raw);
    tr_group_destroy(g);
    cudaFree(s);
    cudaFree(r);
    cudaStreamDestroy(st);
    return NULL;
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

int main(int argc, char **argv) {
    bench_init(argc, argv);
    int max_w = MAX_W;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--world") == 0) max_w = atoi(argv[i + 1]);
    int ngpu = 0;
    if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
        fprintf(stderr, "bench/nccl: no CUDA device here (%s): nothing measured\n",
                cudaGetErrorString(cudaGetLastError()));
        return 0;
    }
    if (max_w > MAX_W) max_w = MAX_W;
    W = ngpu < max_w ? ngpu : max_w;
    if (W < 1) W = 1;
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    CHECK(tr_init(cfg, &rt));
    int nv = 0;
    ncclGetVersion(&nv);
    fprintf(stderr, "bench/nccl: %d rank(s), one per GPU; NCCL %d\n", W, nv);
    NCCL(ncclGetUniqueId(&raw_id));
    pthread_barrier_init(&bar, NULL, (unsigned)W);
    pthread_t th[MAX_W];
    for (int r = 0; r < W; r++)
        pthread_create(&th[r], NULL, rank_main, (void *)(intptr_t)r);
    for (int r = 0; r < W; r++)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&bar);
    char name[96], sz[32];
    for (int op = 0; op < NOPS; op++)
        for (size_t k = 0; k < NSIZES; k++) {
            size_name(sizes[k], sz);
            double tr[ROUNDS], rw[ROUNDS], ratio[ROUNDS];
            for (int i = 0; i < ROUNDS; i++) {
                tr[i] = t_troupe[op][k][i];
                rw[i] = t_raw[op][k][i];
                ratio[i] = rw[i] / tr[i]; /* troupe's bandwidth / raw's, round by round */
            }
            if (sizes[k] <= 65536) {
                snprintf(name, sizeof name, "nccl_%s_us_p50_%s_troupe", op_names[op], sz);
                report_rounds(name, tr, "us");
                snprintf(name, sizeof name, "nccl_%s_us_p50_%s_raw", op_names[op], sz);
                report_rounds(name, rw, "us");
                double over[ROUNDS];
                for (int i = 0; i < ROUNDS; i++)
                    over[i] = tr[i] - rw[i];
                snprintf(name, sizeof name, "nccl_%s_overhead_us_%s", op_names[op], sz);
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
                snprintf(name, sizeof name, "nccl_%s_%s_gbps_%s_troupe", op_names[op], kind, sz);
                report_rounds(name, bw_t, "GB/s");
                snprintf(name, sizeof name, "nccl_%s_%s_gbps_%s_raw", op_names[op], kind, sz);
                report_rounds(name, bw_r, "GB/s");
                snprintf(name, sizeof name, "nccl_%s_troupe_over_raw_%s", op_names[op], sz);
                report_rounds(name, ratio, "x");
            }
        }
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
