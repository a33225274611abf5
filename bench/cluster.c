/* bench/cluster.c - the network between two nodes, as troupe's cross-node RPC sees it:
 * two network namespaces on a bridge (tools/netns.h; root), a server in one, the
 * measurements from the other, in the same run:
 *   raw_grpc_rtt_us_p50      a raw gRPC C-core unary echo (100 bytes; one completion
 *                            queue reused, the way a tuned client calls)
 *   rpc_rtt_us_p50           the same echo through core/rpc (token check, a queue per
 *                            call, msgpack-free bytes): what a control message costs
 *   rpc_over_raw_grpc        their ratio, round by round
 *   rpc_stream_rtt_us_p50    the echo as messages on one core/rpc stream (one in flight)
 *   rpc_stream_msgs_per_s    echoes on one stream with up to 1,000 in flight
 *   raw_tcp_gbps             one TCP stream over the same veth from a 256 MiB buffer into
 *                            another (the bytes an object pull moves, memory to memory)
 *   raw_tcp_cached_gbps      the same stream from one 1 MiB buffer into another, 256
 *                            times (both stay in the caches: no memory traffic)
 *   cluster_call_rtt_us_p50  an 8-byte echo to an actor on the other node: the client's
 *                            embedded node joins the server's (the head), the actor is
 *                            placed there by its "node:10.213.0.1" resource, and each
 *                            call goes caller -> link -> that node's relay -> worker
 *   cluster_over_raw_grpc    its ratio to raw_grpc_rtt_us_p50, round by round
 *   cluster_async_calls_per_s  the same echo, 1,000 calls in flight at a time
 *   cluster_dag_rtt_us_p50   the same echo as a compiled graph (input -> the actor there ->
 *                            output, through the nodes' bridges), one execution at a time
 *   cluster_dag_over_raw_grpc  its ratio to raw_grpc_rtt_us_p50, round by round
 *   object_pull_gbps_256MiB  tr_get here of a 256 MiB object the actor put there: pulled
 *                            over the link in pieces into this node's store (released
 *                            after each round, so each round pulls it again)
 *   object_pull_over_raw_tcp its ratio to raw_tcp_gbps, round by round
 *   raw_gloo_allreduce_us_{4B,1MiB,64MiB}  raw Gloo (libgloo, TCP on the namespaces'
 *                            addresses, a file-store rendezvous), two ranks, one per
 *                            namespace: a barrier, then a timed in-place float32 sum
 *   cluster_gloo_allreduce_us_{...}  the same through troupe: a gloo group declared over
 *                            an actor on each node (tr_group_declare across nodes), timed
 *                            the same way inside the actor here; agreement checks off, as
 *                            raw Gloo has none
 *   cluster_gloo_over_raw_{...}  their ratio, round by round
 *   cluster_gloo_checked_us_{...}  troupe's default: each op's agreement checked (one more
 *                            exchange of 256 bytes per rank, which carries ops <= 224 B)
 *   cluster_flat4_allreduce_us_{...}, cluster_hier4_allreduce_us_{...}  four ranks, two per
 *                            node: a gloo group, and a two-level one (backend "hier": shm
 *                            in each node, Gloo between the nodes' leaders); checks off
 *   cluster_hier4_over_flat4_{...}  their ratio, round by round
 * 5 rounds, interleaved; medians with their spread.
 *
 *   bazel build //bench:cluster && sudo bazel-bin/bench/cluster [--json]
 * (roles: --serve, --client HOST: the run starts them itself in the namespaces)
 */
#include <arpa/inet.h>
#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "bench/raw_gloo.h"
#include "core/rpc.h"
#include "troupe/dag.h"
#include "troupe/troupe.h"
#include "tools/netns.h"

#define RAW_PORT 7401
#define RPC_PORT 7402
#define TCP_PORT 7403
#define HEAD_PORT 7404
#define TOKEN "bench-token"
#define PAYLOAD 100
#define ROUNDS 5
#define CALLS 2000
#define TCP_BYTES (256ull << 20)

static void die(const char *what) {
    fprintf(stderr, "bench/cluster: %s\n", what);
    exit(1);
}

/* ------------------------------------------------------------------ server side */

