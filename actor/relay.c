/* actor/relay.c - see relay.h.
 *
 * Locking: one mutex guards the streams, their connections and the epoll set; the relay
 * thread holds it while it moves bytes (every socket is non-blocking, every stream send
 * only queues) and drops it only to ask the node where an actor is. A connection that
 * goes (its link ended, the caller let go, its worker closed) leaves the epoll set at
 * once and is freed by the relay thread before its next epoll_wait, so an event already
 * fetched never points at freed memory.
 *
 * Connections are keyed by (actor id, the caller's generation); one that ended stays as
 * a tombstone, dropping what still comes for it, until the caller's CLOSE. Only CALL
 * frames pass to a worker: the relay follows the frame headers in the byte stream (a
 * caller elsewhere must not say CALLER, or anything else, to a worker here). A result
 * piece the link cannot take (64 MiB unsent: the caller is not reading) is kept, and the
 * worker is not read, until it can. The other way, a link whose callers' bytes wait for
 * workers that do not take them (OUT_CAP in all) is told HOLD: its caller sends no more
 * until GO, once they are down to half. A caller that sends on regardless past HARD_CAP
 * has the connection it sends on ended: the node's memory stays bounded (HARD_CAP a link).
 *
 * Remote holds (docs/OWNERSHIP.md): a link's KEEP of one of our objects is a pin of ours,
 * counted in the link's table until its LETGO or the link's end; so is a result's
 * container a worker hands us for a caller on the link (the frames of the worker's bytes
 * are followed for it: a kept RESULT names it).
 */
#include "actor/relay.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actor/bulk.h"
#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/remote.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/idmap.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"

#define READ_CHUNK (256u << 10)
#define RETRY_NS 10000000              /* how often an actor not yet up is asked about */
#define QUEUE_CAP ((size_t)256 << 20)  /* bytes held for one actor not yet up... */
#define STREAM_CAP ((size_t)512 << 20) /* ...and for all of one link's */
#define GIVE_UP_NS 10000000000LL       /* the node cannot say where an actor is */
#define OBJ_QUEUE_CAP 256              /* object requests queued per link */
/* A pull of a call's result that is still a promise here (docs/OWNERSHIP.md) waits in its
 * link's queue, asked again every RETRY_NS, up to this long (the puller's own deadline
 * is usually shorter: an answer after it is dropped there). */
#define PROMISE_WAIT_NS (600ll * 1000000000)
#define OUT_CAP ((size_t)16 << 20) /* callers' bytes a link's workers have not taken */
/* ...past which the connection a caller sends on is ended: a caller that heeds HOLD has at
 * most what its link queues (actor/remote.c: 8 MiB) on the way when it hears it, unless
 * its link is busy handing it results it does not read (it hears HOLD late) */
#define HARD_CAP ((size_t)256 << 20)

enum { C_RESOLVING, C_OPEN, C_DONE };

typedef struct rstream rstream;

typedef struct rconn {
    uint8_t id[16];
    uint32_t gen;
    rstream *s;
    int fd; /* the worker's socket once open */
    int state;
    int dead;   /* left: in the graveyard */
    int events; /* what the epoll set waits for */
    int64_t next_try, first_err;
    tr__buf out;                      /* bytes the worker has not taken */
    tr__buf held;                     /* a result piece the link did not take yet */
    unsigned char hdr[TR__FRAME_HDR]; /* the gate: the frame header being read */
    size_t hdr_have;
    uint64_t body_left;
    /* the worker's frames followed (results whose container we keep for the caller) */
    unsigned char rhdr[TR__FRAME_HDR];
    unsigned char rpre[TR__RESULT_KEPT_PREFIX]; /* a RESULT body's first bytes */
    size_t rhdr_have, rpre_have;
    uint64_t rbody_left;
    int rlost;    /* a frame we could not follow: the caller sees the stream is bad */
    unsigned tag; /* its name in the worker's cancel words (tr__board_relay_cancel_word) */
    /* cancels that came before the worker's connection opened: written to the board then */
    uint64_t pend_cancel[TR__SEG_BOARD_CANCELS];
    int n_pend_cancel;
    struct rconn *next;
} rconn;

struct rstream {
    tr__rpc_stream *st;
    uint64_t serial;
    size_t queued;    /* bytes held for its actors not yet up */
    size_t out_bytes; /* bytes held for its actors, up or not (its conns' out) */
    int held;         /* its caller was told HOLD (out_bytes reached OUT_CAP) */
    rconn *conns;
    struct objreq *objq, *objq_tail; /* its pulls' requests, in order */
    int n_obj;
    int64_t obj_full_until; /* its link was full: its requests wait till then */
    tr__idmap kept;         /* objects kept for the link (KEEP): tr__id_key -> rkeep chain */
    size_t n_kept;
    struct rstream *next;
};

/* An object kept for a link (docs/OWNERSHIP.md, remote holds): one pin of ours per KEEP
 * served, until the caller's LETGO or the link's end. */
typedef struct rkeep {
    uint8_t ref[16];
    uint32_t count;
    struct rkeep *next; /* refs of the same key */
} rkeep;
/* Holds one link may have, at most (a caller past it is told ENOMEM). */
#define KEEP_CAP 65536

