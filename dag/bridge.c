/* dag/bridge.c - see bridge.h. On the wire (host byte order: a cluster's nodes share an
 * architecture): a hello {magic u64, value u32, from node u32, graph char[32]}, then per
 * execution a frame {execution u64, code i32, flags u32 (0), length u64} and the value's
 * bytes (or, for an error, its message); at a teardown (not a failure), a goodbye frame
 * {UINT64_MAX, 0, 0, 0}, so that the node reading it stops without taking it for one. */
#include "dag/bridge.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/frame.h"
#include "core/kv.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "dag/chan.h"
#include "objectstore/client.h"

#define HELLO_MAGIC 0x31676472627274ull /* "trbrdg1" */
#define MAX_VALUE (16ull << 30)         /* a frame's length past this: malformed */
#define GOODBYE UINT64_MAX

typedef struct hello {
    uint64_t magic;
    uint32_t v, src;
    char graph[32];
} hello;

typedef struct frame {
    uint64_t e;
    int32_t code;
    uint32_t flags;
    uint64_t len;
} frame;

typedef struct worker {
    struct tr__dag_bridge *b;
    int is_send;
    size_t i; /* its send or recv */
    pthread_t t;
    int started;
} worker;

struct tr__dag_bridge {
    tr__dag_bridge_spec s;
    char graph[32], host[64], node_path[108], key[160];
    char names[TR__DAG_MAX_NODES][80]; /* the spec's, copied */
    tr__dag_send *sends;
    tr__dag_recv *recvs;
    int *send_fd; /* [send * TR__DAG_MAX_NODES + k]: to its k-th destination */
    int *recv_fd; /* by recv */
    int lfd;
    tr__nodeconn *kv;
    int published;
    worker *workers;
    size_t n_workers;
    int stopping, failed, notified; /* atomics */
};

/* "node N" or "node N (its address)". */
static const char *node_name(tr__dag_bridge *b, uint32_t k, char *buf, size_t cap) {
    if (k < TR__DAG_MAX_NODES && b->names[k][0])
        snprintf(buf, cap, "node %u (%s)", k, b->names[k]);
    else
        snprintf(buf, cap, "node %u", k);
    return buf;
}

static int64_t ms_since_ns(int64_t t0) {
    return (tr__now_ns() - t0) / 1000000;
}