/* A raw gRPC echo server: one call at a time, on this thread. */
static void *raw_grpc_server(void *arg) {
    (void)arg;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server *srv = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(srv, cq, NULL);
    grpc_server_credentials *cr = grpc_insecure_server_credentials_create();
    char addr[64];
    snprintf(addr, sizeof addr, "0.0.0.0:%d", RAW_PORT);
    if (grpc_server_add_http2_port(srv, addr, cr) <= 0) die("raw grpc: listen");
    grpc_server_credentials_release(cr);
    grpc_server_start(srv);
    for (;;) {
        grpc_call *call = NULL;
        grpc_call_details det;
        grpc_metadata_array md;
        grpc_call_details_init(&det);
        grpc_metadata_array_init(&md);
        if (grpc_server_request_call(srv, &call, &det, &md, cq, cq, (void *)1) != GRPC_CALL_OK)
            die("raw grpc: request_call");
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE || !ev.success) die("raw grpc: new call");
        grpc_byte_buffer *req = NULL;
        grpc_op ops[4];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_RECV_MESSAGE;
        ops[1].data.recv_message.recv_message = &req;
        grpc_call_start_batch(call, ops, 2, (void *)2, NULL);
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        int cancelled = 0;
        grpc_slice none = grpc_empty_slice();
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_MESSAGE;
        ops[0].data.send_message.send_message = req;
        ops[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
        ops[1].data.send_status_from_server.status = GRPC_STATUS_OK;
        ops[1].data.send_status_from_server.status_details = &none;
        ops[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[2].data.recv_close_on_server.cancelled = &cancelled;
        if (req) {
            grpc_call_start_batch(call, ops, 3, (void *)3, NULL);
            grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            grpc_byte_buffer_destroy(req);
        }
        grpc_call_unref(call);
        grpc_call_details_destroy(&det);
        grpc_metadata_array_destroy(&md);
    }
    return NULL;
}

static int echo(void *ctx, tr__rpc_req *call, const void *req, size_t len, tr__buf *reply) {
    (void)ctx;
    (void)call;
    return tr__buf_append(reply, req, len);
}

static void stream_echo(void *ctx, tr__rpc_stream *st, const void *msg, size_t len) {
    (void)ctx;
    tr__rpc_stream_send(st, msg, len);
}

static const tr__rpc_stream_handlers stream_handlers = {stream_echo, NULL, NULL, NULL};

/* A TCP sink: reads each connection to its end, then answers one byte. The first byte
 * says where the rest goes: 'c' into one 1 MiB buffer again and again (it stays in the
 * caches), 'm' into a 256 MiB buffer end to end (memory, as an object's bytes land). */
static void *tcp_sink(void *arg) {
    (void)arg;
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(TCP_PORT)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4)) die("tcp: listen");
    static char small[1 << 20];
    char *big = malloc(TCP_BYTES);
    if (!big) die("tcp: no memory");
    memset(big, 0, TCP_BYTES); /* faulted in once, as the store's pages are */
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) continue;
        char mode = 0;
        if (read(c, &mode, 1) == 1) {
            uint64_t off = 0;
            for (;;) {
                char *dst = mode == 'm' ? big + off : small;
                size_t cap = mode == 'm' ? TCP_BYTES - off : sizeof small;
                if (cap == 0) off = 0, dst = big, cap = TCP_BYTES;
                ssize_t n = read(c, dst, cap > (1u << 20) ? (1u << 20) : cap);
                if (n <= 0) break;
                if (mode == 'm') off += (uint64_t)n;
            }
        }
        if (write(c, "k", 1) != 1) die("tcp: ack");
        close(c);
    }
    return NULL;
}

static int echo_method(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    return tr_ctx_reply(ctx, args, len);
}

/* Puts an object of the size asked for (a byte pattern) and replies its ref; the worker
 * holds it. */
static int put_method(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    uint64_t size;
    if (len != 8) return tr_ctx_error(ctx, "put wants a size");
    memcpy(&size, args, 8);
    char *buf = malloc(size ? size : 1);
    if (!buf) return tr_ctx_error(ctx, "no memory");
    for (uint64_t i = 0; i < size; i++)
        buf[i] = (char)(i * 131 + 7);
    tr_ref r;
    int rc = tr_put(tr_ctx_runtime(ctx), buf, size, &r);
    free(buf);
    if (rc) return tr_ctx_error(ctx, "tr_put: %s", tr_last_error());
    return tr_ctx_reply(ctx, &r, sizeof r);
}