/* A caller's request for a piece of one of our objects (served by the relay thread). */
typedef struct objreq {
    uint64_t serial; /* its stream */
    uint8_t ref[16];
    uint32_t req;
    uint64_t off, len;
    int bulk;      /* the whole object, offered on the bulk connection */
    int keep;      /* a KEEP, not a piece */
    int64_t since; /* when it came: a promise is waited for up to PROMISE_WAIT_NS */
    struct objreq *next;
} objreq;

struct tr__relay {
    pthread_mutex_t mu;
    char node_path[512];
    size_t max_msg;
    tr__nodeconn *node; /* the relay thread's */
    int ep, wake_fd;
    rstream *streams;
    rconn *grave;
    uint64_t next_serial;
    unsigned next_tag; /* the last connection's tag */
    int resolving;
    int holding;         /* connections with a result piece held */
    int n_obj;           /* object requests queued, all streams */
    tr__objects *objs;   /* the relay thread's view of our store, for callers' pulls */
    tr__nodeconn *onode; /* ...and the connection it lives as long as */
    tr__bulk *bulk;      /* objects' bytes on a TCP connection of their own; NULL: none */
    int stop;
    pthread_t thread;
    tr__rpc_stream_handlers h;
};

/* Appends a request to its stream's queue. Caller holds mu. */
static void enqueue(tr__relay *r, rstream *s, objreq *q) {
    q->next = NULL;
    if (s->objq_tail)
        s->objq_tail->next = q;
    else
        s->objq = q;
    s->objq_tail = q;
    s->n_obj++;
    r->n_obj++;
}

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
    tr__buf_append(&b, &c->gen, 4);
    if (len) tr__buf_append(&b, data, len);
    if (!b.oom) tr__rpc_stream_send(c->s->st, b.data, b.len);
    tr__buf_free(&b);
}

/* What a link's caller is owed: HOLD (its bytes held reached OUT_CAP), GO (held, and
 * they are down to half of it), or 0. Caller holds mu. */
static int owed(const rstream *s) {
    return !s->held && s->out_bytes >= OUT_CAP      ? TR__REMOTE_HOLD
           : s->held && s->out_bytes <= OUT_CAP / 2 ? TR__REMOTE_GO
                                                    : 0;
}

/* A link's callers' bytes held went up or down by delta: its caller is told what it is
 * owed (a HOLD or GO the link cannot take now goes on a later call). Caller holds mu. */
static void account(rstream *s, ssize_t delta) {
    s->out_bytes = (size_t)((ssize_t)s->out_bytes + delta);
    int say = owed(s);
    if (!say) return;
    unsigned char m[TR__REMOTE_HDR] = {(unsigned char)say};
    if (tr__rpc_stream_send(s->st, m, sizeof m) == 0) s->held = say == TR__REMOTE_HOLD;
}

static void set_events(tr__relay *r, rconn *c, int events) {
    if (c->fd < 0 || c->events == events) return;
    struct epoll_event ev = {.events = (uint32_t)events, .data.ptr = c};
    epoll_ctl(r->ep, EPOLL_CTL_MOD, c->fd, &ev);
    c->events = events;
}

/* The worker side of c ends (fd closed, buffers freed); c stays, as a tombstone, until
 * the caller closes it or its link ends. */
