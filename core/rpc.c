/* core/rpc.c - see rpc.h. A reply is a 4-byte little-endian status code (the handler's),
 * then the handler's bytes; transport failures are gRPC statuses. */
#include "core/rpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/trace.h"
#include "core/frame.h"

#include "core/log.h"
#include "core/status.h"

#define METHOD "/troupe.Node/Call"
#define STREAM_METHOD "/troupe.Node/Stream"
#define AUTH_KEY "authorization"
#define BEARER "Bearer "

/* ------------------------------------------------------------------ shared */

static void *tag_of(void *p, int kind) {
    return (void *)((uintptr_t)p | (uintptr_t)kind);
}

static gpr_timespec deadline_in(int timeout_ms) {
    if (timeout_ms < 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

/* The bytes of a received message, appended to b. */
static int read_all(grpc_byte_buffer *bb, tr__buf *b) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return tr__err(TR_EPROTO, "rpc: unreadable message");
    grpc_slice sl;
    int rc = 0;
    while (!rc && grpc_byte_buffer_reader_next(&r, &sl)) {
        rc = tr__buf_append(b, GRPC_SLICE_START_PTR(sl), GRPC_SLICE_LENGTH(sl));
        grpc_slice_unref(sl);
    }
    grpc_byte_buffer_reader_destroy(&r);
    return rc;
}

/* A server's or a client's channel arguments (a[] holds them; at most 12). */
static grpc_channel_args *make_args(size_t max_msg, int server, grpc_arg *a,
                                    grpc_channel_args *args) {
    int lim = max_msg > (size_t)INT32_MAX - 64 ? INT32_MAX : (int)max_msg + 64;
    typedef struct {
        const char *key;
        int value;
    } kv_t;
    const kv_t common[] = {
        {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, lim},
        {GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, lim},
        /* a dead peer or a cut link is seen in seconds, not at TCP's retransmission pace */
        {GRPC_ARG_KEEPALIVE_TIME_MS, server ? 2000 : 1000},
        {GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000},
        {GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1},
        {GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0},
    };
    const kv_t server_only[] = {
        {GRPC_ARG_ALLOW_REUSEPORT, 0}, /* another head on the same port fails, never shares */
        /* a connection that completes no (TLS and HTTP/2) handshake in 10 s goes */
        {GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000},
        {GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500}, /* clients' keepalives */
        {GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0},
    };
    const kv_t client_only[] = {
        {GRPC_ARG_ENABLE_HTTP_PROXY, 0}, /* straight to the node, whatever http_proxy says */
        {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200}, /* a head back is seen within a second */
        /* (gRPC takes this as every connection attempt's deadline too: TCP, the TLS
         * handshake and HTTP/2's settings; 200 ms failed TLS handshakes on a busy host) */
        {GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5000},
        {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000},
    };
    kv_t kv[12];
    size_t n = 0;
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        kv[n++] = common[i];
    const kv_t *more = server ? server_only : client_only;
    size_t m = server ? sizeof server_only / sizeof server_only[0]
                      : sizeof client_only / sizeof client_only[0];
    for (size_t i = 0; i < m; i++)
        kv[n++] = more[i];

    for (size_t i = 0; i < n; i++) {
        a[i].type = GRPC_ARG_INTEGER;
        a[i].key = (char *)kv[i].key;
        a[i].value.integer = kv[i].value;
    }
    args->num_args = n;
    args->args = a;
    return args;
}

/* Constant-time: whether the slice equals "Bearer <token>". */
static int token_ok(grpc_slice v, const char *token) {
    size_t tn = strlen(token), bn = strlen(BEARER), n = GRPC_SLICE_LENGTH(v);
    const unsigned char *p = GRPC_SLICE_START_PTR(v);
    unsigned diff = n != bn + tn;
    for (size_t i = 0; i < bn + tn; i++) {
        unsigned char want = i < bn ? (unsigned char)BEARER[i] : (unsigned char)token[i - bn];
        diff |= (i < n ? p[i] : 0u) ^ want;
    }
    return diff == 0;
}

/* ------------------------------------------------------------------ server */

/* the low 3 bits of a tag: what completed (a call's or a stream's; both 8-aligned) */
enum { T_NEW = 1, T_RECV = 2, T_DONE = 3, S_RECV = 4, S_SEND = 5, S_END = 6, S_STATUS = 7 };
#define T_SHUTDOWN ((void *)(uintptr_t)8)

static void stream_accept(tr__rpc_server *s, grpc_call *call);
static void stream_event(tr__rpc_server *s, tr__rpc_stream *st, int kind, int success);

typedef struct scall {
    tr__rpc_server *srv;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *req, *resp;
    grpc_slice status_msg;
    int cancelled;
    int handed; /* a taken call's answer is in its last batch (atomic: hands the call, as
                   written on the answering thread, to the server's, which frees it) */
} __attribute__((aligned(8))) scall;

struct tr__rpc_server {
    grpc_server *srv;
    grpc_completion_queue *cq;
    pthread_t thread;
    char token[256];
    size_t max_msg;
    tr__rpc_handler handler;
    void *ctx;
    const tr__rpc_stream_handlers *streams; /* NULL: no streams (atomic) */
    int shutting;                           /* destroy began: no call starts another batch */
    int got_shutdown;                       /* the server's shutdown tag came (atomic) */
    long live;   /* calls allocated and not freed (atomic: a taken call's answer may free) */
    int cq_shut; /* the queue was shut (atomic: once) */
    struct listener *ls; /* our own accept loop (NULL: gRPC's, which takes no fds from us) */
};

typedef struct listener listener;
static void mark_proven(listener *l, const char *peer);

/* The queue goes once the server is down and every call is freed (a call that starts a
 * batch on a shut queue aborts the process). */
static void maybe_shut_cq(tr__rpc_server *s) {
    if (__atomic_load_n(&s->got_shutdown, __ATOMIC_SEQ_CST) &&
        __atomic_load_n(&s->live, __ATOMIC_SEQ_CST) == 0 &&
        !__atomic_exchange_n(&s->cq_shut, 1, __ATOMIC_SEQ_CST))
        grpc_completion_queue_shutdown(s->cq);
}

static void free_call(tr__rpc_server *s, scall *c) {
    (void)__atomic_load_n(&c->handed, __ATOMIC_ACQUIRE);
    __atomic_sub_fetch(&s->live, 1, __ATOMIC_SEQ_CST);
    if (c->call) grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    if (c->req) grpc_byte_buffer_destroy(c->req);
    if (c->resp) grpc_byte_buffer_destroy(c->resp);
    grpc_slice_unref(c->status_msg);
    free(c);
}

static int request_next(tr__rpc_server *s) {
    scall *c = calloc(1, sizeof *c);
    if (!c) return tr__err(TR_ENOMEM, "rpc server");
    c->srv = s;
    __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    c->status_msg = grpc_empty_slice();
    if (grpc_server_request_call(s->srv, &c->call, &c->details, &c->md, s->cq, s->cq,
                                 tag_of(c, T_NEW)) != GRPC_CALL_OK) {
        free_call(s, c);
        return tr__err(TR_EINTERNAL, "rpc server: request_call");
    }
    return 0;
}

/* The call's last batch: its reply (or none) and its status. On the server's thread, a
 * call of a server shutting down is freed at once (unref cancels it); elsewhere (a taken
 * call's answer) the batch starts anyway: on a cancelled call it completes at once, and
 * the server's thread frees the call then. */
static void finish_call(tr__rpc_server *s, scall *c, grpc_status_code st, const char *msg,
                        int on_server_thread) {
    if (on_server_thread && __atomic_load_n(&s->shutting, __ATOMIC_ACQUIRE)) {
        free_call(s, c);
        return;
    }
    grpc_op ops[4];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->resp) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->resp;
    }
    grpc_slice_unref(c->status_msg);
    c->status_msg = grpc_slice_from_copied_string(msg);
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = st;
    ops[n++].data.send_status_from_server.status_details = &c->status_msg;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    grpc_call *call = c->call; /* (c is not read after the hand-over) */
    if (!on_server_thread) __atomic_store_n(&c->handed, 1, __ATOMIC_RELEASE);
    if (grpc_call_start_batch(call, ops, n, tag_of(c, T_DONE), NULL) != GRPC_CALL_OK) {
        free_call(s, c);
        if (!on_server_thread) maybe_shut_cq(s);
    }
}

