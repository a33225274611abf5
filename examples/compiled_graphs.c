/* examples/compiled_graphs.c - Ray's Compiled Graphs quickstart, in C: the same echo
 * actor timed through a classic call and through a compiled graph; a chain a -> b; a
 * graph with several outputs; and one of four actors killed under a graph (the others
 * answer, and a new graph over them works).
 *
 *   bazel run //examples:compiled_graphs
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/dag.h"
#include "troupe/troupe.h"

static int echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

/* Its int64 argument plus one. */
static int inc(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    int64_t x;
    if (len != sizeof x) return tr_ctx_error(ctx, "inc wants an int64");
    memcpy(&x, args, sizeof x);
    x++;
    return tr_ctx_reply(ctx, &x, sizeof x);
}

static const tr_method_def methods[] = {{"echo", echo}, {"inc", inc}};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s: %s: %s\n", #expr, tr_errname(rc_), tr_last_error());              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Runs x through a graph with `outs` outputs; prints each as an int64. */
static void run_and_print(tr_dag *g, int64_t x, size_t outs, const char *what) {
    uint64_t e;
    CHECK(tr_dag_execute(g, &x, sizeof x, &e));
    printf("%s(%lld) ->", what, (long long)x);
    for (size_t i = 0; i < outs; i++) {
        const void *d;
        size_t n;
        CHECK(tr_dag_get(g, e, i, 5000, &d, &n));
        int64_t v;
        memcpy(&v, d, sizeof v);
        printf(" %lld", (long long)v);
    }
    printf("\n");
    CHECK(tr_dag_release(g, e));
}

/* A graph: the input to each of n actors' `method`, every result an output. */
static tr_dag *fan_out(tr_runtime *rt, const tr_actor_id *a, int n, const char *method) {
    tr_dag *g;
    tr_dag_node in, out[8];
    CHECK(tr_dag_create(rt, &g));
    CHECK(tr_dag_input(g, &in));
    for (int i = 0; i < n; i++)
        CHECK(tr_dag_bind(g, a[i], method, &in, 1, &out[i]));
    CHECK(tr_dag_output(g, out, (size_t)n));
    CHECK(tr_dag_compile(g, NULL));
    return g;
}

int main(void) {
    tr_config *cfg;
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "EchoActor";
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
    tr_actor_id a[4];
    for (int i = 0; i < 4; i++) {
        CHECK(tr_actor_create(rt, "EchoActor", NULL, NULL, 0, &a[i]));
        CHECK(tr_actor_wait_ready(rt, a[i], 10000));
    }

    /* 1. The echo actor: a classic call, then the same through a compiled graph. */
    enum { N = 10000 };
    static double t[N];
    const char msg[] = "hello";
    for (int i = 0; i < N; i++) {
        tr_ref r;
        double t0 = now_us();
        CHECK(tr_call(rt, a[0], "echo", msg, sizeof msg, &r));
        CHECK(tr_get(rt, r, 5000, NULL, NULL));
        CHECK(tr_ref_release(rt, r));
        t[i] = now_us() - t0;
    }
    qsort(t, N, sizeof t[0], cmp);
    double classic = t[N / 2];
    tr_dag *g = fan_out(rt, a, 1, "echo");
    for (int i = 0; i < N; i++) {
        uint64_t e;
        const void *d;
        size_t n;
        double t0 = now_us();
        CHECK(tr_dag_execute(g, msg, sizeof msg, &e));
        CHECK(tr_dag_get(g, e, 0, 5000, &d, &n));
        CHECK(tr_dag_release(g, e));
        t[i] = now_us() - t0;
    }
    qsort(t, N, sizeof t[0], cmp);
    printf("echo round trip (median of %d): classic call %.2f us, compiled graph %.2f us "
           "(%.0fx faster)\n",
           N, classic, t[N / 2], classic / t[N / 2]);
    CHECK(tr_dag_destroy(g));

    /* 2. A chain: a.inc -> b.inc. */
    tr_dag_node in, na, nb;
    CHECK(tr_dag_create(rt, &g));
    CHECK(tr_dag_input(g, &in));
    CHECK(tr_dag_bind(g, a[0], "inc", &in, 1, &na));
    CHECK(tr_dag_bind(g, a[1], "inc", &na, 1, &nb));
    CHECK(tr_dag_output(g, &nb, 1));
    CHECK(tr_dag_compile(g, NULL));
    char *dot;
    CHECK(tr_dag_to_dot(g, &dot));
    printf("\nthe chain, as Graphviz:\n%s", dot);
    tr_free(dot);
    run_and_print(g, 1, 1, "chain");
    CHECK(tr_dag_destroy(g));

    /* 3. Several outputs: the input to four actors, four results. */
    g = fan_out(rt, a, 4, "inc");
    run_and_print(g, 10, 4, "multi-output");

    /* 4. Kill one of the four: the graph fails with TR_EACTOR_DIED and tears itself down;
     * the other three answer, and a new graph over them works. */
    CHECK(tr_actor_kill(rt, a[2], 1));
    int64_t x = 20;
    uint64_t e;
    const void *d;
    size_t n;
    rc = tr_dag_execute(g, &x, sizeof x, &e);
    for (size_t i = 0; i < 4 && !rc; i++)
        rc = tr_dag_get(g, e, i, 5000, &d, &n);
    printf("\nafter killing one of the four actors: %s (%s)\n", tr_errname(rc), tr_last_error());
    tr_dag_destroy(g);
    tr_actor_id alive[3] = {a[0], a[1], a[3]};
    g = fan_out(rt, alive, 3, "inc");
    run_and_print(g, 30, 3, "a new graph over the other three");
    CHECK(tr_dag_destroy(g));
    tr_shutdown(rt);
    return 0;
}
