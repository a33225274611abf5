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
 *   raw_tcp_gbps             one TCP stream of 256 MiB over the same veth
 *   cluster_call_rtt_us_p50  an 8-byte echo to an actor on the other node: the client's
 *                            embedded node joins the server's (the head), the actor is
 *                            placed there by its "node:10.213.0.1" resource, and each
 *                            call goes caller -> link -> that node's relay -> worker
 *   cluster_over_raw_grpc    its ratio to raw_grpc_rtt_us_p50, round by round
 *   cluster_async_calls_per_s  the same echo, 1,000 calls in flight at a time
 *   object_pull_gbps_256MiB  tr_get here of a 256 MiB object the actor put there: pulled
 *                            over the link in pieces into this node's store (released
 *                            after each round, so each round pulls it again)
 *   object_pull_over_raw_tcp its ratio to raw_tcp_gbps, round by round
 * 5 rounds, interleaved; medians with their spread. Object pulls (issue 12) will be
 * measured here beside these baselines.
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
#include "core/rpc.h"
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

static int echo(void *ctx, const void *req, size_t len, tr__buf *reply) {
    (void)ctx;
    return tr__buf_append(reply, req, len);
}

static void stream_echo(void *ctx, tr__rpc_stream *st, const void *msg, size_t len) {
    (void)ctx;
    tr__rpc_stream_send(st, msg, len);
}

static const tr__rpc_stream_handlers stream_handlers = {stream_echo, NULL, NULL, NULL};

/* A TCP sink: reads each connection to its end, then answers one byte. */
static void *tcp_sink(void *arg) {
    (void)arg;
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(TCP_PORT)};
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4)) die("tcp: listen");
    static char buf[1 << 20];
    for (;;) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) continue;
        while (read(c, buf, sizeof buf) > 0) {
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

static const tr_method_def echo_methods[] = {{"echo", echo_method}, {"put", put_method}};

/* The configuration both sides (and the actor's worker) start from. */
static tr_config *base_config(void) {
    tr_config *cfg;
    CHECK(tr_config_create(&cfg));
    tr_actor_class cls = TR_ACTOR_CLASS_INIT;
    cls.name = "Echo";
    cls.methods = echo_methods;
    cls.n_methods = 2;
    CHECK(tr_config_add_class(cfg, &cls));
    return cfg;
}

static tr_runtime *head_rt;

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
    pthread_t t1, t2;
    pthread_create(&t1, NULL, raw_grpc_server, NULL);
    pthread_create(&t2, NULL, tcp_sink, NULL);
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

static double tcp_gbps(const char *host) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(TCP_PORT)};
    inet_pton(AF_INET, host, &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof a)) die("tcp: connect");
    static char buf[1 << 20];
    memset(buf, 1, sizeof buf);
    double t0 = bench_now_us();
    for (uint64_t sent = 0; sent < TCP_BYTES;) {
        ssize_t w = write(s, buf, sizeof buf);
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

/* An actor on the head's node, called from here through this node (joined to it). */
static tr_runtime *cluster_join(const char *host, tr_actor_id *a) {
    tr_config *cfg = base_config();
    char head[64], res[64];
    snprintf(head, sizeof head, "%s:%d", host, HEAD_PORT);
    CHECK(tr_config_set(cfg, "cluster_head", head));
    CHECK(tr_config_set(cfg, "cluster_token", TOKEN));
    tr_runtime *rt;
    CHECK(tr_init(cfg, &rt));
    tr_config_destroy(cfg);
    snprintf(res, sizeof res, "node:%s", host);
    tr_resource r = {res, 1};
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.resources = &r;
    o.n_resources = 1;
    CHECK(tr_actor_create(rt, "Echo", &o, NULL, 0, a));
    CHECK(tr_actor_wait_ready(rt, *a, 30000));
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    CHECK(tr_actor_info(rt, *a, &d));
    if (strncmp(d.node, host, strlen(host)) != 0) die("the actor is not on the other node");
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
    tr_ref obj = far_object(rt, a);
    for (int r = 0; r < ROUNDS; r++) {
        raw[r] = raw_grpc_rtt(host);
        crtt[r] = cluster_rtt(rt, a);
        cratio[r] = crtt[r] / raw[r];
        cps[r] = bench_async_calls_per_s(rt, a, "echo", 20000);
        rpc[r] = rpc_rtt(host);
        ratio[r] = rpc[r] / raw[r];
        stream_figures(host, &srtt[r], &sps[r]);
        tcp[r] = tcp_gbps(host);
        pull[r] = pull_gbps(rt, obj);
        pratio[r] = pull[r] / tcp[r];
    }
    report("raw_grpc_rtt_us_p50", raw, "us");
    report("rpc_rtt_us_p50", rpc, "us");
    report("rpc_over_raw_grpc", ratio, "x");
    report("rpc_stream_rtt_us_p50", srtt, "us");
    report("rpc_stream_msgs_per_s", sps, "/s");
    report("raw_tcp_gbps", tcp, "GB/s");
    report("cluster_call_rtt_us_p50", crtt, "us");
    report("cluster_over_raw_grpc", cratio, "x");
    report("cluster_async_calls_per_s", cps, "/s");
    report("object_pull_gbps_256MiB", pull, "GB/s");
    report("object_pull_over_raw_tcp", pratio, "x");
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
    /* the server in namespace 0, until killed */
    char inner[8192];
    snprintf(cmd, sizeof cmd, "%s --serve", self);
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
    snprintf(cmd, sizeof cmd, "%s --client 10.213.0.1%s", self, json ? " --json" : "");
    tr_netns_wrap(&net, 1, cmd, inner, sizeof inner);
    fflush(stdout);
    int st = system(inner);
    kill(srv, SIGKILL);
    waitpid(srv, NULL, 0);
    close(p[0]);
    tr_netns_down(&net);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