/* The reply in out (its first 4 bytes held for the code), and the status. */
static void respond(tr__rpc_server *s, scall *c, int rc, tr__buf *out, int on_server_thread) {
    if (rc && out->len == 4) {
        const char *m = tr__last_error();
        tr__buf_append(out, m, strlen(m));
    }
    if (out->oom) {
        finish_call(s, c, GRPC_STATUS_RESOURCE_EXHAUSTED, "troupe: out of memory for the reply",
                    on_server_thread);
        return;
    }
    uint32_t u = (uint32_t)rc;
    for (int i = 0; i < 4; i++)
        out->data[i] = (uint8_t)(u >> (8 * i));
    grpc_slice sl = grpc_slice_from_copied_buffer((const char *)out->data, out->len);
    c->resp = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    finish_call(s, c, GRPC_STATUS_OK, "", on_server_thread);
}

void tr__rpc_answer(tr__rpc_req *call, int rc, const tr__buf *reply) {
    scall *c = (scall *)call;
    tr__buf out = TR__BUF_INIT;
    uint8_t hdr[4] = {0};
    tr__buf_append(&out, hdr, 4);
    if (reply && reply->len) tr__buf_append(&out, reply->data, reply->len);
    respond(c->srv, c, rc > 0 ? TR_EINTERNAL : rc, &out, 0);
    tr__buf_free(&out);
}

static void on_new(tr__rpc_server *s, scall *c) {
    if (__atomic_load_n(&s->shutting, __ATOMIC_ACQUIRE)) {
        free_call(s, c);
        return;
    }
    if (request_next(s)) /* always one request outstanding */
        TR_LOG_ERROR("RPC-ACCEPT", "%s: this server takes no more calls", tr__last_error());
    int stream = grpc_slice_str_cmp(c->details.method, STREAM_METHOD) == 0;
    if (grpc_slice_str_cmp(c->details.method, METHOD) != 0 &&
        !(stream && __atomic_load_n(&s->streams, __ATOMIC_ACQUIRE))) {
        finish_call(s, c, GRPC_STATUS_UNIMPLEMENTED, "troupe: unknown method", 1);
        return;
    }
    if (s->token[0]) {
        int ok = 0;
        for (size_t i = 0; i < c->md.count; i++)
            if (grpc_slice_str_cmp(c->md.metadata[i].key, AUTH_KEY) == 0)
                ok = token_ok(c->md.metadata[i].value, s->token);
        char *peer = grpc_call_get_peer(c->call);
        if (!ok) {
            TR_LOG_WARN_LIMITED("RPC-AUTH", "refused a call from %s: missing or wrong token",
                                peer ? peer : "?");
            gpr_free(peer);
            finish_call(s, c, GRPC_STATUS_UNAUTHENTICATED, "troupe: missing or wrong token", 1);
            return;
        }
        mark_proven(s->ls, peer); /* its connection is a member's: it is not evicted */
        gpr_free(peer);
    }
    if (stream) { /* the stream takes the call over */
        grpc_call *call = c->call;
        c->call = NULL;
        free_call(s, c);
        stream_accept(s, call);
        return;
    }
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->req;
    if (grpc_call_start_batch(c->call, &op, 1, tag_of(c, T_RECV), NULL) != GRPC_CALL_OK)
        finish_call(s, c, GRPC_STATUS_INTERNAL, "troupe: cannot receive", 1);
}

static void on_recv(tr__rpc_server *s, scall *c, int success) {
    if (__atomic_load_n(&s->shutting, __ATOMIC_ACQUIRE)) {
        free_call(s, c);
        return;
    }
    if (!success || !c->req) {
        finish_call(s, c, GRPC_STATUS_INVALID_ARGUMENT, "troupe: no request", 1);
        return;
    }
    tr__buf in = TR__BUF_INIT, out = TR__BUF_INIT;
    int rc = read_all(c->req, &in);
    uint8_t hdr[4] = {0};
    tr__buf_append(&out, hdr, 4); /* the code, filled in by respond */
    if (!rc) rc = s->handler(s->ctx, (tr__rpc_req *)c, in.data, in.len, &out);
    if (rc != TR__RPC_LATER) /* (else the handler has the call: tr__rpc_answer) */
        respond(s, c, rc > 0 ? TR_EINTERNAL : rc, &out, 1);
    tr__buf_free(&in);
    tr__buf_free(&out);
}

static void *serve(void *arg) {
    tr__rpc_server *s = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        if (ev.tag == T_SHUTDOWN) {
            __atomic_store_n(&s->got_shutdown, 1, __ATOMIC_SEQ_CST);
        } else {
            int kind = (int)((uintptr_t)ev.tag & 7);
            scall *c = (scall *)((uintptr_t)ev.tag & ~(uintptr_t)7);
            if (kind >= S_RECV) {
                stream_event(s, (tr__rpc_stream *)c, kind, ev.success);
            } else if (kind == T_NEW) {
                if (ev.success)
                    on_new(s, c);
                else
                    free_call(s, c); /* the server is shutting down */
            } else if (kind == T_RECV) {
                on_recv(s, c, ev.success);
            } else {
                free_call(s, c);
            }
        }
        maybe_shut_cq(s);
    }
    return NULL;
}

/* ------------------------------------------------------------------ the listener

 * gRPC 1.51's own listener stops for good the first time accept4 fails with EMFILE, and it
 * has no cap on connections: a flood of idle connections, token or not, used to close a
 * node's cluster port forever. So the server accepts its connections itself and hands
 * each to gRPC (plaintext: grpc_server_add_channel_from_fd; TLS: the "external:" port's
 * connection handler, below), keeping them within bounds:
 * - at most `cap` connections (a third of what RLIMIT_NOFILE leaves after a reserve: each
 *   costs our descriptor and gRPC's), of which at most half not yet proven: a connection
 *   is proven once a call on it passed the token check (mark_proven);
 * - a new connection past either bound evicts the oldest unproven one, and one that proves
 *   nothing within PENDING_MS is evicted too, so a flood churns through the unproven slots
 *   while the members' connections stay and a new caller with the token gets in;
 * - EMFILE never stops the loop: a spare descriptor is let go to take the connection off
 *   the queue and close it.
 * A connection's end is seen on a duplicate of its descriptor (gRPC shuts a socket down
 * before it closes it: EPOLLHUP), which is also how one is evicted (shutdown). */

#define RESERVE_FDS 256
#define MAX_CONNS 4096
#define PENDING_MS 10000

typedef struct lconn {
    int dup;       /* ours: its end (EPOLLHUP), its eviction (shutdown) */
    int fd;        /* the descriptor gRPC has: its peer is "fd:<fd>" (plaintext) */
    int proven;    /* a call on it passed the token check */
    int64_t since; /* accepted (ns) */
    char peer[80]; /* "ipv4:IP:PORT" / "ipv6:%5BIP%5D:PORT", as gRPC names a TLS peer */
    char host[48]; /* its IP, for the per-source bound */
} lconn;

typedef void (*ext_handle_fn)(void *self, int listener_fd, int fd, void *pending_read);

struct listener {
    tr__rpc_server *s;
    int fd, ep, wake, spare;
    void *ext; /* TLS: gRPC's handler of the "external:" port (a TcpServerFdHandler) */
    pthread_t thread;
    pthread_mutex_t mu; /* conns: the accept thread's, and mark_proven's (server's thread) */
    lconn *conns;
    int n, cap, max_unproven;
    long accepted, evicted, refused, emfile; /* for the log */
};

static void *ext_copy(void *p) {
    return p;
}
static void ext_destroy(void *p) {
    (void)p;
}
static int ext_cmp(void *a, void *b) {
    return (a > b) - (a < b);
}
static const grpc_arg_pointer_vtable ext_vtable = {ext_copy, ext_destroy, ext_cmp};
#define EXT_PORT "external:troupe"