/* gloo_args: a gloo group's allreduce, timed as bench/raw_gloo.cc times raw Gloo. */
typedef struct gloo_args {
    char name[32];
    uint64_t bytes;
    int32_t iters, checks;
} gloo_args;

/* Runs args.iters allreduces (a barrier before each) on the group declared under
 * args.name (opened on first use, kept), replies the median time of one, in us. */
static int gloo_method(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    gloo_args a;
    if (len != sizeof a) return tr_ctx_error(ctx, "gloo wants gloo_args");
    memcpy(&a, args, sizeof a);
    tr_runtime *rt = tr_ctx_runtime(ctx);
    tr_group *g;
    if (tr_group_get(rt, a.name, &g) && tr_group_open(rt, a.name, 60000, &g))
        return tr_ctx_error(ctx, "open: %s", tr_last_error());
    tr_group_set_checks(g, a.checks);
    size_t n = a.bytes / sizeof(float);
    float *buf = malloc((n ? n : 1) * sizeof *buf);
    double *t = malloc((size_t)a.iters * sizeof *t);
    int rc = buf && t ? 0 : TR_ENOMEM, wrong = 0;
    for (int i = 0; i < a.iters && !rc && !wrong; i++) {
        for (size_t k = 0; k < n; k++)
            buf[k] = (float)(tr_group_rank(g) + 1);
        rc = tr_barrier(g, 60000);
        double t0 = bench_now_us();
        if (!rc) rc = tr_allreduce(g, buf, buf, n, TR_FLOAT32, TR_SUM, 60000);
        t[i] = bench_now_us() - t0;
        int w = tr_group_size(g);
        if (!rc && n && buf[n - 1] != (float)(w * (w + 1) / 2)) wrong = 1;
    }
    double med = rc || wrong ? 0 : bench_percentile(t, (size_t)a.iters, 50);
    free(buf);
    free(t);
    if (rc) return tr_ctx_error(ctx, "allreduce: %s: %s", tr_errname(rc), tr_last_error());
    if (wrong) return tr_ctx_error(ctx, "allreduce: a wrong sum");
    return tr_ctx_reply(ctx, &med, sizeof med);
}

static const tr_method_def echo_methods[] = {
    {"echo", echo_method}, {"put", put_method}, {"gloo", gloo_method}};

/* The configuration both sides (and the actor's worker) start from. */
static tr_config *base_config(void) {
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Echo";
    cls.methods = echo_methods;
    cls.n_methods = 3;
    CHECK(tr_config_add_class(cfg, &cls));
    return cfg;
}

static tr_runtime *head_rt;

/* The raw Gloo sizes and iterations; the run's file-store directory (in /dev/shm, which
 * both namespaces see). */
static const size_t gloo_bytes[3] = {4, 1 << 20, 64 << 20};
static const int gloo_iters[3] = {200, 40, 5};
static const char *gloo_names[3] = {"4B", "1MiB", "64MiB"};
static const char *gloo_dir;

/* Raw Gloo's rank 0, on the head's side: every round's three sizes, in the client's
 * order (each joins through the file store when the client's rank 1 comes). */
static void *raw_gloo_rank0(void *arg) {
    (void)arg;
    static double t[200];
    char err[256], prefix[32];
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < 3; k++) {
            snprintf(prefix, sizeof prefix, "r%ds%d", r, k);
            if (raw_gloo_run_on("10.213.0.1", gloo_dir, prefix, 2, 0, RAW_GLOO_ALLREDUCE,
                                gloo_bytes[k], gloo_iters[k], t, err, sizeof err))
                fprintf(stderr, "bench/cluster: %s\n", err);
        }
    }
    return NULL;
}

