/* bench/collectives.c - allreduce, broadcast and allgather across 2 and 4 actors at 4 B,
 * 4 KiB, 1 MiB and 64 MiB, in one run, through:
 *   shm          troupe's shm collective backend
 *   gloo         troupe's gloo collective backend
 *   gloounchecked  the same with tr_group_set_checks(g, 0): no agreement check
 *   objectstore  the object store (allreduce: tr_object_allreduce; broadcast: the root's
 *                put and everyone's get; allgather: everyone's put and everyone's gets)
 *   rawgloo      the baseline: libgloo straight, no troupe (bench/raw_gloo.cc)
 * Timed as ../shared/anchors/mpi_coll.c times MPI: as many untimed iterations first as it
 * warms up with (200 below 1 MiB, 30 at 1 MiB, 2 at 64 MiB), then 300, 30 and 15 timed
 * (at 64 MiB its most; it takes up to 2000 and 300 below), a barrier before each
 * iteration, the iteration's time is the slowest rank's, the median is reported (the
 * first timed iteration is left out too). Sizes are per rank (allgather gathers world x
 * size).
 *
 *   bazel run //bench:collectives -- [--json] [--max-mib N] [--paths shm,gloo,...]
 *                                    [--ops allreduce,...] [--worlds 2,4] [--sizes 4B,1MiB]
 *                                    [--repeat N] [--bind 0|1] [--single -1|0|1]
 * --repeat N runs the whole set N times in the same node and reports each figure as the
 * median over the runs, with the min and max beside it. Ranks have a core each where the
 * machine has enough (actors with num_cpus = 1, bound by the node as mpirun binds), and
 * float otherwise or with --bind 0. --single sets shm's single copy: -1 (default) the
 * faster way, timed as the group runs, 1 on, 0 off (tr_group_set_single_copy).
 * Metrics: <op>_us_p50_<path>_<ranks>r_<size>, e.g. allreduce_us_p50_shm_2r_1MiB, and the
 * ratios <op>_objectstore_over_shm_<ranks>r_<size>, <op>_gloo_over_rawgloo_... and
 * <op>_gloounchecked_over_rawgloo_....
 */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "bench/raw_gloo.h"
#include "troupe/troupe.h"

enum { PATH_SHM, PATH_OBJ, PATH_GLOO, PATH_GLOO_UNCHECKED, PATH_RAWGLOO, N_PATHS };
enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, N_OPS };
static const char *path_names[] = {"shm", "objectstore", "gloo", "gloounchecked", "rawgloo"};
static const char *op_names[] = {"allreduce", "broadcast", "allgather"};

typedef struct args {
    char name[32];
    char dir[64]; /* rawgloo's FileStore */
    int32_t world, rank, path, op, iters;
    int32_t warm; /* untimed iterations first */
    uint64_t bytes;
    int32_t single; /* shm's single copy: 1, 0, -1 the faster (tr_group_set_single_copy) */
} args;

/* The object-store path, one iteration: every rank that contributes puts its buffer and
 * publishes the ref in the KV store; every rank that needs a value polls for the ref,
 * gets it (zero copy) and copies it where it belongs. */
static int obj_iteration(tr_runtime *rt, const args *a, int i, float *buf, float *out,
                         tr_ref *mine) {
    char key[96];
    int rc = 0;
    int contributes = a->op == OP_ALLGATHER || a->rank == 0;
    if (contributes) {
        snprintf(key, sizeof key, "%s-%d-%d", a->name, i, a->rank);
        rc = tr_put(rt, buf, a->bytes, mine);
        if (!rc) rc = tr_kv_put(rt, key, mine, sizeof *mine);
    }
    for (int q = 0; q < a->world && !rc; q++) {
        if (q == a->rank || (a->op == OP_BROADCAST && q != 0)) continue;
        snprintf(key, sizeof key, "%s-%d-%d", a->name, i, q);
        void *v = NULL;
        size_t n = 0;
        while ((rc = tr_kv_get(rt, key, &v, &n)) == TR_ENOTFOUND) {
        } /* the public KV has no wait: poll */
        tr_ref r;
        if (!rc && n == sizeof r) memcpy(&r, v, sizeof r);
        tr_free(v);
        const void *view;
        size_t vl;
        if (!rc) rc = tr_get(rt, r, 30000, &view, &vl);
        if (!rc) memcpy(a->op == OP_ALLGATHER ? out + (size_t)q * (a->bytes / 4) : buf, view, vl);
        if (!rc) rc = tr_ref_release(rt, r);
    }
    if (!rc && a->op == OP_ALLGATHER) memcpy(out + (size_t)a->rank * (a->bytes / 4), buf, a->bytes);
    return rc;
}

