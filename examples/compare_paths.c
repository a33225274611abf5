/* examples/compare_paths.c - the README's first command: N actors allreduce a float32
 * buffer through the object store (tr_object_allreduce) and through each collective
 * backend (shm, gloo), check the sums, and print the times and speedups; an SVG bar chart
 * of them is written too.
 *
 *   bazel run //examples:compare_paths -- [actors=4] [KiB=1024] [chart.svg]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/troupe.h"

#define ITERS 20

typedef struct job {
    int32_t world, rank, path; /* 0 object store, 1 shm, 2 gloo */
    uint64_t count;
    char name[32];
} job;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One rank: ITERS allreduces, each after a barrier; replies its per-iteration times. */
static int rank_run(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    job j;
    if (len != sizeof j) return tr_ctx_error(ctx, "bad job");
    memcpy(&j, args, sizeof j);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_group *g;
    int rc = tr_group_init(rt, j.world, j.rank, j.path == 2 ? "gloo" : "shm", j.name, 30000, &g);
    if (rc) return tr_ctx_error(ctx, "group: %s", tr_last_error());
    float *buf = malloc(j.count * sizeof(float) + 1);
    double t[ITERS];
    for (int i = 0; i < ITERS && !rc; i++) {
        for (uint64_t k = 0; k < j.count; k++)
            buf[k] = (float)(j.rank + 1);
        rc = tr_barrier(g, 30000);
        double t0 = now_us();
        if (!rc && j.path == 0)
            rc = tr_object_allreduce(rt, j.name, j.rank, j.world, (uint64_t)i, buf, j.count,
                                     TR_FLOAT32, TR_SUM, 30000);
        else if (!rc)
            rc = tr_allreduce(g, buf, buf, j.count, TR_FLOAT32, TR_SUM, 30000);
        t[i] = now_us() - t0;
        if (!rc && j.count && buf[0] != (float)(j.world * (j.world + 1) / 2))
            rc = tr_ctx_error(ctx, "wrong sum %f", (double)buf[0]);
    }
    free(buf);
    tr_group_destroy(g);
    if (rc)
        return rc == TR_ETASK ? rc : tr_ctx_error(ctx, "%s: %s", tr_errname(rc), tr_last_error());
    return tr_ctx_reply(ctx, t, sizeof t);
}

static const tr_method_def methods[] = {{"run", rank_run}};

static void write_svg(const char *path, const char *names[], const double us[], int n, int world,
                      size_t kib) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    double max = 0;
    for (int i = 0; i < n; i++)
        if (us[i] > max) max = us[i];
    int W = 640, H = 120 + 60 * n;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
            "font-family='sans-serif' font-size='14'>\n",
            W, H);
    fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
    fprintf(f,
            "<text x='20' y='30' font-size='18'>allreduce of %zu KiB float32 across %d actors "
            "(median of %d, slowest rank)</text>\n",
            kib, world, ITERS);
    for (int i = 0; i < n; i++) {
        double w = max > 0 ? 400.0 * us[i] / max : 0;
        int y = 60 + 60 * i;
        fprintf(f, "<text x='20' y='%d'>%s</text>\n", y + 22, names[i]);
        fprintf(f, "<rect x='140' y='%d' width='%.1f' height='30' fill='%s'/>\n", y, w < 1 ? 1 : w,
                i == 0 ? "#c44" : "#48c");
        fprintf(f, "<text x='%.1f' y='%d'>%.0f us (%.1fx)</text>\n", 150 + w, y + 22, us[i],
                us[0] / us[i]);
    }
    fprintf(f, "</svg>\n");
    fclose(f);
}

int main(int argc, char **argv) {
    tr_config *cfg;
    tr_config_create(&cfg);
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Rank";
    cls.methods = methods;
    cls.n_methods = 1;
    tr_config_add_class(cfg, &cls);
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt); /* a worker runs its actor here and never returns */
    if (rc) {
        fprintf(stderr, "tr_init: %s\n", tr_last_error());
        return 1;
    }
    int world = argc > 1 ? atoi(argv[1]) : 4;
    size_t kib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    const char *svg = argc > 3 ? argv[3] : "compare_paths.svg";
    if (world < 1 || world > 16) world = 4;
    tr_actor_id actors[16];
    for (int r = 0; r < world; r++)
        tr_actor_create(rt, "Rank", NULL, NULL, 0, &actors[r]);
    const char *names[] = {"object store", "shm", "gloo"};
    double p50[3] = {0};
    printf("allreduce of %zu KiB float32 across %d actors, %d iterations each\n", kib, world,
           ITERS);
    for (int path = 0; path < 3 && !rc; path++) {
        tr_ref calls[16];
        for (int r = 0; r < world; r++) {
            job j = {world, r, path, kib * 1024 / 4, {0}};
            snprintf(j.name, sizeof j.name, "cmp%d", path);
            tr_call(rt, actors[r], "run", &j, sizeof j, &calls[r]);
        }
        double slowest[ITERS] = {0};
        for (int r = 0; r < world; r++) {
            const void *d;
            size_t n;
            int e = tr_get(rt, calls[r], 120000, &d, &n);
            if (e) {
                fprintf(stderr, "%s rank %d: %s\n", names[path], r, tr_last_error());
                rc = e;
            } else {
                for (int i = 0; i < ITERS; i++)
                    if (((const double *)d)[i] > slowest[i]) slowest[i] = ((const double *)d)[i];
            }
            tr_ref_release(rt, calls[r]);
        }
        qsort(slowest + 1, ITERS - 1, sizeof(double), cmp); /* the first maps pages */
        p50[path] = slowest[1 + (ITERS - 1) / 2];
    }
    if (!rc) {
        printf("%-14s %12s %10s\n", "path", "median us", "speedup");
        for (int i = 0; i < 3; i++)
            printf("%-14s %12.1f %9.1fx\n", names[i], p50[i], p50[0] / p50[i]);
        write_svg(svg, names, p50, 3, world, kib);
        printf("chart: %s\n", svg);
    }
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    return rc ? 1 : 0;
}
