/* examples/hello_actors.c - the main job of the README's first command: start an embedded
 * node, create a few actors (each its own worker process), call them, print the results
 * and the measured round trip of a method call.
 *
 *   bazel run //examples:hello_actors -- [n_actors]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "troupe/troupe.h"

/* An actor class: a counter with a name. Arguments and results are raw int64 here. */
typedef struct counter {
    int64_t value;
    char name[32];
} counter;

static int counter_new(tr_ctx *ctx, const void *args, size_t len, void **self) {
    counter *c = calloc(1, sizeof *c);
    if (!c) return tr_ctx_error(ctx, "out of memory");
    snprintf(c->name, sizeof c->name, "%.*s", (int)len, (const char *)args);
    *self = c;
    return 0;
}

static void counter_free(void *self) {
    free(self);
}

static int counter_add(tr_ctx *ctx, void *self, const void *args, size_t len) {
    counter *c = self;
    int64_t d;
    if (len != sizeof d) return tr_ctx_error(ctx, "add wants one int64, got %zu bytes", len);
    memcpy(&d, args, sizeof d);
    c->value += d;
    return tr_ctx_reply(ctx, &c->value, sizeof c->value);
}

static int counter_whoami(tr_ctx *ctx, void *self, const void *args, size_t len) {
    counter *c = self;
    (void)args;
    (void)len;
    char msg[96];
    int n = snprintf(msg, sizeof msg, "%s in pid %d", c->name, (int)getpid());
    return tr_ctx_reply(ctx, msg, (size_t)n + 1);
}

static int counter_echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

static const tr_method_def counter_methods[] = {
    {"add", counter_add},
    {"whoami", counter_whoami},
    {"echo", counter_echo},
};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_) {                                                                                 \
            fprintf(stderr, "%s failed: %s: %s\n", #expr, tr_errname(rc_), tr_last_error());       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Counter";
    cls.ctor = counter_new;
    cls.dtor = counter_free;
    cls.methods = counter_methods;
    cls.n_methods = sizeof counter_methods / sizeof counter_methods[0];
    CHECK(tr_config_add_class(cfg, &cls));
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt)); /* in a worker process this runs the actor and never returns */

    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (n < 1 || n > 64) n = 4;
    printf("troupe %s: embedded node at %s\n", tr_version_string(), tr_runtime_address(rt));
    char *status; /* its status page and metrics, while it runs: the node's "dashboard" */
    if (tr_node_status(rt, &status) == 0) {
        const char *at = strstr(status, "\"dashboard\":\"");
        const char *end = at ? strchr(at + 13, '"') : NULL;
        if (end)
            printf("status page: %.*s (Prometheus: %.*smetrics)\n", (int)(end - at - 13), at + 13,
                   (int)(end - at - 13), at + 13);
        tr_free(status);
    }
    tr_actor_id actors[64];
    double t0 = now_us();
    for (int i = 0; i < n; i++) {
        char name[32];
        int len = snprintf(name, sizeof name, "counter-%d", i);
        CHECK(tr_actor_create(rt, "Counter", NULL, name, (size_t)len, &actors[i]));
    }
    for (int i = 0; i < n; i++)
        CHECK(tr_actor_wait_ready(rt, actors[i], 10000));
    printf("created %d actors in %.1f ms\n", n, (now_us() - t0) / 1e3);

    for (int i = 0; i < n; i++) {
        tr_ref ref;
        const void *data;
        size_t len;
        CHECK(tr_call(rt, actors[i], "whoami", NULL, 0, &ref));
        CHECK(tr_get(rt, ref, 5000, &data, &len));
        printf("  actor %d: %s\n", i, (const char *)data);
        tr_ref_release(rt, ref);
    }
    /* Every actor adds 1..100; the totals must be 5050 each. */
    tr_ref refs[64 * 100];
    int k = 0;
    for (int64_t v = 1; v <= 100; v++)
        for (int i = 0; i < n; i++)
            CHECK(tr_call(rt, actors[i], "add", &v, sizeof v, &refs[k++]));
    for (int j = k - n; j < k; j++) {
        const void *data;
        size_t len;
        CHECK(tr_get(rt, refs[j], 5000, &data, &len));
        int64_t total;
        memcpy(&total, data, sizeof total);
        printf("  actor %d total: %lld (expected 5050)\n", j - (k - n), (long long)total);
    }
    for (int j = 0; j < k; j++)
        tr_ref_release(rt, refs[j]);

    /* Round trip of a small echo call, measured. */
    enum { ITERS = 5000 };
    static double lat[ITERS];
    for (int i = 0; i < ITERS + 500; i++) {
        double s = now_us();
        tr_ref ref;
        const void *data;
        size_t len;
        int64_t v = i;
        CHECK(tr_call(rt, actors[0], "echo", &v, sizeof v, &ref));
        CHECK(tr_get(rt, ref, 5000, &data, &len));
        tr_ref_release(rt, ref);
        if (i >= 500) lat[i - 500] = now_us() - s;
    }
    qsort(lat, ITERS, sizeof lat[0], cmp_double);
    printf("echo round trip over %d calls: p50 %.1f us, p99 %.1f us\n", ITERS, lat[ITERS / 2],
           lat[ITERS * 99 / 100]);

    /* A method error comes back with its message; the actor lives on. */
    tr_ref bad;
    CHECK(tr_call(rt, actors[0], "add", "x", 1, &bad));
    int rc = tr_get(rt, bad, 5000, NULL, NULL);
    printf("bad call: %s: %s\n", tr_errname(rc), tr_last_error());
    tr_ref_release(rt, bad);

    tr_shutdown(rt);
    tr_config_destroy(cfg);
    printf("shut down cleanly\n");
    return 0;
}