/* Whether this gRPC's "external:" port handler is the one this code knows: gRPC core 29
 * (1.51, Debian 12's), whose grpc_core::TcpServerFdHandler is {virtual ~(); virtual void
 * Handle(int listener_fd, int fd, grpc_byte_buffer *pending)}: in the Itanium C++ ABI its
 * vtable is [complete dtor, deleting dtor, Handle]. It is how gRPC's C++ API hands a server
 * connections it accepted elsewhere; the C API's way, grpc_server_add_channel_from_fd,
 * takes insecure credentials only. Any other gRPC: TLS keeps gRPC's own listener. */
static int ext_known(void) {
    return strcmp(grpc_version_string(), "29.0.0") == 0;
}

/* A peer as gRPC 1.51 names it (grpc_sockaddr_to_uri: an IPv4-mapped address as IPv4,
 * IPv6's brackets percent-encoded), and its host alone. */
static void peer_name(const struct sockaddr_storage *a, char *out, size_t cap, char *host,
                      size_t hcap) {
    char ip[INET6_ADDRSTRLEN] = "?";
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)a;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
        snprintf(out, cap, "ipv4:%s:%u", ip, ntohs(v4->sin_port));
    } else if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
        inet_ntop(AF_INET, (const char *)&v6->sin6_addr + 12, ip, sizeof ip);
        snprintf(out, cap, "ipv4:%s:%u", ip, ntohs(v6->sin6_port));
    } else {
        inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
        snprintf(out, cap, "ipv6:%%5B%s%%5D:%u", ip, ntohs(v6->sin6_port));
    }
    snprintf(host, hcap, "%s", ip);
}

/* Drops conns[i] (caller holds mu): its end was seen, or it is evicted (shut down: gRPC
 * sees the end and closes its descriptor). */
static void conn_drop(listener *l, int i, int evict) {
    lconn *c = &l->conns[i];
    if (evict) {
        shutdown(c->dup, SHUT_RDWR);
        l->evicted++;
    }
    epoll_ctl(l->ep, EPOLL_CTL_DEL, c->dup, NULL);
    close(c->dup);
    l->conns[i] = l->conns[--l->n];
}

/* The oldest unproven connection, and the oldest from host; how many of each (caller
 * holds mu). -1: none. */
static void oldest_unproven(listener *l, const char *host, int *old, int *unproven, int *old_here,
                            int *here) {
    *old = *old_here = -1;
    *unproven = *here = 0;
    for (int i = 0; i < l->n; i++) {
        lconn *c = &l->conns[i];
        if (c->proven) continue;
        (*unproven)++;
        if (*old < 0 || c->since < l->conns[*old].since) *old = i;
        if (strcmp(c->host, host) != 0) continue;
        (*here)++;
        if (*old_here < 0 || c->since < l->conns[*old_here].since) *old_here = i;
    }
}

/* A connection accepted: kept within the bounds and handed to gRPC, or closed. A source
 * that holds a quarter of the unproven slots makes room among its own: one host's flood
 * churns through its own connections, not the other hosts' (a member that connects from
 * elsewhere in the meantime gets in). */
static void conn_take(listener *l, int fd, const struct sockaddr_storage *peer) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char name[80], host[48];
    peer_name(peer, name, sizeof name, host, sizeof host);
    pthread_mutex_lock(&l->mu);
    int old, unproven, old_here, here;
    oldest_unproven(l, host, &old, &unproven, &old_here, &here);
    if (old_here >= 0 && here >= l->max_unproven / 4)
        conn_drop(l, old_here, 1);
    else if (old >= 0 && (unproven >= l->max_unproven || l->n >= l->cap))
        conn_drop(l, old, 1);
    int d = l->n < l->cap ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    struct epoll_event ev = {.events = 0, .data.fd = d}; /* (HUP and ERR always come) */
    if (d < 0 || epoll_ctl(l->ep, EPOLL_CTL_ADD, d, &ev) != 0) {
        if (d >= 0) close(d);
        l->refused++; /* every slot proven (members'), or out of descriptors */
        pthread_mutex_unlock(&l->mu);
        close(fd);
        return;
    }
    lconn *c = &l->conns[l->n++];
    c->dup = d;
    c->fd = fd;
    c->proven = 0;
    c->since = tr__now_ns();
    snprintf(c->peer, sizeof c->peer, "%s", name);
    snprintf(c->host, sizeof c->host, "%s", host);
    l->accepted++;
    pthread_mutex_unlock(&l->mu);
    if (l->ext) {
        ext_handle_fn handle = (ext_handle_fn)(*(void ***)l->ext)[2];
        handle(l->ext, l->fd, fd, NULL);
    } else {
        grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
        grpc_server_add_channel_from_fd(l->s->srv, fd, creds);
        grpc_server_credentials_release(creds);
    }
}

static void accept_all(listener *l) {
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t len = sizeof peer;
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            conn_take(l, fd, &peer);
            continue;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE) {
            /* out of descriptors: the spare's slot takes the connection off the queue */
            int x = -1;
            if (l->spare >= 0) {
                close(l->spare);
                x = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
                if (x >= 0) close(x);
                l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
            }
            l->emfile++;
            TR_LOG_WARN_LIMITED("RPC-EMFILE",
                                "out of file descriptors: a connection was closed unserved "
                                "(%d held)",
                                l->n);
            if (x >= 0) continue;
            /* no spare: the listener stays readable; back off instead of spinning */
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
            if (l->spare < 0) l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        return; /* EAGAIN: nothing more to take now */
    }
}

static void *listen_loop(void *arg) {
    listener *l = arg;
    for (;;) {
        struct epoll_event evs[64];
        int n = epoll_wait(l->ep, evs, 64, 1000);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == l->wake) return NULL;
            if (fd == l->fd) {
                accept_all(l);
                continue;
            }
            pthread_mutex_lock(&l->mu); /* a connection ended */
            for (int k = 0; k < l->n; k++)
                if (l->conns[k].dup == fd) {
                    conn_drop(l, k, 0);
                    break;
                }
            pthread_mutex_unlock(&l->mu);
        }
        int64_t too_old = tr__now_ns() - (int64_t)PENDING_MS * 1000000;
        pthread_mutex_lock(&l->mu);
        for (int k = 0; k < l->n;)
            if (!l->conns[k].proven && l->conns[k].since < too_old)
                conn_drop(l, k, 1);
            else
                k++;
        pthread_mutex_unlock(&l->mu);
    }
    return NULL;
}

/* A call on the connection gRPC names `peer` passed the token check: it stays. */
static void mark_proven(listener *l, const char *peer) {
    if (!l || !peer) return;
    int fd = strncmp(peer, "fd:", 3) == 0 ? atoi(peer + 3) : -1;
    pthread_mutex_lock(&l->mu);
    int best = -1; /* the newest of that name (a number gRPC closed may name a new one) */
    for (int i = 0; i < l->n; i++)
        if ((fd >= 0 ? l->conns[i].fd == fd : strcmp(l->conns[i].peer, peer) == 0) &&
            (best < 0 || l->conns[i].since > l->conns[best].since))
            best = i;
    if (best >= 0) l->conns[best].proven = 1;
    pthread_mutex_unlock(&l->mu);
}

/* Binds "HOST:PORT" (a name, an IPv4 or a [IPv6] literal), listening; *port: the port. */
static int bind_listen(const char *where, int *fd_out, int *port) {
    char host[256], service[8];
    int want;
    if (tr__split_host_port(where, host, sizeof host, &want))
        return tr__err(TR_EINVAL, "rpc server: '%s' is not HOST:PORT", where);
    snprintf(service, sizeof service, "%d", want);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int e = getaddrinfo(host, service, &hints, &res);
    if (e) return tr__err(TR_EINVAL, "rpc server: %s: %s", where, gai_strerror(e));
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    int ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
             bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
    int err = errno;
    freeaddrinfo(res);
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    if (ok && getsockname(fd, (struct sockaddr *)&a, &al) != 0) ok = 0, err = errno;
    if (!ok) {
        if (fd >= 0) close(fd);
        tr__err_errno(err, "rpc server: cannot listen on %s", where);
        return TR_EIO;
    }
    *port = ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                         : ((struct sockaddr_in6 *)&a)->sin6_port);
    *fd_out = fd;
    return 0;
}

