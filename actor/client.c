/* actor/client.c - direct actor calls: per-actor connections, refs, get and wait.
 *
 * Locking: one mutex (mu) guards everything here. Only the blocking waits happen without
 * it: epoll_wait by the leader, node RPCs while resolving an actor (flagged per actor).
 * Reads of sockets always happen under mu, so replies are parsed by one thread at a time.
 *
 * Each actor connection keeps an output stream: every CALL frame is appended to `out`
 * and covers bytes [start, end) of the stream; `sent` counts the bytes the kernel took.
 * If the connection breaks, calls whose frames had started going out die with
 * TR_EACTOR_DIED; calls never sent stay queued for the next incarnation.
 */
#include "actor/client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actor/protocol.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/idmap.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/sched.h"
#include "core/status.h"

#define NODE_RPC_MS 10000
#define RESOLVE_SLICE_MS 50
#define BROKEN_GRACE_NS 1000000000
#define ADOPT_TIMEOUT_MS 2000
#define DRIVE_EVERY_NS 2000000 /* how often a waiter asks about other queued actors */

typedef struct aconn aconn;

typedef struct slot {
    uint64_t key;
    aconn *ac;    /* non-NULL while the call is queued or in flight */
    uint64_t seq; /* frame seq on the actor stream */
    uint64_t start, end;
    int done, rc, released;
    char *data; /* malloc'd, or a view into an adopted object (obj_result) */
    size_t len;
    int obj_result; /* data is object `result_ref`'s view, pinned until release */
    tr_ref result_ref;
    tr_ref *pins; /* object arguments kept alive until the call completes */
    size_t n_pins;
    struct slot *next;
} slot;

struct aconn {
    tr_actor_id id;
    int fd;   /* -1: not connected */
    int dead; /* permanently */
    int resolving;
    char reason[700]; /* why it is dead (no allocation: failing calls always have a text) */
    uint64_t inc;
    uint64_t broken_inc; /* incarnation whose connection hit EOF: do not reconnect to it */
    int64_t broken_at;   /* ...unless the node still calls it alive after BROKEN_GRACE_NS */
    int unknown;         /* the node has never heard of this id */
    int64_t next_try;    /* when drive_others may ask the node about it again */
    tr__buf out;         /* unsent stream bytes: out[off] is stream byte `sent` */
    uint64_t sent, queued;
    tr__buf in;
    slot *head, *tail;
    uint64_t next_seq;
    int want_out;
};

struct tr__actors {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tr__nodeconn *node;
    tr__objects *objects;
    int ep;
    int wake_fd; /* eventfd in the epoll set: wakes the reader when another thread
                    completes calls or closes a connection */
    int reader;
    int waiters;
    int queued_unconnected; /* some actor has calls queued and no connection */
    tr__idmap actors;
    tr__idmap slots;
    uint64_t next_ref, tag;
    size_t max_msg;
};