static int serve(void) {
    /* the head of a cluster (an embedded node), where the actor will live */
    tr_config *cfg = base_config();
    char port[16];
    snprintf(port, sizeof port, "%d", HEAD_PORT);
    CHECK(tr_config_set(cfg, "cluster_port", port));
    CHECK(tr_config_set(cfg, "cluster_bind", "10.213.0.1"));
    CHECK(tr_config_set(cfg, "cluster_token", TOKEN));
    CHECK(tr_init(cfg, &head_rt));
    tr_config_destroy(cfg);
    grpc_init();
    pthread_t t1, t2, t3;
    pthread_create(&t1, NULL, raw_grpc_server, NULL);
    pthread_create(&t2, NULL, tcp_sink, NULL);
    pthread_create(&t3, NULL, raw_gloo_rank0, NULL);
    tr__rpc_server *s;
    char bind[64];
    snprintf(bind, sizeof bind, "0.0.0.0:%d", RPC_PORT);
    if (tr__rpc_server_create(bind, TOKEN, 1 << 20, echo, NULL, &s, NULL)) die("rpc: listen");
    tr__rpc_server_on_stream(s, &stream_handlers);
    printf("ready\n");
    fflush(stdout);
    pause(); /* until killed */
    return 0;
}

/* ------------------------------------------------------------------ client side */

static double raw_grpc_rtt(const char *host) {
    char target[64];
    snprintf(target, sizeof target, "%s:%d", host, RAW_PORT);
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cr, NULL);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice method = grpc_slice_from_static_string("/bench.Echo/Ping");
    char body[PAYLOAD];
    memset(body, 'x', sizeof body);
    static double lat[CALLS];
    for (int i = -200; i < CALLS; i++) { /* (200 warm-up calls) */
        double t0 = bench_now_us();
        grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method,
                                                   NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        grpc_slice sl = grpc_slice_from_copied_buffer(body, sizeof body);
        grpc_byte_buffer *req = grpc_raw_byte_buffer_create(&sl, 1), *resp = NULL;
        grpc_slice_unref(sl);
        grpc_metadata_array im, tm;
        grpc_metadata_array_init(&im);
        grpc_metadata_array_init(&tm);
        grpc_status_code st;
        grpc_slice det;
        grpc_op ops[6];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = req;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &im;
        ops[4].op = GRPC_OP_RECV_MESSAGE;
        ops[4].data.recv_message.recv_message = &resp;
        ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        ops[5].data.recv_status_on_client.trailing_metadata = &tm;
        ops[5].data.recv_status_on_client.status = &st;
        ops[5].data.recv_status_on_client.status_details = &det;
        grpc_call_start_batch(call, ops, 6, (void *)7, NULL);
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE || st != GRPC_STATUS_OK || !resp ||
            grpc_byte_buffer_length(resp) != PAYLOAD)
            die("raw grpc: a call failed");
        if (i >= 0) lat[i] = bench_now_us() - t0;
        grpc_slice_unref(det);
        grpc_byte_buffer_destroy(resp);
        grpc_byte_buffer_destroy(req);
        grpc_metadata_array_destroy(&im);
        grpc_metadata_array_destroy(&tm);
        grpc_call_unref(call);
    }
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return bench_percentile(lat, CALLS, 50);
}

static double rpc_rtt(const char *host) {
    char target[64];
    snprintf(target, sizeof target, "%s:%d", host, RPC_PORT);
    tr__rpc_client *c;
    if (tr__rpc_client_create(target, TOKEN, 1 << 20, &c)) die("rpc: client");
    char body[PAYLOAD];
    memset(body, 'x', sizeof body);
    static double lat[CALLS];
    tr__buf r = TR__BUF_INIT;
    for (int i = -200; i < CALLS; i++) {
        tr__buf_reset(&r);
        double t0 = bench_now_us();
        if (tr__rpc_call(c, body, sizeof body, 10000, &r) || r.len != PAYLOAD)
            die("rpc: a call failed");
        if (i >= 0) lat[i] = bench_now_us() - t0;
    }
    tr__buf_free(&r);
    tr__rpc_client_destroy(c);
    return bench_percentile(lat, CALLS, 50);
}

