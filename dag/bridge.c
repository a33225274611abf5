/* dag/bridge.c - see bridge.h. On the wire (host byte order: a cluster's nodes share an
 * architecture): the receiver's challenge {magic u64, nonce u8[16]}, the sender's hello
 * {magic u64, value u32, from node u32, graph char[32], mac u8[32]}, then per execution a
 * frame {execution u64, code i32, flags u32 (0), length u64} and the value's bytes (or, for
 * an error, its message); at a teardown (not a failure), a goodbye frame {UINT64_MAX, 0,
 * 0, 0}, so that the node reading it stops without taking it for one. */
#include "dag/bridge.h"

#include <arpa/inet.h>
#include <errno.h>
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
#include "core/ids.h"
#include "core/kv.h"
#include "core/log.h"
#include "core/mac.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "dag/chan.h"
#include "objectstore/client.h"

#define HELLO_MAGIC 0x32676472627274ull     /* "trbrdg2" */
#define CHALLENGE_MAGIC 0x32686372627274ull /* "trbrch2" */
#define MAX_PENDING 64                      /* connections whose hello is not in yet */
#define MAX_VALUE (16ull << 30)             /* a frame's length past this: malformed */
#define GOODBYE UINT64_MAX

typedef struct challenge {
    uint64_t magic;
    uint8_t nonce[16];
} challenge;