static void listener_free(listener *l) {
    if (!l) return;
    for (int i = 0; i < l->n; i++)
        close(l->conns[i].dup);
    if (l->fd >= 0) close(l->fd);
    if (l->ep >= 0) close(l->ep);
    if (l->wake >= 0) close(l->wake);
    if (l->spare >= 0) close(l->spare);
    pthread_mutex_destroy(&l->mu);
    free(l->conns);
    free(l);
}

/* The listener for bind, its bounds from RLIMIT_NOFILE; not accepting yet. */
static int listener_create(tr__rpc_server *s, const char *bind, listener **out, int *port) {
    listener *l = calloc(1, sizeof *l);
    if (!l) return tr__err(TR_ENOMEM, "rpc server");
    l->s = s;
    l->fd = l->ep = l->wake = l->spare = -1;
    pthread_mutex_init(&l->mu, NULL);
    struct rlimit rl;
    long fds = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                   ? (long)rl.rlim_cur
                   : 1024;
    long cap = (fds - RESERVE_FDS) / 3;
    l->cap = cap < 16 ? 16 : cap > MAX_CONNS ? MAX_CONNS : (int)cap;
    l->max_unproven = l->cap / 2;
    l->conns = calloc((size_t)l->cap, sizeof *l->conns);
    int rc = l->conns ? bind_listen(bind, &l->fd, port) : tr__err(TR_ENOMEM, "rpc server");
    if (!rc) {
        l->ep = epoll_create1(EPOLL_CLOEXEC);
        l->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
        struct epoll_event a = {.events = EPOLLIN, .data.fd = l->fd};
        struct epoll_event w = {.events = EPOLLIN, .data.fd = l->wake};
        if (l->ep < 0 || l->wake < 0 || epoll_ctl(l->ep, EPOLL_CTL_ADD, l->fd, &a) != 0 ||
            epoll_ctl(l->ep, EPOLL_CTL_ADD, l->wake, &w) != 0)
            rc = tr__err_errno(errno, "rpc server: epoll");
    }
    if (rc) {
        listener_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

/* Stops accepting (the thread joined); the connections stay gRPC's. */
static void listener_stop(listener *l) {
    if (!l || !l->thread) return;
    uint64_t one = 1;
    ssize_t w = write(l->wake, &one, sizeof one);
    (void)w;
    pthread_join(l->thread, NULL);
    l->thread = 0;
    if (l->evicted || l->refused || l->emfile)
        TR_LOG_INFO("RPC-CONNS",
                    "%ld connections accepted, %ld evicted unproven, %ld refused, %ld closed "
                    "out of descriptors",
                    l->accepted, l->evicted, l->refused, l->emfile);
}

static int read_pem(const char *path, char **out) {
    *out = NULL;
    if (!path) return 0;
    FILE *f = fopen(path, "rb");
    char *b = f ? malloc((1 << 20) + 1) : NULL;
    size_t n = b ? fread(b, 1, 1 << 20, f) : 0;
    int bad = !f || !b || n == 0 || (n == (1 << 20) && fgetc(f) != EOF);
    int e = errno;
    if (f) fclose(f);
    if (bad) {
        free(b);
        return tr__err(TR_EINVAL, "TLS: cannot read %s%s%s", path, f ? "" : ": ",
                       f ? " (empty, or over 1 MiB)" : strerror(e));
    }
    b[n] = '\0';
    *out = b;
    return 0;
}

int tr__rpc_tls_load(const char *cert_path, const char *key_path, const char *ca_path,
                     tr__rpc_tls *out) {
    memset(out, 0, sizeof *out);
    int rc = read_pem(cert_path, &out->cert);
    if (!rc) rc = read_pem(key_path, &out->key);
    if (!rc) rc = read_pem(ca_path, &out->ca);
    if (rc) tr__rpc_tls_free(out);
    return rc;
}

int tr__rpc_tls_load_files(const tr__rpc_tls_files *f, tr__rpc_tls *out) {
    if (!f) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    return tr__rpc_tls_load(f->cert[0] ? f->cert : NULL, f->key[0] ? f->key : NULL,
                            f->ca[0] ? f->ca : NULL, out);
}

void tr__rpc_tls_free(tr__rpc_tls *t) {
    if (!t) return;
    free(t->cert);
    free(t->key);
    free(t->ca);
    memset(t, 0, sizeof *t);
}

int tr__rpc_server_create(const char *bind, const char *token, size_t max_msg,
                          tr__rpc_handler handler, void *ctx, tr__rpc_server **out, int *port) {
    return tr__rpc_server_create_tls(bind, token, NULL, max_msg, handler, ctx, out, port);
}

int tr__rpc_server_create_tls(const char *bind, const char *token, const tr__rpc_tls *tls,
                              size_t max_msg, tr__rpc_handler handler, void *ctx,
                              tr__rpc_server **out, int *port) {
    if (!out || !bind || !handler) return tr__err(TR_EINVAL, "rpc server: NULL argument");
    if (tls && ((!tls->cert) != (!tls->key) || (tls->cert && !tls->ca)))
        return tr__err(TR_EINVAL, "rpc server: TLS needs a certificate, its key, and the CA "
                                  "that signs the clients' certificates (TLS is mutual)");
    *out = NULL;
    if (!token) token = "";
    if (strlen(token) >= sizeof((tr__rpc_server *)0)->token)
        return tr__err(TR_EINVAL, "rpc server: a token of at most 255 bytes");
    if (!token[0]) /* loopback too: every local user reaches it */
        return tr__err(TR_EINVAL, "rpc server: %s: a cluster port never runs without a token",
                       bind);
    tr__rpc_server *s = calloc(1, sizeof *s);
    if (!s) return tr__err(TR_ENOMEM, "rpc server");
    snprintf(s->token, sizeof s->token, "%s", token);
    s->max_msg = max_msg;
    s->handler = handler;
    s->ctx = ctx;
    /* our own listener (see "the listener"), unless TLS needs gRPC's and this gRPC's
     * handler of outside connections is not the one known */
    int use_tls = tls && tls->cert, p = 0, rc = 0;
    if (!use_tls || ext_known()) rc = listener_create(s, bind, &s->ls, &p);
    if (rc) {
        free(s);
        return rc;
    }
    grpc_init();
    grpc_arg a[12];
    grpc_channel_args args;
    make_args(max_msg, 1, a, &args);
    if (use_tls && s->ls) { /* gRPC writes its handler into s->ls->ext */
        a[args.num_args].type = GRPC_ARG_POINTER;
        a[args.num_args].key = (char *)EXT_PORT;
        a[args.num_args].value.pointer.p = &s->ls->ext;
        a[args.num_args++].value.pointer.vtable = &ext_vtable;
    }
    s->cq = grpc_completion_queue_create_for_next(NULL);
    s->srv = grpc_server_create(&args, NULL);
    grpc_server_register_completion_queue(s->srv, s->cq, NULL);
    if (use_tls) {
        grpc_ssl_pem_key_cert_pair pair = {tls->key, tls->cert};
        /* mutual: a client must present a certificate the CA signed */
        grpc_server_credentials *creds = grpc_ssl_server_credentials_create_ex(
            tls->ca, &pair, 1, GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY, NULL);
        if (!creds)
            rc = tr__err(TR_EINVAL, "rpc server: TLS: the certificate or key is not usable");
        else if (s->ls && (grpc_server_add_http2_port(s->srv, EXT_PORT, creds) != 0 || !s->ls->ext))
            rc = tr__err(TR_EINTERNAL, "rpc server: gRPC took no outside connections");
        else if (!s->ls && (p = grpc_server_add_http2_port(s->srv, bind, creds)) <= 0)
            rc = tr__err(TR_EIO, "rpc server: cannot listen on %s", bind);
        if (creds) grpc_server_credentials_release(creds);
        if (!rc && !s->ls)
            TR_LOG_WARN("RPC-LISTEN",
                        "gRPC %s: TLS connections are accepted by gRPC itself, with no cap "
                        "on their number",
                        grpc_version_string());
    }
    if (rc) {
        grpc_server_destroy(s->srv);
        grpc_completion_queue_shutdown(s->cq);
        while (grpc_completion_queue_next(s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(s->cq);
        listener_free(s->ls);
        free(s);
        grpc_shutdown();
        return rc;
    }
    grpc_server_start(s->srv);
    rc = request_next(s);
    if (!rc && pthread_create(&s->thread, NULL, serve, s) != 0)
        rc = tr__err(TR_ENOMEM, "rpc server: no thread");
    if (!rc && s->ls && pthread_create(&s->ls->thread, NULL, listen_loop, s->ls) != 0) {
        s->ls->thread = 0;
        rc = tr__err(TR_ENOMEM, "rpc server: no thread");
    }
    if (rc) {
        if (!s->thread) {
            s->shutting = 1;
            grpc_server_shutdown_and_notify(s->srv, s->cq, T_SHUTDOWN);
            grpc_server_cancel_all_calls(s->srv);
            serve(s); /* drains here */
            grpc_server_destroy(s->srv);
            grpc_completion_queue_destroy(s->cq);
            listener_free(s->ls);
            free(s);
            grpc_shutdown();
        } else {
            tr__rpc_server_destroy(s);
        }
        return rc;
    }
    if (port) *port = p;
    *out = s;
    return 0;
}

void tr__rpc_server_destroy(tr__rpc_server *s) {
    if (!s) return;
    listener_stop(s->ls); /* no connection is handed to gRPC from now on */
    __atomic_store_n(&s->shutting, 1, __ATOMIC_RELEASE);
    grpc_server_shutdown_and_notify(s->srv, s->cq, T_SHUTDOWN);
    grpc_server_cancel_all_calls(s->srv);
    pthread_join(s->thread, NULL);
    grpc_server_destroy(s->srv);
    grpc_completion_queue_destroy(s->cq);
    listener_free(s->ls);
    free(s);
    grpc_shutdown();
}

/* ------------------------------------------------------------------ client */

struct tr__rpc_client {
    grpc_channel *ch;
    char auth[300];
    size_t max_msg;
};

int tr__rpc_client_create(const char *target, const char *token, size_t max_msg,
                          tr__rpc_client **out) {
    return tr__rpc_client_create_tls(target, token, NULL, max_msg, out);
}

int tr__rpc_client_create_tls(const char *target, const char *token, const tr__rpc_tls *tls,
                              size_t max_msg, tr__rpc_client **out) {
    if (!out || !target) return tr__err(TR_EINVAL, "rpc client: NULL argument");
    *out = NULL;
    if (token && strlen(token) > 255) return tr__err(TR_EINVAL, "rpc client: token too long");
    tr__rpc_client *c = calloc(1, sizeof *c);
    if (!c) return tr__err(TR_ENOMEM, "rpc client");
    snprintf(c->auth, sizeof c->auth, BEARER "%s", token ? token : "");
    c->max_msg = max_msg;
    grpc_init();
    grpc_arg a[13];
    grpc_channel_args args;
    grpc_channel_credentials *creds;
    make_args(max_msg, 0, a, &args);
    if (tls && tls->ca) {
        grpc_ssl_pem_key_cert_pair pair = {tls->key, tls->cert};
        creds =
            grpc_ssl_credentials_create(tls->ca, tls->cert && tls->key ? &pair : NULL, NULL, NULL);
        a[args.num_args].type = GRPC_ARG_STRING; /* the name every node's certificate has */
        a[args.num_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        a[args.num_args++].value.string = (char *)TR__RPC_TLS_NAME;
    } else {
        creds = grpc_insecure_credentials_create();
    }
    c->ch = creds ? grpc_channel_create(target, creds, &args) : NULL;
    if (creds) grpc_channel_credentials_release(creds);
    if (!c->ch) {
        free(c);
        grpc_shutdown();
        return tr__err(TR_EINVAL, "rpc client: bad target %s", target);
    }
    *out = c;
    return 0;
}

void tr__rpc_client_destroy(tr__rpc_client *c) {
    if (!c) return;
    grpc_channel_destroy(c->ch);
    free(c);
    grpc_shutdown();
}

static int code_of_status(grpc_status_code st, const char *detail) {
    tr__proc_counters *cnt = tr__proc_cnt(); /* (every failed call or stream: the metrics) */
    if (cnt) tr__cnt_add(&cnt->rpc_errors, 1);
    switch (st) {
    case GRPC_STATUS_UNAVAILABLE:
        return tr__err(TR_ECONNECT, "rpc: unavailable: %s", detail);
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return tr__err(TR_ETIMEDOUT, "rpc: deadline exceeded: %s", detail);
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
        return tr__err(TR_EPERM, "rpc: refused: %s", detail);
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return tr__err(TR_EMSGSIZE, "rpc: too large: %s", detail);
    case GRPC_STATUS_CANCELLED:
        return tr__err(TR_ECLOSED, "rpc: cancelled: %s", detail);
    default:
        return tr__err(TR_EIO, "rpc: status %d: %s", (int)st, detail);
    }
}

int tr__rpc_call(tr__rpc_client *c, const void *req, size_t len, int timeout_ms, tr__buf *reply) {
    if (!c || (!req && len) || !reply) return tr__err(TR_EINVAL, "rpc call: NULL argument");
    if (len > c->max_msg)
        return tr__err(TR_EMSGSIZE, "rpc call: %zu bytes (at most %zu)", len, c->max_msg);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_slice method = grpc_slice_from_static_string(METHOD);
    grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method,
                                               NULL, deadline_in(timeout_ms), NULL);
    grpc_slice body = grpc_slice_from_copied_buffer(req, len);
    grpc_byte_buffer *out = grpc_raw_byte_buffer_create(&body, 1), *in = NULL;
    grpc_slice_unref(body);
    grpc_metadata md;
    memset(&md, 0, sizeof md);
    md.key = grpc_slice_from_static_string(AUTH_KEY);
    md.value = grpc_slice_from_copied_string(c->auth);
    grpc_metadata_array init_md, trail_md;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_status_code st = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &in;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[5].data.recv_status_on_client.status = &st;
    ops[5].data.recv_status_on_client.status_details = &details;
    int rc = 0;
    if (grpc_call_start_batch(call, ops, 6, tag_of(call, 0), NULL) != GRPC_CALL_OK) {
        rc = tr__err(TR_EINTERNAL, "rpc call: start_batch");
    } else {
        /* the call's own deadline ends it; the pluck waits for that */
        grpc_event ev = grpc_completion_queue_pluck(cq, tag_of(call, 0),
                                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) {
            rc = tr__err(TR_EINTERNAL, "rpc call: no completion");
        } else if (st != GRPC_STATUS_OK) {
            char *d = grpc_slice_to_c_string(details);
            rc = code_of_status(st, d ? d : "");
            gpr_free(d);
        } else if (!in) {
            rc = tr__err(TR_EPROTO, "rpc call: a reply without a message");
        } else {
            size_t at = reply->len;
            rc = read_all(in, reply);
            if (!rc && reply->len - at < 4)
                rc = tr__err(TR_EPROTO, "rpc call: a reply of %zu bytes", reply->len - at);
            if (!rc) {
                uint32_t u = 0;
                for (int i = 0; i < 4; i++)
                    u |= (uint32_t)reply->data[at + i] << (8 * i);
                memmove(reply->data + at, reply->data + at + 4, reply->len - at - 4);
                reply->len -= 4;
                int code = (int32_t)u;
                if (code > 0 || (code && strcmp(tr__errname(code), "TR_E?") == 0))
                    rc = tr__err(TR_EPROTO, "rpc call: status %d in a reply", code);
                else if (code)
                    rc = tr__err(code, "%.*s", (int)(reply->len - at > 400 ? 400 : reply->len - at),
                                 (const char *)reply->data + at);
            }
        }
    }
    if (in) grpc_byte_buffer_destroy(in);
    grpc_byte_buffer_destroy(out);
    grpc_slice_unref(md.value);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (
        grpc_completion_queue_pluck(cq, tag_of(call, 0), gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
            .type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return rc;
}

/* ------------------------------------------------------------------ streams */

#define STREAM_QUEUE_BYTES (64u << 20) /* what a stream holds unsent, or received untaken */
#define CLOSE_WAIT_S 5                 /* a client stream's close waits this for gRPC */

typedef struct smsg { /* a message waiting for the send in flight */
    struct smsg *next;
    grpc_byte_buffer *bb;
} smsg;

typedef struct rmsg { /* a message received, not yet taken (client) */
    struct rmsg *next;
    size_t len;
    unsigned char data[];
} rmsg;

struct tr__rpc_stream {
    grpc_call *call;
    tr__rpc_server *srv;       /* the server's side; NULL on a client */
    grpc_completion_queue *cq; /* a client's own */
    pthread_t thread;          /* a client's: drives cq */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;  /* batches in flight, and 1 for the owner (client: until close; server: until
                  on_end has returned) */
    int ended; /* no more messages either way */
    int code;  /* how it ended (a client's recv says) */
    char why[256];
    int cq_shut;
    size_t max_msg;
    int sending; /* one send in flight: `out`; the rest wait in sq */
    grpc_byte_buffer *out, *in;
    smsg *sq, *sq_tail;
    size_t sq_bytes;
    rmsg *rq, *rq_tail;
    size_t rq_bytes;
    int recv_paused; /* a client's: rq is full; its reader re-arms the receive */
    int loop_done;   /* a client's: its thread is past its loop */
    int orphaned;    /* a client's: close gave up waiting; its thread frees it */
    int half_closed; /* a server's: the client sent all; the status follows the replies */
    const tr__rpc_stream_handlers *h; /* a server's handlers, or a callback client's */
    /* a client's */
    grpc_metadata auth;
    grpc_metadata_array md_in, md_trail;
    grpc_status_code status;
    grpc_slice details;
    /* a server's */
    int cancelled;
    grpc_slice st_msg;
} __attribute__((aligned(8)));

/* Starts a RECV_MESSAGE (caller holds mu). */
static int start_recv(tr__rpc_stream *st, int with_initial_md) {
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (with_initial_md) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &st->in;
    if (grpc_call_start_batch(st->call, ops, n, tag_of(st, S_RECV), NULL) != GRPC_CALL_OK)
        return -1;
    st->refs++;
    return 0;
}

/* Starts a SEND_MESSAGE of bb (caller holds mu). */
static int start_send(tr__rpc_stream *st, grpc_byte_buffer *bb) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    st->out = bb;
    if (grpc_call_start_batch(st->call, &op, 1, tag_of(st, S_SEND), NULL) != GRPC_CALL_OK) {
        st->out = NULL;
        return -1;
    }
    st->sending = 1;
    st->refs++;
    return 0;
}

static void stream_free(tr__rpc_stream *st) {
    for (smsg *m = st->sq, *next; m; m = next) {
        next = m->next;
        grpc_byte_buffer_destroy(m->bb);
        free(m);
    }
    for (rmsg *m = st->rq, *next; m; m = next) {
        next = m->next;
        free(m);
    }
    if (st->in) grpc_byte_buffer_destroy(st->in);
    if (st->out) grpc_byte_buffer_destroy(st->out);
    if (st->call) grpc_call_unref(st->call);
    if (st->srv) {
        grpc_slice_unref(st->st_msg);
    } else {
        grpc_slice_unref(st->auth.value);
        grpc_slice_unref(st->details);
        grpc_metadata_array_destroy(&st->md_in);
        grpc_metadata_array_destroy(&st->md_trail);
    }
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
}

static void stream_init(tr__rpc_stream *st, size_t max_msg) {
    pthread_mutex_init(&st->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->cv, &ca);
    pthread_condattr_destroy(&ca);
    st->max_msg = max_msg;
    st->refs = 1;
}

/* A server's status OK, once every reply owed has gone (caller holds mu). */
static void send_status(tr__rpc_stream *st) {
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op.data.send_status_from_server.status = GRPC_STATUS_OK;
    op.data.send_status_from_server.status_details = &st->st_msg;
    st->half_closed = 0; /* (once) */
    if (grpc_call_start_batch(st->call, &op, 1, tag_of(st, S_STATUS), NULL) == GRPC_CALL_OK)
        st->refs++;
}

/* A completed send: the next waiting one goes (caller holds mu). */
static void sent(tr__rpc_stream *st) {
    st->refs--;
    grpc_byte_buffer_destroy(st->out);
    st->out = NULL;
    st->sending = 0;
    while (st->sq && !st->ended) {
        smsg *m = st->sq;
        st->sq = m->next;
        if (!st->sq) st->sq_tail = NULL;
        grpc_byte_buffer *bb = m->bb;
        st->sq_bytes -= grpc_byte_buffer_length(bb);
        free(m);
        if (start_send(st, bb) == 0) break;
        grpc_byte_buffer_destroy(bb);
    }
    if (st->half_closed && !st->sending && !st->ended) send_status(st);
}

void tr__rpc_server_on_stream(tr__rpc_server *s, const tr__rpc_stream_handlers *h) {
    if (!s || !h || !h->on_msg) return; /* (a server takes streams once, for good) */
    __atomic_store_n(&s->streams, h, __ATOMIC_RELEASE);
}

static void stream_accept(tr__rpc_server *s, grpc_call *call) {
    tr__rpc_stream *st = calloc(1, sizeof *st);
    if (!st) {
        grpc_call_cancel(call, NULL);
        grpc_call_unref(call);
        return;
    }
    stream_init(st, s->max_msg);
    st->srv = s;
    st->h = __atomic_load_n(&s->streams, __ATOMIC_ACQUIRE); /* this stream's for good */
    st->call = call;
    st->st_msg = grpc_empty_slice();
    __atomic_add_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &st->cancelled;
    pthread_mutex_lock(&st->mu);
    int ok = grpc_call_start_batch(call, &op, 1, tag_of(st, S_END), NULL) == GRPC_CALL_OK;
    if (ok) st->refs++;
    if (ok && start_recv(st, 1) != 0) grpc_call_cancel(call, NULL); /* S_END will come */
    pthread_mutex_unlock(&st->mu);
    if (!ok) { /* nothing in flight: gone at once */
        __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        stream_free(st);
    }
}

/* A server stream's completion, on the server's thread. */
static void stream_event(tr__rpc_server *s, tr__rpc_stream *st, int kind, int success) {
    int shutting = __atomic_load_n(&s->shutting, __ATOMIC_ACQUIRE);
    pthread_mutex_lock(&st->mu);
    if (kind == S_RECV) {
        st->refs--;
        grpc_byte_buffer *in = st->in;
        st->in = NULL;
        if (success && in && !st->ended && !shutting) {
            tr__buf b = TR__BUF_INIT;
            int rc = read_all(in, &b);
            pthread_mutex_unlock(&st->mu);
            if (!rc && !b.oom) st->h->on_msg(st->h->ctx, st, b.data, b.len);
            pthread_mutex_lock(&st->mu);
            if (rc || b.oom) /* never a silent gap in an ordered stream: it ends */
                grpc_call_cancel(st->call, NULL);
            else if (!st->ended && start_recv(st, 0) != 0)
                grpc_call_cancel(st->call, NULL);
            tr__buf_free(&b);
        } else if (success && !in && !st->ended && !shutting) { /* the client sent all */
            st->half_closed = 1;
            if (!st->sending) send_status(st); /* else once the replies owed have gone */
        }
        if (in) grpc_byte_buffer_destroy(in);
    } else if (kind == S_SEND) {
        sent(st);
    } else if (kind == S_STATUS) {
        st->refs--;
    } else { /* S_END: the call is over; the application hears it once */
        st->refs--;
        st->ended = 1;
        pthread_mutex_unlock(&st->mu);
        if (st->h->on_end) st->h->on_end(st->h->ctx, st);
        pthread_mutex_lock(&st->mu);
        st->refs--; /* the owner's */
    }
    int gone = st->refs == 0;
    pthread_mutex_unlock(&st->mu);
    if (gone) {
        __atomic_sub_fetch(&s->live, 1, __ATOMIC_ACQ_REL);
        stream_free(st);
    }
}

/* A callback stream's message, as its slices, to on_msgv (called with st->mu held; drops
 * it during the call). Returns 0 or a code (unreadable, no memory). */
static int deliver_pieces(tr__rpc_stream *st, grpc_byte_buffer *bb) {
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return tr__err(TR_EPROTO, "rpc: unreadable message");
    grpc_slice stack_sl[64], *sl = stack_sl;
    struct iovec stack_iov[64], *iov = stack_iov;
    int n = 0, cap = 64, rc = 0;
    size_t len = 0;
    grpc_slice s;
    while (grpc_byte_buffer_reader_next(&r, &s)) {
        if (n == cap) {
            int ncap = cap * 2;
            grpc_slice *ns = malloc(ncap * sizeof *ns);
            struct iovec *ni = malloc(ncap * sizeof *ni);
            if (!ns || !ni) {
                free(ns);
                free(ni);
                grpc_slice_unref(s);
                rc = tr__err(TR_ENOMEM, "rpc stream: no room for a message's pieces");
                break;
            }
            memcpy(ns, sl, n * sizeof *ns);
            memcpy(ni, iov, n * sizeof *ni);
            if (sl != stack_sl) {
                free(sl);
                free(iov);
            }
            sl = ns;
            iov = ni;
            cap = ncap;
        }
        sl[n++] = s;
    }
    grpc_byte_buffer_reader_destroy(&r);
    /* the views last: a small slice keeps its bytes inside itself (where sl[] holds it
     * now, for good), and sl[] may have moved while it grew */
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = GRPC_SLICE_START_PTR(sl[i]);
        iov[i].iov_len = GRPC_SLICE_LENGTH(sl[i]);
        len += iov[i].iov_len;
    }
    if (!rc && !st->ended) {
        pthread_mutex_unlock(&st->mu);
        st->h->on_msgv(st->h->ctx, st, iov, n, len);
        pthread_mutex_lock(&st->mu);
    }
    for (int i = 0; i < n; i++)
        grpc_slice_unref(sl[i]);
    if (sl != stack_sl) {
        free(sl);
        free(iov);
    }
    return rc;
}

static void *client_loop(void *arg) {
    tr__rpc_stream *st = arg;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        int kind = (int)((uintptr_t)ev.tag & 7);
        pthread_mutex_lock(&st->mu);
        if (kind == S_RECV) {
            st->refs--;
            grpc_byte_buffer *in = st->in;
            st->in = NULL;
            if (ev.success && in && st->h && st->h->on_msgv) { /* its pieces, no copy */
                int rc = deliver_pieces(st, in);
                grpc_byte_buffer_destroy(in);
                in = NULL;
                if (!rc && !st->ended && start_recv(st, 0) != 0) grpc_call_cancel(st->call, NULL);
                if (rc) { /* never a silent gap in an ordered stream */
                    st->code = rc;
                    snprintf(st->why, sizeof st->why, "%s", tr__last_error());
                    grpc_call_cancel(st->call, NULL);
                }
            } else if (ev.success && in && st->h) { /* a callback stream: on_msg, here */
                tr__buf b = TR__BUF_INIT;
                int rc = read_all(in, &b);
                grpc_byte_buffer_destroy(in);
                in = NULL;
                if (!rc && !b.oom && !st->ended) {
                    pthread_mutex_unlock(&st->mu);
                    st->h->on_msg(st->h->ctx, st, b.data, b.len);
                    pthread_mutex_lock(&st->mu);
                    if (!st->ended && start_recv(st, 0) != 0) grpc_call_cancel(st->call, NULL);
                } else if (rc || b.oom) { /* never a silent gap in an ordered stream */
                    st->code = tr__err(TR_ENOMEM, "rpc stream: no room for a message received");
                    snprintf(st->why, sizeof st->why, "%s", tr__last_error());
                    grpc_call_cancel(st->call, NULL);
                }
                tr__buf_free(&b);
            } else if (ev.success && in) {
                tr__buf b = TR__BUF_INIT;
                rmsg *m = NULL;
                if (read_all(in, &b) == 0 && !b.oom) m = malloc(sizeof *m + b.len);
                if (m) {
                    m->next = NULL;
                    m->len = b.len;
                    if (b.len) memcpy(m->data, b.data, b.len);
                    if (st->rq_tail)
                        st->rq_tail->next = m;
                    else
                        st->rq = m;
                    st->rq_tail = m;
                    st->rq_bytes += b.len;
                    pthread_cond_broadcast(&st->cv);
                    /* backpressure: a reader that lags stops the receives (and HTTP/2's
                     * flow control the sender); tr__rpc_stream_recv re-arms */
                    if (st->ended)
                        ;
                    else if (st->rq_bytes >= STREAM_QUEUE_BYTES)
                        st->recv_paused = 1;
                    else if (start_recv(st, 0) != 0)
                        grpc_call_cancel(st->call, NULL);
                } else { /* never a silent gap in an ordered stream: it ends */
                    st->code = tr__err(TR_ENOMEM, "rpc stream: no room for a message received");
                    snprintf(st->why, sizeof st->why, "%s", tr__last_error());
                    st->ended = 1;
                    grpc_call_cancel(st->call, NULL);
                    pthread_cond_broadcast(&st->cv);
                }
                tr__buf_free(&b);
                grpc_byte_buffer_destroy(in);
            }
        } else if (kind == S_SEND) {
            sent(st);
        } else if (kind == S_END) { /* the status: how it ended */
            st->refs--;
            char *d = grpc_slice_to_c_string(st->details);
            if (st->code) /* ended here already, and says why */
                ;
            else if (st->status == GRPC_STATUS_OK)
                st->code = tr__err(TR_ECLOSED, "rpc stream: the peer ended it");
            else
                st->code = code_of_status(st->status, d ? d : "");
            if (st->why[0] == '\0') snprintf(st->why, sizeof st->why, "%s", tr__last_error());
            gpr_free(d);
            st->ended = 1;
            pthread_cond_broadcast(&st->cv);
            if (st->h && st->h->on_end) { /* once: S_END comes once */
                pthread_mutex_unlock(&st->mu);
                st->h->on_end(st->h->ctx, st);
                pthread_mutex_lock(&st->mu);
            }
        }
        int shut = st->refs == 0 && !st->cq_shut;
        if (shut) st->cq_shut = 1;
        pthread_mutex_unlock(&st->mu);
        if (shut) grpc_completion_queue_shutdown(st->cq);
    }
    pthread_mutex_lock(&st->mu); /* a close that gave up waiting leaves the rest to us */
    int orphan = st->orphaned;
    st->loop_done = 1;
    pthread_mutex_unlock(&st->mu);
    if (orphan) {
        grpc_completion_queue_destroy(st->cq);
        stream_free(st);
    }
    return NULL;
}

int tr__rpc_stream_open(tr__rpc_client *c, tr__rpc_stream **out) {
    return tr__rpc_stream_open_cb(c, NULL, out);
}

int tr__rpc_stream_open_cb(tr__rpc_client *c, const tr__rpc_stream_handlers *h,
                           tr__rpc_stream **out) {
    if (!c || !out || (h && !h->on_msg)) return tr__err(TR_EINVAL, "rpc stream: NULL argument");
    *out = NULL;
    tr__rpc_stream *st = calloc(1, sizeof *st);
    if (!st) return tr__err(TR_ENOMEM, "rpc stream");
    stream_init(st, c->max_msg);
    st->h = h;
    st->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice method = grpc_slice_from_static_string(STREAM_METHOD);
    st->call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, st->cq, method, NULL,
                                        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    st->auth.key = grpc_slice_from_static_string(AUTH_KEY);
    st->auth.value = grpc_slice_from_copied_string(c->auth);
    grpc_metadata_array_init(&st->md_in);
    grpc_metadata_array_init(&st->md_trail);
    st->details = grpc_empty_slice();
    st->status = GRPC_STATUS_UNKNOWN;
    grpc_op ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &st->auth;
    ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &st->md_in;
    ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[2].data.recv_status_on_client.trailing_metadata = &st->md_trail;
    ops[2].data.recv_status_on_client.status = &st->status;
    ops[2].data.recv_status_on_client.status_details = &st->details;
    pthread_mutex_lock(&st->mu);
    int rc = grpc_call_start_batch(st->call, ops, 3, tag_of(st, S_END), NULL) == GRPC_CALL_OK
                 ? 0
                 : tr__err(TR_EINTERNAL, "rpc stream: start");
    if (!rc) st->refs++;
    if (!rc && start_recv(st, 0) != 0) rc = tr__err(TR_EINTERNAL, "rpc stream: receive");
    pthread_mutex_unlock(&st->mu);
    if (!rc && pthread_create(&st->thread, NULL, client_loop, st) != 0)
        rc = tr__err(TR_ENOMEM, "rpc stream: no thread");
    if (rc) {
        char why[300];
        snprintf(why, sizeof why, "%s", tr__last_error());
        if (st->refs > 1) { /* batches in flight: the loop must drain them */
            grpc_call_cancel(st->call, NULL);
            st->refs--; /* the owner's */
            client_loop(st);
        } else {
            grpc_completion_queue_shutdown(st->cq);
            while (
                grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                GRPC_QUEUE_SHUTDOWN) {
            }
        }
        grpc_completion_queue_destroy(st->cq);
        stream_free(st);
        return tr__err(rc, "%s", why);
    }
    *out = st;
    return 0;
}

int tr__rpc_stream_send(tr__rpc_stream *st, const void *msg, size_t len) {
    struct iovec one = {(void *)msg, len};
    if (!st || (!msg && len)) return tr__err(TR_EINVAL, "rpc stream send: NULL argument");
    return tr__rpc_stream_sendv(st, &one, 1);
}

static int send_bb(tr__rpc_stream *st, grpc_byte_buffer *bb, size_t len);

int tr__rpc_stream_sendv(tr__rpc_stream *st, const struct iovec *iov, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    if (!st || n < 0 || (!iov && n)) return tr__err(TR_EINVAL, "rpc stream send: NULL argument");
    if (len > st->max_msg)
        return tr__err(TR_EMSGSIZE, "rpc stream send: %zu bytes (at most %zu)", len, st->max_msg);
    grpc_slice sl = grpc_slice_malloc(len);
    for (size_t i = 0, at = 0; i < (size_t)n; at += iov[i].iov_len, i++)
        if (iov[i].iov_len) memcpy(GRPC_SLICE_START_PTR(sl) + at, iov[i].iov_base, iov[i].iov_len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    return send_bb(st, bb, len);
}

typedef struct lent {
    void (*done)(void *);
    void *ctx;
} lent;

static void lent_done(void *p) {
    lent *l = p;
    l->done(l->ctx);
    free(l);
}

int tr__rpc_stream_send_lent(tr__rpc_stream *st, const void *head, size_t hlen, const void *data,
                             size_t len, void (*done)(void *), void *ctx) {
    lent *l = malloc(sizeof *l);
    if (!st || !done || !l || hlen + len > st->max_msg) {
        free(l);
        if (done) done(ctx);
        return !st || !done ? tr__err(TR_EINVAL, "rpc stream send: NULL argument")
               : !l         ? tr__err(TR_ENOMEM, "rpc stream send")
                    : tr__err(TR_EMSGSIZE, "rpc stream send: %zu bytes (at most %zu)", hlen + len,
                              st->max_msg);
    }
    l->done = done;
    l->ctx = ctx;
    grpc_slice sl[2];
    sl[0] = grpc_slice_from_copied_buffer(head, hlen);
    sl[1] = grpc_slice_new_with_user_data((void *)data, len, lent_done, l);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(sl, 2);
    grpc_slice_unref(sl[0]);
    grpc_slice_unref(sl[1]); /* the buffer holds it: done runs when gRPC lets go */
    return send_bb(st, bb, hlen + len);
}

/* Sends (or queues) a message built already; on failure it is destroyed. */
static int send_bb(tr__rpc_stream *st, grpc_byte_buffer *bb, size_t len) {
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    if (st->ended) {
        rc = st->code ? tr__err(st->code, "%s", st->why) : tr__err(TR_ECLOSED, "rpc stream: ended");
    } else if (!st->sending) {
        if (start_send(st, bb) != 0)
            rc = tr__err(TR_EINTERNAL, "rpc stream: send");
        else
            bb = NULL;
    } else if (st->sq_bytes + len > STREAM_QUEUE_BYTES) {
        rc = tr__err(TR_ENOMEM, "rpc stream send: %zu bytes wait unsent: the peer is not reading",
                     st->sq_bytes);
    } else {
        smsg *m = malloc(sizeof *m);
        if (!m) {
            rc = tr__err(TR_ENOMEM, "rpc stream send");
        } else {
            st->sq_bytes += len;
            m->next = NULL;
            m->bb = bb;
            bb = NULL;
            if (st->sq_tail)
                st->sq_tail->next = m;
            else
                st->sq = m;
            st->sq_tail = m;
        }
    }
    pthread_mutex_unlock(&st->mu);
    if (bb) grpc_byte_buffer_destroy(bb);
    return rc;
}

int tr__rpc_stream_recv(tr__rpc_stream *st, int timeout_ms, tr__buf *msg) {
    if (!st || !msg) return tr__err(TR_EINVAL, "rpc stream recv: NULL argument");
    if (st->srv || st->h)
        return tr__err(TR_EINVAL, "rpc stream recv: this stream's messages come to on_msg");
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&st->mu);
    while (!st->rq && !st->ended && rc == 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&st->cv, &st->mu);
        else if (pthread_cond_timedwait(&st->cv, &st->mu, &until) != 0)
            rc = tr__err(TR_ETIMEDOUT, "rpc stream recv: nothing in %d ms", timeout_ms);
    }
    if (st->rq) {
        rmsg *m = st->rq;
        st->rq = m->next;
        if (!st->rq) st->rq_tail = NULL;
        st->rq_bytes -= m->len;
        rc = tr__buf_append(msg, m->data, m->len);
        free(m);
        if (st->recv_paused && !st->ended && st->rq_bytes < STREAM_QUEUE_BYTES / 2) {
            st->recv_paused = 0;
            if (start_recv(st, 0) != 0) grpc_call_cancel(st->call, NULL);
        }
    } else if (!rc) {
        rc = tr__err(st->code ? st->code : TR_ECLOSED, "%s",
                     st->why[0] ? st->why : "rpc stream: ended");
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

size_t tr__rpc_stream_unsent(tr__rpc_stream *st) {
    pthread_mutex_lock(&st->mu);
    size_t n = st->sq_bytes;
    pthread_mutex_unlock(&st->mu);
    return n;
}

int tr__rpc_stream_why(tr__rpc_stream *st, char *why, size_t cap) {
    pthread_mutex_lock(&st->mu);
    int rc = st->ended ? (st->code ? st->code : TR_ECLOSED) : 0;
    if (cap) snprintf(why, cap, "%s", st->why[0] ? st->why : rc ? "rpc stream: ended" : "");
    pthread_mutex_unlock(&st->mu);
    return rc;
}

void tr__rpc_stream_close(tr__rpc_stream *st) {
    if (!st || st->srv) return; /* (a server's stream ends with its call: on_end) */
    pthread_mutex_lock(&st->mu);
    st->ended = 1;
    st->refs--; /* the owner's */
    int shut = st->refs == 0 && !st->cq_shut;
    if (shut) st->cq_shut = 1;
    pthread_mutex_unlock(&st->mu);
    grpc_call_cancel(st->call, NULL); /* what is in flight completes now */
    if (shut) grpc_completion_queue_shutdown(st->cq);
    /* ...within moments. Never wait for ever: a batch gRPC does not end (seen with a send
     * stalled by HTTP/2 flow control) leaves the stream's remains to its thread */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CLOSE_WAIT_S;
    if (pthread_timedjoin_np(st->thread, NULL, &until) != 0) {
        pthread_mutex_lock(&st->mu);
        int done = st->loop_done;
        if (!done) {
            st->orphaned = 1;
            st->h = NULL; /* no callback after close returns: its owner may free them */
        }
        pthread_mutex_unlock(&st->mu);
        if (!done) {
            TR_LOG_WARN_LIMITED("RPC-CLOSE",
                                "a stream's batches did not end within %d s of its cancel; its "
                                "thread frees it when they do",
                                CLOSE_WAIT_S);
            pthread_detach(st->thread);
            return;
        }
        pthread_join(st->thread, NULL);
    }
    grpc_completion_queue_destroy(st->cq);
    stream_free(st);
}