/* One stream: round trips one at a time (p50, us) and pipelined echoes per second. */
static void stream_figures(const char *host, double *rtt, double *per_s) {
    char target[64];
    snprintf(target, sizeof target, "%s:%d", host, RPC_PORT);
    tr__rpc_client *c;
    tr__rpc_stream *st;
    if (tr__rpc_client_create(target, TOKEN, 1 << 20, &c) || tr__rpc_stream_open(c, &st))
        die("rpc stream: open");
    char body[PAYLOAD];
    memset(body, 'x', sizeof body);
    static double lat[CALLS];
    tr__buf r = TR__BUF_INIT;
    for (int i = -200; i < CALLS; i++) {
        tr__buf_reset(&r);
        double t0 = bench_now_us();
        if (tr__rpc_stream_send(st, body, sizeof body) || tr__rpc_stream_recv(st, 10000, &r) ||
            r.len != PAYLOAD)
            die("rpc stream: an echo failed");
        if (i >= 0) lat[i] = bench_now_us() - t0;
    }
    *rtt = bench_percentile(lat, CALLS, 50);
    const int total = 50000, window = 1000;
    int sent = 0, got = 0;
    double t0 = bench_now_us();
    while (got < total) {
        while (sent < total && sent - got < window) {
            if (tr__rpc_stream_send(st, body, sizeof body)) die("rpc stream: send");
            sent++;
        }
        tr__buf_reset(&r);
        if (tr__rpc_stream_recv(st, 10000, &r)) die("rpc stream: recv");
        got++;
    }
    *per_s = total / ((bench_now_us() - t0) / 1e6);
    tr__buf_free(&r);
    tr__rpc_stream_close(st);
    tr__rpc_client_destroy(c);
}

/* One TCP stream of TCP_BYTES to the sink: from a 1 MiB buffer sent again and again into
 * one the sink reuses (cached: 'c'), or from a 256 MiB buffer into another ('m'). */
static double tcp_gbps(const char *host, char mode) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(TCP_PORT)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) die("tcp: connect");
    static char *big;
    static char small[1 << 20];
    if (!big) { /* filled once, so every page is its own (not the shared zero page) */
        if ((big = malloc(TCP_BYTES)) == NULL) die("tcp: no memory");
        for (uint64_t i = 0; i < TCP_BYTES; i++)
            big[i] = (char)(i * 131 + 7);
    }
    memset(small, 1, sizeof small);
    double t0 = bench_now_us();
    if (write(s, &mode, 1) != 1) die("tcp: write");
    for (uint64_t sent = 0; sent < TCP_BYTES;) {
        const char *src = mode == 'm' ? big + sent : small;
        size_t k = TCP_BYTES - sent < sizeof small ? TCP_BYTES - sent : sizeof small;
        ssize_t w = write(s, src, k);
        if (w <= 0) die("tcp: write");
        sent += (uint64_t)w;
    }
    shutdown(s, SHUT_WR);
    char k;
    if (read(s, &k, 1) != 1) die("tcp: ack");
    double us = bench_now_us() - t0;
    close(s);
    return (double)TCP_BYTES / us / 1e3;
}