/* Runs `warm` untimed then `iters` timed iterations in one rank; replies the timed
 * iterations' times (us). */
static int run_rank(tr_ctx *ctx, void *self, const void *in, size_t len) {
    (void)self;
    if (len != sizeof(args)) return tr_ctx_error(ctx, "bad args");
    args a;
    memcpy(&a, in, sizeof a);
    int warm = a.warm;
    a.iters += warm; /* (all run; the first `warm` times are not replied) */
    double *t = calloc((size_t)a.iters, sizeof(double));
    if (a.path == PATH_RAWGLOO) {
        char err[256];
        int rc = raw_gloo_run(a.dir, a.name, a.world, a.rank, a.op, a.bytes, a.iters, t, err,
                              sizeof err);
        rc = rc ? tr_ctx_error(ctx, "%s", err)
                : tr_ctx_reply(ctx, t + warm, sizeof(double) * (size_t)(a.iters - warm));
        free(t);
        return rc;
    }
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_group *g;
    /* the object-store path uses an shm group only for the timing barriers */
    int gloo = a.path == PATH_GLOO || a.path == PATH_GLOO_UNCHECKED;
    int rc = tr_group_join(rt, a.world, a.rank, gloo ? "gloo" : "shm", a.name, 30000, &g);
    if (!rc && a.path == PATH_GLOO_UNCHECKED) rc = tr_group_set_checks(g, 0);
    if (!rc) rc = tr_group_set_single_copy(g, a.single);
    if (rc) {
        free(t);
        return tr_ctx_error(ctx, "group: %s", tr_last_error());
    }
    /* Buffers as the MPI anchor has them: filled once, allreduce from one into another
     * (a buffer rewritten before every iteration would be read from the writer's cache,
     * which the anchor never measures). The object-store allreduce works in place: its
     * buffer is refilled, untimed. */
    size_t count = a.bytes / 4;
    float *buf = calloc(count ? count : 1, sizeof(float));
    float *out = calloc(count ? count * (size_t)a.world : 1, sizeof(float));
    float want = a.op == OP_ALLREDUCE ? (float)(a.world * (a.world + 1) / 2) : 1.0f;
    for (size_t k = 0; k < count; k++)
        buf[k] = (float)(a.rank + 1);
    for (int i = 0; i < a.iters && !rc; i++) {
        if (a.path == PATH_OBJ && a.op == OP_ALLREDUCE)
            for (size_t k = 0; k < count; k++)
                buf[k] = (float)(a.rank + 1);
        if (a.op == OP_BROADCAST && a.rank != 0 && count) buf[0] = buf[count - 1] = 0;
        rc = tr_barrier(g, 30000);
        if (rc) break;
        tr_ref mine;
        double t0 = bench_now_us();
        if (a.path == PATH_OBJ && a.op == OP_ALLREDUCE)
            rc = tr_object_allreduce(rt, a.name, a.rank, a.world, (uint64_t)i, buf, count,
                                     TR_FLOAT32, TR_SUM, 30000);
        else if (a.path == PATH_OBJ)
            rc = obj_iteration(rt, &a, i, buf, out, &mine);
        else if (a.op == OP_ALLREDUCE)
            rc = tr_allreduce(g, buf, out, count, TR_FLOAT32, TR_SUM, 30000);
        else if (a.op == OP_BROADCAST)
            rc = tr_broadcast(g, buf, count, TR_FLOAT32, 0, 30000);
        else
            rc = tr_allgather(g, buf, out, count, TR_FLOAT32, 30000);
        t[i] = bench_now_us() - t0;
        if (!rc && a.path == PATH_OBJ && a.op != OP_ALLREDUCE &&
            (a.op == OP_ALLGATHER || a.rank == 0)) {
            /* everyone has read before the contributors let go (not timed) */
            char key[96];
            snprintf(key, sizeof key, "%s-%d-%d", a.name, i, a.rank);
            rc = tr_barrier(g, 30000);
            if (!rc) rc = tr_ref_release(rt, mine);
            if (!rc) rc = tr_kv_del(rt, key);
        } else if (!rc && a.path == PATH_OBJ) {
            rc = tr_barrier(g, 30000);
        }
        float got = a.op == OP_ALLGATHER ? out[count * (size_t)(a.world - 1)] / (float)a.world
                    : a.op == OP_ALLREDUCE && a.path != PATH_OBJ ? out[count - 1]
                                                                 : buf[count - 1];
        if (!rc && count && got != want)
            rc = tr_ctx_error(ctx, "wrong %s result %f", op_names[a.op], (double)got);
    }
    tr_group_destroy(g);
    free(buf);
    free(out);
    if (rc) {
        free(t);
        return rc == TR_ETASK ? rc : tr_ctx_error(ctx, "%s: %s", tr_errname(rc), tr_last_error());
    }
    rc = tr_ctx_reply(ctx, t + warm, sizeof(double) * (size_t)(a.iters - warm));
    free(t);
    return rc;
}

