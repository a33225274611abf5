/* examples/compare_paths.c - the second half of the README's first command: actors
 * allreduce float32 buffers from 4 B to 64 MiB through the object store
 * (tr_object_allreduce, what a Ray user writes with put/get), through each collective
 * backend (shm, gloo), and as a compiled graph (troupe/dag.h: each actor's output into a
 * collective node), for 2 and 4 actors; every sum is checked. Prints a table of
 * median times and writes a chart - time against size on log axes, one line per path,
 * a panel per actor count - that shows where each path wins and by how much.
 *
 *   bazel run //examples:compare_paths -- [chart.svg] [actor counts, e.g. 2,4]
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "troupe/dag.h"
#include "troupe/troupe.h"

enum { N_PATHS = 4, N_SIZES = 7, MAX_WORLDS = 4, MAX_ACTORS = 16, MAX_ITERS = 41 };

static const char *path_names[N_PATHS] = {"object store", "shm", "gloo", "compiled graph"};
static const char *path_colors[N_PATHS] = {"#c0392b", "#2471a3", "#229954", "#8e44ad"};
/* A compiled graph's channels hold a value of every node per execution in flight, in a
 * segment of at most 256 MiB: slots of at most 8 MiB; a larger value travels as an object
 * of the store by reference, through the collective node too. */
#define GRAPH_SLOT_MAX (8u << 20)
/* bytes of float32 per rank: 4 B, 256 B, 4 KiB, 64 KiB, 1 MiB, 8 MiB, 64 MiB */
static const uint64_t sizes[N_SIZES] = {4, 256, 4 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20};

/* Iterations at a size (the first is a warm-up): fewer where each takes long. */
static int iters_for(uint64_t bytes) {
    return bytes <= (64 << 10) ? 41 : bytes <= (1 << 20) ? 21 : bytes <= (8 << 20) ? 11 : 6;
}