/* An Echo actor placed on the node at host, ready. */
static tr_actor_id cluster_actor_on(tr_runtime *rt, const char *host) {
    char res[64];
    snprintf(res, sizeof res, "node:%s", host);
    tr_resource r = {res, 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &r;
    o.n_resources = 1;
    tr_actor_id a;
    CHECK(tr_actor_create(rt, "Echo", &o, NULL, 0, &a));
    CHECK(tr_actor_wait_ready(rt, a, 30000));
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    CHECK(tr_actor_info(rt, a, &d));
    if (strncmp(d.node, host, strlen(host)) != 0) die("the actor is not on the other node");
    return a;
}

/* An actor on the head's node, called from here through this node (joined to it). */
static tr_runtime *cluster_join(const char *host, tr_actor_id *a) {
    tr_config *cfg = base_config();
    char head[64];
    snprintf(head, sizeof head, "%s:%d", host, HEAD_PORT);
    CHECK(tr_config_set(cfg, "cluster_head", head));
    CHECK(tr_config_set(cfg, "cluster_token", TOKEN));
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    tr_config_destroy(cfg);
    *a = cluster_actor_on(rt, host);
    return rt;
}

static double cluster_rtt(tr_runtime *rt, tr_actor_id a) {
    static double lat[CALLS];
    for (int i = -200; i < CALLS; i++) {
        int64_t v = i;
        tr_ref ref;
        const void *p;
        size_t n;
        double t0 = bench_now_us();
        CHECK(tr_call(rt, a, "echo", &v, sizeof v, &ref));
        CHECK(tr_get(rt, ref, 10000, &p, &n));
        if (i >= 0) lat[i] = bench_now_us() - t0;
        if (n != 8 || memcmp(p, &v, 8) != 0) die("cluster: a wrong echo");
        CHECK(tr_ref_release(rt, ref));
    }
    return bench_percentile(lat, CALLS, 50);
}

#define PULL_BYTES ((uint64_t)256 << 20)

/* A compiled graph input -> the actor there (echo) -> output: one 8-byte execution at a
 * time, execute to get (p50, us). */
static double dag_rtt(tr_runtime *rt, tr_actor_id a) {
    static double lat[CALLS];
    tr_dag *g;
    tr_dag_node in, out;
    CHECK(tr_dag_create(rt, &g));
    CHECK(tr_dag_input(g, &in));
    CHECK(tr_dag_bind(g, a, "echo", &in, 1, &out));
    CHECK(tr_dag_output(g, &out, 1));
    CHECK(tr_dag_compile(g, NULL));
    for (int i = -200; i < CALLS; i++) {
        int64_t v = i;
        uint64_t e;
        const void *p;
        size_t n;
        double t0 = bench_now_us();
        CHECK(tr_dag_execute(g, &v, sizeof v, &e));
        CHECK(tr_dag_get(g, e, 0, 10000, &p, &n));
        if (i >= 0) lat[i] = bench_now_us() - t0;
        if (n != 8 || memcmp(p, &v, 8) != 0) die("dag: a wrong echo");
        CHECK(tr_dag_release(g, e));
    }
    CHECK(tr_dag_destroy(g));
    return bench_percentile(lat, CALLS, 50);
}

/* The 256 MiB object the actor put on its node, for the pulls. */
static tr_ref far_object(tr_runtime *rt, tr_actor_id a) {
    uint64_t size = PULL_BYTES;
    tr_ref ref, obj;
    const void *p;
    size_t n;
    CHECK(tr_call(rt, a, "put", &size, sizeof size, &ref));
    CHECK(tr_get(rt, ref, 60000, &p, &n));
    if (n != 16) die("put: no ref");
    memcpy(&obj, p, 16);
    CHECK(tr_ref_release(rt, ref));
    return obj;
}

static double pull_gbps(tr_runtime *rt, tr_ref obj) {
    const void *p;
    size_t n;
    double t0 = bench_now_us();
    CHECK(tr_get(rt, obj, 60000, &p, &n));
    double us = bench_now_us() - t0;
    if (n != PULL_BYTES || ((const char *)p)[n - 1] != (char)((n - 1) * 131 + 7))
        die("pull: wrong bytes");
    CHECK(tr_ref_release(rt, obj)); /* our copy goes: the next round pulls again */
    return (double)n / us / 1e3;
}

/* Raw Gloo's rank 1 here: the median of one allreduce, us. */
static double raw_gloo_us(int round, int k) {
    static double t[200];
    char err[256], prefix[32];
    snprintf(prefix, sizeof prefix, "r%ds%d", round, k);
    if (raw_gloo_run_on("10.213.0.2", gloo_dir, prefix, 2, 1, RAW_GLOO_ALLREDUCE, gloo_bytes[k],
                        gloo_iters[k], t, err, sizeof err))
        die(err);
    return bench_percentile(t, (size_t)gloo_iters[k], 50);
}

/* troupe's group `name` over n actors (ours is rank 0): its median, us. */
static double cluster_gloo_us(tr_runtime *rt, const tr_actor_id *actors, int n, const char *name,
                              int k, int checks) {
    gloo_args a = {"", gloo_bytes[k], gloo_iters[k], checks};
    snprintf(a.name, sizeof a.name, "%s", name);
    tr_ref ref[4];
    double med[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i++)
        CHECK(tr_call(rt, actors[i], "gloo", &a, sizeof a, &ref[i]));
    for (int i = 0; i < n; i++) {
        const void *p;
        size_t n;
        CHECK(tr_get(rt, ref[i], 120000, &p, &n));
        if (n != 8) die("gloo: no time");
        memcpy(&med[i], p, 8);
        CHECK(tr_ref_release(rt, ref[i]));
    }
    return med[0];
}

static void report(const char *name, double *v, const char *unit) {
    double tmp[ROUNDS];
    memcpy(tmp, v, sizeof tmp);
    double med = bench_percentile(tmp, ROUNDS, 50);
    bench_report_spread(name, med, tmp[0], tmp[ROUNDS - 1], ROUNDS, unit);
}

static int client(const char *host) {
    tr_actor_id a;
    tr_runtime *rt = cluster_join(host, &a);
    grpc_init();
    double raw[ROUNDS], rpc[ROUNDS], ratio[ROUNDS], tcp[ROUNDS], srtt[ROUNDS], sps[ROUNDS];
    double crtt[ROUNDS], cratio[ROUNDS], cps[ROUNDS], pull[ROUNDS], pratio[ROUNDS];
    double drtt[ROUNDS], dratio[ROUNDS], tcpc[ROUNDS];
    tr_ref obj = far_object(rt, a);
    /* a gloo group over an actor here and the one there */
    tr_actor_id pair[2];
    CHECK(tr_actor_create(rt, "Echo", NULL, NULL, 0, &pair[0]));
    CHECK(tr_actor_wait_ready(rt, pair[0], 30000));
    pair[1] = a;
    CHECK(tr_group_declare(rt, pair, 2, NULL, "gloo", "bench-gloo"));
    /* four ranks, two per node: flat Gloo, and two levels (shm in each node, Gloo between
     * the nodes' leaders) */
    tr_actor_id four[4];
    four[0] = pair[0];
    four[1] = a;
    CHECK(tr_actor_create(rt, "Echo", NULL, NULL, 0, &four[2]));
    CHECK(tr_actor_wait_ready(rt, four[2], 30000));
    four[3] = cluster_actor_on(rt, host);
    CHECK(tr_group_declare(rt, four, 4, NULL, "gloo", "bench-flat4"));
    CHECK(tr_group_declare(rt, four, 4, NULL, "hier", "bench-hier4"));
    double graw[3][ROUNDS], gtr[3][ROUNDS], gratio[3][ROUNDS], gchk[3][ROUNDS];
    double g4[3][ROUNDS], h4[3][ROUNDS], hratio[3][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < 3; k++) {
            graw[k][r] = raw_gloo_us(r, k);
            gtr[k][r] = cluster_gloo_us(rt, pair, 2, "bench-gloo", k, 0);
            gratio[k][r] = gtr[k][r] / graw[k][r];
            gchk[k][r] = cluster_gloo_us(rt, pair, 2, "bench-gloo", k, 1);
            g4[k][r] = cluster_gloo_us(rt, four, 4, "bench-flat4", k, 0);
            h4[k][r] = cluster_gloo_us(rt, four, 4, "bench-hier4", k, 0);
            hratio[k][r] = h4[k][r] / g4[k][r];
        }
        raw[r] = raw_grpc_rtt(host);
        crtt[r] = cluster_rtt(rt, a);
        cratio[r] = crtt[r] / raw[r];
        drtt[r] = dag_rtt(rt, a);
        dratio[r] = drtt[r] / raw[r];
        cps[r] = bench_async_calls_per_s(rt, a, "echo", 20000);
        rpc[r] = rpc_rtt(host);
        ratio[r] = rpc[r] / raw[r];
        stream_figures(host, &srtt[r], &sps[r]);
        tcpc[r] = tcp_gbps(host, 'c');
        tcp[r] = tcp_gbps(host, 'm');
        pull[r] = pull_gbps(rt, obj);
        pratio[r] = pull[r] / tcp[r];
    }
    report("raw_grpc_rtt_us_p50", raw, "us");
    report("rpc_rtt_us_p50", rpc, "us");
    report("rpc_over_raw_grpc", ratio, "x");
    report("rpc_stream_rtt_us_p50", srtt, "us");
    report("rpc_stream_msgs_per_s", sps, "/s");
    report("raw_tcp_gbps", tcp, "GB/s");
    report("raw_tcp_cached_gbps", tcpc, "GB/s");
    report("cluster_call_rtt_us_p50", crtt, "us");
    report("cluster_over_raw_grpc", cratio, "x");
    report("cluster_async_calls_per_s", cps, "/s");
    report("cluster_dag_rtt_us_p50", drtt, "us");
    report("cluster_dag_over_raw_grpc", dratio, "x");
    report("object_pull_gbps_256MiB", pull, "GB/s");
    report("object_pull_over_raw_tcp", pratio, "x");
    char name[64];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "raw_gloo_allreduce_us_%s", gloo_names[k]);
        report(name, graw[k], "us");
        snprintf(name, sizeof name, "cluster_gloo_allreduce_us_%s", gloo_names[k]);
        report(name, gtr[k], "us");
        snprintf(name, sizeof name, "cluster_gloo_over_raw_%s", gloo_names[k]);
        report(name, gratio[k], "x");
        snprintf(name, sizeof name, "cluster_gloo_checked_us_%s", gloo_names[k]);
        report(name, gchk[k], "us");
    }
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "cluster_flat4_allreduce_us_%s", gloo_names[k]);
        report(name, g4[k], "us");
        snprintf(name, sizeof name, "cluster_hier4_allreduce_us_%s", gloo_names[k]);
        report(name, h4[k], "us");
        snprintf(name, sizeof name, "cluster_hier4_over_flat4_%s", gloo_names[k]);
        report(name, hratio[k], "x");
    }
    grpc_shutdown();
    tr_shutdown(rt);
    return 0;
}