int tr__actors_create(tr__nodeconn *node, tr__objects *objects, size_t max_msg, tr__actors **out) {
    *out = NULL;
    tr__actors *a = calloc(1, sizeof *a);
    if (!a) return tr__err(TR_ENOMEM, "actor client");
    a->ep = epoll_create1(EPOLL_CLOEXEC);
    a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (a->ep < 0 || a->wake_fd < 0 || epoll_ctl(a->ep, EPOLL_CTL_ADD, a->wake_fd, &ev) != 0) {
        int e = errno;
        if (a->ep >= 0) close(a->ep);
        if (a->wake_fd >= 0) close(a->wake_fd);
        free(a);
        return tr__err_errno(e, "epoll/eventfd");
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    a->node = node;
    a->objects = objects;
    a->max_msg = max_msg;
    do { /* bit 63 clear: b[15]'s top bit marks object refs (objectstore/client.h) */
        tr__random_bytes(&a->tag, sizeof a->tag);
        a->tag &= ~(1ull << 63);
    } while (a->tag == 0);
    *out = a;
    return 0;
}

static void unpin_args(tr__actors *a, slot *s) {
    for (size_t i = 0; i < s->n_pins; i++)
        tr__objects_unpin(a->objects, s->pins[i]);
    free(s->pins);
    s->pins = NULL;
    s->n_pins = 0;
}

static void slot_free(tr__actors *a, slot *s) {
    unpin_args(a, s);
    if (s->obj_result)
        tr__objects_unpin(a->objects, s->result_ref);
    else
        free(s->data);
    free(s);
}

void tr__actors_destroy(tr__actors *a) {
    if (!a) return;
    size_t pos = 0;
    void *v;
    while (tr__idmap_next(&a->actors, &pos, NULL, &v)) {
        aconn *ac = v;
        if (ac->fd >= 0) close(ac->fd);
        for (slot *s = ac->head, *n; s; s = n) {
            n = s->next;
            if (s->released) slot_free(a, s); /* others are in the slot map */
        }
        tr__buf_free(&ac->out);
        tr__buf_free(&ac->in);
        free(ac);
    }
    pos = 0;
    while (tr__idmap_next(&a->slots, &pos, NULL, &v))
        slot_free(a, v);
    tr__idmap_free(&a->actors);
    tr__idmap_free(&a->slots);
    close(a->ep);
    close(a->wake_fd);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

/* ------------------------------------------------------------------ node requests */

static void enc_id(tr__buf *b, const char *key, const void *id) {
    tr__enc_str(b, key);
    tr__enc_bin(b, id, 16);
}

int tr__actor_create(tr__actors *a, const char *cls, const tr_actor_options *opts, const void *args,
                     size_t len, tr_actor_id *out) {
    tr_actor_options def = TR_ACTOR_OPTIONS_INIT;
    if (!opts) opts = &def;
    if (!cls || !*cls) return tr__err(TR_EINVAL, "tr_actor_create: no class name");
    if (opts->struct_size < sizeof(tr_actor_options))
        return tr__err(TR_EINVAL,
                       "tr_actor_create: options struct_size %u, want %zu (use "
                       "TR_ACTOR_OPTIONS_INIT)",
                       opts->struct_size, sizeof(tr_actor_options));
    if (!args && len) return tr__err(TR_EINVAL, "tr_actor_create: args is NULL");
    if (opts->n_resources && !opts->resources)
        return tr__err(TR_EINVAL, "tr_actor_create: n_resources without resources");
    if (opts->max_restarts < -1)
        return tr__err(TR_EINVAL, "tr_actor_create: max_restarts must be >= -1");
    if (len + 4096 > a->max_msg)
        return tr__err(TR_EMSGSIZE,
                       "constructor arguments of %zu bytes exceed the message "
                       "limit of %zu",
                       len, a->max_msg);
    tr__res req = {0};
    int rc;
    if ((opts->num_cpus > 0 && (rc = tr__res_add(&req, "CPU", opts->num_cpus))) ||
        (opts->num_gpus > 0 && (rc = tr__res_add(&req, "GPU", opts->num_gpus))))
        return rc;
    if (opts->num_cpus < 0 || opts->num_gpus < 0)
        return tr__err(TR_EINVAL, "tr_actor_create: num_cpus and num_gpus must be >= 0");
    for (size_t i = 0; i < opts->n_resources; i++)
        if ((rc = tr__res_add(&req, opts->resources[i].name, opts->resources[i].quantity)))
            return rc;
    char res[1024];
    tr__res_format(&req, res, sizeof res);
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 5);
    tr__enc_str(&b, "class");
    tr__enc_str(&b, cls);
    tr__enc_str(&b, "args");
    tr__enc_bin(&b, args ? args : "", len);
    tr__enc_str(&b, "max_restarts");
    tr__enc_int(&b, opts->max_restarts);
    tr__enc_str(&b, "res");
    tr__enc_str(&b, res);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, opts->name);
    tr__reply r;
    rc = tr__nodeconn_call(a->node, TR__MSG_ACTOR_CREATE, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    rc = tr__get_id(r.root, "id", out->b, 16);
    tr__reply_free(&r);
    return rc;
}

typedef struct resolved {
    int state;
    uint64_t inc;
    char path[512];
    char reason[512];
} resolved;

static int resolve(tr__actors *a, const tr_actor_id *id, int wait_ms, resolved *out) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    enc_id(&b, "id", id->b);
    tr__enc_str(&b, "wait_ms");
    tr__enc_int(&b, wait_ms);
    tr__reply r;
    int timeout = wait_ms < 0 || wait_ms > RESOLVE_SLICE_MS ? NODE_RPC_MS : wait_ms + NODE_RPC_MS;
    int rc = tr__nodeconn_call(a->node, TR__MSG_ACTOR_RESOLVE, &b, timeout, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    int64_t state;
    const char *p;
    size_t n;
    memset(out, 0, sizeof *out);
    if ((rc = tr__get_int(r.root, "state", &state)) ||
        (rc = tr__get_uint(r.root, "inc", &out->inc)))
        goto done;
    out->state = (int)state;
    if (tr__get_str(r.root, "path", &p, &n) == 0 && n < sizeof out->path) memcpy(out->path, p, n);
    if (tr__get_str(r.root, "reason", &p, &n) == 0)
        snprintf(out->reason, sizeof out->reason, "%.*s", (int)n, p);
    if (out->state == TR__ACTOR_ALIVE && !out->path[0])
        rc = tr__err(TR_EPROTO, "node said ALIVE without a path");
done:
    tr__reply_free(&r);
    return rc;
}

int tr__actor_wait_ready(tr__actors *a, tr_actor_id id, int timeout_ms) {
    int64_t deadline = tr__deadline(timeout_ms);
    for (;;) {
        /* short slices: the node connection is shared, and held during each request */
        int left = tr__ms_left(deadline);
        resolved r;
        int rc = resolve(a, &id, left < 0 || left > RESOLVE_SLICE_MS ? RESOLVE_SLICE_MS : left, &r);
        if (rc) return rc;
        if (r.state == TR__ACTOR_ALIVE) return 0;
        if (r.state == TR__ACTOR_DEAD)
            return tr__err(TR_EACTOR_DIED, "actor died: %s", r.reason[0] ? r.reason : "unknown");
        if (tr__now_ns() >= deadline)
            return tr__err(TR_ETIMEDOUT, "actor is still %s", tr__actor_state_name(r.state));
    }
}

int tr__actor_by_name(tr__actors *a, const char *name, tr_actor_id *out) {
    if (!name || !*name) return tr__err(TR_EINVAL, "tr_actor_get: no name");
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, name);
    tr__reply r;
    int rc = tr__nodeconn_call(a->node, TR__MSG_ACTOR_BY_NAME, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc) return rc == TR_ENOTFOUND ? tr__err(rc, "no live actor named '%s'", name) : rc;
    rc = tr__get_id(r.root, "id", out->b, 16);
    tr__reply_free(&r);
    return rc;
}

