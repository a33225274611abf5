/* actor/relay.c - see relay.h.
 *
 * Locking: one mutex guards the streams, their connections and the epoll set; the relay
 * thread holds it while it moves bytes (every socket is non-blocking, every stream send
 * only queues) and drops it only to ask the node where an actor is. A connection that
 * goes (its link ended, the caller let go, its worker closed) leaves the epoll set at
 * once and is freed by the relay thread before its next epoll_wait, so an event already
 * fetched never points at freed memory.
 */
#include "actor/relay.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/remote.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"

#define READ_CHUNK (256u << 10)
#define RETRY_NS 10000000             /* how often an actor not yet up is asked about */
#define QUEUE_CAP ((size_t)256 << 20) /* bytes held for one actor not yet up */

enum { C_RESOLVING, C_OPEN };

typedef struct rstream rstream;

typedef struct rconn {
    uint8_t id[16];
    rstream *s;
    int fd; /* the worker's socket once open */
    int state;
    int dead; /* left: in the graveyard */
    int want_out;
    int64_t next_try;
    tr__buf out; /* bytes the worker has not taken */
    struct rconn *next;
} rconn;

struct rstream {
    tr__rpc_stream *st;
    uint64_t serial;
    rconn *conns;
    struct rstream *next;
};

struct tr__relay {
    pthread_mutex_t mu;
    char node_path[512];
    size_t max_msg;
    tr__nodeconn *node; /* the relay thread's */
    int ep, wake_fd;
    rstream *streams;
    rconn *grave;
    uint64_t next_serial;
    int resolving;
    int stop;
    pthread_t thread;
    tr__rpc_stream_handlers h;
};

static void wake(tr__relay *r) {
    uint64_t one = 1;
    ssize_t w = write(r->wake_fd, &one, sizeof one);
    (void)w;
}

/* [kind][id][payload] on the connection's stream. Caller holds mu. */
static void send_kind(rconn *c, int kind, const void *data, size_t len) {
    tr__buf b = TR__BUF_INIT;
    unsigned char k = (unsigned char)kind;
    tr__buf_append(&b, &k, 1);
    tr__buf_append(&b, c->id, 16);
    if (len) tr__buf_append(&b, data, len);
    if (!b.oom) tr__rpc_stream_send(c->s->st, b.data, b.len);
    tr__buf_free(&b);
}

