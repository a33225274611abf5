/* bench/tasks.c - remote functions and refs passed on, beside an actor call in the same
 * run: a task's sync round trip (an 8-byte echo on the node's task pool) and pipelined
 * tasks per second, beside the same echo as an actor method; and a ref passed on - a
 * call's result nested in another call's arguments, got by the callee through the store
 * (its tr_get timed inside the callee), and that whole round trip.
 *
 *   bazel run //bench:tasks [-- --json] [-- --calls N]
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "troupe/troupe.h"

static int echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

/* args: a ref (passed contained). Gets it, replies how long that tr_get took (us). */
static int timed_get(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    if (len != sizeof(tr_ref)) return tr_ctx_error(ctx, "timed_get wants a ref");
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_ref r;
    memcpy(&r, args, sizeof r);
    const void *d;
    size_t n;
    double t = bench_now_us();
    int rc = tr_get(rt, r, 10000, &d, &n);
    double us = bench_now_us() - t;
    if (rc) return tr_ctx_error(ctx, "tr_get: %s", tr_last_error());
    tr_ref_release(rt, r);
    return tr_ctx_reply(ctx, &us, sizeof us);
}

static int task_echo(tr_ctx *ctx, const void *args, size_t len) {
    return tr_ctx_reply(ctx, args, len);
}

static const tr_method_def methods[] = {{"echo", echo}, {"timed_get", timed_get}};

static double call_rtt(tr_runtime *rt, tr_actor_id a) {
    int64_t v = 7;
    tr_ref r;
    double t = bench_now_us();
    CHECK(tr_call(rt, a, "echo", &v, sizeof v, &r));
    CHECK(tr_get(rt, r, 10000, NULL, NULL));
    double us = bench_now_us() - t;
    CHECK(tr_ref_release(rt, r));
    return us;
}

static double task_rtt(tr_runtime *rt) {
    int64_t v = 7;
    tr_ref r;
    double t = bench_now_us();
    CHECK(tr_task_submit(rt, "echo", &v, sizeof v, NULL, 0, NULL, &r));
    CHECK(tr_get(rt, r, 10000, NULL, NULL));
    double us = bench_now_us() - t;
    CHECK(tr_ref_release(rt, r));
    return us;
}

/* Pipelined tasks: windows of 1000 in flight, then their results. */
static double tasks_per_s(tr_runtime *rt, int total) {
    enum { WINDOW = 1000 };
    static tr_ref refs[WINDOW];
    double t0 = bench_now_us();
    for (int done = 0; done + WINDOW <= total; done += WINDOW) {
        for (int i = 0; i < WINDOW; i++) {
            int64_t v = done + i;
            CHECK(tr_task_submit(rt, "echo", &v, sizeof v, NULL, 0, NULL, &refs[i]));
        }
        for (int i = 0; i < WINDOW; i++) {
            CHECK(tr_get(rt, refs[i], 10000, NULL, NULL));
            CHECK(tr_ref_release(rt, refs[i]));
        }
    }
    return (double)(total / WINDOW * WINDOW) / ((bench_now_us() - t0) / 1e6);
}

/* A result of a's echo, nested in b's timed_get arguments: b gets it through the store.
 * *get_us: b's tr_get; returns the round trip of b's call. */
static double nested(tr_runtime *rt, tr_actor_id a, tr_actor_id b, double *get_us) {
    int64_t v = 7;
    tr_ref r, c;
    CHECK(tr_call(rt, a, "echo", &v, sizeof v, &r));
    CHECK(tr_get(rt, r, 10000, NULL, NULL)); /* in: shared by one copy, then got */
    double t = bench_now_us();
    CHECK(tr_call_contains(rt, b, "timed_get", &r, sizeof r, NULL, 0, &r, 1, &c));
    const void *d;
    size_t n;
    CHECK(tr_get(rt, c, 10000, &d, &n));
    double us = bench_now_us() - t;
    if (n != sizeof *get_us) exit(1);
    memcpy(get_us, d, sizeof *get_us);
    CHECK(tr_ref_release(rt, c));
    CHECK(tr_ref_release(rt, r));
    return us;
}

int main(int argc, char **argv) {
    int calls = 5000;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--calls") == 0) calls = atoi(argv[i + 1]);
    if (calls < 1000) calls = 1000;
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Bench";
    cls.methods = methods;
    cls.n_methods = 2;
    CHECK(tr_config_add_class(cfg, &cls));
    CHECK(tr_config_add_function(cfg, "echo", task_echo));
    tr_worker_main(cfg);
    bench_init(argc, argv);
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    tr_actor_id a, b;
    CHECK(tr_actor_create(rt, "Bench", NULL, NULL, 0, &a));
    CHECK(tr_actor_create(rt, "Bench", NULL, NULL, 0, &b));
    CHECK(tr_actor_wait_ready(rt, a, 30000));
    CHECK(tr_actor_wait_ready(rt, b, 30000));
    for (int i = 0; i < 200; i++) { /* warm: connections, the task pool's workers */
        call_rtt(rt, a);
        task_rtt(rt);
    }
    double *tc = malloc(sizeof(double) * (size_t)calls);
    double *tt = malloc(sizeof(double) * (size_t)calls);
    for (int i = 0; i < calls; i++) { /* interleaved: both see the same load */
        tc[i] = call_rtt(rt, a);
        tt[i] = task_rtt(rt);
    }
    double c50 = bench_percentile(tc, (size_t)calls, 50);
    double t50 = bench_percentile(tt, (size_t)calls, 50);
    bench_report("call_rtt_us_p50", c50, "us");
    bench_report("task_rtt_us_p50", t50, "us");
    bench_report("task_rtt_us_p99", bench_percentile(tt, (size_t)calls, 99), "us");
    bench_report("task_over_call_rtt", t50 / c50, "x");
    double cps = bench_async_calls_per_s(rt, a, "echo", calls * 4);
    double tps = tasks_per_s(rt, calls * 4);
    bench_report("calls_per_s", cps, "calls/s");
    bench_report("tasks_per_s", tps, "tasks/s");
    int nn = calls / 5;
    double *tn = malloc(sizeof(double) * (size_t)nn), *tg = malloc(sizeof(double) * (size_t)nn);
    for (int i = 0; i < 50; i++)
        nested(rt, a, b, &tg[0]);
    for (int i = 0; i < nn; i++) {
        tn[i] = nested(rt, a, b, &tg[i]);
        tc[i] = call_rtt(rt, b);
    }
    bench_report("nested_ref_get_us_p50", bench_percentile(tg, (size_t)nn, 50), "us");
    bench_report("nested_ref_call_us_p50", bench_percentile(tn, (size_t)nn, 50), "us");
    bench_report("call_rtt_us_p50_beside_nested", bench_percentile(tc, (size_t)nn, 50), "us");
    tr_store_stats st = TR_STORE_STATS_INIT;
    CHECK(tr_object_stats(rt, &st));
    if (st.n_objects) {
        fprintf(stderr, "leak: %llu objects left\n", (unsigned long long)st.n_objects);
        return 1;
    }
    free(tc);
    free(tt);
    free(tn);
    free(tg);
    tr_shutdown(rt);
    tr_config_destroy(cfg);
    return 0;
}