/* What one rank runs: every size on one path, in one group. */
typedef struct job {
    int32_t world, rank, path; /* path: 0 object store, 1 shm, 2 gloo */
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

/* One rank: for each size, iters_for() allreduces, each after a barrier, each checked;
 * replies the times, size after size (MAX_ITERS slots each). */
static int rank_run(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    job j;
    if (len != sizeof j) return tr_ctx_error(ctx, "bad job");
    memcpy(&j, args, sizeof j);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_group *g;
    int rc = tr_group_join(rt, j.world, j.rank, j.path == 2 ? "gloo" : "shm", j.name, 30000, &g);
    if (rc) return tr_ctx_error(ctx, "group: %s", tr_last_error());
    float *buf = malloc(sizes[N_SIZES - 1]);
    double *t = calloc(N_SIZES * MAX_ITERS, sizeof *t);
    const float want = (float)(j.world * (j.world + 1) / 2);
    uint64_t round = 0;
    if (!buf || !t) rc = tr_ctx_error(ctx, "out of memory");
    for (int s = 0; s < N_SIZES && !rc; s++) {
        uint64_t count = sizes[s] / sizeof(float);
        for (int i = 0; i < iters_for(sizes[s]) && !rc; i++) {
            for (uint64_t k = 0; k < count; k++)
                buf[k] = (float)(j.rank + 1);
            rc = tr_barrier(g, 30000);
            double t0 = now_us();
            if (!rc && j.path == 0)
                rc = tr_object_allreduce(rt, j.name, j.rank, j.world, round++, buf, count,
                                         TR_FLOAT32, TR_SUM, 60000);
            else if (!rc)
                rc = tr_allreduce(g, buf, buf, count, TR_FLOAT32, TR_SUM, 60000);
            t[s * MAX_ITERS + i] = now_us() - t0;
            if (!rc && (buf[0] != want || buf[count - 1] != want))
                rc = tr_ctx_error(ctx, "%s: wrong sum %g at %llu bytes", path_names[j.path],
                                  (double)buf[0], (unsigned long long)sizes[s]);
        }
    }
    free(buf);
    tr_group_destroy(g);
    if (!rc) rc = tr_ctx_reply(ctx, t, N_SIZES * MAX_ITERS * sizeof *t);
    free(t);
    if (rc && rc != TR_ETASK) return tr_ctx_error(ctx, "%s: %s", tr_errname(rc), tr_last_error());
    return rc;
}

/* The compiled graph's node: `count` float32 ones (its argument), for the collective node
 * after it, written where its reply goes (its slot, or an object of the store over a slot:
 * no copy), as a rank of the other paths fills its buffer before each allreduce. */
static int fill_ones(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    uint64_t count;
    float *buf;
    if (len != sizeof count) return tr_ctx_error(ctx, "fill wants a count");
    memcpy(&count, args, sizeof count);
    if (tr_ctx_reply_alloc(ctx, count * sizeof *buf, (void **)&buf))
        return tr_ctx_error(ctx, "fill: %s", tr_last_error());
    for (uint64_t k = 0; k < count; k++)
        buf[k] = 1.0f;
    return 0;
}

static const tr_method_def methods[] = {{"run", rank_run}, {"fill", fill_ones}};

/* The compiled-graph path, from the driver: input -> each actor's fill -> a collective
 * node (allreduce) -> every actor's sum back; per size a graph compiled for it, each
 * execution's round trip timed, every sum checked. */
static int graph_path(tr_runtime *rt, const tr_actor_id *actors, int world, double *p50) {
    for (int s = 0; s < N_SIZES; s++) {
        tr_dag *g;
        tr_dag_node in, fill[MAX_ACTORS], sum[MAX_ACTORS];
        int rc = tr_dag_create(rt, &g);
        if (!rc) rc = tr_dag_input(g, &in);
        for (int r = 0; r < world && !rc; r++)
            rc = tr_dag_bind(g, actors[r], "fill", &in, 1, &fill[r]);
        if (!rc) rc = tr_dag_allreduce(g, fill, (size_t)world, TR_FLOAT32, TR_SUM, sum);
        if (!rc) rc = tr_dag_output(g, sum, (size_t)world);
        tr_dag_options o = TR_DAG_OPTIONS_INIT;
        o.max_inflight = 2;
        o.slot_bytes = sizes[s] < 64 ? 64 : sizes[s] > GRAPH_SLOT_MAX ? GRAPH_SLOT_MAX : sizes[s];
        if (!rc) rc = tr_dag_compile(g, &o);
        double t[MAX_ITERS];
        uint64_t count = sizes[s] / sizeof(float);
        int it = iters_for(sizes[s]);
        for (int i = 0; i < it && !rc; i++) {
            uint64_t e;
            double t0 = now_us();
            rc = tr_dag_execute(g, &count, sizeof count, &e);
            for (int r = 0; r < world && !rc; r++) {
                const void *d;
                size_t n;
                rc = tr_dag_get(g, e, (size_t)r, 60000, &d, &n);
                if (!rc && (n != sizes[s] || ((const float *)d)[0] != (float)world ||
                            ((const float *)d)[count - 1] != (float)world)) {
                    fprintf(stderr, "compiled graph: wrong sum at %llu bytes\n",
                            (unsigned long long)sizes[s]);
                    rc = TR_EINTERNAL;
                }
            }
            t[i] = now_us() - t0;
            if (!rc) rc = tr_dag_release(g, e);
        }
        if (rc) fprintf(stderr, "compiled graph, %d actors: %s\n", world, tr_last_error());
        tr_dag_destroy(g);
        if (rc) return rc;
        qsort(t + 1, (size_t)(it - 1), sizeof *t, cmp); /* the first maps pages */
        p50[s] = t[1 + (it - 1) / 2];
    }
    return 0;
}

/* "4 B", "64 KiB", "8 MiB" */
static const char *size_label(uint64_t b, char *out, size_t cap) {
    if (b >= (1 << 20))
        snprintf(out, cap, "%llu MiB", (unsigned long long)(b >> 20));
    else if (b >= (1 << 10))
        snprintf(out, cap, "%llu KiB", (unsigned long long)(b >> 10));
    else
        snprintf(out, cap, "%llu B", (unsigned long long)b);
    return out;
}

/* "0.41 us", "12 us", "3.4 ms", "1.2 s" */
static const char *time_label(double us, char *out, size_t cap) {
    if (us >= 1e6)
        snprintf(out, cap, "%.3g s", us / 1e6);
    else if (us >= 1000)
        snprintf(out, cap, "%.3g ms", us / 1000);
    else
        snprintf(out, cap, "%.3g us", us);
    return out;
}

/* The chart: a panel per actor count, log2 size across, log10 time up, a line per path. */
static int write_svg(const char *path, const int *worlds, int n_worlds,
                     double p50[][N_PATHS][N_SIZES]) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    double lo = 1e300, hi = 0;
    for (int w = 0; w < n_worlds; w++)
        for (int p = 0; p < N_PATHS; p++)
            for (int s = 0; s < N_SIZES; s++) {
                double v = p50[w][p][s];
                if (v > 0 && v < lo) lo = v;
                if (v > hi) hi = v;
            }
    if (hi <= 0) lo = 1, hi = 10;
    int d_lo = (int)floor(log10(lo)), d_hi = (int)ceil(log10(hi));
    if (d_hi <= d_lo) d_hi = d_lo + 1;
    const int pw = 460, ph = 340, ml = 80, mt = 70, gap = 70, mb = 60;
    int W = ml + n_worlds * pw + (n_worlds - 1) * gap + 30, H = mt + ph + mb + 60;
    fprintf(f,
            "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' "
            "font-family='sans-serif' font-size='13'>\n"
            "<rect width='100%%' height='100%%' fill='white'/>\n"
            "<text x='%d' y='28' font-size='17'>allreduce of float32: time against size "
            "(median; lower is better)</text>\n",
            W, H, ml);
    double x0 = log2((double)sizes[0]), x1 = log2((double)sizes[N_SIZES - 1]);
    char a[32];
    for (int w = 0; w < n_worlds; w++) {
        int left = ml + w * (pw + gap);
        fprintf(f, "<text x='%d' y='%d' font-size='15'>%d actors, %ld CPUs</text>\n", left, mt - 12,
                worlds[w], sysconf(_SC_NPROCESSORS_ONLN));
        fprintf(f, "<rect x='%d' y='%d' width='%d' height='%d' fill='none' stroke='#888'/>\n", left,
                mt, pw, ph);
        for (int d = d_lo; d <= d_hi; d++) { /* decades of time */
            double y = mt + ph - (double)(d - d_lo) / (d_hi - d_lo) * ph;
            fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#ddd'/>\n", left, y,
                    left + pw, y);
            fprintf(f, "<text x='%d' y='%.1f' text-anchor='end'>%s</text>\n", left - 6, y + 4,
                    time_label(pow(10, d), a, sizeof a));
        }
        for (int s = 0; s < N_SIZES; s++) {
            double x = left + (log2((double)sizes[s]) - x0) / (x1 - x0) * pw;
            fprintf(f, "<line x1='%.1f' y1='%d' x2='%.1f' y2='%d' stroke='#eee'/>\n", x, mt, x,
                    mt + ph);
            fprintf(f, "<text x='%.1f' y='%d' text-anchor='middle'>%s</text>\n", x, mt + ph + 18,
                    size_label(sizes[s], a, sizeof a));
        }
        fprintf(f, "<text x='%d' y='%d' text-anchor='middle'>bytes per rank</text>\n",
                left + pw / 2, mt + ph + 40);
        for (int p = 0; p < N_PATHS; p++) {
            fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2.5' points='",
                    path_colors[p]);
            for (int s = 0; s < N_SIZES; s++) {
                if (p50[w][p][s] <= 0) continue;
                double x = left + (log2((double)sizes[s]) - x0) / (x1 - x0) * pw;
                double y = mt + ph - (log10(p50[w][p][s]) - d_lo) / (d_hi - d_lo) * ph;
                fprintf(f, "%.1f,%.1f ", x, y);
            }
            fprintf(f, "'/>\n");
            for (int s = 0; s < N_SIZES; s++) {
                if (p50[w][p][s] <= 0) continue;
                double x = left + (log2((double)sizes[s]) - x0) / (x1 - x0) * pw;
                double y = mt + ph - (log10(p50[w][p][s]) - d_lo) / (d_hi - d_lo) * ph;
                char t[32];
                fprintf(f,
                        "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'><title>%s, %s: %s"
                        "</title></circle>\n",
                        x, y, path_colors[p], path_names[p], size_label(sizes[s], a, sizeof a),
                        time_label(p50[w][p][s], t, sizeof t));
            }
        }
    }
    fprintf(f,
            "<text x='%d' y='%d' font-size='12' fill='#444'>shm: ranks reduce each other's "
            "buffers in shared memory. object store: a put each, refs through the node's KV "
            "store, zero-copy gets.</text>\n"
            "<text x='%d' y='%d' font-size='12' fill='#444'>gloo: loopback TCP with an I/O "
            "thread per process, whose wake-ups dominate once there are more actors than "
            "CPUs.</text>\n"
            "<text x='%d' y='%d' font-size='12' fill='#444'>compiled graph: the driver's round "
            "trip, input to every actor's sum, through shared-memory channels and a "
            "collective node (values over 8 MiB as objects).</text>\n",
            ml, H - 42, ml, H - 26, ml, H - 10);
    static const int legend_x[N_PATHS] = {0, 130, 210, 290}; /* after each name's width */
    for (int p = 0; p < N_PATHS; p++) {                      /* legend, beside the title */
        int x = ml + 548 + legend_x[p], y = 28;
        fprintf(f, "<line x1='%d' y1='%d' x2='%d' y2='%d' stroke='%s' stroke-width='3'/>\n", x,
                y - 5, x + 28, y - 5, path_colors[p]);
        fprintf(f, "<text x='%d' y='%d'>%s</text>\n", x + 34, y, path_names[p]);
    }
    fprintf(f, "</svg>\n");
    return fclose(f);
}