typedef struct hello {
    uint64_t magic;
    uint32_t v, src;
    char graph[32];
    uint8_t mac[TR__MAC_BYTES];
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
    uint8_t secret[TR__DAG_SECRET];
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

/* Reads n bytes and lets go of them (a value this node does not keep). 0, or as read_all. */
static int skip(int fd, uint64_t n) {
    char sink[4096];
    int r = 0;
    for (uint64_t left = n; !r && left;) {
        size_t k = left < sizeof sink ? (size_t)left : sizeof sink;
        r = read_all(fd, sink, k);
        left -= k;
    }
    return r;
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

/* The MAC a hello for value v from node src answers nonce with. */
static int hello_mac(const tr__dag_bridge *b, const uint8_t nonce[16], uint32_t v, uint32_t src,
                     const char graph[32], uint8_t out[TR__MAC_BYTES]) {
    static const char what[] = "troupe dag bridge hello";
    const void *parts[] = {what, nonce, &v, &src, graph};
    size_t lens[] = {sizeof what, 16, sizeof v, sizeof src, 32};
    return tr__mac(b->secret, sizeof b->secret, parts, lens, 5, out);
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
    tr__chan_wait w = {TR__NO_DEADLINE, 0, &b->s.h->stop, check, b, 0};
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
        fail(b, rc, "value %u: %s", sd->v, tr__last_error());
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
            if (rc != TR_ECLOSED) fail(b, rc, "value %u: %s", sd->v, tr__last_error());
            return NULL;
        }
        tr_ref pin;
        int pinned = 0;
        char why[200];
        if (!code && (flags & TR__CHAN_REF)) { /* an object of this node's store: its bytes */
            memcpy(pin.b, data, sizeof pin.b);
            if ((code = tr__objects_pin(b->s.objects, pin, 10000, &data, &len))) {
                snprintf(why, sizeof why, "value %u: %s", sd->v, tr__last_error());
                data = why;
                len = strlen(why) + 1;
            } else {
                pinned = 1;
            }
        } else if (!code && flags) {
            code = TR_EPROTO;
            snprintf(why, sizeof why, "value %u: a device or forwarded value cannot cross nodes",
                     sd->v);
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
        fail(b, rc ? rc : TR_ENOMEM, "value %u: %s", rv->v, rc ? tr__last_error() : "no memory");
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
            if (rc != TR_ECLOSED) fail(b, rc, "value %u: %s", rv->v, tr__last_error());
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
        if (code && strcmp(tr__errname(code), "TR_E?") == 0) code = TR_EPROTO; /* unknown */
        if (code && f.len > cap) { /* an error's message: as much as the slot holds */
            r = read_all(fd, buf, cap);
            if (!r) r = skip(fd, f.len - cap);
            out = cap;
        } else if (f.len <= cap) {
            r = f.len ? read_all(fd, buf, (size_t)f.len) : 0;
        } else { /* larger than a slot: straight into this node's store, its ref in the
                    slot (no buffer of the length a frame declares: the store bounds it; one
                    it can never hold is refused at once, and its bytes drained) */
            tr_ref put;
            void *dst;
            int taken = 0; /* the value's bytes are off the connection */
            if ((rc = tr__objects_create(b->s.objects, (size_t)f.len, &put, &dst)) == 0) {
                r = read_all(fd, dst, (size_t)f.len);
                taken = 1;
                if (r || (rc = tr__objects_seal(b->s.objects, put)) != 0)
                    tr__objects_release(b->s.objects, put); /* (unsealed: it goes) */
            }
            if (!r && !rc) {
                refs[slot] = put;
                ref_set[slot] = 1;
                memcpy(buf, put.b, sizeof put.b);
                out = sizeof put.b;
                flags = TR__CHAN_REF;
            } else if (!r) { /* no room now: the execution carries the error, the graph goes
                                on (the value's bytes are read and let go of) */
                int k = snprintf(buf, cap, "value %u: %s", rv->v, tr__last_error());
                code = rc;
                out = k < 0 ? 0 : (size_t)k + 1 > cap ? cap : (size_t)k + 1;
                if (!taken) r = skip(fd, f.len);
            }
        }
        if (r) {
            tr__chan_write_end(&c, e, TR_EACTOR_DIED, 0, 0, 1);
            fail(b, TR_EACTOR_DIED,
                 "the link from %s (value %u) ended: an actor there died, or its node",
                 node_name(b, rv->src, nm, sizeof nm), rv->v);
            break;
        }
        tr__chan_write_end(&c, e, code, flags, out, 1);
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

/* A connection to node dst (non-blocking, nothing said yet). */
static int connect_to(tr__dag_bridge *b, uint32_t dst, int64_t deadline, int *out) {
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
        if (ok) { /* (its challenge and our hello: handshake_all, with the others') */
            tune(fd);
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

/* A connection whose hello is not in yet (in), or whose challenge is not (out). */
typedef struct pending {
    int fd;
    int64_t since; /* accepted */
    size_t got;
    uint8_t nonce[16];
    hello h;
} pending;

typedef struct outgoing {
    int fd; /* b->send_fd's, to send its hello on (-1: sent) */
    uint32_t v, dst;
    size_t got;
    challenge ch;
} outgoing;

/* A whole hello on p: the receive it opens, or -1 (not one of ours). */
static int hello_for(tr__dag_bridge *b, const pending *p) {
    uint8_t want[TR__MAC_BYTES];
    if (p->h.magic != HELLO_MAGIC || memcmp(p->h.graph, b->graph, sizeof p->h.graph) != 0 ||
        hello_mac(b, p->nonce, p->h.v, p->h.src, p->h.graph, want) != 0 ||
        !tr__mac_equal(want, p->h.mac))
        return -1;
    for (size_t i = 0; i < b->s.n_recvs; i++)
        if (b->recvs[i].v == p->h.v && b->recvs[i].src == p->h.src && b->recv_fd[i] < 0)
            return (int)i;
    return -1;
}

static void drop_pending(pending *p, int *n, int i, const char *graph, const char *why) {
    if (why) TR_LOG_WARN_LIMITED("DAG-HELLO", "graph %s: a connection closed: %s", graph, why);
    close(p[i].fd);
    p[i] = p[--*n];
}

/* An outgoing connection's challenge is readable: once whole, its hello goes. 0 (more to
 * come, or sent), or a code. */
static int answer(tr__dag_bridge *b, outgoing *o, int64_t deadline) {
    ssize_t k = recv(o->fd, (char *)&o->ch + o->got, sizeof o->ch - o->got, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    if (k <= 0)
        return tr__err(TR_ECONNECT,
                       "dag bridge: node %u closed the connection before its "
                       "challenge",
                       o->dst);
    if ((o->got += (size_t)k) < sizeof o->ch) return 0;
    if (o->ch.magic != CHALLENGE_MAGIC)
        return tr__err(TR_EPROTO, "dag bridge: node %u is no bridge of this troupe", o->dst);
    hello h = {HELLO_MAGIC, o->v, b->s.node, {0}, {0}};
    memcpy(h.graph, b->graph, sizeof h.graph);
    int rc = hello_mac(b, o->ch.nonce, h.v, h.src, h.graph, h.mac);
    struct iovec iov = {&h, sizeof h};
    if (!rc && tr__write_all(o->fd, &iov, 1, deadline))
        rc = tr__err(TR_ECONNECT, "dag bridge: node %u closed the connection", o->dst);
    if (!rc) rc = tr__set_nonblock(o->fd, 0);
    o->fd = -1;
    return rc;
}

/* Every link's handshake, side by side (one that trickles holds back no other), all by
 * the deadline: each connection this node receives is challenged and must name its value
 * and node and prove the graph's secret (anything else is closed); each it made answers
 * its receiver's challenge. (Both at once: two nodes that send to each other each wait
 * for the other's challenge.) */
static int handshake_all(tr__dag_bridge *b, outgoing *out, size_t n_out, int64_t deadline) {
    pending p[MAX_PENDING];
    int np = 0, rc = 0;
    size_t taken = 0, answered = 0;
    while ((taken < b->s.n_recvs || answered < n_out) && !rc) {
        int left = tr__ms_left(deadline);
        if (left == 0) {
            rc = tr__err(TR_ETIMEDOUT,
                         "dag bridge: %zu of graph %s's %zu links came in time, %zu of %zu "
                         "went",
                         taken, b->graph, b->s.n_recvs, answered, n_out);
            break;
        }
        struct pollfd pf[1 + MAX_PENDING + 64];
        size_t nf = 0, o_at[64], n_o = 0;
        pf[nf++] = (struct pollfd){b->lfd, POLLIN, 0};
        for (int i = 0; i < np; i++)
            pf[nf++] = (struct pollfd){p[i].fd, POLLIN, 0};
        for (size_t i = 0; i < n_out && n_o < 64; i++)
            if (out[i].fd >= 0) {
                o_at[n_o++] = i;
                pf[nf++] = (struct pollfd){out[i].fd, POLLIN, 0};
            }
        int pr = poll(pf, (nfds_t)nf, left < 0 || left > 1000 ? 1000 : left);
        if (pr <= 0) continue;
        for (size_t j = 0; j < n_o && !rc; j++)
            if (pf[1 + np + j].revents) {
                outgoing *o = &out[o_at[j]];
                if ((rc = answer(b, o, deadline)) == 0 && o->fd < 0) answered++;
            }
        for (int i = np - 1; i >= 0 && !rc; i--) { /* (from the end: a drop moves the last) */
            if (!pf[i + 1].revents) continue;
            ssize_t k =
                recv(p[i].fd, (char *)&p[i].h + p[i].got, sizeof p[i].h - p[i].got, MSG_DONTWAIT);
            if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (k <= 0) {
                drop_pending(p, &np, i, b->graph, "it ended before its hello");
                continue;
            }
            p[i].got += (size_t)k;
            if (p[i].got < sizeof p[i].h) continue;
            int r = hello_for(b, &p[i]);
            if (r < 0) {
                drop_pending(p, &np, i, b->graph,
                             "no valid hello (not of this graph, or no proof of its secret)");
                continue;
            }
            (void)tr__set_nonblock(p[i].fd,
                                   0); /* (should it fail, its first read fails the link) */
            tune(p[i].fd);
            b->recv_fd[r] = p[i].fd;
            p[i] = p[--np];
            taken++;
        }
        if (rc || !(pf[0].revents & POLLIN)) continue;
        int fd = accept4(b->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        if (np == MAX_PENDING) { /* the oldest makes room */
            int old = 0;
            for (int i = 1; i < np; i++)
                if (p[i].since < p[old].since) old = i;
            drop_pending(p, &np, old, b->graph, "too many connections without a hello");
        }
        pending *q = &p[np];
        memset(q, 0, sizeof *q);
        q->fd = fd;
        q->since = tr__now_ns();
        challenge ch = {CHALLENGE_MAGIC, {0}};
        if ((rc = tr__random_bytes(q->nonce, sizeof q->nonce))) {
            close(fd);
            break;
        }
        memcpy(ch.nonce, q->nonce, sizeof ch.nonce);
        /* (a fresh socket's buffer takes 24 bytes at once) */
        if (send(fd, &ch, sizeof ch, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof ch) {
            close(fd);
            continue;
        }
        np++;
    }
    while (np > 0)
        drop_pending(p, &np, np - 1, b->graph, NULL);
    return rc;
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
    if (!s->secret || !s->objects) return tr__err(TR_EINVAL, "dag bridge: bad spec");
    tr__dag_bridge *b = calloc(1, sizeof *b);
    if (!b) return tr__err(TR_ENOMEM, "dag bridge");
    b->s = *s;
    memcpy(b->secret, s->secret, sizeof b->secret);
    b->s.secret = NULL;
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
            rc =
                connect_to(b, b->sends[i].dst[k], deadline, &b->send_fd[i * TR__DAG_MAX_NODES + k]);
    size_t n_out = 0;
    outgoing *going = calloc((s->n_sends + 1) * TR__DAG_MAX_NODES, sizeof *going);
    if (!rc && !going) rc = tr__err(TR_ENOMEM, "dag bridge");
    for (size_t i = 0; !rc && i < s->n_sends; i++)
        for (uint32_t k = 0; k < b->sends[i].n_dst; k++) {
            outgoing *o = &going[n_out++];
            o->fd = b->send_fd[i * TR__DAG_MAX_NODES + k];
            o->v = b->sends[i].v;
            o->dst = b->sends[i].dst[k];
        }
    if (!rc) rc = handshake_all(b, going, n_out, deadline);
    free(going);
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
        snprintf(why, sizeof why, "%s", tr__last_error());
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