int tr__actor_kill(tr__actors *a, tr_actor_id id, int no_restart) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    enc_id(&b, "id", id.b);
    tr__enc_str(&b, "no_restart");
    tr__enc_int(&b, no_restart ? 1 : 0);
    int rc = tr__nodeconn_call(a->node, TR__MSG_ACTOR_KILL, &b, NODE_RPC_MS, NULL);
    tr__buf_free(&b);
    return rc;
}

/* ------------------------------------------------------------------ slots and streams */

static void slot_done(tr__actors *a, slot *s, int rc, const void *data, size_t len) {
    s->ac = NULL;
    s->done = 1;
    s->rc = rc;
    unpin_args(a, s);
    s->data = malloc(len + 1);
    if (!s->data) {
        s->rc = TR_ENOMEM;
        s->len = 0;
    } else {
        if (len) memcpy(s->data, data, len);
        s->data[len] = '\0';
        s->len = len;
    }
    if (s->released) slot_free(a, s);
}

static void slot_fail(tr__actors *a, slot *s, int rc, const char *msg) {
    if (!msg) msg = tr_strerror(rc);
    slot_done(a, s, rc, msg, strlen(msg));
}

/* Pops the head slot of ac's FIFO. */
static slot *pop(aconn *ac) {
    slot *s = ac->head;
    ac->head = s->next;
    if (!ac->head) ac->tail = NULL;
    s->next = NULL;
    return s;
}