static void nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void fail(tr__dag_bridge *b, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Ends every connection's reads and writes (the fds stay open until the stop). */
static void shut_all(tr__dag_bridge *b) {
    for (size_t i = 0; i < (b->s.n_sends + 1) * TR__DAG_MAX_NODES; i++)
        if (b->send_fd[i] >= 0) shutdown(b->send_fd[i], SHUT_RDWR);
    for (size_t i = 0; i < b->s.n_recvs + 1; i++)
        if (b->recv_fd[i] >= 0) shutdown(b->recv_fd[i], SHUT_RDWR);
}

/* The bridge's part failed: the other nodes see their connections end at once (no
 * goodbye), and the caller hears it once. */
static void fail(tr__dag_bridge *b, int code, const char *fmt, ...) {
    if (__atomic_load_n(&b->stopping, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&b->failed, 1, __ATOMIC_RELEASE);
    if (__atomic_exchange_n(&b->notified, 1, __ATOMIC_ACQ_REL)) return;
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    TR_LOG_WARN("DAG-BRIDGE", "graph %s, node %u: %s", b->graph, b->s.node, why);
    if (b->s.on_fail) b->s.on_fail(b->s.fail_arg, code, why);
    shut_all(b);
}

/* A goodbye came in: the graph was torn down where it came from (on_fail, code 0). */
static void said_goodbye(tr__dag_bridge *b, uint32_t from) {
    if (__atomic_load_n(&b->stopping, __ATOMIC_ACQUIRE)) return;
    if (__atomic_exchange_n(&b->notified, 1, __ATOMIC_ACQ_REL)) return;
    char why[100];
    snprintf(why, sizeof why, "node %u tore the graph down", from);
    if (b->s.on_fail) b->s.on_fail(b->s.fail_arg, 0, why);
}

/* 0, 1 (the peer closed before anything), or -1. */
static int read_all(int fd, void *p, size_t n) {
    char *c = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(fd, c + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0 && got == 0) return 1;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Low latency, and a peer cut off is seen within seconds (2 s idle, 3 probes 1 s apart). */
static void tune(int fd) {
    int one = 1, idle = 2, intvl = 1, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* The threads' waits end on the segment's stop word, the caller's check, or the bridge's
 * own stop (a start that failed part way: the stop word may be unset). */
static int check(void *arg) {
    tr__dag_bridge *b = arg;
    if (__atomic_load_n(&b->stopping, __ATOMIC_ACQUIRE))
        return tr__err(TR_ECLOSED, "the bridge stops");
    return b->s.check ? b->s.check(b->s.check_arg) : 0;
}

static tr__chan_wait waits(tr__dag_bridge *b) {
    tr__chan_wait w = {TR__NO_DEADLINE, 0, &b->s.h->stop, check, b};
    return w;
}

/* ------------------------------------------------------------------ the threads */

static void *run_send(void *arg) {
    worker *wk = arg;
    tr__dag_bridge *b = wk->b;
    const tr__dag_send *sd = &b->sends[wk->i];
    tr__chan c;
    int rc = tr__chan_open(&c, (char *)b->s.h + sd->off, (size_t)(b->s.bytes - sd->off));
    if (!rc && sd->reader >= c.readers)
        rc = tr__err(TR_EPROTO, "reader %u of a channel of %u", sd->reader, c.readers);
    if (rc) {
        fail(b, rc, "value %u: %s", sd->v, tr_last_error());
        return NULL;
    }
    tr__chan_wait w = waits(b);
    for (uint64_t e = 0;; e++) {
        const void *data;
        size_t len;
        int32_t code;
        uint32_t flags;
        rc = tr__chan_read(&c, e, &w, &data, &len, &code, &flags);
        if (rc == TR_ECLOSED && !__atomic_load_n(&b->failed, __ATOMIC_ACQUIRE)) {
            frame bye = {GOODBYE, 0, 0, 0}; /* a teardown: the readers stop, not fail */
            for (uint32_t k = 0; k < sd->n_dst; k++) {
                struct iovec iov = {&bye, sizeof bye};
                tr__write_all(b->send_fd[wk->i * TR__DAG_MAX_NODES + k], &iov, 1,
                              tr__deadline(1000));
            }
        }
        if (rc) {
            if (rc != TR_ECLOSED) fail(b, rc, "value %u: %s", sd->v, tr_last_error());
            return NULL;
        }
        tr_ref pin;
        int pinned = 0;
        char why[200];
        if (!code && (flags & TR__CHAN_REF)) { /* an object of this node's store: its bytes */
            memcpy(pin.b, data, sizeof pin.b);
            if ((code = tr__objects_pin(b->s.objects, pin, 10000, &data, &len))) {
                snprintf(why, sizeof why, "value %u: %s", sd->v, tr_last_error());
                data = why;
                len = strlen(why) + 1;
            } else {
                pinned = 1;
            }
        } else if (!code && flags) {
            code = TR_EPROTO;
            snprintf(why, sizeof why, "value %u: a device value cannot cross nodes", sd->v);
            data = why;
            len = strlen(why) + 1;
        }
        frame f = {e, code, 0, len};
        int bad = -1;
        for (uint32_t k = 0; k < sd->n_dst && bad < 0; k++) {
            struct iovec iov[2] = {{&f, sizeof f}, {(void *)data, len}};
            if (tr__write_all(b->send_fd[wk->i * TR__DAG_MAX_NODES + k], iov, len ? 2 : 1,
                              TR__NO_DEADLINE))
                bad = (int)k;
        }
        if (pinned) tr__objects_unpin(b->s.objects, pin);
        tr__chan_release(&c, e, sd->reader);
        if (bad >= 0) {
            char nm[120];
            fail(b, TR_EACTOR_DIED,
                 "the link to %s (value %u) ended: an actor there died, or its node",
                 node_name(b, sd->dst[bad], nm, sizeof nm), sd->v);
            return NULL;
        }
    }
}

static void *run_recv(void *arg) {
    worker *wk = arg;
    tr__dag_bridge *b = wk->b;
    const tr__dag_recv *rv = &b->recvs[wk->i];
    int fd = b->recv_fd[wk->i];
    tr__chan c;
    int rc = tr__chan_open(&c, (char *)b->s.h + rv->off, (size_t)(b->s.bytes - rv->off));
    tr_ref *refs = rc ? NULL : calloc(c.slots, sizeof *refs);
    unsigned char *ref_set = rc ? NULL : calloc(c.slots, 1);
    if (rc || !refs || !ref_set) {
        fail(b, rc ? rc : TR_ENOMEM, "value %u: %s", rv->v, rc ? tr_last_error() : "no memory");
        goto out;
    }
    tr__chan_wait w = waits(b);
    char nm[120];
    for (uint64_t e = 0;; e++) {
        frame f;
        int r = read_all(fd, &f, sizeof f);
        if (r) {
            fail(b, TR_EACTOR_DIED,
                 "the link from %s (value %u) ended: an actor there died, or its node",
                 node_name(b, rv->src, nm, sizeof nm), rv->v);
            break;
        }
        if (f.e == GOODBYE && !f.code && !f.flags && !f.len) {
            said_goodbye(b, rv->src);
            break;
        }
        if (f.e != e || f.flags || f.len > MAX_VALUE || f.code > 0 || f.code < -1000 ||
            (f.code && f.len > 4096)) {
            fail(b, TR_EPROTO, "a malformed frame from node %u (value %u, execution %llu)", rv->src,
                 rv->v, (unsigned long long)f.e);
            break;
        }
        void *buf;
        size_t cap;
        if ((rc = tr__chan_write_begin(&c, e, &buf, &cap, &w))) {
            if (rc != TR_ECLOSED) fail(b, rc, "value %u: %s", rv->v, tr_last_error());
            break;
        }
        size_t slot = (size_t)(e % c.slots);
        if (ref_set[slot]) { /* the slot's last value went as an object: read by now */
            tr__objects_release(b->s.objects, refs[slot]);
            ref_set[slot] = 0;
        }
        int32_t code = f.code;
        uint32_t flags = 0;
        size_t out = (size_t)f.len;
        if (code && strcmp(tr_errname(code), "TR_E?") == 0) code = TR_EPROTO; /* unknown */
        if (code && f.len > cap) { /* an error's message: as much as the slot holds */
            r = read_all(fd, buf, cap);
            char sink[256];
            for (uint64_t left = f.len - cap; !r && left;) {
                size_t k = left < sizeof sink ? (size_t)left : sizeof sink;
                r = read_all(fd, sink, k);
                left -= k;
            }
            out = cap;
        } else if (f.len <= cap) {
            r = f.len ? read_all(fd, buf, (size_t)f.len) : 0;
        } else { /* larger than a slot: into this node's store, its ref in the slot */
            char *tmp = malloc((size_t)f.len);
            r = tmp ? read_all(fd, tmp, (size_t)f.len) : -1;
            if (!tmp) {
                fail(b, TR_ENOMEM, "value %u: no memory for %llu bytes", rv->v,
                     (unsigned long long)f.len);
                tr__chan_write_end(&c, e, TR_ENOMEM, 0, 0);
                break;
            }
            tr_ref put;
            if (!r && (rc = tr__objects_put(b->s.objects, tmp, (size_t)f.len, &put)) == 0) {
                refs[slot] = put;
                ref_set[slot] = 1;
                memcpy(buf, put.b, sizeof put.b);
                out = sizeof put.b;
                flags = TR__CHAN_REF;
            } else if (!r) { /* the execution carries the error; the graph goes on */
                int k = snprintf(buf, cap, "value %u: %s", rv->v, tr_last_error());
                code = rc;
                out = k < 0 ? 0 : (size_t)k + 1 > cap ? cap : (size_t)k + 1;
            }
            free(tmp);
        }
        if (r) {
            tr__chan_write_end(&c, e, TR_EACTOR_DIED, 0, 0);
            fail(b, TR_EACTOR_DIED,
                 "the link from %s (value %u) ended: an actor there died, or its node",
                 node_name(b, rv->src, nm, sizeof nm), rv->v);
            break;
        }
        tr__chan_write_end(&c, e, code, flags, out);
    }
out:
    for (size_t k = 0; ref_set && k < c.slots; k++)
        if (ref_set[k]) tr__objects_release(b->s.objects, refs[k]);
    free(refs);
    free(ref_set);
    return NULL;
}

/* ------------------------------------------------------------------ set-up */

static int kv_key(tr__dag_bridge *b, uint32_t node, char *out, size_t cap) {
    int n = snprintf(out, cap, "troupe/dag/%s/%u", b->graph, node);
    return n > 0 && (size_t)n < cap ? 0 : tr__err(TR_EINVAL, "dag bridge: graph name too long");
}

static int listen_here(tr__dag_bridge *b) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    if (inet_pton(AF_INET, b->host, &a.sin_addr) != 1)
        return tr__err(TR_EINVAL, "dag bridge: '%s' is not an IPv4 address", b->host);
    b->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t al = sizeof a;
    if (b->lfd < 0 || bind(b->lfd, (struct sockaddr *)&a, sizeof a) || listen(b->lfd, SOMAXCONN) ||
        getsockname(b->lfd, (struct sockaddr *)&a, &al))
        return tr__err_errno(errno, "dag bridge: listening on %s", b->host);
    char addr[96];
    snprintf(addr, sizeof addr, "%s:%u", b->host, (unsigned)ntohs(a.sin_port));
    int rc = kv_key(b, b->s.node, b->key, sizeof b->key);
    if (!rc) rc = tr__nodeconn_open(b->node_path, b->s.max_msg, &b->kv);
    if (!rc) rc = tr__kv_client_cluster(b->kv, "put", b->key, addr, strlen(addr), NULL, NULL);
    b->published = rc == 0;
    return rc;
}

/* Node `node`'s published address, polled until the deadline. */
static int address_of(tr__dag_bridge *b, uint32_t node, int64_t deadline, struct sockaddr_in *a) {
    char key[160];
    int rc = kv_key(b, node, key, sizeof key);
    while (!rc) {
        void *v = NULL;
        size_t n = 0;
        rc = tr__kv_client_cluster(b->kv, "get", key, NULL, 0, &v, &n);
        if (!rc) {
            char s[96], *colon;
            if (n == 0 || n >= sizeof s) {
                free(v);
                return tr__err(TR_EPROTO, "dag bridge: node %u's address is malformed", node);
            }
            memcpy(s, v, n);
            s[n] = '\0';
            free(v);
            colon = strrchr(s, ':');
            memset(a, 0, sizeof *a);
            a->sin_family = AF_INET;
            if (!colon || (*colon = '\0', inet_pton(AF_INET, s, &a->sin_addr) != 1))
                return tr__err(TR_EPROTO, "dag bridge: node %u's address is malformed", node);
            a->sin_port = htons((uint16_t)atoi(colon + 1));
            return 0;
        }
        if (rc != TR_ENOTFOUND && rc != TR_ERESOURCES && rc != TR_ETIMEDOUT && rc != TR_ECONNECT)
            return rc;
        if (tr__now_ns() >= deadline)
            return tr__err(TR_ETIMEDOUT, "dag bridge: node %u of graph %s did not come", node,
                           b->graph);
        rc = 0;
        nap(10);
    }
    return rc;
}

static int connect_to(tr__dag_bridge *b, const tr__dag_send *sd, uint32_t dst, int64_t deadline,
                      int *out) {
    struct sockaddr_in a;
    int rc = address_of(b, dst, deadline, &a);
    if (rc) return rc;
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) return tr__err_errno(errno, "dag bridge: socket");
        /* connected within the deadline, or not (a peer whose SYNs are dropped) */
        int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        if (!ok && errno == EINPROGRESS) {
            int left = tr__ms_left(deadline), err = 0;
            socklen_t el = sizeof err;
            struct pollfd p = {fd, POLLOUT, 0};
            ok = poll(&p, 1, left < 0 ? 10000 : left) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
            if (!ok && err) errno = err;
        }
        if (ok) {
            int fl = fcntl(fd, F_GETFL);
            if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
            tune(fd);
            hello h = {HELLO_MAGIC, sd->v, b->s.node, {0}};
            memcpy(h.graph, b->graph, sizeof h.graph);
            struct iovec iov = {&h, sizeof h};
            if (tr__write_all(fd, &iov, 1, deadline)) {
                close(fd);
                return tr__err(TR_ECONNECT, "dag bridge: node %u closed the connection", dst);
            }
            *out = fd;
            return 0;
        }
        int e = errno;
        close(fd);
        if (tr__now_ns() >= deadline)
            return tr__err_errno(e, "dag bridge: connecting to node %u", dst);
        nap(20);
    }
}

/* Takes the connections of every receive: each names its value and node in its hello;
 * anything else is closed. */
static int accept_all(tr__dag_bridge *b, int64_t deadline) {
    size_t taken = 0;
    while (taken < b->s.n_recvs) {
        int left = tr__ms_left(deadline);
        struct pollfd p = {b->lfd, POLLIN, 0};
        int pr = poll(&p, 1, left < 0 ? 1000 : left);
        if (pr == 0 && left == 0)
            return tr__err(TR_ETIMEDOUT, "dag bridge: %zu of graph %s's %zu links came in time",
                           taken, b->graph, b->s.n_recvs);
        if (pr <= 0) continue;
        int fd = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        struct timeval tv = {2, 0}, none = {0, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        hello h;
        size_t i = b->s.n_recvs;
        if (read_all(fd, &h, sizeof h) == 0 && h.magic == HELLO_MAGIC &&
            memcmp(h.graph, b->graph, sizeof h.graph) == 0)
            for (i = 0; i < b->s.n_recvs; i++)
                if (b->recvs[i].v == h.v && b->recvs[i].src == h.src && b->recv_fd[i] < 0) break;
        if (i == b->s.n_recvs) { /* not one of ours */
            close(fd);
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
        tune(fd);
        b->recv_fd[i] = fd;
        taken++;
    }
    return 0;
}

static void bridge_free(tr__dag_bridge *b) {
    free(b->sends);
    free(b->recvs);
    free(b->send_fd);
    free(b->recv_fd);
    free(b->workers);
    free(b);
}

int tr__dag_bridge_start(const tr__dag_bridge_spec *s, tr__dag_bridge **out) {
    *out = NULL;
    if (!s || !s->graph || strlen(s->graph) >= 32 || !s->host || strlen(s->host) >= 64 ||
        !s->node_path || strlen(s->node_path) >= 108 || !s->h)
        return tr__err(TR_EINVAL, "dag bridge: bad spec");
    for (size_t i = 0; i < s->n_sends; i++)
        if (s->sends[i].n_dst < 1 || s->sends[i].n_dst > TR__DAG_MAX_NODES)
            return tr__err(TR_EINVAL, "dag bridge: a value sent to %u nodes", s->sends[i].n_dst);
    /* every channel inside the segment's area (an attach message is checked, not trusted) */
    for (size_t i = 0; i < s->n_sends + s->n_recvs; i++) {
        uint64_t off = i < s->n_sends ? s->sends[i].off : s->recvs[i - s->n_sends].off;
        if (off < sizeof(tr__dag_hdr) || off >= s->bytes || off % 64)
            return tr__err(TR_EPROTO, "dag bridge: a channel offset %llu outside %llu bytes",
                           (unsigned long long)off, (unsigned long long)s->bytes);
    }
    tr__dag_bridge *b = calloc(1, sizeof *b);
    if (!b) return tr__err(TR_ENOMEM, "dag bridge");
    b->s = *s;
    b->lfd = -1;
    snprintf(b->graph, sizeof b->graph, "%s", s->graph);
    snprintf(b->host, sizeof b->host, "%s", s->host);
    snprintf(b->node_path, sizeof b->node_path, "%s", s->node_path);
    b->sends = calloc(s->n_sends + 1, sizeof *b->sends);
    b->recvs = calloc(s->n_recvs + 1, sizeof *b->recvs);
    b->send_fd = malloc((s->n_sends + 1) * TR__DAG_MAX_NODES * sizeof *b->send_fd);
    b->recv_fd = malloc((s->n_recvs + 1) * sizeof *b->recv_fd);
    b->workers = calloc(s->n_sends + s->n_recvs + 1, sizeof *b->workers);
    for (size_t i = 0; b->send_fd && i < (s->n_sends + 1) * TR__DAG_MAX_NODES; i++)
        b->send_fd[i] = -1;
    for (size_t i = 0; b->recv_fd && i < s->n_recvs + 1; i++)
        b->recv_fd[i] = -1;
    if (!b->sends || !b->recvs || !b->send_fd || !b->recv_fd || !b->workers) {
        bridge_free(b);
        return tr__err(TR_ENOMEM, "dag bridge");
    }
    for (size_t k = 0; s->names && k < s->n_names && k < TR__DAG_MAX_NODES; k++)
        snprintf(b->names[k], sizeof b->names[k], "%s", s->names[k] ? s->names[k] : "");
    if (s->n_sends) memcpy(b->sends, s->sends, s->n_sends * sizeof *b->sends);
    if (s->n_recvs) memcpy(b->recvs, s->recvs, s->n_recvs * sizeof *b->recvs);
    b->s.sends = b->sends;
    b->s.recvs = b->recvs;
    b->s.names = NULL;
    int64_t t0 = tr__now_ns(), deadline = tr__deadline(s->timeout_ms);
    int rc = listen_here(b);
    for (size_t i = 0; !rc && i < s->n_sends; i++)
        for (uint32_t k = 0; !rc && k < b->sends[i].n_dst; k++)
            rc = connect_to(b, &b->sends[i], b->sends[i].dst[k], deadline,
                            &b->send_fd[i * TR__DAG_MAX_NODES + k]);
    if (!rc) rc = accept_all(b, deadline);
    for (size_t i = 0; !rc && i < s->n_sends + s->n_recvs; i++) {
        worker *wk = &b->workers[i];
        wk->b = b;
        wk->is_send = i < s->n_sends;
        wk->i = wk->is_send ? i : i - s->n_sends;
        if (pthread_create(&wk->t, NULL, wk->is_send ? run_send : run_recv, wk) != 0)
            rc = tr__err(TR_ENOMEM, "dag bridge: no thread");
        else
            wk->started = 1;
        b->n_workers = i + 1;
    }
    if (rc) {
        char why[400];
        snprintf(why, sizeof why, "%s", tr_last_error());
        tr__dag_bridge_stop(b);
        return tr__err(rc, "%s (after %lld ms)", why, (long long)ms_since_ns(t0));
    }
    *out = b;
    return 0;
}

void tr__dag_bridge_abort(tr__dag_bridge *b) {
    if (b) __atomic_store_n(&b->failed, 1, __ATOMIC_RELEASE);
}

void tr__dag_bridge_stop(tr__dag_bridge *b) {
    if (!b) return;
    __atomic_store_n(&b->stopping, 1, __ATOMIC_RELEASE);
    /* (a thread's wait ends within 100 ms on the stopping flag, where no stop word is set)
     * the receivers' reads end here; the senders' waits on the segment's stop word (set
     * by the caller), then they say goodbye: a second for that, then their writes end too
     * (a peer that reads nothing) */
    for (size_t i = 0; b->recv_fd && i < b->s.n_recvs + 1; i++)
        if (b->recv_fd[i] >= 0) shutdown(b->recv_fd[i], SHUT_RDWR);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    for (size_t i = 0; i < b->n_workers; i++) {
        worker *wk = &b->workers[i];
        if (!wk->started || !wk->is_send || pthread_timedjoin_np(wk->t, NULL, &until) != 0)
            continue;
        wk->started = 0; /* joined */
    }
    for (size_t i = 0; b->send_fd && i < (b->s.n_sends + 1) * TR__DAG_MAX_NODES; i++)
        if (b->send_fd[i] >= 0) shutdown(b->send_fd[i], SHUT_RDWR);
    for (size_t i = 0; i < b->n_workers; i++)
        if (b->workers[i].started) pthread_join(b->workers[i].t, NULL);
    for (size_t i = 0; b->send_fd && i < (b->s.n_sends + 1) * TR__DAG_MAX_NODES; i++)
        if (b->send_fd[i] >= 0) close(b->send_fd[i]);
    for (size_t i = 0; b->recv_fd && i < b->s.n_recvs + 1; i++)
        if (b->recv_fd[i] >= 0) close(b->recv_fd[i]);
    if (b->lfd >= 0) close(b->lfd);
    if (b->published) tr__kv_client_cluster(b->kv, "del", b->key, NULL, 0, NULL, NULL);
    if (b->kv) tr__nodeconn_close(b->kv);
    bridge_free(b);
}