static const tr_method_def methods[] = {{"run", run_rank}};

/* "a,b,c" -> bit i set where names[i] is listed (all when the option is absent). */
static unsigned parse_set(int argc, char **argv, const char *opt, const char **names, int n) {
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], opt) != 0) continue;
        unsigned set = 0;
        for (int k = 0; k < n; k++) {
            const char *p = argv[i + 1];
            size_t len = strlen(names[k]);
            while ((p = strstr(p, names[k]))) {
                if ((p == argv[i + 1] || p[-1] == ',') && (p[len] == 0 || p[len] == ','))
                    set |= 1u << k;
                p += len;
            }
        }
        return set;
    }
    return ~0u;
}

/* Every figure of every run, reported at the end as the median over runs with the spread
 * (min, max), under the metric's usual name. */
typedef struct metric {
    char name[96];
    const char *unit;
    double v[64];
    int n;
} metric;
static metric metrics[256];
static int n_metrics;

static void record(const char *name, double value, const char *unit) {
    int i = 0;
    while (i < n_metrics && strcmp(metrics[i].name, name) != 0)
        i++;
    if (i == n_metrics) {
        if (n_metrics == 256) return;
        snprintf(metrics[i].name, sizeof metrics[i].name, "%s", name);
        metrics[i].unit = unit;
        n_metrics++;
    }
    if (metrics[i].n < 64) metrics[i].v[metrics[i].n++] = value;
}

/* The actors a world runs on: where every rank can have a core of its own, ranks that ask
 * for one CPU each (the node binds them to distinct cores, as mpirun binds ranks by
 * default); otherwise (or with --bind 0) ranks that float. Made on first use. */
static tr_actor_id bound[4], floating[4];
static int n_bound, n_floating;

static const tr_actor_id *actors_for(tr_runtime *rt, int world, int bind) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    int use_bound = bind && world <= cores;
    tr_actor_id *v = use_bound ? bound : floating;
    int *n = use_bound ? &n_bound : &n_floating;
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_cpus = use_bound ? 1 : 0;
    for (; *n < world; (*n)++) {
        CHECK(tr_actor_create(rt, "Rank", &o, NULL, 0, &v[*n]));
        CHECK(tr_actor_wait_ready(rt, v[*n], 60000)); /* none starting while we time */
    }
    return v;
}

