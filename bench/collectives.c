/* bench/collectives.c - allreduce and broadcast across 2 and 4 actors at 4 B, 4 KiB, 1 MiB
 * and 64 MiB, through the object store (tr_object_allreduce; a broadcast is the root's
 * put and everyone's get) and through the shm and gloo collective backends, in one run.
 * Timed as
 * shared/anchors/mpi_coll.c times MPI: a barrier before each iteration, the iteration's
 * time is the slowest rank's, the median is reported.
 *
 *   bazel run //bench:collectives [-- --json] [-- --max-mib N]
 * Metrics: <op>_us_p50_<path>_<ranks>r_<size>, e.g. allreduce_us_p50_shm_2r_1MiB.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "troupe/troupe.h"

enum { PATH_SHM = 0, PATH_OBJ = 1, PATH_GLOO = 2 };
enum { OP_ALLREDUCE = 0, OP_BROADCAST = 1 };

typedef struct args {
    char name[32];
    int32_t world, rank, path, op, iters;
    uint64_t bytes;
} args;

/* Runs `iters` timed iterations in one rank; replies the per-iteration times (us). */
static int run_rank(tr_ctx *ctx, void *self, const void *in, size_t len) {
    (void)self;
    if (len != sizeof(args)) return tr_ctx_error(ctx, "bad args");
    args a;
    memcpy(&a, in, sizeof a);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_group *g;
    /* the object-store path uses an shm group only for the timing barriers */
    int rc =
        tr_group_init(rt, a.world, a.rank, a.path == PATH_GLOO ? "gloo" : "shm", a.name, 30000, &g);
    if (rc) return tr_ctx_error(ctx, "group: %s", tr_last_error());
    size_t count = a.bytes / 4;
    float *buf = calloc(count ? count : 1, sizeof(float));
    double *t = calloc((size_t)a.iters, sizeof(double));
    char key[64];
    for (int i = 0; i < a.iters && !rc; i++) {
        for (size_t k = 0; k < count; k++)
            buf[k] = (float)(a.rank + 1);
        rc = tr_barrier(g, 30000);
        double t0 = bench_now_us();
        if (rc) break;
        if (a.path != PATH_OBJ && a.op == OP_ALLREDUCE) {
            rc = tr_allreduce(g, buf, buf, count, TR_FLOAT32, TR_SUM, 30000);
        } else if (a.path != PATH_OBJ) {
            rc = tr_broadcast(g, buf, count, TR_FLOAT32, 0, 30000);
        } else if (a.op == OP_ALLREDUCE) {
            snprintf(key, sizeof key, "%s-ar", a.name);
            rc = tr_object_allreduce(rt, key, a.rank, a.world, (uint64_t)i, buf, count, TR_FLOAT32,
                                     TR_SUM, 30000);
        } else { /* broadcast through the store: the root puts, the others get and copy */
            snprintf(key, sizeof key, "%s-bc-%d", a.name, i);
            tr_ref r;
            if (a.rank == 0) {
                rc = tr_put(rt, buf, a.bytes, &r);
                if (!rc) rc = tr_kv_put(rt, key, &r, sizeof r);
            } else {
                void *v = NULL;
                size_t n = 0;
                for (;;) { /* the public KV has no wait: poll */
                    rc = tr_kv_get(rt, key, &v, &n);
                    if (rc != TR_ENOTFOUND) break;
                }
                if (!rc && n == sizeof r) memcpy(&r, v, sizeof r);
                tr_free(v);
                const void *view;
                size_t vl;
                if (!rc) rc = tr_get(rt, r, 30000, &view, &vl);
                if (!rc) memcpy(buf, view, vl);
            }
            double t1 = bench_now_us();
            t[i] = t1 - t0;
            if (!rc) rc = tr_barrier(g, 30000); /* everyone has read before the root lets go */
            if (!rc) rc = tr_ref_release(rt, r);
            if (!rc && a.rank == 0) tr_kv_del(rt, key);
            continue;
        }
        t[i] = bench_now_us() - t0;
        if (!rc && a.op == OP_ALLREDUCE && count && buf[0] != (float)(a.world * (a.world + 1) / 2))
            rc = tr_ctx_error(ctx, "wrong allreduce result %f", (double)buf[0]);
    }
    tr_group_destroy(g);
    free(buf);
    if (rc) {
        free(t);
        return rc == TR_ETASK ? rc : tr_ctx_error(ctx, "%s: %s", tr_errname(rc), tr_last_error());
    }
    rc = tr_ctx_reply(ctx, t, sizeof(double) * (size_t)a.iters);
    free(t);
    return rc;
}

static const tr_method_def methods[] = {{"run", run_rank}};

int main(int argc, char **argv) {
    size_t max_mib = 64;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--max-mib") == 0) max_mib = (size_t)atol(argv[i + 1]);
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
    tr_worker_main(cfg);
    bench_init(argc, argv);
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    tr_actor_id ranks[4];
    for (int i = 0; i < 4; i++)
        CHECK(tr_actor_create(rt, "Rank", NULL, NULL, 0, &ranks[i]));
    const size_t sizes[] = {4, 4096, 1 << 20, 64 << 20};
    const char *size_names[] = {"4B", "4KiB", "1MiB", "64MiB"};
    const char *paths[] = {"shm", "objectstore", "gloo"};
    const char *ops[] = {"allreduce", "broadcast"};
    int seq = 0;
    for (int world = 2; world <= 4; world += 2) {
        for (int s = 0; s < 4; s++) {
            if (sizes[s] > (max_mib << 20)) continue;
            int iters = sizes[s] >= (64u << 20) ? 5 : sizes[s] >= (1u << 20) ? 30 : 300;
            for (int op = 0; op < 2; op++) {
                double p50[3];
                for (int path = 0; path < 3; path++) {
                    tr_ref calls[4];
                    for (int r = 0; r < world; r++) {
                        args a = {{0}, world, r, path, op, iters, sizes[s]};
                        snprintf(a.name, sizeof a.name, "b%d", seq);
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
                    /* the first iteration maps the pages: leave it out, as MPI warm-ups do */
                    p50[path] = bench_percentile(slowest + 1, (size_t)iters - 1, 50);
                    free(slowest);
                    char name[96];
                    snprintf(name, sizeof name, "%s_us_p50_%s_%dr_%s", ops[op], paths[path], world,
                             size_names[s]);
                    bench_report(name, p50[path], "us");
                }
                char name[96];
                snprintf(name, sizeof name, "%s_objectstore_over_shm_%dr_%s", ops[op], world,
                         size_names[s]);
                bench_report(name, p50[1] / p50[0], "x");
            }
        }
    }
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    return 0;
}