/* ------------------------------------------------------------------ the run */

int main(int argc, char **argv) {
    tr_config *wcfg = base_config();
    tr_worker_main(wcfg); /* the actor's worker never returns from here */
    tr_config_destroy(wcfg);
    int json = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--gloo-dir") == 0 && i + 1 < argc) gloo_dir = argv[i + 1];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--serve") == 0) return serve();
        if (strcmp(argv[i], "--client") == 0 && i + 1 < argc) {
            bench_init(argc, argv); /* the table's header, or --json */
            return client(argv[i + 1]);
        }
        json |= strcmp(argv[i], "--json") == 0;
    }
    char self[4096], why[512], cmd[8192];
    if (!realpath("/proc/self/exe", self)) die("no /proc/self/exe");
    tr_netns net;
    if (tr_netns_up(&net, 2, why, sizeof why) != 0) {
        fprintf(stderr, "bench/cluster: %s: nothing measured\n", why);
        return 0;
    }
    /* raw Gloo's rendezvous files, where both namespaces see them */
    char gdir[] = "/dev/shm/trbench-gloo-XXXXXX";
    if (!mkdtemp(gdir)) die("mkdtemp");
    /* the server in namespace 0, until killed */
    char inner[8192];
    snprintf(cmd, sizeof cmd, "%s --serve --gloo-dir %s", self, gdir);
    tr_netns_wrap(&net, 0, cmd, inner, sizeof inner);
    int p[2];
    if (pipe(p)) die("pipe");
    pid_t srv = fork();
    if (srv == 0) {
        dup2(p[1], 1);
        close(p[0]);
        execl("/bin/sh", "sh", "-c", inner, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    char line[16] = {0};
    if (read(p[0], line, 6) != 6 || strncmp(line, "ready", 5) != 0) {
        tr_netns_down(&net);
        die("the server did not start");
    }
    fprintf(stderr, "bench/cluster: server in %sn0 (10.213.0.1), client in %sn1\n", net.tag,
            net.tag);
    snprintf(cmd, sizeof cmd, "%s --client 10.213.0.1 --gloo-dir %s%s", self, gdir,
             json ? " --json" : "");
    tr_netns_wrap(&net, 1, cmd, inner, sizeof inner);
    fflush(stdout);
    int st = system(inner);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    close(p[0]);
    tr_netns_down(&net);
    snprintf(cmd, sizeof cmd, "rm -rf %s", gdir);
    if (system(cmd) != 0) fprintf(stderr, "bench/cluster: could not remove %s\n", gdir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