/* Calls completed (or a connection closed) outside the reader's own processing: the
 * reader may be asleep in epoll_wait on nothing that will fire, so poke it; followers
 * sleep on the condition variable. */
static void wake(tr__actors *a) {
    if (a->reader) {
        uint64_t one = 1;
        ssize_t w = write(a->wake_fd, &one, sizeof one);
        (void)w;
    }
    if (a->waiters) pthread_cond_broadcast(&a->cv);
}

/* The connection broke: calls that had started going out die; the rest stay queued. */
static void conn_failed(tr__actors *a, aconn *ac, int rc, const char *why) {
    char hex[33], msg[700];
    tr__hex(ac->id.b, 16, hex);
    snprintf(msg, sizeof msg, "actor %s died while the call was in flight (%s)", hex, why);
    if (ac->fd >= 0) {
        epoll_ctl(a->ep, EPOLL_CTL_DEL, ac->fd, NULL);
        close(ac->fd);
        ac->fd = -1;
    }
    ac->want_out = 0;
    if (rc == TR_EACTOR_DIED) { /* EOF: that incarnation is gone, whatever the node says */
        ac->broken_inc = ac->inc;
        ac->broken_at = tr__now_ns();
    }
    while (ac->head && ac->head->start < ac->sent)
        slot_fail(a, pop(ac), rc, msg);
    /* Drop the unsent tail of a frame that was partly written. */
    uint64_t keep_from = ac->head ? ac->head->start : ac->queued;
    tr__buf_consume(&ac->out, (size_t)(keep_from - ac->sent));
    ac->sent = keep_from;
    tr__buf_reset(&ac->in);
    wake(a);
}

static void mark_dead(tr__actors *a, aconn *ac, const char *reason) {
    char hex[33];
    tr__hex(ac->id.b, 16, hex);
    snprintf(ac->reason, sizeof ac->reason, "actor %s is dead: %s", hex, reason);
    ac->dead = 1;
    while (ac->head)
        slot_fail(a, pop(ac), TR_EACTOR_DIED, ac->reason);
    tr__buf_reset(&ac->out);
    ac->sent = ac->queued;
    wake(a);
}

static void set_want_out(tr__actors *a, aconn *ac, int on) {
    if (ac->want_out == on) return;
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = ac};
    epoll_ctl(a->ep, EPOLL_CTL_MOD, ac->fd, &ev);
    ac->want_out = on;
}

/* Writes queued bytes without blocking; on EAGAIN the leader finishes the job when the
 * socket is writable again. */
static void flush(tr__actors *a, aconn *ac) {
    while (ac->fd >= 0 && tr__buf_avail(&ac->out)) {
        ssize_t n = send(ac->fd, ac->out.data + ac->out.off, tr__buf_avail(&ac->out),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            tr__buf_consume(&ac->out, (size_t)n);
            ac->sent += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) {
            set_want_out(a, ac, 1);
            return;
        }
        conn_failed(a, ac, TR_EACTOR_DIED, n < 0 ? strerror(errno) : "send failed");
        return;
    }
    if (ac->fd >= 0) set_want_out(a, ac, 0);
}