/* Takes c out of its stream and the epoll set; freed by the relay thread. */
static void conn_drop(tr__relay *r, rconn *c) {
    if (c->dead) return;
    c->dead = 1;
    for (rconn **pp = &c->s->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    if (c->state == C_RESOLVING) r->resolving--;
    if (c->fd >= 0) {
        epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    c->next = r->grave;
    r->grave = c;
}

static void conn_eof(tr__relay *r, rconn *c, const char *why) {
    send_kind(c, TR__REMOTE_EOF, why, strlen(why));
    conn_drop(r, c);
}

static void set_want_out(tr__relay *r, rconn *c, int on) {
    if (c->want_out == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
    epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

/* Writes what the worker takes now. Caller holds mu. */
static void flush(tr__relay *r, rconn *c) {
    while (tr__buf_avail(&c->out)) {
        ssize_t n = send(c->fd, c->out.data + c->out.off, tr__buf_avail(&c->out),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            tr__buf_consume(&c->out, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            set_want_out(r, c, 1);
            return;
        }
        conn_eof(r, c, "the actor's worker connection broke");
        return;
    }
    set_want_out(r, c, 0);
}

static rstream *find_stream(tr__relay *r, tr__rpc_stream *st) {
    for (rstream *s = r->streams; s; s = s->next)
        if (s->st == st) return s;
    return NULL;
}

static rconn *find_conn(rstream *s, const uint8_t *id) {
    for (rconn *c = s->conns; c; c = c->next)
        if (memcmp(c->id, id, 16) == 0) return c;
    return NULL;
}

/* The RPC server's thread: a caller's message. */
static void on_msg(void *ctx, tr__rpc_stream *st, const void *msg, size_t len) {
    tr__relay *r = ctx;
    const unsigned char *p = msg;
    if (len < TR__REMOTE_HDR || (p[0] != TR__REMOTE_DATA && p[0] != TR__REMOTE_CLOSE)) {
        TR_LOG_WARN_LIMITED("RELAY-BAD", "a caller sent a malformed message (%zu bytes)", len);
        return;
    }
    pthread_mutex_lock(&r->mu);
    rstream *s = find_stream(r, st);
    if (!s && (s = calloc(1, sizeof *s))) {
        s->st = st;
        s->serial = ++r->next_serial;
        s->next = r->streams;
        r->streams = s;
    }
    rconn *c = s ? find_conn(s, p + 1) : NULL;
    if (!s) goto out;
    if (p[0] == TR__REMOTE_CLOSE) {
        if (c) conn_drop(r, c);
        goto out;
    }
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) goto out;
        memcpy(c->id, p + 1, 16);
        c->s = s;
        c->fd = -1;
        c->state = C_RESOLVING;
        c->next = s->conns;
        s->conns = c;
        r->resolving++;
        wake(r);
    }
    const char *data = (const char *)p + TR__REMOTE_HDR;
    size_t n = len - TR__REMOTE_HDR;
    if (c->state == C_OPEN && !tr__buf_avail(&c->out)) { /* straight to the worker */
        ssize_t w = send(c->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            data += w;
            n -= (size_t)w;
        }
    }
    if (!n) goto out;
    if (tr__buf_avail(&c->out) + n > QUEUE_CAP || tr__buf_append(&c->out, data, n)) {
        conn_eof(r, c, "too many bytes queued for an actor that is not up");
        goto out;
    }
    if (c->state == C_OPEN) flush(r, c);
out:
    pthread_mutex_unlock(&r->mu);
}

/* The RPC server's thread: a link ended; nothing sends on it once this returns (the
 * relay thread sends only under mu, to streams still listed). */
static void on_end(void *ctx, tr__rpc_stream *st) {
    tr__relay *r = ctx;
    pthread_mutex_lock(&r->mu);
    rstream *s = find_stream(r, st);
    if (s) {
        while (s->conns)
            conn_drop(r, s->conns);
        for (rstream **pp = &r->streams; *pp; pp = &(*pp)->next) {
            if (*pp == s) {
                *pp = s->next;
                break;
            }
        }
        free(s);
    }
    pthread_mutex_unlock(&r->mu);
}

/* A worker's bytes, back to its caller. Caller holds mu. */
static void on_worker(tr__relay *r, rconn *c, uint32_t events) {
    if ((events & EPOLLOUT) && c->state == C_OPEN) flush(r, c);
    if (c->dead || !(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
    for (int round = 0; round < 4; round++) { /* then the other connections get a turn */
        tr__buf b = TR__BUF_INIT;
        if (tr__buf_reserve(&b, TR__REMOTE_HDR + READ_CHUNK)) {
            conn_eof(r, c, "the node is out of memory");
            return;
        }
        b.data[0] = TR__REMOTE_DATA;
        memcpy(b.data + 1, c->id, 16);
        ssize_t n;
        do {
            n = recv(c->fd, b.data + TR__REMOTE_HDR, READ_CHUNK, MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        if (n > 0) tr__rpc_stream_send(c->s->st, b.data, TR__REMOTE_HDR + (size_t)n);
        tr__buf_free(&b);
        if (n > 0 && (size_t)n == READ_CHUNK) continue;
        if (n > 0 || (n < 0 && errno == EAGAIN)) return;
        conn_eof(r, c,
                 n == 0 ? "the actor's worker closed the connection"
                        : "the actor's worker connection broke");
        return;
    }
}

typedef struct pending {
    uint64_t serial;
    uint8_t id[16];
} pending;

/* Asks the node about actors not yet up (without mu) and opens those that are. */
static void resolve_pass(tr__relay *r) {
    pending todo[64];
    int n = 0;
    int64_t now = tr__now_ns();
    for (rstream *s = r->streams; s && n < 64; s = s->next)
        for (rconn *c = s->conns; c && n < 64; c = c->next)
            if (c->state == C_RESOLVING && c->next_try <= now) {
                todo[n].serial = s->serial;
                memcpy(todo[n++].id, c->id, 16);
            }
    for (int i = 0; i < n; i++) {
        pthread_mutex_unlock(&r->mu);
        tr__actor_where w;
        tr_actor_id id;
        memcpy(id.b, todo[i].id, 16);
        int rc = r->node ? tr__actor_resolve(r->node, &id, 0, &w) : TR_ECONNECT;
        if (rc == TR_ECONNECT || rc == TR_EPROTO || rc == TR_ETIMEDOUT) { /* once more */
            tr__nodeconn_close(r->node);
            r->node = NULL;
            if (!tr__nodeconn_open(r->node_path, r->max_msg, &r->node) &&
                tr__nodeconn_hello(r->node, "cli", 0, 5000) == 0)
                rc = tr__actor_resolve(r->node, &id, 0, &w);
        }
        char why[600];
        snprintf(why, sizeof why, "%s", rc ? tr_last_error() : "");
        pthread_mutex_lock(&r->mu);
        rstream *s = r->streams;
        while (s && s->serial != todo[i].serial)
            s = s->next;
        rconn *c = s ? find_conn(s, todo[i].id) : NULL;
        if (!c || c->state != C_RESOLVING) continue;
        c->next_try = tr__now_ns() + RETRY_NS;
        if (rc == TR_ENOTFOUND) {
            conn_eof(r, c, "no such actor on this node");
            continue;
        }
        if (rc) {
            TR_LOG_WARN_LIMITED("RELAY-RESOLVE", "%s", why);
            continue;
        }
        if (w.state == TR__ACTOR_DEAD) {
            conn_eof(r, c, w.reason[0] ? w.reason : "the actor is dead");
            continue;
        }
        if (w.state != TR__ACTOR_ALIVE || !w.path[0]) continue;
        int fd = tr__unix_connect_nb(w.path);
        if (fd < 0) continue;
        tr__buf hello = TR__BUF_INIT;
        tr__caller_frame(&hello, -1); /* no store here for it: results come inline */
        tr__buf_append(&hello, c->out.data + c->out.off, tr__buf_avail(&c->out));
        if (hello.oom) {
            close(fd);
            tr__buf_free(&hello);
            conn_eof(r, c, "the node is out of memory");
            continue;
        }
        tr__buf_free(&c->out);
        c->out = hello;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->state = C_OPEN;
        r->resolving--;
        flush(r, c);
    }
}

static void *relay_main(void *arg) {
    tr__relay *r = arg;
    struct epoll_event evs[64];
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        while (r->grave) {
            rconn *c = r->grave;
            r->grave = c->next;
            tr__buf_free(&c->out);
            free(c);
        }
        int timeout = r->resolving ? (int)(RETRY_NS / 1000000) : 1000;
        pthread_mutex_unlock(&r->mu);
        int n = epoll_wait(r->ep, evs, 64, timeout);
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < n; i++) {
            rconn *c = evs[i].data.ptr;
            if (!c) {
                uint64_t v;
                ssize_t rd = read(r->wake_fd, &v, sizeof v);
                (void)rd;
                continue;
            }
            if (!c->dead) on_worker(r, c, evs[i].events);
        }
        if (r->resolving) resolve_pass(r);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int tr__relay_create(const char *node_path, size_t max_msg, tr__relay **out) {
    *out = NULL;
    tr__relay *r = calloc(1, sizeof *r);
    if (!r) return tr__err(TR_ENOMEM, "relay");
    pthread_mutex_init(&r->mu, NULL);
    snprintf(r->node_path, sizeof r->node_path, "%s", node_path);
    r->max_msg = max_msg;
    r->ep = epoll_create1(EPOLL_CLOEXEC);
    r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    int rc = 0;
    if (r->ep < 0 || r->wake_fd < 0 || epoll_ctl(r->ep, EPOLL_CTL_ADD, r->wake_fd, &ev) != 0)
        rc = tr__err_errno(errno, "relay: epoll/eventfd");
    if (!rc && pthread_create(&r->thread, NULL, relay_main, r) != 0)
        rc = tr__err(TR_ENOMEM, "relay: no thread");
    if (rc) {
        if (r->ep >= 0) close(r->ep);
        if (r->wake_fd >= 0) close(r->wake_fd);
        pthread_mutex_destroy(&r->mu);
        free(r);
        return rc;
    }
    r->h.on_msg = on_msg;
    r->h.on_end = on_end;
    r->h.ctx = r;
    *out = r;
    return 0;
}

const tr__rpc_stream_handlers *tr__relay_handlers(tr__relay *r) {
    return &r->h;
}

void tr__relay_destroy(tr__relay *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    wake(r);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    for (rstream *s = r->streams, *sn; s; s = sn) { /* none, after the server: a safety net */
        sn = s->next;
        while (s->conns)
            conn_drop(r, s->conns);
        free(s);
    }
    for (rconn *c = r->grave, *n; c; c = n) {
        n = c->next;
        tr__buf_free(&c->out);
        free(c);
    }
    tr__nodeconn_close(r->node);
    close(r->ep);
    close(r->wake_fd);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
