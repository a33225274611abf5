/* examples/cluster_actors.c - a driver on one node of a cluster using an actor on another:
 * the actor is placed there by that node's "node:<its IP>" resource, called (its round
 * trip timed), given an object put here (pulled there on first use) and asked for one it
 * puts there (pulled here by tr_get). Start a cluster first (README, "Cluster"), then on
 * any node:
 *
 *   bazel run //examples:cluster_actors -- <this node's socket> <another node's IP>
 *
 * (`troupe start` prints the socket: "address: /tmp/troupe-0/n.../node.sock"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "troupe/troupe.h"

static int echo(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

/* The sum of the bytes of its one object argument. */
static int sum(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self, (void)args, (void)len;
    const unsigned char *p;
    size_t n;
    if (tr_ctx_ref(ctx, 0, (const void **)&p, &n)) return tr_ctx_error(ctx, "no object");
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += p[i];
    return tr_ctx_reply(ctx, &s, sizeof s);
}

/* Puts `size` bytes of 1 and replies the object's ref. */
static int make(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    uint64_t size;
    if (len != 8) return tr_ctx_error(ctx, "make wants a size");
    memcpy(&size, args, 8);
    char *b = malloc(size ? size : 1);
    if (!b) return tr_ctx_error(ctx, "no memory");
    memset(b, 1, size);
    tr_ref r;
    int rc = tr_put(tr_ctx_runtime(ctx), b, size, &r);
    free(b);
    return rc ? tr_ctx_error(ctx, "tr_put: %s", tr_last_error()) : tr_ctx_reply(ctx, &r, 16);
}

static const tr_method_def methods[] = {{"echo", echo}, {"sum", sum}, {"make", make}};

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int fail(const char *what, int rc) {
    fprintf(stderr, "cluster_actors: %s: %s (%s)\n", what, tr_last_error(), tr_errname(rc));
    return 1;
}

int main(int argc, char **argv) {
    tr_config *cfg;
    tr_config_create(&cfg);
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Far";
    cls.methods = methods;
    cls.n_methods = 3;
    tr_config_add_class(cfg, &cls);
    tr_worker_main(cfg); /* the actor's worker (on the other node) never returns here */
    if (argc != 3) {
        fprintf(stderr, "usage: cluster_actors <this node's socket> <another node's IP>\n");
        return 2;
    }
    tr_config_set(cfg, "address", argv[1]);
    tr_runtime *rt;
    int rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) return fail("tr_init", rc);

    char where[64];
    snprintf(where, sizeof where, "node:%s", argv[2]);
    tr_resource res = {where, 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &res;
    o.n_resources = 1;
    tr_actor_id far;
    if ((rc = tr_actor_create(rt, "Far", &o, NULL, 0, &far)) ||
        (rc = tr_actor_wait_ready(rt, far, 30000)))
        return fail("creating the actor there", rc);
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    tr_actor_info(rt, far, &d);
    printf("actor on node %s, pid %d there\n", d.node, d.pid);

    double best = 1e9;
    for (int i = 0; i < 200; i++) {
        int64_t v = i;
        tr_ref r;
        double t0 = now_us();
        if ((rc = tr_call(rt, far, "echo", &v, 8, &r)) || (rc = tr_get(rt, r, 10000, NULL, NULL)))
            return fail("echo", rc);
        double t = now_us() - t0;
        if (t < best) best = t;
        tr_ref_release(rt, r);
    }
    printf("an 8-byte echo across nodes: %.0f us at best of 200\n", best);

    size_t size = 64 << 20;
    char *buf = malloc(size);
    memset(buf, 2, size);
    tr_ref obj, r;
    const void *p;
    size_t n;
    rc = tr_put(rt, buf, size, &obj);
    free(buf);
    if (rc || (rc = tr_call_refs(rt, far, "sum", NULL, 0, &obj, 1, &r)) ||
        (rc = tr_get(rt, r, 60000, &p, &n)))
        return fail("sum of an object put here", rc);
    printf("64 MiB put here, summed there: %llu (expected %llu)\n",
           (unsigned long long)*(const uint64_t *)p, (unsigned long long)2 * size);
    tr_ref_release(rt, r);
    tr_ref_release(rt, obj);

    uint64_t want = 64 << 20;
    if ((rc = tr_call(rt, far, "make", &want, 8, &r)) || (rc = tr_get(rt, r, 60000, &p, &n)))
        return fail("make", rc);
    memcpy(&obj, p, 16);
    double t0 = now_us();
    if ((rc = tr_get(rt, obj, 60000, &p, &n))) return fail("tr_get of an object there", rc);
    double us = now_us() - t0;
    printf("64 MiB put there, pulled here: %zu bytes in %.1f ms (%.2f GB/s)\n", n, us / 1e3,
           n / us / 1e3);
    tr_shutdown(rt); /* the actor there goes with us */
    return 0;
}