static void on_readable(tr__actors *a, aconn *ac) {
    if (ac->fd < 0) return;
    int rc = tr__read_some(ac->fd, &ac->in);
    for (;;) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&ac->in, a->max_msg, &h, &body);
        if (r == 0) break;
        int res_rc, creator = -1;
        const void *data;
        size_t dlen;
        if (r < 0 || h.type != TR__MSG_RESULT || !ac->head || ac->head->seq != h.seq ||
            ac->head->end > ac->sent ||
            tr__result_parse(body, h.len, &res_rc, &data, &dlen, &creator)) {
            char why[300];
            snprintf(why, sizeof why, "malformed reply from the worker: %s",
                     r < 0 ? tr_last_error() : "unexpected frame");
            TR_LOG_WARN_LIMITED("CLIENT-BADREPLY", "%s", why);
            conn_failed(a, ac, TR_EPROTO, why);
            return;
        }
        slot *s = pop(ac);
        if (creator >= 0) { /* a large result: adopt the object the worker put */
            tr_ref r;
            const void *view;
            size_t vlen;
            memcpy(r.b, data, 16);
            /* a short wait: the result may be mid-spill (it is sealed, and not viewed) */
            int from = creator == TR__RESULT_HANDED ? -1 : creator; /* whose hold to take */
            int prc = tr__objects_pin(a->objects, r, ADOPT_TIMEOUT_MS, from, &view, &vlen);
            if (prc) {
                /* or it would leak: the hold is the worker's, or already ours */
                tr__objects_drop_for(a->objects, r,
                                     from >= 0 ? from : tr__objects_client(a->objects));
                slot_fail(a, s, prc, tr_last_error());
            } else {
                s->ac = NULL;
                s->done = 1;
                s->rc = 0;
                unpin_args(a, s);
                s->obj_result = 1;
                s->result_ref = r;
                s->data = (char *)view;
                s->len = vlen;
                if (s->released) slot_free(a, s);
            }
        } else {
            slot_done(a, s, res_rc, data, dlen);
        }
        tr__buf_consume(&ac->in, TR__FRAME_HDR + h.len);
    }
    if (rc < 0) conn_failed(a, ac, TR_EACTOR_DIED, "worker connection closed");
}

/* Connects to the actor's current worker if the node says it is up. Called with mu held;
 * drops it during the node RPC. Returns 0 or a transport error. */
static int connect_actor(tr__actors *a, aconn *ac, int wait_ms) {
    ac->resolving = 1;
    pthread_mutex_unlock(&a->mu);
    resolved r;
    int rc = resolve(a, &ac->id, wait_ms, &r);
    pthread_mutex_lock(&a->mu);
    ac->resolving = 0;
    if (a->waiters) pthread_cond_broadcast(&a->cv);
    if (ac->fd >= 0 || ac->dead) return 0;
    if (rc == TR_ENOTFOUND) {
        ac->unknown = 1;
        mark_dead(a, ac, "no such actor");
        return 0;
    }
    if (rc == TR_ECONNECT) { /* no node, no actors: the queued calls carry the error */
        mark_dead(a, ac, "the node service is unreachable");
        return 0;
    }
    if (rc) return rc;
    if (r.state == TR__ACTOR_DEAD) {
        mark_dead(a, ac, r.reason[0] ? r.reason : "unknown reason");
        return 0;
    }
    if (r.state != TR__ACTOR_ALIVE) return 0;
    /* The node has not yet reaped the incarnation we saw die (or it died after the node
     * answered): wait a little for the restart or the verdict. */
    int fd = r.inc == ac->broken_inc && tr__now_ns() - ac->broken_at < BROKEN_GRACE_NS
                 ? -1
                 : tr__unix_connect_nb(r.path); /* never blocks, even on a full backlog */
    if (fd < 0) {
        pthread_mutex_unlock(&a->mu);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&a->mu);
        return 0;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ac};
    if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        close(fd);
        return tr__err_errno(errno, "epoll_ctl");
    }
    /* Tell the worker our object store index first (large results are handed to us);
     * a fresh socket's buffer takes these few bytes at once. */
    tr__buf hello = TR__BUF_INIT;
    size_t at = 0;
    tr__frame_put_hdr(&hello, TR__MSG_CALLER, 0, 0);
    at = hello.len;
    tr__enc_array(&hello, 1);
    tr__enc_int(&hello, a->objects ? tr__objects_client(a->objects) : -1);
    tr__frame_hdr hh = {TR__FRAME_MAGIC, TR__FRAME_VERSION, TR__MSG_CALLER,
                        (uint32_t)(hello.len - at), 0};
    if (!hello.oom) memcpy(hello.data, &hh, sizeof hh);
    ssize_t sent = hello.oom ? -1 : send(fd, hello.data, hello.len, MSG_NOSIGNAL | MSG_DONTWAIT);
    int ok = sent == (ssize_t)hello.len;
    tr__buf_free(&hello);
    if (!ok) {
        epoll_ctl(a->ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        return 0; /* treated like a worker not yet up: tried again */
    }
    ac->fd = fd;
    ac->inc = r.inc;
    ac->want_out = 0;
    flush(a, ac);
    return 0;
}