int main(int argc, char **argv) {
    size_t max_mib = 64;
    int repeat = 1, bind = 1, single = -1;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--max-mib") == 0) max_mib = (size_t)atol(argv[i + 1]);
        if (strcmp(argv[i], "--repeat") == 0) repeat = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--bind") == 0) bind = atoi(argv[i + 1]);
        if (strcmp(argv[i], "--single") == 0) single = atoi(argv[i + 1]);
    }
    if (repeat < 1 || repeat > 64) repeat = 1;
    static const char *world_names[] = {"2", "4"};
    static const size_t sizes[] = {4, 4096, 1 << 20, 64 << 20};
    static const char *size_names[] = {"4B", "4KiB", "1MiB", "64MiB"};
    unsigned size_set = parse_set(argc, argv, "--sizes", size_names, 4);
    unsigned paths = parse_set(argc, argv, "--paths", path_names, N_PATHS);
    unsigned ops = parse_set(argc, argv, "--ops", op_names, N_OPS);
    unsigned worlds = parse_set(argc, argv, "--worlds", world_names, 2);
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Rank";
    cls.methods = methods;
    cls.n_methods = 1;
    CHECK(tr_config_add_class(cfg, &cls));
    char store[32];
    snprintf(store, sizeof store, "%zu", (max_mib * 4 * 3 + 64) << 20);
    CHECK(tr_config_set(cfg, "object_store_bytes", store));
    CHECK(tr_config_set(cfg, "num_cpus", "64")); /* placement by binding, not by quota */
    tr_worker_main(cfg);
    bench_init(argc, argv);
    char dir[64] = "/tmp/troupe-bench-gloo-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    /* the node pre-faults the object store in the background (objectstore/store.c): at
     * this size that takes one of the two cores for ~0.5 s; let it finish first */
    sleep(1);
    int seq = 0;
    for (int run = 0; run < repeat; run++) {
        for (int wi = 0; wi < 2; wi++) {
            int world = 2 + 2 * wi;
            if (!(worlds >> wi & 1)) continue;
            const tr_actor_id *ranks = actors_for(rt, world, bind);
            for (int s = 0; s < 4; s++) {
                if (sizes[s] > (max_mib << 20) || !(size_set >> s & 1)) continue;
                int iters = sizes[s] >= (64u << 20) ? 15 : sizes[s] >= (1u << 20) ? 30 : 300;
                /* (mpi_coll.c's warm-up: max(2, maxit / 10) of its 15, 300 and 2000) */
                int warm = sizes[s] >= (64u << 20) ? 2 : sizes[s] >= (1u << 20) ? 30 : 200;
                for (int op = 0; op < N_OPS; op++) {
                    if (!(ops >> op & 1)) continue;
                    double p50[N_PATHS] = {0};
                    for (int path = 0; path < N_PATHS; path++) {
                        if (!(paths >> path & 1)) continue;
                        tr_ref calls[4];
                        for (int r = 0; r < world; r++) {
                            args a = {{0}, {0}, world, r, path, op, iters, warm, sizes[s], single};
                            snprintf(a.name, sizeof a.name, "b%d", seq);
                            snprintf(a.dir, sizeof a.dir, "%s", dir);
                            CHECK(tr_call(rt, ranks[r], "run", &a, sizeof a, &calls[r]));
                        }
                        seq++;
                        double *slowest = calloc((size_t)iters, sizeof(double));
                        for (int r = 0; r < world; r++) {
                            const void *d;
                            size_t n;
                            CHECK(tr_get(rt, calls[r], 600000, &d, &n));
                            const double *t = d;
                            for (int i = 0; i < iters; i++)
                                if (t[i] > slowest[i]) slowest[i] = t[i];
                            CHECK(tr_ref_release(rt, calls[r]));
                        }
                        p50[path] = bench_percentile(slowest + 1, (size_t)iters - 1, 50);
                        free(slowest);
                        char name[96];
                        snprintf(name, sizeof name, "%s_us_p50_%s_%dr_%s", op_names[op],
                                 path_names[path], world, size_names[s]);
                        record(name, p50[path], "us");
                    }
                    char name[96];
                    if (p50[PATH_OBJ] > 0 && p50[PATH_SHM] > 0) {
                        snprintf(name, sizeof name, "%s_objectstore_over_shm_%dr_%s", op_names[op],
                                 world, size_names[s]);
                        record(name, p50[PATH_OBJ] / p50[PATH_SHM], "x");
                    }
                    for (int gp = PATH_GLOO; gp <= PATH_GLOO_UNCHECKED; gp++) {
                        if (p50[gp] <= 0 || p50[PATH_RAWGLOO] <= 0) continue;
                        snprintf(name, sizeof name, "%s_%s_over_rawgloo_%dr_%s", op_names[op],
                                 path_names[gp], world, size_names[s]);
                        record(name, p50[gp] / p50[PATH_RAWGLOO], "x");
                    }
                }
            }
        }
    }
    for (int i = 0; i < n_metrics; i++) {
        metric *m = &metrics[i];
        double lo = m->v[0], hi = m->v[0];
        for (int k = 1; k < m->n; k++) {
            if (m->v[k] < lo) lo = m->v[k];
            if (m->v[k] > hi) hi = m->v[k];
        }
        bench_report_spread(m->name, bench_percentile(m->v, (size_t)m->n, 50), lo, hi, m->n,
                            m->unit);
    }
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return 0;
}