static void conn_close_worker(tr__relay *r, rconn *c) {
    if (c->state == C_RESOLVING) {
        r->resolving--;
        c->s->queued -= tr__buf_avail(&c->out);
    }
    if (tr__buf_avail(&c->held)) r->holding--;
    if (tr__buf_avail(&c->out)) account(c->s, -(ssize_t)tr__buf_avail(&c->out));
    if (c->fd >= 0) {
        epoll_ctl(r->ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
    }
    tr__buf_free(&c->out);
    tr__buf_free(&c->held);
    c->state = C_DONE;
}

/* Takes c out of its stream and the epoll set; freed by the relay thread. */
static void conn_drop(tr__relay *r, rconn *c) {
    if (c->dead) return;
    conn_close_worker(r, c);
    c->dead = 1;
    for (rconn **pp = &c->s->conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    c->next = r->grave;
    r->grave = c;
}

/* The caller hears that c ended, and why; c becomes a tombstone. */
static void conn_eof(tr__relay *r, rconn *c, const char *why) {
    if (c->state == C_DONE) return;
    send_kind(c, TR__REMOTE_EOF, why, strlen(why));
    conn_close_worker(r, c);
}

/* Whether the worker is read (no result piece held) and written to (bytes queued). */
static void update_events(tr__relay *r, rconn *c) {
    set_events(r, c,
               (tr__buf_avail(&c->held) ? 0 : EPOLLIN) | (tr__buf_avail(&c->out) ? EPOLLOUT : 0));
}

/* Writes what the worker takes now. Caller holds mu. */
static void flush(tr__relay *r, rconn *c) {
    size_t had = tr__buf_avail(&c->out);
    int rc = tr__write_some(c->fd, &c->out);
    if (had != tr__buf_avail(&c->out)) account(c->s, -(ssize_t)(had - tr__buf_avail(&c->out)));
    if (rc) {
        conn_eof(r, c, "the actor's worker connection broke");
        return;
    }
    update_events(r, c);
}

/* The gate: n more bytes from the caller, which must be whole CALL frames in sequence.
 * Returns 0, or -1 at the first byte of anything else. */
static int gate(tr__relay *r, rconn *c, const char *p, size_t n) {
    while (n) {
        if (c->body_left) {
            size_t k = n < c->body_left ? n : (size_t)c->body_left;
            c->body_left -= k;
            p += k;
            n -= k;
            continue;
        }
        size_t k = TR__FRAME_HDR - c->hdr_have;
        if (k > n) k = n;
        memcpy(c->hdr + c->hdr_have, p, k);
        c->hdr_have += k;
        p += k;
        n -= k;
        if (c->hdr_have < TR__FRAME_HDR) break;
        tr__frame_hdr h;
        memcpy(&h, c->hdr, sizeof h);
        if (tr__frame_check(&h, r->max_msg) || h.type != TR__MSG_CALL) return -1;
        c->body_left = h.len;
        c->hdr_have = 0;
    }
    return 0;
}

static rstream *find_stream(tr__relay *r, tr__rpc_stream *st) {
    for (rstream *s = r->streams; s; s = s->next)
        if (s->st == st) return s;
    return NULL;
}

static rconn *find_conn(rstream *s, const uint8_t *id, uint32_t gen) {
    for (rconn *c = s->conns; c; c = c->next)
        if (c->gen == gen && memcmp(c->id, id, 16) == 0) return c;
    return NULL;
}

/* ------------------------------------------------------------------ remote holds */

static int store_view(tr__relay *r);

static rkeep *find_kept(rstream *s, const uint8_t ref[16]) {
    rkeep *k = tr__idmap_get(&s->kept, tr__id_key(ref));
    while (k && memcmp(k->ref, ref, 16) != 0)
        k = k->next;
    return k;
}

/* A caller's LETGO: one of its link's holds on ref ends (nothing if it has none). Under mu
 * (a hold means the store view is there). */
static void let_go_kept(tr__relay *r, rstream *s, const uint8_t ref[16]) {
    uint64_t key = tr__id_key(ref);
    rkeep *head = tr__idmap_get(&s->kept, key), **pp = &head;
    while (*pp && memcmp((*pp)->ref, ref, 16) != 0)
        pp = &(*pp)->next;
    rkeep *k = *pp;
    if (!k) return;
    tr_ref obj;
    memcpy(obj.b, ref, 16);
    tr__objects_unpin(r->objs, obj);
    if (--k->count) return;
    *pp = k->next;
    if (head)
        tr__idmap_put(&s->kept, key, head); /* (replaces: takes no memory) */
    else
        tr__idmap_del(&s->kept, key);
    free(k);
    s->n_kept--;
}

/* Lets go of everything s kept (its link ended). Under mu. */
static void drop_kept(tr__relay *r, rstream *s) {
    size_t pos = 0;
    uint64_t key;
    void *v;
    while (tr__idmap_next(&s->kept, &pos, &key, &v)) {
        for (rkeep *k = v, *n; k; k = n) {
            n = k->next;
            tr_ref obj;
            memcpy(obj.b, k->ref, 16);
            while (k->count--)
                tr__objects_unpin(r->objs, obj);
            free(k);
        }
    }
    tr__idmap_free(&s->kept);
    s->n_kept = 0;
}

/* Counts one more hold of ours (a pin taken) for s on ref. Returns 0, or TR_ENOMEM with
 * why (the caller unpins). Under mu. */
static int kept_add(rstream *s, const uint8_t ref[16], char *why, size_t cap) {
    rkeep *k = find_kept(s, ref);
    if (!k && s->n_kept >= KEEP_CAP) {
        snprintf(why, cap, "this link keeps %d objects already", KEEP_CAP);
        return TR_ENOMEM;
    }
    if (!k) {
        uint64_t key = tr__id_key(ref);
        if (!(k = calloc(1, sizeof *k))) {
            snprintf(why, cap, "the node is out of memory");
            return TR_ENOMEM;
        }
        memcpy(k->ref, ref, 16);
        k->next = tr__idmap_get(&s->kept, key);
        if (tr__idmap_put(&s->kept, key, k)) {
            free(k);
            snprintf(why, cap, "the node is out of memory");
            return TR_ENOMEM;
        }
        s->n_kept++;
    }
    k->count++;
    return 0;
}

/* Serves a KEEP: a pin of ours on the object (sealed or not: a promise is kept too), the
 * link's record of it, the answer. Called with mu; drops it meanwhile. Returns 1 if the
 * link was full (try again later). */
static int serve_keep(tr__relay *r, objreq *q) {
    pthread_mutex_unlock(&r->mu);
    tr_ref ref;
    memcpy(ref.b, q->ref, 16);
    int rc = !tr__ref_is_object(&ref) ? tr__err(TR_EINVAL, "not an object ref")
             : store_view(r)          ? tr__err(TR_EOBJECT_LOST, "the store is out of reach")
                                      : tr__objects_pin(r->objs, ref, 0, NULL, NULL);
    char why[300] = "";
    if (rc) snprintf(why, sizeof why, "%s", tr__last_error());
    pthread_mutex_lock(&r->mu);
    rstream *s = r->streams;
    while (s && s->serial != q->serial)
        s = s->next;
    if (!s) { /* its link ended: nobody holds it */
        if (!rc) tr__objects_unpin(r->objs, ref);
        return 0;
    }
    if (!rc && (rc = kept_add(s, q->ref, why, sizeof why))) tr__objects_unpin(r->objs, ref);
    tr__buf b = TR__BUF_INIT;
    unsigned char kind = TR__REMOTE_OBJ_KEPT;
    int32_t code = rc;
    tr__buf_append(&b, &kind, 1);
    tr__buf_append(&b, q->ref, 16);
    tr__buf_append(&b, &q->req, 4);
    tr__buf_append(&b, &code, 4);
    tr__buf_append(&b, why, strlen(why));
    /* (an answer the link cannot take is lost: the caller's wait ends at its deadline, and
     * what we kept then stays until its link ends) */
    if (!b.oom) tr__rpc_stream_send(s->st, b.data, b.len);
    tr__buf_free(&b);
    return 0;
}

/* Writes a cancel word on the board entry of the connection's actor; SIGURG to a task's
 * worker if asked. Caller holds mu, and the connection is open (so the store view is
 * there: resolve_pass made it before it opened the connection). */
static void board_cancel(tr__relay *r, rconn *c, uint64_t word, int interrupt) {
    if (!r->objs) return;
    pid_t pid = tr__objects_board_cancel(r->objs, tr__id_key(c->id), word);
    if (pid > 0 && interrupt) kill(pid, SIGURG);
}

/* A caller's CANCEL of one of its calls on connection c (payload: u64 seq, u8 interrupt):
 * as a caller on this node would, on the actor's board entry, which the worker checks
 * before and while it runs the call (tr_ctx_canceled). Before the connection opened, it
 * waits in the connection (the call has not reached the worker either). Caller holds mu. */
static void on_cancel(tr__relay *r, rconn *c, const unsigned char *payload) {
    uint64_t seq;
    memcpy(&seq, payload, 8);
    uint64_t word = tr__board_relay_cancel_word(c->tag, seq);
    if (c->state == C_OPEN) {
        board_cancel(r, c, word, payload[8] == 1);
    } else { /* (the board keeps as many; an earlier one goes, as it would there) */
        int at = c->n_pend_cancel++ % TR__SEG_BOARD_CANCELS;
        c->pend_cancel[at] = word;
    }
}

/* The RPC server's thread: a caller's message. */
static void on_msg(void *ctx, tr__rpc_stream *st, const void *msg, size_t len) {
    tr__relay *r = ctx;
    const unsigned char *p = msg;
    int obj = p[0] == TR__REMOTE_OBJ_GET || p[0] == TR__REMOTE_OBJ_BULK ||
              p[0] == TR__REMOTE_OBJ_KEEP || p[0] == TR__REMOTE_OBJ_LETGO;
    int cancel = p[0] == TR__REMOTE_CANCEL;
    if (len < TR__REMOTE_HDR || (p[0] != TR__REMOTE_DATA && p[0] != TR__REMOTE_CLOSE &&
                                 (!obj || len != TR__REMOTE_HDR + 16) &&
                                 (!cancel || len != TR__REMOTE_HDR + TR__REMOTE_CANCEL_LEN))) {
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
    if (s && p[0] == TR__REMOTE_OBJ_LETGO) {
        let_go_kept(r, s, p + 1);
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (s && obj) {
        /* for the relay thread (it reads our store) */
        objreq *q = s->n_obj < OBJ_QUEUE_CAP ? calloc(1, sizeof *q) : NULL;
        if (q) {
            q->keep = p[0] == TR__REMOTE_OBJ_KEEP;
            q->serial = s->serial;
            memcpy(q->ref, p + 1, 16);
            memcpy(&q->req, p + 17, 4);
            memcpy(&q->off, p + TR__REMOTE_HDR, 8);
            memcpy(&q->len, p + TR__REMOTE_HDR + 8, 8);
            q->bulk = p[0] == TR__REMOTE_OBJ_BULK;
            q->since = tr__now_ns();
            enqueue(r, s, q);
            wake(r);
        } else { /* no room: the puller hears it (a pull waits for every answer) */
            tr__buf b = TR__BUF_INIT;
            int32_t code = TR_ENOMEM;
            const char *why = "too many object requests on this link";
            unsigned char k =
                p[0] == TR__REMOTE_OBJ_KEEP ? TR__REMOTE_OBJ_KEPT : TR__REMOTE_OBJ_ERR;
            tr__buf_append(&b, &k, 1);
            tr__buf_append(&b, p + 1, 20);
            tr__buf_append(&b, &code, 4);
            tr__buf_append(&b, why, strlen(why));
            if (!b.oom) tr__rpc_stream_send(st, b.data, b.len);
            tr__buf_free(&b);
        }
        pthread_mutex_unlock(&r->mu);
        return;
    }
    uint32_t gen;
    memcpy(&gen, p + 17, 4);
    rconn *c = s ? find_conn(s, p + 1, gen) : NULL;
    if (!s) {
        TR_LOG_WARN_LIMITED("RELAY-OOM", "out of memory: a caller's message is dropped");
        goto out;
    }
    if (p[0] == TR__REMOTE_CLOSE) {
        if (c) conn_drop(r, c);
        goto out;
    }
    if (cancel) { /* (for a connection that is not there, or ended: nothing to cancel) */
        if (c && c->state != C_DONE) on_cancel(r, c, p + TR__REMOTE_HDR);
        goto out;
    }
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) {
            TR_LOG_WARN_LIMITED("RELAY-OOM", "out of memory: a caller's message is dropped");
            goto out;
        }
        memcpy(c->id, p + 1, 16);
        c->gen = gen;
        c->tag = r->next_tag = r->next_tag % TR__BOARD_TAG_MAX + 1;
        c->s = s;
        c->fd = -1;
        c->state = C_RESOLVING;
        c->next = s->conns;
        s->conns = c;
        r->resolving++;
        wake(r);
    }
    if (c->state == C_DONE) goto out; /* it ended: the caller hears (or heard) why */
    const char *data = (const char *)p + TR__REMOTE_HDR;
    size_t n = len - TR__REMOTE_HDR;
    if (gate(r, c, data, n)) {
        conn_eof(r, c, "the caller sent something other than CALL frames");
        goto out;
    }
    if (c->state == C_OPEN && !tr__buf_avail(&c->out)) { /* straight to the worker */
        ssize_t w = send(c->fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            data += w;
            n -= (size_t)w;
        }
    }
    if (!n) goto out;
    if (c->s->out_bytes + n > HARD_CAP) { /* told HOLD, and sending on */
        conn_eof(r, c,
                 "the node holds 256 MiB of calls on this link that its actors did not take, "
                 "and the caller sent on after it was told to hold");
        goto out;
    }
    if (c->state == C_RESOLVING &&
        (tr__buf_avail(&c->out) + n > QUEUE_CAP || c->s->queued + n > STREAM_CAP)) {
        conn_eof(r, c, "too many bytes queued for an actor that is not up");
        goto out;
    }
    if (tr__buf_append(&c->out, data, n)) {
        conn_eof(r, c, "the node is out of memory");
        goto out;
    }
    account(c->s, (ssize_t)n);
    if (c->state == C_RESOLVING) c->s->queued += n;
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
        while (s->objq) { /* nobody to answer */
            objreq *q = s->objq;
            s->objq = q->next;
            r->n_obj--;
            free(q);
        }
        drop_kept(r, s); /* what it kept goes with the link */
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

/* Sends c's held result piece; 0 once it is gone, -1 if the link is still full. */
static int send_held(tr__relay *r, rconn *c) {
    if (!tr__buf_avail(&c->held)) return 0;
    int rc = tr__rpc_stream_send(c->s->st, c->held.data + c->held.off, tr__buf_avail(&c->held));
    if (rc == TR_ENOMEM) return -1;
    if (rc) { /* the link ended (its on_end comes) or the piece cannot go: never a gap */
        conn_eof(r, c, "the link cannot take the actor's results");
        return 0;
    }
    tr__buf_reset(&c->held);
    r->holding--;
    return 0;
}

/* A worker's bytes, back to its caller, in messages of the link's size at most. Caller
 * holds mu. */
/* Follows the frames in the worker's bytes to the caller: a RESULT that hands a result's
 * container to us (tr__result_frame_kept: the worker transferred it to our store index)
 * is adopted and kept for the caller's link, which says LETGO when its caller lets go of
 * the result (docs/OWNERSHIP.md). Under mu. */
static void follow_results(tr__relay *r, rconn *c, const char *p, size_t n) {
    while (n && !c->rlost) {
        if (c->rbody_left) {
            size_t want = c->rpre_have < TR__RESULT_KEPT_PREFIX &&
                                  c->rbody_left + c->rpre_have >= TR__RESULT_KEPT_PREFIX
                              ? TR__RESULT_KEPT_PREFIX - c->rpre_have
                              : 0;
            if (want > n) want = n;
            memcpy(c->rpre + c->rpre_have, p, want);
            c->rpre_have += want;
            size_t k = n < c->rbody_left ? n : (size_t)c->rbody_left;
            c->rbody_left -= k;
            p += k;
            n -= k;
            if (want && c->rpre_have == TR__RESULT_KEPT_PREFIX && c->rpre[0] == 0x94 &&
                c->rpre[1] == 0x00 && c->rpre[2] == 0xc4 && c->rpre[3] == 0x10 && r->objs) {
                tr_ref ref;
                memcpy(ref.b, c->rpre + 4, 16);
                char why[200];
                if (tr__objects_adopt(r->objs, ref) == 0 && kept_add(c->s, ref.b, why, sizeof why))
                    tr__objects_unpin(r->objs, ref); /* (the caller's pull fails, saying so) */
            }
            continue;
        }
        size_t k = TR__FRAME_HDR - c->rhdr_have;
        if (k > n) k = n;
        memcpy(c->rhdr + c->rhdr_have, p, k);
        c->rhdr_have += k;
        p += k;
        n -= k;
        if (c->rhdr_have < TR__FRAME_HDR) break;
        tr__frame_hdr h;
        memcpy(&h, c->rhdr, sizeof h);
        if (tr__frame_check(&h, r->max_msg)) {
            c->rlost = 1;
            break;
        }
        c->rhdr_have = 0;
        c->rbody_left = h.len;
        /* only a RESULT's or ITEM's body is looked at (a kept one is 4 elements, its ref
         * first) */
        c->rpre_have =
            h.type == TR__MSG_RESULT || h.type == TR__MSG_ITEM ? 0 : TR__RESULT_KEPT_PREFIX;
    }
}

static void on_worker(tr__relay *r, rconn *c, uint32_t events) {
    if ((events & EPOLLOUT) && c->state == C_OPEN) flush(r, c);
    if (c->state != C_OPEN || !(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
    size_t chunk =
        r->max_msg - TR__REMOTE_HDR < READ_CHUNK ? r->max_msg - TR__REMOTE_HDR : READ_CHUNK;
    for (int round = 0; round < 4 && !tr__buf_avail(&c->held); round++) {
        tr__buf *b = &c->held; /* read into it: sent at once, or kept if the link is full */
        tr__buf_reset(b);
        if (tr__buf_reserve(b, TR__REMOTE_HDR + chunk)) {
            conn_eof(r, c, "the node is out of memory");
            return;
        }
        b->data[0] = TR__REMOTE_DATA;
        memcpy(b->data + 1, c->id, 16);
        memcpy(b->data + 17, &c->gen, 4);
        ssize_t n;
        do {
            n = recv(c->fd, b->data + TR__REMOTE_HDR, chunk, MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        if (n > 0) {
            b->len = TR__REMOTE_HDR + (size_t)n;
            follow_results(r, c, b->data + TR__REMOTE_HDR, (size_t)n); /* (before they go) */
            r->holding++;
            if (send_held(r, c)) break; /* the link is full: not read until it takes this */
            if (c->state != C_OPEN) return;
            if ((size_t)n == chunk) continue;
            return;
        }
        if (n < 0 && errno == EAGAIN) return;
        conn_eof(r, c,
                 n == 0 ? "the actor's worker closed the connection"
                        : "the actor's worker connection broke");
        return;
    }
    update_events(r, c);
}

/* The relay thread's view of our store, on a node connection of its own (a process's
 * holds live as long as its connection), opened when first needed. Called without mu.
 * Returns 0 or a code. */
static int store_view(tr__relay *r) {
    if (r->objs) return 0;
    int rc = 0;
    if (!r->onode && ((rc = tr__nodeconn_open(r->node_path, r->max_msg, &r->onode)) ||
                      (rc = tr__nodeconn_hello(r->onode, "cli", 0, 5000)))) {
        tr__nodeconn_close(r->onode);
        r->onode = NULL;
        return rc;
    }
    return tr__objects_attach(r->onode, &r->objs);
}

/* A view of an object lent to gRPC with a piece of it. */
typedef struct lent_view {
    tr__objects *objs;
    tr_ref ref;
} lent_view;

/* gRPC has sent the piece (or dropped it): the view goes (any thread; views are pins,
 * counted, so pieces of one object in flight at once each keep theirs). */
static void let_go(void *p) {
    lent_view *v = p;
    tr__objects_unpin(v->objs, v->ref);
    free(v);
}

/* One request for a piece: sent (or why not). Returns 1 if the link was full (nothing
 * sent: try again later), 2 if the object is not sealed yet (a promise: ask again later).
 * Called with mu; drops it meanwhile. */
static int serve_one(tr__relay *r, objreq *q) {
    if (q->keep) return serve_keep(r, q);
    pthread_mutex_unlock(&r->mu);
    tr__buf b = TR__BUF_INIT; /* the header (and an error's text); a piece is sent from the
                                 store itself */
    unsigned char k = TR__REMOTE_OBJ_DATA;
    tr__buf_append(&b, &k, 1);
    tr__buf_append(&b, q->ref, 16);
    tr__buf_append(&b, &q->req, 4);
    tr_ref ref;
    memcpy(ref.b, q->ref, 16);
    const void *data = NULL;
    size_t size = 0;
    int rc = !tr__ref_is_object(&ref) ? tr__err(TR_EINVAL, "not an object ref")
             : store_view(r)          ? tr__err(TR_EOBJECT_LOST, "the store is out of reach")
                                      : tr__objects_pin(r->objs, ref, 0, &data, &size);
    if (rc == TR_ETIMEDOUT && tr__now_ns() - q->since < PROMISE_WAIT_NS) {
        /* not sealed yet (a call's result still a promise, or an object being written):
         * this request waits its turn again */
        tr__buf_free(&b);
        pthread_mutex_lock(&r->mu);
        return 2;
    }
    if (!rc && q->bulk) {
        rc = r->bulk ? 0 : tr__err(TR_ESTATE, "this node offers no bulk connections (TLS)");
    } else if (!rc && (q->off > size || q->len > size - q->off ||
                       q->len > r->max_msg - TR__REMOTE_HDR - 64))
        rc = tr__err(TR_EINVAL, "a piece [%llu, +%llu) of an object of %zu bytes",
                     (unsigned long long)q->off, (unsigned long long)q->len, size);
    if (!rc && q->bulk) { /* the whole object, under a ticket: its view goes once served */
        lent_view *v = malloc(sizeof *v);
        uint8_t ticket[16];
        uint64_t total = size;
        uint32_t port = (uint32_t)tr__bulk_port(r->bulk);
        if (!v) {
            tr__objects_unpin(r->objs, ref);
            rc = tr__err(TR_ENOMEM, "the node is out of memory");
        } else {
            v->objs = r->objs;
            v->ref = ref;
            rc = tr__bulk_offer(r->bulk, data, size, let_go, v, ticket); /* (v goes either way) */
        }
        data = NULL;
        if (!rc) {
            b.data[0] = TR__REMOTE_OBJ_BULK;
            tr__buf_append(&b, &total, 8);
            tr__buf_append(&b, &port, 4);
            tr__buf_append(&b, ticket, 16);
        }
    } else if (!rc) {
        uint64_t total = size;
        tr__buf_append(&b, &q->off, 8);
        tr__buf_append(&b, &total, 8);
    }
    if (rc) {
        char why[300];
        snprintf(why, sizeof why, "%s",
                 rc == TR_ENOTFOUND ? "no such object here (freed?)" : tr__last_error());
        int32_t code = rc;
        b.data[0] = TR__REMOTE_OBJ_ERR;
        tr__buf_append(&b, &code, 4);
        tr__buf_append(&b, why, strlen(why));
    }
    /* the piece goes from the store itself: our view of the object is held until gRPC
     * has sent it (let_go) */
    lent_view *v = data && !rc ? malloc(sizeof *v) : NULL;
    if (v) {
        v->objs = r->objs;
        v->ref = ref;
    } else if (data && rc) { /* (a piece out of range: b says why) */
        tr__objects_unpin(r->objs, ref);
    } else if (data) {
        tr__objects_unpin(r->objs, ref);
        rc = tr__err(TR_ENOMEM, "the node is out of memory");
        b.data[0] = TR__REMOTE_OBJ_ERR; /* (b holds the header: an error follows it) */
        int32_t code = rc;
        b.len = TR__REMOTE_HDR;
        tr__buf_append(&b, &code, 4);
    }
    pthread_mutex_lock(&r->mu);
    rstream *s = r->streams;
    while (s && s->serial != q->serial)
        s = s->next;
    int src = 0;
    if (!s) { /* its link ended: nobody to answer */
        if (v) let_go(v);
    } else if (v) {
        src = b.oom ? (let_go(v), TR_ENOMEM)
                    : tr__rpc_stream_send_lent(s->st, b.data, b.len, (const char *)data + q->off,
                                               (size_t)q->len, let_go, v);
    } else {
        src = b.oom ? TR_ENOMEM : tr__rpc_stream_send(s->st, b.data, b.len);
    }
    tr__buf_free(&b);
    return src == TR_ENOMEM;
}

/* Serves the callers' requests for pieces of our objects, a request per stream in turn
 * (a stream whose link is full waits, the others go on): a view of the object (held while
 * the piece is copied out), the piece, or why not. Called with mu; drops it meanwhile. */
static void serve_objects(tr__relay *r) {
    for (int served = 1; served && r->n_obj;) {
        served = 0;
        int64_t now = tr__now_ns();
        for (uint64_t serial = 0;;) { /* each stream once, by serial (they may go) */
            rstream *s = NULL;
            for (rstream *t = r->streams; t; t = t->next)
                if (t->serial > serial && t->objq && t->obj_full_until <= now &&
                    (!s || t->serial < s->serial))
                    s = t;
            if (!s) break;
            serial = s->serial;
            objreq *q = s->objq;
            s->objq = q->next;
            if (!s->objq) s->objq_tail = NULL;
            s->n_obj--;
            r->n_obj--;
            int full = serve_one(r, q);
            s = r->streams; /* found again: it may have ended meanwhile */
            while (s && s->serial != serial)
                s = s->next;
            if (full == 2 && s) { /* not sealed yet: behind the others, asked again later */
                enqueue(r, s, q);
            } else if (full == 1 && s) { /* this one again, once its link takes more */
                q->next = s->objq;
                s->objq = q;
                if (!s->objq_tail) s->objq_tail = q;
                s->n_obj++;
                r->n_obj++;
                s->obj_full_until = tr__now_ns() + RETRY_NS;
            } else {
                free(q);
                served = 1;
            }
        }
    }
}

typedef struct pending {
    uint64_t serial;
    uint8_t id[16];
    uint32_t gen;
} pending;

/* Asks the node about actors not yet up (without mu) and opens those that are. */
static void resolve_pass(tr__relay *r) {
    pending due[64];
    int n = 0;
    int64_t now = tr__now_ns();
    for (rstream *s = r->streams; s && n < 64; s = s->next)
        for (rconn *c = s->conns; c && n < 64; c = c->next)
            if (c->state == C_RESOLVING && c->next_try <= now) {
                due[n].serial = s->serial;
                due[n].gen = c->gen;
                memcpy(due[n++].id, c->id, 16);
            }
    for (int i = 0; i < n; i++) {
        pthread_mutex_unlock(&r->mu);
        tr__actor_where w;
        tr_actor_id id;
        memcpy(id.b, due[i].id, 16);
        if (store_view(r)) /* (our store index goes to the worker: results with refs) */
            TR_LOG_WARN_LIMITED("RELAY-STORE", "no view of the store: %s", tr__last_error());
        int rc = r->node ? tr__actor_resolve(r->node, &id, 0, &w) : TR_ECONNECT;
        if (rc == TR_ECONNECT || rc == TR_EPROTO || rc == TR_ETIMEDOUT) { /* once more */
            tr__nodeconn_close(r->node);
            r->node = NULL;
            if (!tr__nodeconn_open(r->node_path, r->max_msg, &r->node) &&
                tr__nodeconn_hello(r->node, "cli", 0, 5000) == 0)
                rc = tr__actor_resolve(r->node, &id, 0, &w);
        }
        char why[600];
        snprintf(why, sizeof why, "%s", rc ? tr__last_error() : "");
        pthread_mutex_lock(&r->mu);
        rstream *s = r->streams;
        while (s && s->serial != due[i].serial)
            s = s->next;
        rconn *c = s ? find_conn(s, due[i].id, due[i].gen) : NULL;
        if (!c || c->state != C_RESOLVING) continue;
        c->next_try = tr__now_ns() + RETRY_NS;
        if (rc == TR_ENOTFOUND) {
            conn_eof(r, c, "no such actor on this node");
            continue;
        }
        if (rc) { /* the node cannot say: tried again, for a while */
            TR_LOG_WARN_LIMITED("RELAY-RESOLVE", "%s", why);
            if (!c->first_err) c->first_err = tr__now_ns();
            if (tr__now_ns() - c->first_err > GIVE_UP_NS) conn_eof(r, c, why);
            continue;
        }
        c->first_err = 0;
        if (w.remote[0]) { /* (never: the node does not forward its own questions) */
            conn_eof(r, c, "the actor is not on this node");
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
        /* results come inline; those with refs in them hand us their container */
        tr__caller_frame(&hello, r->objs ? tr__objects_client(r->objs) : -1, r->objs != NULL,
                         c->tag);
        tr__buf_append(&hello, c->out.data + c->out.off, tr__buf_avail(&c->out));
        if (hello.oom) {
            close(fd);
            tr__buf_free(&hello);
            conn_eof(r, c, "the node is out of memory");
            continue;
        }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(r->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            tr__buf_free(&hello);
            continue;
        }
        c->s->queued -= tr__buf_avail(&c->out);
        account(c->s, (ssize_t)tr__buf_avail(&hello) - (ssize_t)tr__buf_avail(&c->out));
        tr__buf_free(&c->out);
        c->out = hello;
        c->fd = fd;
        c->events = EPOLLIN;
        c->state = C_OPEN;
        r->resolving--;
        int pend =
            c->n_pend_cancel < TR__SEG_BOARD_CANCELS ? c->n_pend_cancel : TR__SEG_BOARD_CANCELS;
        for (int k = 0; k < pend; k++) /* (before its calls reach the worker) */
            board_cancel(r, c, c->pend_cancel[k], 0);
        c->n_pend_cancel = 0;
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
            free(c);
        }
        int unsaid = 0; /* a HOLD or GO owed */
        for (rstream *s = r->streams; s && !unsaid; s = s->next)
            unsaid = owed(s);
        int timeout =
            r->resolving || r->holding || r->n_obj || unsaid ? (int)(RETRY_NS / 1000000) : 1000;
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
        if (r->holding) /* links that were full may take the pieces held now */
            for (rstream *s = r->streams; s; s = s->next)
                for (rconn *c = s->conns; c; c = c->next)
                    if (tr__buf_avail(&c->held) && !send_held(r, c) && c->state == C_OPEN) {
                        update_events(r, c);
                        on_worker(r, c, EPOLLIN);
                    }
        if (r->n_obj) serve_objects(r);
        if (r->resolving) resolve_pass(r);
        for (rstream *s = r->streams; s; s = s->next) /* a HOLD or GO the link could not */
            account(s, 0);                            /* take then goes now */
        if (r->bulk) { /* offers nobody came for let go of their objects (without mu: a
                          release unpins through the store) */
            pthread_mutex_unlock(&r->mu);
            tr__bulk_sweep(r->bulk);
            pthread_mutex_lock(&r->mu);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int tr__relay_create(const char *node_path, size_t max_msg, const char *bulk_ip, tr__relay **out) {
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
    if (!rc && bulk_ip && tr__bulk_create(bulk_ip, &r->bulk)) /* (pulls go on the link) */
        TR_LOG_WARN("RELAY-BULK", "no bulk connections for objects: %s", tr__last_error());
    if (!rc && pthread_create(&r->thread, NULL, relay_main, r) != 0)
        rc = tr__err(TR_ENOMEM, "relay: no thread");
    if (rc) {
        tr__bulk_destroy(r->bulk);
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
        while (s->objq) {
            objreq *q = s->objq;
            s->objq = q->next;
            free(q);
        }
        drop_kept(r, s);
        free(s);
    }
    for (rconn *c = r->grave, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    tr__bulk_destroy(r->bulk); /* (its offers' views go: before the store's) */
    tr__objects_detach(r->objs);
    tr__nodeconn_close(r->onode);
    tr__nodeconn_close(r->node);
    close(r->ep);
    close(r->wake_fd);
    pthread_mutex_destroy(&r->mu);
    free(r);
}