static aconn *get_aconn(tr__actors *a, const tr_actor_id *id) {
    uint64_t key = tr__id_key(id->b);
    aconn *ac = key ? tr__idmap_get(&a->actors, key) : NULL;
    if (ac && memcmp(ac->id.b, id->b, 16) == 0) return ac;
    if (ac || key == 0) {
        tr__err(TR_ENOTFOUND, "not an actor id");
        return NULL;
    }
    ac = calloc(1, sizeof *ac);
    if (!ac) {
        tr__err(TR_ENOMEM, "actor connection");
        return NULL;
    }
    ac->id = *id;
    ac->fd = -1;
    if (tr__idmap_put(&a->actors, key, ac)) {
        free(ac);
        return NULL;
    }
    return ac;
}

int tr__actors_call(tr__actors *a, tr_actor_id id, const char *method, const void *args, size_t len,
                    const tr_ref *refs, size_t n_refs, tr_ref *out) {
    if (!method || !*method || !out || (!args && len) || (!refs && n_refs))
        return tr__err(TR_EINVAL, "tr_call: NULL or empty argument");
    for (size_t i = 0; i < n_refs; i++)
        if (!tr__ref_is_object(&refs[i]))
            return tr__err(TR_EINVAL, "tr_call_refs: ref %zu is not an object ref", i);
    size_t mlen = strlen(method);
    if (mlen > 255) return tr__err(TR_EINVAL, "tr_call: method name longer than 255 bytes");
    if (len + mlen + 64 > a->max_msg)
        return tr__err(TR_EMSGSIZE,
                       "call arguments of %zu bytes exceed the message limit of %zu "
                       "(max_message_bytes)",
                       len, a->max_msg);
    slot *s = calloc(1, sizeof *s);
    if (!s) return tr__err(TR_ENOMEM, "tr_call");
    if (n_refs) { /* keep the arguments alive until the call completes */
        s->pins = malloc(n_refs * sizeof *s->pins);
        if (!s->pins) {
            free(s);
            return tr__err(TR_ENOMEM, "tr_call");
        }
        for (size_t i = 0; i < n_refs; i++) {
            int rc = tr__objects_pin(a->objects, refs[i], 0, -1, NULL, NULL);
            if (rc) {
                unpin_args(a, s);
                free(s);
                return tr__err(rc, "tr_call_refs: object argument %zu: %s", i, tr_last_error());
            }
            s->pins[s->n_pins++] = refs[i];
        }
    }
    pthread_mutex_lock(&a->mu);
    int rc = 0;
    aconn *ac = get_aconn(a, &id);
    if (!ac) {
        rc = TR_ENOTFOUND;
        goto fail;
    }
    s->key = ++a->next_ref;
    if ((rc = tr__idmap_put(&a->slots, s->key, s))) goto fail;
    if (ac->unknown) {
        tr__idmap_del(&a->slots, s->key);
        rc = tr__err(TR_ENOTFOUND, "tr_call: no such actor");
        goto fail;
    }
    if (ac->dead) {
        slot_fail(a, s, TR_EACTOR_DIED, ac->reason);
        goto done;
    }
    size_t before = tr__buf_avail(&ac->out); /* not len: appending may compact the buffer */
    s->seq = ++ac->next_seq;
    if ((rc = tr__call_frame(&ac->out, s->seq, method, args ? args : "", len, refs, n_refs))) {
        tr__idmap_del(&a->slots, s->key);
        goto fail;
    }
    s->ac = ac;
    s->start = ac->queued;
    s->end = ac->queued += tr__buf_avail(&ac->out) - before;
    if (ac->tail)
        ac->tail->next = s;
    else
        ac->head = s;
    ac->tail = s;
    if (ac->fd >= 0)
        flush(a, ac);
    else if (ac->head == s && !ac->resolving)
        connect_actor(a, ac, 0); /* first queued call: see if the actor is up already */
    if (ac->fd < 0 && !ac->dead) a->queued_unconnected = 1;
    if (ac->unknown) { /* the node has never heard of this actor (mark_dead failed s) */
        tr__idmap_del(&a->slots, s->key);
        pthread_mutex_unlock(&a->mu);
        slot_free(a, s);
        return tr__err(TR_ENOTFOUND, "tr_call: no such actor");
    }
done:
    memcpy(out->b, &s->key, 8);
    memcpy(out->b + 8, &a->tag, 8);
    pthread_mutex_unlock(&a->mu);
    return 0;
fail:
    unpin_args(a, s);
    pthread_mutex_unlock(&a->mu);
    free(s);
    return rc;
}