static int parse_worlds(const char *s, int *out) {
    int n = 0;
    while (s && *s && n < MAX_WORLDS) {
        int w = atoi(s);
        if (w < 1 || w > MAX_ACTORS) return 0;
        out[n++] = w;
        s = strchr(s, ',');
        if (s) s++;
    }
    return n;
}

int main(int argc, char **argv) {
    tr_config *cfg;
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Rank";
    cls.methods = methods;
    cls.n_methods = sizeof methods / sizeof methods[0];
    if (tr_config_create(&cfg) || tr_config_add_class(cfg, &cls)) return 1;
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt); /* a worker runs its actor here and never returns */
    tr_config_destroy(cfg);
    if (rc) {
        fprintf(stderr, "tr_init: %s\n", tr_last_error());
        return 1;
    }
    const char *svg = argc > 1 ? argv[1] : "compare_paths.svg";
    int worlds[MAX_WORLDS] = {2, 4}, n_worlds = 2;
    if (argc > 2 && !(n_worlds = parse_worlds(argv[2], worlds))) {
        fprintf(stderr, "usage: compare_paths [chart.svg] [actor counts, e.g. 2,4]\n");
        tr_shutdown(rt);
        return 2;
    }
    int most = 0;
    for (int w = 0; w < n_worlds; w++)
        if (worlds[w] > most) most = worlds[w];
    tr_actor_id actors[MAX_ACTORS];
    for (int r = 0; r < most && !rc; r++)
        rc = tr_actor_create(rt, "Rank", NULL, NULL, 0, &actors[r]);
    static double p50[MAX_WORLDS][N_PATHS][N_SIZES];
    printf("allreduce of float32 through each path, every sum checked; median of each size's\n"
           "iterations (after a warm-up) of the slowest rank\n\n");
    for (int w = 0; w < n_worlds && !rc; w++) {
        for (int p = 0; p < N_PATHS && !rc; p++) {
            if (p == 3) {
                rc = graph_path(rt, actors, worlds[w], p50[w][p]);
                continue;
            }
            tr_ref calls[MAX_ACTORS];
            for (int r = 0; r < worlds[w]; r++) {
                job j = {worlds[w], r, p, {0}};
                snprintf(j.name, sizeof j.name, "cmp-%d-%d", worlds[w], p);
                if ((rc = tr_call(rt, actors[r], "run", &j, sizeof j, &calls[r]))) break;
            }
            static double slowest[N_SIZES * MAX_ITERS];
            memset(slowest, 0, sizeof slowest);
            for (int r = 0; r < worlds[w] && !rc; r++) {
                const void *d;
                size_t n;
                int e = tr_get(rt, calls[r], 600000, &d, &n);
                if (e) {
                    fprintf(stderr, "%s, rank %d of %d: %s\n", path_names[p], r, worlds[w],
                            tr_last_error());
                    rc = e;
                } else {
                    for (size_t k = 0; k < N_SIZES * MAX_ITERS; k++)
                        if (((const double *)d)[k] > slowest[k])
                            slowest[k] = ((const double *)d)[k];
                }
            }
            for (int r = 0; r < worlds[w]; r++)
                tr_ref_release(rt, calls[r]);
            for (int s = 0; s < N_SIZES; s++) {
                int it = iters_for(sizes[s]);
                double *t = slowest + s * MAX_ITERS + 1; /* the first maps pages */
                qsort(t, (size_t)(it - 1), sizeof *t, cmp);
                p50[w][p][s] = t[(it - 1) / 2];
            }
        }
    }
    if (rc) {
        tr_shutdown(rt);
        return 1;
    }
    char a[32], b[32];
    for (int w = 0; w < n_worlds; w++) {
        printf("%d actors        %14s %12s %12s %15s   %s\n", worlds[w], path_names[0],
               path_names[1], path_names[2], path_names[3],
               "fastest, and its lead over the object store");
        for (int s = 0; s < N_SIZES; s++) {
            int best = 0;
            for (int p = 1; p < N_PATHS; p++)
                if (p50[w][p][s] > 0 && p50[w][p][s] < p50[w][best][s]) best = p;
            printf("  %-14s", size_label(sizes[s], a, sizeof a));
            for (int p = 0; p < N_PATHS; p++)
                printf(p == 3 ? " %15s" : " %12s",
                       p50[w][p][s] > 0 ? time_label(p50[w][p][s], b, sizeof b) : "-");
            printf("   %s, %.1fx\n", path_names[best], p50[w][0][s] / p50[w][best][s]);
        }
        printf("\n");
    }
    printf("Where each wins, and why: shm ranks reduce each other's buffers in shared memory\n"
           "(no kernel on the data path); the object store puts each buffer, publishes its ref\n"
           "through the node's KV store (a round trip per rank) and reduces zero-copy views;\n"
           "gloo goes over loopback TCP with an I/O thread per process, so with more actors\n"
           "than CPUs its wake-ups dominate. At 64 MiB all three are bound by memory traffic.\n"
           "The compiled graph is timed from the driver: its input reaches every actor through\n"
           "a shared-memory channel, each makes its buffer, a collective node allreduces them\n"
           "(shm), every sum comes back; nothing goes through a socket or the node.\n\n");
    if (write_svg(svg, worlds, n_worlds, p50) == 0)
        printf("chart: %s\n", svg);
    else
        fprintf(stderr, "could not write %s\n", svg);
    tr_shutdown(rt);
    return 0;
}