static slot *find_slot(tr__actors *a, tr_ref ref) {
    uint64_t key, tag;
    memcpy(&key, ref.b, 8);
    memcpy(&tag, ref.b + 8, 8);
    if (tag != a->tag) return NULL;
    return tr__idmap_get(&a->slots, key);
}

/* Sleeps on the condition variable (never as the reader) until woken or the deadline. */
static void cv_wait(tr__actors *a, int64_t deadline) {
    a->waiters++;
    struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    a->waiters--;
}

/* Waits for progress on any connection until the deadline. Called with mu held. */
static void progress(tr__actors *a, int64_t deadline) {
    if (a->queued_unconnected) { /* come back soon to send queued calls (drive_others) */
        int64_t soon = tr__now_ns() + DRIVE_EVERY_NS;
        if (soon < deadline) deadline = soon;
    }
    if (a->reader) {
        if (deadline == TR__NO_DEADLINE) {
            a->waiters++;
            pthread_cond_wait(&a->cv, &a->mu);
            a->waiters--;
        } else {
            cv_wait(a, deadline);
        }
        return;
    }
    a->reader = 1;
    pthread_mutex_unlock(&a->mu);
    struct epoll_event evs[32];
    int ms = tr__ms_left(deadline);
    int n = epoll_wait(a->ep, evs, 32, ms);
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < n; i++) {
        aconn *ac = evs[i].data.ptr;
        if (!ac) { /* the wake eventfd */
            uint64_t v;
            ssize_t r = read(a->wake_fd, &v, sizeof v);
            (void)r;
            continue;
        }
        if (evs[i].events & EPOLLOUT) flush(a, ac);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(a, ac);
    }
    a->reader = 0;
    if (a->waiters) pthread_cond_broadcast(&a->cv);
}

/* Any thread that waits also sends the calls queued for every other actor that has come
 * up meanwhile (there is no background thread to do it): a quick node query per such
 * actor, at most every 2 ms each. Called with mu held. */
static void drive_others(tr__actors *a, aconn *skip) {
    if (!a->queued_unconnected) return;
    int64_t now = tr__now_ns();
    int left = 0;
    size_t pos = 0;
    void *v;
    while (tr__idmap_next(&a->actors, &pos, NULL, &v)) {
        aconn *ac = v;
        if (ac->fd >= 0 || ac->dead || !ac->head) continue;
        left = 1;
        if (ac == skip || ac->resolving || now < ac->next_try) continue;
        ac->next_try = now + DRIVE_EVERY_NS;
        connect_actor(a, ac, 0); /* drops mu: the map may change, so stop here */
        return;
    }
    a->queued_unconnected = left;
}

/* Sends what is queued for an unconnected actor if it is up (or learns it is dead). */
static int drive_unconnected(tr__actors *a, aconn *ac, int64_t deadline) {
    if (ac->resolving) { /* another thread asks the node; it broadcasts when done */
        int64_t slice = tr__deadline(RESOLVE_SLICE_MS);
        cv_wait(a, slice < deadline ? slice : deadline);
        return 0;
    }
    int left = tr__ms_left(deadline);
    int wait = left < 0 || left > RESOLVE_SLICE_MS ? RESOLVE_SLICE_MS : left;
    return connect_actor(a, ac, wait);
}

static int finish_get(slot *s, const void **data, size_t *len) {
    if (data) *data = s->data;
    if (len) *len = s->len;
    if (s->rc) return tr__err(s->rc, "%s", s->data ? s->data : tr_strerror(s->rc));
    return 0;
}

int tr__actors_get(tr__actors *a, tr_ref ref, int timeout_ms, const void **data, size_t *len) {
    int64_t deadline = tr__deadline(timeout_ms);
    pthread_mutex_lock(&a->mu);
    int rc, passes = 0;
    for (;;) {
        slot *s = find_slot(a, ref);
        if (!s) {
            rc = tr__err(TR_ESTALE, "tr_get: unknown or released ref");
            break;
        }
        if (s->done) {
            rc = finish_get(s, data, len);
            break;
        }
        /* Even a zero timeout makes one pass of progress: there is no background thread. */
        if (passes++ > 0 && tr__now_ns() >= deadline) {
            rc =
                tr__err(TR_ETIMEDOUT, "tr_get: the call has not finished within %d ms", timeout_ms);
            break;
        }
        aconn *ac = s->ac;
        if (ac->fd < 0) {
            if ((rc = drive_unconnected(a, ac, deadline)) && rc != TR_ETIMEDOUT) break;
            continue;
        }
        drive_others(a, ac);
        progress(a, deadline);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int tr__actors_wait(tr__actors *a, const tr_ref *refs, size_t n, size_t num_ready, int timeout_ms,
                    uint8_t *ready, size_t *n_ready) {
    if ((!refs && n) || num_ready > n)
        return tr__err(TR_EINVAL, "tr_wait: refs is NULL or num_ready > n");
    int64_t deadline = tr__deadline(timeout_ms);
    pthread_mutex_lock(&a->mu);
    int rc = 0, passes = 0;
    for (;;) {
        size_t count = 0;
        aconn *unconnected = NULL;
        for (size_t i = 0; i < n; i++) {
            slot *s = find_slot(a, refs[i]);
            if (!s) {
                rc = tr__err(TR_ESTALE, "tr_wait: ref %zu is unknown or released", i);
                goto out;
            }
            if (ready) ready[i] = (uint8_t)s->done;
            count += s->done ? 1 : 0;
            if (!s->done && s->ac->fd < 0 && !unconnected) unconnected = s->ac;
        }
        if (n_ready) *n_ready = count;
        if (count >= num_ready || (passes++ > 0 && tr__now_ns() >= deadline)) break;
        if (unconnected) {
            int left = tr__ms_left(deadline);
            int64_t slice = tr__deadline(left < 0 || left > 5 ? 5 : left);
            rc = drive_unconnected(a, unconnected, slice);
            if (rc && rc != TR_ETIMEDOUT) goto out;
            rc = 0;
            progress(a, tr__now_ns()); /* and read whatever the connected actors sent */
            continue;
        }
        drive_others(a, NULL);
        progress(a, deadline);
    }
out:
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int tr__actors_release(tr__actors *a, tr_ref ref) {
    pthread_mutex_lock(&a->mu);
    slot *s = find_slot(a, ref);
    if (!s) {
        pthread_mutex_unlock(&a->mu);
        return tr__err(TR_ESTALE, "tr_ref_release: unknown or released ref");
    }
    tr__idmap_del(&a->slots, s->key);
    if (s->done)
        slot_free(a, s);
    else
        s->released = 1; /* freed when its reply arrives or its actor dies */
    pthread_mutex_unlock(&a->mu);
    return 0;
}
