/* actor/calls.c - direct actor calls: per-actor connections, refs, get and wait.
 *
 * Locking: one mutex (mu) guards everything here. Only the blocking waits happen without
 * it: epoll_wait by the leader, node RPCs while resolving an actor (flagged per actor), and
 * taking the view of a large result (a restore from disk may take seconds).
 * Reads of sockets always happen under mu, so replies are parsed by one thread at a time.
 *
 * Each actor connection keeps an output stream: every CALL frame is appended to `out`
 * and covers bytes [start, end) of the stream; `sent` counts the bytes the kernel took.
 * If the connection breaks, calls whose frames had started going out die with
 * TR_EACTOR_DIED, unless they may go again (tasks, and calls to an actor with
 * max_task_retries: resend); calls never sent stay queued for the next incarnation.
 *
 * A call may pass other calls' results as arguments. One whose producing call has not
 * finished is held: not encoded, in its actor's held queue, with every later call to that
 * actor behind it (calls to one actor run in the order they were made). When the last
 * result it waits for arrives, it is encoded with the values - a small result inline in
 * the frame, a large one (an object in the store) by ref, pinned, never copied - and
 * queued; if one of them failed, the call fails with that code and message and is never
 * sent. This is where Ray's actor task submitter resolves dependencies too: in the
 * caller, so that the callee's one thread never blocks on a value another actor (maybe
 * one it is calling) has yet to produce.
 */
#include "actor/calls.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/remote.h"
#include "core/clock.h"
#include "core/frame.h"
#include "core/idmap.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/ring.h"
#include "core/status.h"
#include "core/trace.h"
#include "core/wait.h"

#define RESOLVE_SLICE_MS 50
#define BROKEN_GRACE_NS 1000000000
#define DRIVE_EVERY_NS 2000000  /* how often a waiter asks about other queued actors */
#define REMOTE_HOLD_MS 10000    /* a node's answer to a remote hold, at most */
#define CONTAINER_SWEEP_MS 1000 /* how often the driver looks for containers gone */
#define BACKLOG_LOOK_NS 2000000 /* how often the driver looks at calls left unsent (backlog) */
#define SMALL_RESULT 32         /* a result (and its NUL) up to this is kept in its slot */
#define SLOT_CACHE 1024         /* freed slots a thread keeps for its next calls */

/* An object made here with other nodes' refs in it (tr__actors_put_refs). */
typedef struct rcontainer {
    tr_ref obj;
    tr_ref *refs; /* held at their nodes (call-kind remote holds) while obj lives */
    size_t n;
    struct rcontainer *next;
} rcontainer;

typedef struct aconn aconn;
typedef struct slot slot;

/* What only some calls have: refs their arguments contain, and a task's retries. */
typedef struct slot_extra {
    tr_ref *keep; /* refs contained in the arguments: pinned until the call completes */
    size_t n_keep;
    tr_ref *rkeep; /* ...and other nodes' refs among them and the arguments: held there
                      (remote holds) until then */
    size_t n_rkeep, cap_rkeep;
    /* a task (actor/tasks.h), or a call to an actor with max_task_retries: sent again,
     * up to `retries` times (-1: always), when its worker dies with it in flight; its
     * frame is kept for that */
    int retries;
    int own_retries; /* retries are the call's own (tr_call_opts), not the actor's */
    char *frame;
    size_t frame_len;
    /* a call with several results (num_returns): this slot is hidden, each of kids[] is
     * one result's ref, filled from this one's reply (tr_ctx_reply_multi) */
    slot **kids;
    size_t n_kids;
    int split; /* the kids got their results: they live on their own now */
    /* a kid whose parts' refs live in its call's result, which another node keeps for us
     * (kept_link), or which could not be given one of its own: that call's slot, which it
     * keeps (users) while it lives */
    slot *parent;
    /* a result with refs from an actor on another node: its container, kept by that
     * node's relay for our link until the slot goes (docs/OWNERSHIP.md) */
    tr__rlink *kept_link;
    tr_ref kept;
    int task; /* a task (tr__actors_submit's `task`): tr_cancel may force it */
    /* a stream (num_returns TR_STREAMING): the items its method yielded so far (ITEM
     * frames), each a slot of its own, put in the map when tr_stream_next hands it out
     * (items[taken..] are still the stream's); skip: items a task's new run yields
     * again, dropped; lost: items that found no memory (the stream ends in an error) */
    int stream;
    slot **items;
    size_t n_items, cap_items, taken, skip, lost;
} slot_extra;

/* A held call waiting for a producing call's result. */
typedef struct edge {
    slot *consumer;
    struct edge *next;
} edge;

/* An argument passed by reference. */
typedef struct call_arg {
    tr_ref ref; /* the object (for a call's large result: once the call is encoded) */
    slot *from; /* the call whose result this is, until this call is encoded */
    int pinned; /* ref is pinned by this call until it completes */
    int store;  /* resolved through the store (an object, or a result's twin) */
} call_arg;

struct slot {
    uint64_t key;
    aconn *ac;    /* non-NULL while the call is held, queued or in flight */
    uint64_t seq; /* frame seq on the actor stream */
    uint64_t start, end;
    int done, rc, released;
    char *data; /* small, malloc'd, or a view of the result object once taken (obj_result) */
    size_t len;
    int obj_result; /* the result is object `result_ref`, pinned until the slot goes */
    tr_ref result_ref;
    uint8_t exported;     /* the ref escaped: its twin is in the store, pinned here
                             (docs/OWNERSHIP.md); 2: while the call is pending */
    uint8_t counted;      /* in its actor's n_pending */
    uint8_t pending;      /* in this process's pending calls (the node's metrics) */
    uint8_t in_fifo;      /* in its actor's FIFO (queued or in flight) */
    uint8_t canceled;     /* tr_cancel completed it: the reply, if one comes, is dropped */
    struct slot_extra *x; /* what only some calls have (NULL for a plain call) */
    int viewing;          /* threads taking the view of result_ref without mu */
    call_arg *args;
    size_t n_args;
    /* a held call: what to encode once the results it waits for are in */
    char *method;
    void *body;
    size_t body_len;
    int waiting; /* argument calls not done yet */
    int held;    /* in its actor's held queue */
    /* as a producer */
    edge *consumers; /* held calls waiting for this result */
    int users;       /* held calls that will read this result when they are encoded */
    slot *next;      /* in the actor's FIFO or held queue (in slot_cache: the next there) */
    char small[SMALL_RESULT]; /* a small result's bytes (data points here then) */
};

struct aconn {
    tr_actor_id id;
    int fd;          /* -1: not connected */
    tr__rlink *link; /* an actor on another node: fd reads its results, writes go here */
    int dead;        /* permanently */
    int ending;      /* its worker said it ends for good (tr_ctx_exit_actor): reason says why */
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
    slot *head, *tail;           /* encoded calls, in order: queued or in flight */
    slot *held_head, *held_tail; /* calls waiting for argument results, and those after */
    int releasing;               /* release_held is running for this actor */
    int reading;                 /* on_readable is parsing `in`: no flush meanwhile */
    uint64_t next_seq;
    int want_out;
    size_t n_pending; /* calls held, queued or in flight (tr__actors_pending) */
    /* Call rings (core/ring.h): made at connect and passed to the worker; once it said
     * yes (ring_wait 0), calls go and results come on them, and the socket carries only
     * doorbells (read into ctl) and its end. ring_wait: its answer has not come, and the
     * calls wait in out. */
    tr__ring *ring;
    int ring_wait;
    tr__buf ctl;
    /* the stream's end of the last call released while still unsent (nobody will wait
     * for it): the driver sends until `sent` passes it, so every call submitted runs
     * (Ray's fire-and-forget calls; an actor's end when its last handle goes) */
    uint64_t orphan_end;
    uint64_t looked_sent; /* `sent` at the driver's last look at a backlog (looked: one) */
    int looked;
    /* the actor's max_task_retries, as its node said (0 until then): each call keeps its
     * frame, to go again to the next incarnation if this one dies with it in flight */
    int task_retries;
};

struct tr__actors {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tr__nodeconn *node;
    tr__objects *objects;
    tr__remotes *remotes; /* links to other nodes (actor/remote.h) */
    int ep;
    int wake_fd; /* eventfd in the epoll set: wakes the reader when another thread
                    completes calls or closes a connection */
    int reader;
    int32_t pid; /* ours (the timeline's call flows) */
    int waiters;
    int queued_unconnected; /* some actor has calls queued and no connection */
    int remote_backlog;     /* some remote actor has bytes its full link did not take */
    int backlog; /* a call was left unsent behind a full socket or ring: the driver looks */
    tr__idmap actors;
    tr__idmap slots;
    uint64_t next_ref, salt, tag;
    size_t max_msg;
    int64_t spin_ns; /* a waiting reader polls this long before it sleeps (tr__actors_set_spin) */
    int rings;       /* calls to actors of this node go on call rings (tr__actors_set_rings) */
    aconn **ringed;  /* the connections whose rings are on */
    size_t n_ringed, cap_ringed;
    /* the reader polls the rings of a copy of `ringed` without mu (polled): a ring that
     * goes meanwhile is freed once it has the lock again (grave) */
    tr__ring **polled, **grave;
    size_t n_polled, n_grave, cap_polled; /* (grave's capacity is polled's too) */
    int polling;
    tr__spin spin; /* whether the reader polls now (the reader's only) */
    /* Results that borrowers wait for are read even when no thread of ours waits: a
     * driver thread, started at the first export of a call not done yet, reads while
     * any is pending (a process that shares nothing never has one). */
    int pending_exports;
    /* objects made here (tr__actors_put_refs) that contain other nodes' refs: those are
     * held at their nodes by this process until the object is gone (the driver looks,
     * every CONTAINER_SWEEP_MS while there are any) */
    struct rcontainer *containers;
    int driver_started, closing;
    pthread_t driver;
    pthread_cond_t driver_cv; /* the idle driver's own (it is no waiter then) */
};

/* Where the node that made ref is (its address, token and TLS files), asked of our node. */
static int node_of(tr__actors *a, tr_ref ref, char address[160], char token[256],
                   tr__rpc_tls_files *tls) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "num");
    tr__enc_uint(&b, tr__ref_node(&ref));
    tr__reply r;
    /* a node that joined a moment ago is in this node's copy of the cluster's table after
     * its next heartbeat (500 ms): unknown is "not yet" for 2 s */
    int64_t until = tr__deadline(2000);
    int rc;
    while ((rc = tr__nodeconn_call(a->node, TR__MSG_NODE_WHERE, &b, 5000, &r)) == TR_ENOTFOUND &&
           tr__now_ns() < until) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
    }
    tr__buf_free(&b);
    if (rc)
        return rc == TR_ECONNECT || rc == TR_ETIMEDOUT || rc == TR_EOWNER_DIED
                   ? rc
                   : tr__err(TR_EOBJECT_LOST, "%s", tr__last_error());
    const char *p, *t;
    size_t n, tn;
    rc = tr__get_str(r.root, "address", &p, &n);
    if (!rc) rc = tr__get_str(r.root, "token", &t, &tn);
    if (!rc) rc = tr__get_tls_files(r.root, tls);
    if (!rc && (n >= 160 || tn >= 256)) rc = tr__err(TR_EPROTO, "node_where: too long");
    if (!rc) {
        memcpy(address, p, n);
        address[n] = '\0';
        memcpy(token, t, tn);
        token[tn] = '\0';
    }
    tr__reply_free(&r);
    return rc;
}

/* The store's puller (objectstore/client.h): an object another node made is copied here
 * from that node, over this process's link to it. */
static int pull_object(void *ctx, tr_ref ref, int timeout_ms) {
    tr__actors *a = ctx;
    char address[160], token[256];
    tr__rpc_tls_files tls;
    int rc = node_of(a, ref, address, token, &tls);
    return rc ? rc
              : tr__remote_pull(a->remotes, address, token, &tls, a->objects, ref.b, timeout_ms);
}

int tr__actors_is_remote(const tr__actors *a, tr_ref ref) {
    uint32_t num = tr__ref_node(&ref), mine = a->objects ? tr__objects_node_num(a->objects) : 0;
    return (tr__ref_is_object(&ref) || tr__ref_is_call(&ref)) && num && mine && num != mine;
}

int tr__actors_remote_hold(tr__actors *a, tr_ref ref, int user, int timeout_ms) {
    tr__seg_store_id(ref.b, ref.b); /* a call's result: its twin */
    char address[160], token[256];
    tr__rpc_tls_files tls;
    int rc = node_of(a, ref, address, token, &tls);
    return rc ? rc : tr__remote_hold(a->remotes, address, token, &tls, ref.b, user, timeout_ms);
}

int tr__actors_remote_release(tr__actors *a, tr_ref ref, int user) {
    tr__seg_store_id(ref.b, ref.b);
    return tr__remote_release(a->remotes, ref.b, user);
}

void tr__actors_set_rings(tr__actors *a, int on) {
    a->rings = on;
}

void tr__actors_set_spin(tr__actors *a, int spin_us) {
    a->spin_ns = spin_us > 0 ? (int64_t)spin_us * 1000 : 0;
}

int tr__actors_create(tr__nodeconn *node, tr__objects *objects, size_t max_msg, tr__actors **out) {
    *out = NULL;
    tr__actors *a = calloc(1, sizeof *a);
    if (!a) return tr__err(TR_ENOMEM, "actor client");
    /* A call ref: b[0..7] a key (a counter under a random salt: unique here, random
     * across processes), b[8..15] its owner - our store client index and generation, our
     * node - and the call bit (docs/OWNERSHIP.md). */
    int rc0 = tr__random_bytes(&a->salt, sizeof a->salt);
    if (rc0) {
        free(a);
        return rc0;
    }
    uint32_t num = objects ? tr__objects_node_num(objects) : 0;
    unsigned client = objects ? (unsigned)tr__objects_client(objects) : 0xffff;
    unsigned gen = objects ? tr__objects_gen(objects) : 0;
    uint8_t t[8] = {(uint8_t)client,      (uint8_t)(client >> 8), (uint8_t)gen,
                    (uint8_t)(gen >> 8),  (uint8_t)num,           (uint8_t)(num >> 8),
                    (uint8_t)(num >> 16), TR__REF_CALL_BIT};
    memcpy(&a->tag, t, 8);
    if (tr__remotes_create(max_msg, &a->remotes)) {
        free(a);
        return TR_ENOMEM;
    }
    a->ep = epoll_create1(EPOLL_CLOEXEC);
    a->pid = (int32_t)getpid();
    a->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (a->ep < 0 || a->wake_fd < 0 || epoll_ctl(a->ep, EPOLL_CTL_ADD, a->wake_fd, &ev) != 0) {
        int e = errno;
        if (a->ep >= 0) close(a->ep);
        if (a->wake_fd >= 0) close(a->wake_fd);
        tr__remotes_destroy(a->remotes);
        free(a);
        return tr__err_errno(e, "epoll/eventfd");
    }
    pthread_mutex_init(&a->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_cond_init(&a->driver_cv, &ca);
    pthread_condattr_destroy(&ca);
    a->node = node;
    a->objects = objects;
    a->max_msg = max_msg;
    if (objects) tr__objects_set_puller(objects, pull_object, a);
    *out = a;
    return 0;
}

/* ------------------------------------------------------------------ slots */

static void slot_maybe_free(tr__actors *a, slot *s);

/* The slot's call is now held, queued or in flight at ac. */
static void attach(aconn *ac, slot *s) {
    s->ac = ac;
    if (s->x && !s->counted) { /* (tasks: their pool picks by it) */
        s->counted = 1;
        ac->n_pending++;
    }
}

/* Removes one edge from producer d to consumer s. */
static void unlink_edge(slot *d, slot *s) {
    for (edge **pp = &d->consumers; *pp; pp = &(*pp)->next) {
        if ((*pp)->consumer == s) {
            edge *e = *pp;
            *pp = e->next;
            free(e);
            return;
        }
    }
}

/* Lets go of the call's arguments: its pins, and the producing calls it was going to read
 * (a producer the user released goes once nobody reads it). Idempotent. */
static void drop_args(tr__actors *a, slot *s) {
    for (size_t i = 0; i < s->n_args; i++) {
        call_arg *g = &s->args[i];
        if (g->pinned) tr__objects_unpin(a->objects, g->ref);
        g->pinned = 0;
        slot *d = g->from;
        if (!d) continue;
        g->from = NULL;
        if (!d->done) unlink_edge(d, s);
        d->users--;
        slot_maybe_free(a, d);
    }
    s->waiting = 0;
}

/* Lets go of the refs the call's arguments contained. */
static void drop_keep(tr__actors *a, slot *s) {
    slot_extra *x = s->x;
    if (!x) return;
    for (size_t i = 0; i < x->n_keep; i++)
        tr__objects_unpin(a->objects, x->keep[i]);
    for (size_t i = 0; i < x->n_rkeep; i++) /* (never waits) */
        tr__actors_remote_release(a, x->rkeep[i], 0);
    free(x->keep);
    free(x->rkeep);
    x->keep = x->rkeep = NULL;
    x->n_keep = x->n_rkeep = x->cap_rkeep = 0;
}

static tr_ref ref_of(const tr__actors *a, const slot *s) {
    tr_ref r;
    memcpy(r.b, &s->key, 8);
    memcpy(r.b + 8, &a->tag, 8);
    return r;
}

/* The call is no longer pending (done, or freed): the node's metrics hear so. */
static void unpend(slot *s) {
    if (!s->pending) return;
    s->pending = 0;
    if (tr__proc_cnt()) tr__cnt_add((uint64_t *)&tr__proc_cnt()->calls_pending, (uint64_t)-1);
}

/* Slots freed by this thread, kept for its next calls: a caller with a thousand calls in
 * flight (a pipelined loop) outruns malloc's per-thread cache, and each slot's calloc and
 * free then took malloc's slow path (callgrind: ~700 instructions of malloc a call). A
 * thread's cache is freed when it exits (slot_cache_key's destructor); the main thread's
 * stays reachable from its TLS until the process ends. */
static _Thread_local slot *slot_cache;
static _Thread_local unsigned slot_cached;
static _Thread_local int slot_cache_keyed;
static pthread_key_t slot_cache_key;
static pthread_once_t slot_cache_once = PTHREAD_ONCE_INIT;

static void slot_cache_drop(void *unused) {
    (void)unused;
    while (slot_cache) {
        slot *s = slot_cache;
        slot_cache = s->next;
        free(s);
    }
    slot_cached = 0;
    slot_cache_keyed = 0; /* (a slot freed by a later destructor keys it again) */
}

static void slot_cache_init(void) {
    if (pthread_key_create(&slot_cache_key, slot_cache_drop)) slot_cache_key = (pthread_key_t)-1;
}

/* A zeroed slot: one this thread freed before, or a new one. NULL: out of memory. */
static slot *slot_new(void) {
    slot *s = slot_cache;
    if (!s) return calloc(1, sizeof *s);
    slot_cache = s->next;
    slot_cached--;
    memset(s, 0, sizeof *s);
    return s;
}

/* The memory of a slot nothing refers to any more: kept for this thread's next calls. */
static void slot_put(slot *s) {
    if (slot_cached >= SLOT_CACHE) {
        free(s);
        return;
    }
    if (!slot_cache_keyed) { /* (once per thread: its cache goes when it exits) */
        pthread_once(&slot_cache_once, slot_cache_init);
        if (slot_cache_key == (pthread_key_t)-1 || pthread_setspecific(slot_cache_key, (void *)1)) {
            free(s);
            return;
        }
        slot_cache_keyed = 1;
    }
    s->next = slot_cache;
    slot_cache = s;
    slot_cached++;
}

static void slot_free(tr__actors *a, slot *s) {
    unpend(s);
    if (s->x && s->x->parent) {
        slot *p = s->x->parent;
        s->x->parent = NULL;
        p->users--;
        slot_maybe_free(a, p);
    }
    drop_args(a, s);
    if (s->x) drop_keep(a, s);
    if (s->x && s->x->kept_link) tr__remote_result_drop(a->remotes, s->x->kept_link, s->x->kept.b);
    if (s->exported) tr__objects_unpin(a->objects, ref_of(a, s)); /* (its twin) */
    if (s->obj_result)
        tr__objects_unpin(a->objects, s->result_ref);
    else if (s->data != s->small)
        free(s->data);
    for (edge *e = s->consumers, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    free(s->args);
    free(s->method);
    free(s->body);
    if (s->x) {
        for (size_t i = 0; !s->x->split && i < s->x->n_kids; i++) /* (destroy: unreachable) */
            if (s->x->kids[i]->released) slot_free(a, s->x->kids[i]);
        free(s->x->kids);
        for (size_t i = s->x->taken; i < s->x->n_items; i++) /* (in no map) */
            slot_free(a, s->x->items[i]);
        free(s->x->items);
        free(s->x->frame);
        free(s->x);
    }
    slot_put(s);
}

/* Frees a slot once nothing can reach it: released by the user, done, not being viewed,
 * and read by no held call. */
static void slot_maybe_free(tr__actors *a, slot *s) {
    if (s->released && s->done && !s->viewing && !s->users && !s->in_fifo) slot_free(a, s);
}

static void release_held(tr__actors *a, aconn *ac);
static void want_driver(tr__actors *a);

/* The call is done (its result, or an error, is in the slot): its arguments go, the
 * held calls waiting for it move on. */
static void fill_twin(tr__actors *a, slot *s);
static void slot_done(tr__actors *a, slot *s, int rc, const void *data, size_t len);
static void slot_fail(tr__actors *a, slot *s, int rc, const char *msg);
static void complete(tr__actors *a, slot *s);

/* The kid keeps p, and so the refs in p's result, alive while it lives (slot_free). */
static int keep_parent(slot *kid, slot *p) {
    if (!kid->x && !(kid->x = calloc(1, sizeof *kid->x)))
        return tr__err(TR_ENOMEM, "a result of several with refs in it");
    kid->x->parent = p;
    p->users++;
    return 0;
}

/* A kid's part as a container of its own, holding crefs (all the refs in the call's
 * result: the store cannot tell which part holds which), pinned for the kid as a large
 * result is. 0, or an error (then the caller falls back to keep_parent). */
static int kid_container(tr__actors *a, slot *kid, const void *part, size_t len,
                         const tr_ref *crefs, size_t n_crefs) {
    tr_ref obj;
    int rc = tr__objects_put_refs(a->objects, part, len, crefs, n_crefs, &obj);
    if (rc) return rc;
    rc = tr__objects_pin(a->objects, obj, 0, NULL, NULL);
    tr__objects_release(a->objects, obj); /* (the pin holds it now, or nothing does) */
    if (rc) return rc;
    kid->obj_result = 1;
    kid->result_ref = obj;
    kid->rc = 0;
    complete(a, kid);
    return 0;
}

/* A reply of several results (tr_ctx_reply_multi): "TRMR", u32 k, k u64 lengths, then
 * the parts. Each kid gets its part (a copy), or the call's failure. A reply with refs in
 * it (tr_ctx_reply_multi_contains, a container): each kid gets a container of its own
 * holding them, or where it cannot, keeps this call's slot and its container alive. */
static void split_to_kids(tr__actors *a, slot *p) {
    slot_extra *x = p->x;
    const char *d = p->data;
    size_t n = p->len;
    int rc = p->rc;
    char why[200] = "";
    if (!rc && p->obj_result && !d) {
        const void *v;
        rc = tr__objects_view(a->objects, p->result_ref, 10000, &v, &n);
        d = v;
        if (rc) snprintf(why, sizeof why, "%s", tr__last_error());
    }
    tr_ref *crefs = NULL;
    size_t n_crefs = 0, n0 = 0;
    int keep = !rc && x->kept_link; /* (its container is another node's) */
    if (!rc && p->obj_result && tr__objects_refs(a->objects, p->result_ref, NULL, 0, &n0) == 0 &&
        n0 > 0) {
        crefs = malloc(n0 * sizeof *crefs);
        if (!crefs || tr__objects_refs(a->objects, p->result_ref, crefs, n0, &n_crefs) ||
            n_crefs != n0) {
            free(crefs);
            crefs = NULL;
            keep = 1;
        }
    }
    uint32_t k = 0;
    if (!rc && (n < 8 || memcmp(d, "TRMR", 4) != 0 || (memcpy(&k, d + 4, 4), k != x->n_kids) ||
                (n - 8) / 8 < k)) {
        rc = TR_ETASK;
        snprintf(why, sizeof why,
                 "the method replied %s, where the call asked for %zu results "
                 "(tr_ctx_reply_multi)",
                 n >= 8 && memcmp(d, "TRMR", 4) == 0 ? "another number of results" : "one value",
                 x->n_kids);
    }
    const char *part = d ? d + 8 + 8 * (size_t)k : NULL;
    size_t left = rc ? 0 : n - 8 - 8 * (size_t)k;
    for (size_t i = 0; i < x->n_kids; i++) {
        slot *kid = x->kids[i];
        uint64_t len = 0;
        if (!rc) memcpy(&len, d + 8 + 8 * i, 8);
        if (!rc && len > left) {
            rc = TR_EPROTO;
            snprintf(why, sizeof why, "a reply of several results is malformed (part %zu)", i);
        }
        if (rc) {
            slot_done(a, kid, rc, why[0] ? why : (p->data ? p->data : ""),
                      strlen(why[0] ? why : (p->data ? p->data : "")));
        } else if (!crefs || kid_container(a, kid, part, (size_t)len, crefs, n_crefs) != 0) {
            int krc = keep || crefs ? keep_parent(kid, p) : 0;
            if (krc)
                slot_fail(a, kid, krc, tr__last_error());
            else
                slot_done(a, kid, 0, part, (size_t)len);
        }
        if (!rc) {
            part += len;
            left -= (size_t)len;
        }
    }
    free(crefs);
    x->split = 1;
}

static void complete(tr__actors *a, slot *s) {
    if (s->counted && s->ac) {
        s->ac->n_pending--;
        s->counted = 0;
    }
    s->ac = NULL;
    s->done = 1;
    unpend(s);
    if (s->exported) fill_twin(a, s);
    drop_args(a, s);
    if (s->x) drop_keep(a, s);
    edge *e = s->consumers;
    s->consumers = NULL;
    s->users++; /* its consumers read it below: it must outlive them */
    while (e) {
        edge *n = e->next;
        slot *c = e->consumer;
        free(e);
        if (--c->waiting == 0 && c->ac) release_held(a, c->ac);
        e = n;
    }
    s->users--;
    if (s->x && s->x->n_kids && !s->x->split) split_to_kids(a, s);
    slot_maybe_free(a, s);
}

static void slot_done(tr__actors *a, slot *s, int rc, const void *data, size_t len) {
    s->rc = rc;
    s->data = len < sizeof s->small ? s->small : malloc(len + 1);
    if (!s->data) {
        s->rc = TR_ENOMEM;
        s->len = 0;
    } else {
        if (len) memcpy(s->data, data, len);
        s->data[len] = '\0';
        s->len = len;
    }
    complete(a, s);
}

static void slot_fail(tr__actors *a, slot *s, int rc, const char *msg) {
    if (!msg) msg = tr__strerror(rc);
    slot_done(a, s, rc, msg, strlen(msg));
}

/* Fails a call taken out of its actor's FIFO, unless tr_cancel completed it already. */
static void fail_popped(tr__actors *a, slot *s, int rc, const char *msg) {
    if (s->canceled)
        slot_maybe_free(a, s);
    else
        slot_fail(a, s, rc, msg);
}

/* Pops the head slot of ac's FIFO. */
static slot *pop(aconn *ac) {
    slot *s = ac->head;
    ac->head = s->next;
    if (!ac->head) ac->tail = NULL;
    s->next = NULL;
    s->in_fifo = 0;
    return s;
}

/* The call a RESULT frame answers: the head's, or (an actor with max_concurrency > 1
 * replies as its calls finish) a later one's, taken out of the FIFO (which stays in send
 * order). NULL: none of ours, or its frame is not all sent. */
static slot *take_seq(aconn *ac, uint64_t seq) {
    slot *s = ac->head;
    if (s && s->seq == seq) return s->end > ac->sent ? NULL : pop(ac);
    for (slot *prev = s; prev && (s = prev->next); prev = s) {
        if (s->seq != seq) continue;
        if (s->end > ac->sent) return NULL;
        prev->next = s->next;
        if (ac->tail == s) ac->tail = prev;
        s->next = NULL;
        s->in_fifo = 0;
        return s;
    }
    return NULL;
}

/* The call an ITEM frame belongs to (it stays in the FIFO), or NULL. */
static slot *find_seq(aconn *ac, uint64_t seq) {
    for (slot *s = ac->head; s; s = s->next)
        if (s->seq == seq) return s->end > ac->sent ? NULL : s;
    return NULL;
}

static slot *pop_held(aconn *ac) {
    slot *s = ac->held_head;
    ac->held_head = s->next;
    if (!ac->held_head) ac->held_tail = NULL;
    s->next = NULL;
    s->held = 0;
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

/* ------------------------------------------------------------------ streams */

/* The connection broke: calls that had started going out die; the rest stay queued. */
/* Makes room for `need` elements of `elem` bytes in *p (capacity *cap). Returns 1, or 0
 * when out of memory. */
static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t n = *cap ? *cap * 2 : 8;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return 0;
    *p = q;
    *cap = n;
    return 1;
}

/* The connection's rings go (its socket's end, or the worker said no). Called with mu. */
static void ring_off(tr__actors *a, aconn *ac) {
    if (!ac->ring) return;
    for (size_t i = 0; i < a->n_ringed; i++)
        if (a->ringed[i] == ac) {
            a->ringed[i] = a->ringed[--a->n_ringed];
            break;
        }
    int polled = 0; /* (the reader may be polling it now: freed once it is done) */
    for (size_t i = 0; a->polling && i < a->n_polled && !polled; i++)
        polled = a->polled[i] == ac->ring;
    if (polled)
        a->grave[a->n_grave++] = ac->ring; /* (room for every polled one: rings_snapshot) */
    else
        tr__ring_free(ac->ring);
    ac->ring = NULL;
    ac->ring_wait = 0;
    tr__buf_reset(&ac->ctl);
}

/* Calls that were in flight when the actor's worker died (tasks, and calls to an actor
 * with max_task_retries), in the order they were sent: they go again, ahead of the calls
 * never sent (which were sent after them), each under a new seq. Out of memory, they all
 * fail (nb's oom sticks). Called with mu held, the stream's unsent bytes starting at a
 * frame. */
static void resend(tr__actors *a, aconn *ac, slot *again) {
    tr__buf nb = TR__BUF_INIT;
    slot *first = NULL, *last = NULL;
    uint64_t at = ac->sent;
    while (again) {
        slot *s = again;
        again = s->next;
        s->next = NULL;
        size_t off = nb.len;
        if (tr__buf_append(&nb, s->x->frame, s->x->frame_len)) {
            slot_fail(a, s, TR_ENOMEM, "out of memory sending a call again");
            continue;
        }
        s->seq = ++ac->next_seq;
        memcpy(nb.data + off + offsetof(tr__frame_hdr, seq), &s->seq, sizeof s->seq);
        s->start = at;
        s->end = at += s->x->frame_len;
        if (last)
            last->next = s;
        else
            first = s;
        last = s;
    }
    if (first && tr__buf_append(&nb, ac->out.data + ac->out.off, tr__buf_avail(&ac->out))) {
        while (first) {
            slot *s = first;
            first = s->next;
            s->next = NULL;
            slot_fail(a, s, TR_ENOMEM, "out of memory sending a call again");
        }
    }
    if (!first) {
        tr__buf_free(&nb);
        return;
    }
    uint64_t shift = at - ac->sent;
    for (slot *s = ac->head; s; s = s->next) {
        s->start += shift;
        s->end += shift;
    }
    if (ac->orphan_end > ac->sent) ac->orphan_end += shift;
    ac->queued += shift;
    for (slot *s = first; s; s = s->next) {
        s->in_fifo = 1;
        if (s->released && s->end > ac->orphan_end) ac->orphan_end = s->end; /* (nobody waits) */
    }
    last->next = ac->head;
    ac->head = first;
    if (!ac->tail) ac->tail = last;
    tr__buf_free(&ac->out);
    ac->out = nb;
}

/* A call to an actor with max_task_retries keeps its frame, as a task does (once the
 * actor's node has said so: calls encoded before then keep theirs as it connects). Out
 * of memory, it is not sent again. Called with mu held, s unsent. */
static void keep_frame(aconn *ac, slot *s) {
    if (!s->x && !(s->x = calloc(1, sizeof *s->x))) return;
    slot_extra *x = s->x;
    if (!x->retries && !x->task && !x->own_retries) x->retries = ac->task_retries;
    if (!x->retries || x->frame) return;
    size_t n = (size_t)(s->end - s->start);
    if ((x->frame = malloc(n))) {
        memcpy(x->frame, ac->out.data + ac->out.off + (s->start - ac->sent), n);
        x->frame_len = n;
    }
}

/* The node told us the actor's max_task_retries: the calls queued so far keep their
 * frames (none has been sent to this actor yet). */
static void learn_retries(aconn *ac, int task_retries) {
    int first = !ac->task_retries && task_retries;
    ac->task_retries = task_retries;
    for (slot *s = first ? ac->head : NULL; s; s = s->next)
        if (s->start >= ac->sent) keep_frame(ac, s);
}

static void fail_all(tr__actors *a, aconn *ac);

static void conn_failed(tr__actors *a, aconn *ac, int rc, const char *why) {
    char hex[33], msg[700];
    tr__hex(ac->id.b, 16, hex);
    if (ac->ending) /* (the calls after the one that ended it: never run, for that reason) */
        snprintf(msg, sizeof msg, "%s", ac->reason);
    else
        snprintf(msg, sizeof msg, "actor %s died while the call was in flight (%s)", hex, why);
    if (ac->fd >= 0) {
        epoll_ctl(a->ep, EPOLL_CTL_DEL, ac->fd, NULL);
        if (ac->link) tr__remote_close(a->remotes, ac->link, ac->id.b);
        ac->link = NULL;
        close(ac->fd);
        ac->fd = -1;
    }
    ring_off(a, ac);
    ac->want_out = 0;
    if (rc == TR_EACTOR_DIED) { /* EOF: that incarnation is gone, whatever the node says */
        ac->broken_inc = ac->inc;
        ac->broken_at = tr__now_ns();
    }
    slot *again = NULL, **again_tail = &again; /* calls to send to the next incarnation */
    while (ac->head && ac->head->start < ac->sent) {
        slot *s = pop(ac);
        if (s->canceled) { /* done already */
            slot_maybe_free(a, s);
            continue;
        }
        slot_extra *x = s->x;
        if (rc == TR_EACTOR_DIED && x && x->retries && x->frame && !ac->dead && !ac->ending) {
            if (x->retries > 0) x->retries--;
            x->skip = x->n_items + x->lost; /* (a stream's new run yields them again) */
            *again_tail = s;
            again_tail = &s->next;
            continue;
        }
        slot_fail(a, s, rc, msg);
    }
    /* Drop the unsent tail of a frame that was partly written. */
    uint64_t keep_from = ac->head ? ac->head->start : ac->queued;
    tr__buf_consume(&ac->out, (size_t)(keep_from - ac->sent));
    ac->sent = keep_from;
    tr__buf_reset(&ac->in);
    if (ac->ending) { /* (never restarted: whatever waits fails now) */
        fail_all(a, ac);
        return;
    }
    if (again) resend(a, ac, again);
    /* Calls never sent wait for the next incarnation: whichever thread waits next must
     * reconnect, even one that waits for another actor's call (a held call may need
     * these). */
    if (ac->head && !ac->dead) {
        a->queued_unconnected = 1;
        want_driver(a); /* (a task to retry goes out even if nobody waits for it) */
    }
    wake(a);
}

static void mark_dead(tr__actors *a, aconn *ac, const char *reason) {
    char hex[33];
    tr__hex(ac->id.b, 16, hex);
    snprintf(ac->reason, sizeof ac->reason, "actor %s is dead: %s", hex, reason);
    fail_all(a, ac);
}

/* The actor is dead for good (ac->reason says why): its calls queued, held or in flight
 * fail, and later ones at once. Called with mu held. */
static void fail_all(tr__actors *a, aconn *ac) {
    ac->dead = 1;
    while (ac->head)
        fail_popped(a, pop(ac), TR_EACTOR_DIED, ac->reason);
    while (ac->held_head)
        slot_fail(a, pop_held(ac), TR_EACTOR_DIED, ac->reason);
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

static void flush_some(tr__actors *a, aconn *ac);

/* Writes queued bytes without blocking; on EAGAIN the leader finishes the job when the
 * socket is writable again. Bytes left (a full socket, ring or link, a RING not answered
 * yet) wake the driver to look at them (look_backlog): their caller may never wait. */
static void flush(tr__actors *a, aconn *ac) {
    flush_some(a, ac);
    if (!a->backlog && ac->fd >= 0 && !ac->dead && tr__buf_avail(&ac->out)) {
        a->backlog = 1;
        want_driver(a);
    }
}

static void flush_some(tr__actors *a, aconn *ac) {
    if (ac->fd >= 0 && ac->link) { /* queued on the link, never blocks */
        size_t taken = 0;
        int rc = tr__buf_avail(&ac->out)
                     ? tr__remote_send(a->remotes, ac->link, ac->id.b, ac->out.data + ac->out.off,
                                       tr__buf_avail(&ac->out), &taken)
                     : 0;
        tr__buf_consume(&ac->out, taken);
        ac->sent += (uint64_t)taken;
        if (rc == TR_ENOMEM) /* the link is full: the leader tries again in a moment */
            a->remote_backlog = 1;
        else if (rc)
            conn_failed(a, ac, TR_EACTOR_DIED, tr__last_error());
        return;
    }
    if (ac->ring) { /* (until the worker answers our RING, calls wait) */
        if (ac->ring_wait || !tr__buf_avail(&ac->out)) return;
        int wake = 0;
        size_t before = tr__buf_avail(&ac->out);
        int64_t n = tr__ring_write(ac->ring, &ac->out, &wake);
        if (n >= 0 && tr__buf_avail(&ac->out)) { /* full: the worker rings once it reads */
            tr__ring_want_room(ac->ring);
            if (tr__ring_write(ac->ring, &ac->out, &wake) < 0) n = -1;
        }
        ac->sent += (uint64_t)(before - tr__buf_avail(&ac->out));
        if (n < 0)
            conn_failed(a, ac, TR_EACTOR_DIED, tr__last_error());
        else if (wake)
            tr__send_empty_frame(ac->fd, TR__MSG_WAKE, 0);
        return;
    }
    while (ac->fd >= 0 && !ac->link && tr__buf_avail(&ac->out)) {
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
    if (ac->fd >= 0 && !ac->link) set_want_out(a, ac, 0);
}

/* Encodes a call whose argument results are all in, appends it to the actor's stream
 * and FIFO. If a producing call failed, or the frame cannot be made, the call fails
 * instead (its slot says why). Returns 0 if it was queued. */
static int encode_call(tr__actors *a, aconn *ac, slot *s, const char *method, const void *body,
                       size_t body_len) {
    tr__wire_arg one, *w = s->n_args <= 1 ? &one : calloc(s->n_args, sizeof *w);
    int rc = w ? 0 : tr__err(TR_ENOMEM, "tr_call");
    size_t bytes = body_len + strlen(method) + 64;
    for (size_t i = 0; !rc && i < s->n_args; i++) {
        call_arg *g = &s->args[i];
        slot *d = g->from;
        memset(&w[i], 0, sizeof w[i]);
        if (!d) {
            memcpy(w[i].ref, g->ref.b, 16);
            bytes += 16;
        } else if (d->rc) {
            rc = tr__err(d->rc, "argument %zu (the result of another call) failed: %s", i,
                         d->data ? d->data : tr__strerror(d->rc));
        } else if (d->obj_result) { /* large: the callee reads the same object */
            if ((rc = tr__objects_pin(a->objects, d->result_ref, 0, NULL, NULL))) break;
            g->ref = d->result_ref;
            g->pinned = 1;
            memcpy(w[i].ref, g->ref.b, 16);
            bytes += 16;
        } else {
            w[i].data = d->data;
            w[i].len = d->len;
            bytes += 20 + d->len;
        }
    }
    if (!rc && bytes > a->max_msg)
        rc = tr__err(TR_EMSGSIZE,
                     "the call with its argument values is %zu bytes, over the message limit "
                     "of %zu (max_message_bytes)",
                     bytes, a->max_msg);
    size_t before = tr__buf_avail(&ac->out); /* not len: appending may compact the buffer */
    if (!rc) {
        s->seq = ac->next_seq + 1;
        rc = tr__call_frame(&ac->out, s->seq, method, body, body_len, w, s->n_args);
    }
    if (w != &one) free(w);
    /* the producers' results are in the frame (or pinned) now: nothing reads them later */
    for (size_t i = 0; i < s->n_args; i++) {
        slot *d = s->args[i].from;
        if (!d) continue;
        s->args[i].from = NULL;
        d->users--;
        slot_maybe_free(a, d);
    }
    if (rc) {
        slot_fail(a, s, rc, tr__last_error());
        return rc;
    }
    ac->next_seq++;
    /* (the timeline: its submission, an instant whose flow the worker's run of it ends) */
    int64_t now = tr__now_ns();
    tr__trace_ev_add(TR__EV_SUBMIT, now, now, method, strcspn(method, "\x1f"), /* (a task's:
                                                                          no namespace) */
                     ac->link ? 0 : tr__trace_call_flow(a->pid, ac->id.b, s->seq), 0, 0);
    attach(ac, s);
    s->start = ac->queued;
    s->end = ac->queued += tr__buf_avail(&ac->out) - before;
    slot_extra *x = s->x;
    if ((x && x->retries && !x->frame) || ac->task_retries)
        keep_frame(ac, s); /* a call that may be sent again */
    if (ac->tail)
        ac->tail->next = s;
    else
        ac->head = s;
    ac->tail = s;
    s->in_fifo = 1;
    return 0;
}

/* Encodes the held calls at the head of ac's held queue whose argument results are all
 * in, in order, and sends them (or leaves them for whichever thread next waits, if the
 * actor is not connected). Called with mu held; never drops it. */
static void release_held(tr__actors *a, aconn *ac) {
    if (ac->releasing) return; /* the loop below is running: it sees the change */
    ac->releasing = 1;
    int queued = 0;
    while (ac->held_head && ac->held_head->waiting == 0) {
        slot *s = pop_held(ac);
        if (ac->dead) {
            slot_fail(a, s, TR_EACTOR_DIED, ac->reason);
            continue;
        }
        char *method = s->method;
        void *body = s->body;
        s->method = NULL;
        s->body = NULL;
        queued |= encode_call(a, ac, s, method, body ? body : "", s->body_len) == 0;
        free(method);
        free(body);
    }
    ac->releasing = 0;
    if (!queued) return;
    if (ac->fd >= 0) {
        if (!ac->reading) flush(a, ac); /* else on_readable flushes once it is done */
    } else if (!ac->dead) {
        a->queued_unconnected = 1; /* drive_others connects it */
        want_driver(a);
    }
    wake(a);
}

/* With rings: the socket's frames (the worker's answer to our RING, then doorbells; sock:
 * it is readable), then the ring's bytes into in. Returns what the socket's read returned
 * (< 0: its end), or 1 if the connection failed here (a bad frame or ring). With mu. */
static int ring_input(tr__actors *a, aconn *ac, int sock) {
    int rc = sock ? tr__read_some(ac->fd, &ac->ctl) : 0;
    while (ac->ring) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&ac->ctl, 0, &h, &body);
        if (r == 0) break;
        if (r > 0 && h.type == TR__MSG_WAKE && !ac->ring_wait) {
            tr__buf_consume(&ac->ctl, TR__FRAME_HDR);
            continue;
        }
        if (r > 0 && h.type == TR__MSG_RING && ac->ring_wait) {
            tr__buf_consume(&ac->ctl, TR__FRAME_HDR);
            if (h.seq == 0 && grow((void **)&a->ringed, &a->cap_ringed, a->n_ringed + 1,
                                   sizeof *a->ringed)) { /* on */
                ac->ring_wait = 0;
                a->ringed[a->n_ringed++] = ac;
                continue;
            }
            if (h.seq == 0) { /* (no room to list it: the worker reads the ring regardless) */
                conn_failed(a, ac, TR_ENOMEM, "out of memory for the call rings");
                return 1;
            }
            /* refused: the socket carries calls and results, as without rings */
            TR_LOG_DEBUG("CLIENT-RING", "the worker refused call rings (%d)", (int)h.seq);
            tr__buf_append(&ac->in, ac->ctl.data + ac->ctl.off, tr__buf_avail(&ac->ctl));
            ring_off(a, ac);
            return rc;
        }
        conn_failed(a, ac, TR_EPROTO,
                    "malformed reply from the worker: a frame other than WAKE on its socket");
        return 1;
    }
    if (ac->ring && !ac->ring_wait) {
        int wake = 0;
        if (tr__ring_read(ac->ring, &ac->in, &wake) < 0) {
            conn_failed(a, ac, TR_EPROTO, tr__last_error());
            return 1;
        }
        if (wake) tr__send_empty_frame(ac->fd, TR__MSG_WAKE, 0);
    }
    return rc;
}

/* Offers the worker call rings on a new connection: made here, their memfd passed with a
 * RING frame; calls wait for its answer (ring_input). Returns 0 (also when no rings
 * could be made: the socket serves), or TR_EIO if the frame did not go whole. */
static int ring_offer(aconn *ac, int fd) {
    int mfd;
    tr__ring *r;
    if (tr__ring_create(TR__RING_CAP, &r, &mfd)) {
        TR_LOG_WARN_LIMITED("CLIENT-RING", "calls go on the socket: %s", tr__last_error());
        return 0;
    }
    int rc = tr__send_frame_fd(fd, TR__MSG_RING, 0, NULL, 0, mfd);
    close(mfd);
    if (rc) {
        tr__ring_free(r);
        return rc;
    }
    ac->ring = r;
    ac->ring_wait = 1;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem);

/* An item of call s's stream (an ITEM frame: a RESULT's body), the next of its items: a
 * slot of its own, done at once, kept by the stream until tr_stream_next hands it out.
 * A call that is no stream (or no longer wants items: canceled, released, done) drops
 * it, and what it holds. Called with mu held. */
static void on_item(tr__actors *a, aconn *ac, slot *s, int rc, const void *data, size_t len,
                    int is_ref, const void *kept) {
    slot_extra *x = s->x;
    int want = x && x->stream && !s->canceled && !s->released && !s->done;
    if (want && x->skip) { /* (a task's new run: this item came from the last one) */
        x->skip--;
        want = 0;
    }
    slot *it = NULL;
    if (want && grow((void **)&x->items, &x->cap_items, x->n_items + 1, sizeof *x->items))
        it = slot_new();
    if (it && is_ref == 2 && !(it->x = calloc(1, sizeof *it->x))) {
        free(it);
        it = NULL;
    }
    if (want && !it) x->lost++;
    if (is_ref == 2) { /* its container, kept for us by the relay of the actor's node */
        tr__remote_result_keep(a->remotes, ac->link);
        if (!it) tr__remote_result_drop(a->remotes, ac->link, kept);
    }
    tr_ref obj = {{0}};
    if (is_ref == 1) memcpy(obj.b, data, 16);
    if (!it) {
        if (is_ref == 1 && tr__objects_adopt(a->objects, obj) == 0)
            tr__objects_unpin(a->objects, obj);
        return;
    }
    do
        it->key = ++a->next_ref ^ a->salt;
    while (it->key == 0);
    x->items[x->n_items++] = it;
    if (is_ref == 2) {
        it->x->kept_link = ac->link;
        memcpy(it->x->kept.b, kept, 16);
    }
    if (is_ref != 1) {
        slot_done(a, it, rc, data, len);
    } else if ((rc = tr__objects_adopt(a->objects, obj))) {
        slot_fail(a, it, rc == TR_ENOMEM ? rc : TR_EPROTO, tr__last_error());
    } else {
        it->obj_result = 1;
        it->result_ref = obj;
        complete(a, it);
    }
}

static void on_readable(tr__actors *a, aconn *ac, int sock) {
    if (ac->fd < 0) return;
    int rc = ac->ring ? ring_input(a, ac, sock) : tr__read_some(ac->fd, &ac->in);
    if (ac->fd < 0) return; /* (failed in ring_input) */
    /* A completed call may release held calls to this same actor: their frames go out
     * after the parse, so no send failure resets `in` under it. */
    ac->reading = 1;
    for (;;) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&ac->in, a->max_msg, &h, &body);
        if (r == 0) break;
        int res_rc, is_ref = 0;
        const void *data, *kept = NULL;
        size_t dlen;
        slot *s = NULL;
        int item = r > 0 && h.type == TR__MSG_ITEM;
        if (r < 0 || (h.type != TR__MSG_RESULT && !item) ||
            tr__result_parse(body, h.len, &res_rc, &data, &dlen, &is_ref, &kept) ||
            (is_ref == 2 && !ac->link) || !(s = item ? find_seq(ac, h.seq) : take_seq(ac, h.seq))) {
            char why[300];
            snprintf(why, sizeof why, "malformed reply from the worker: %s",
                     r < 0 ? tr__last_error() : "unexpected frame");
            TR_LOG_WARN_LIMITED("CLIENT-BADREPLY", "%s", why);
            ac->reading = 0;
            conn_failed(a, ac, TR_EPROTO, why);
            return;
        }
        if (item) {
            on_item(a, ac, s, res_rc, data, dlen, is_ref, kept);
            tr__buf_consume(&ac->in, TR__FRAME_HDR + h.len);
            continue;
        }
        if (is_ref == 2) { /* a result with refs from another node: the slot keeps its
                              container there (or lets go of it at once) */
            if (!s->canceled && (s->x || (s->x = calloc(1, sizeof *s->x)))) {
                s->x->kept_link = ac->link;
                memcpy(s->x->kept.b, kept, 16);
                tr__remote_result_keep(a->remotes, ac->link);
            } else {
                tr__remote_result_keep(a->remotes, ac->link);
                tr__remote_result_drop(a->remotes, ac->link, kept);
            }
            is_ref = 0; /* the result itself is inline */
        }
        if (s->canceled) { /* tr_cancel completed it: the result goes */
            if (is_ref) {
                tr_ref obj;
                memcpy(obj.b, data, 16);
                if (tr__objects_adopt(a->objects, obj) == 0) tr__objects_unpin(a->objects, obj);
            }
            slot_maybe_free(a, s);
        } else if (is_ref) {
            /* A large result, transferred to us: take the hold over now (no wait); the
             * view, which may mean a restore from disk, is taken by tr_get without mu. */
            tr_ref obj;
            memcpy(obj.b, data, 16);
            int arc = tr__objects_adopt(a->objects, obj);
            if (arc) {
                slot_fail(a, s, arc == TR_ENOMEM ? arc : TR_EPROTO, tr__last_error());
            } else {
                s->obj_result = 1;
                s->result_ref = obj;
                s->rc = 0;
                complete(a, s);
            }
        } else {
            if (res_rc == TR__RC_ACTOR_ENDED) { /* (tr_ctx_exit_actor's: calls after it fail) */
                res_rc = TR_EACTOR_DIED;
                ac->ending = 1;
                snprintf(ac->reason, sizeof ac->reason, "%.*s",
                         (int)(dlen && ((const char *)data)[dlen - 1] == '\0' ? dlen - 1 : dlen),
                         (const char *)data);
            }
            slot_done(a, s, res_rc, data, dlen);
        }
        tr__buf_consume(&ac->in, TR__FRAME_HDR + h.len);
    }
    ac->reading = 0;
    if (rc < 0)
        conn_failed(a, ac, TR_EACTOR_DIED,
                    ac->link ? "its worker's connection on the other node, or the link to that "
                               "node, closed"
                             : "worker connection closed");
    else if (tr__buf_avail(&ac->out))
        flush(a, ac);
}

/* An actor on another node: its results come through the link's socketpair, its calls go
 * on the link's stream. Called with mu held. */
static int connect_remote(tr__actors *a, aconn *ac, const tr__actor_where *r) {
    int fd;
    tr__rlink *link;
    int rc = tr__remote_open(a->remotes, r->remote, r->token, &r->tls, ac->id.b, &fd, &link);
    if (rc == TR_ECONNECT) {
        mark_dead(a, ac, tr__last_error());
        return 0;
    }
    if (rc) return rc;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = ac};
    if (epoll_ctl(a->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
        rc = tr__err_errno(errno, "epoll_ctl");
        tr__remote_close(a->remotes, link, ac->id.b);
        close(fd);
        return rc;
    }
    ac->fd = fd;
    ac->link = link;
    ac->inc = r->inc;
    ac->want_out = 0;
    learn_retries(ac, r->task_retries);
    flush(a, ac);
    return 0;
}

/* Connects to the actor's current worker if the node says it is up. Called with mu held;
 * drops it during the node RPC. Returns 0 or a transport error. */
static int connect_actor(tr__actors *a, aconn *ac, int wait_ms) {
    ac->resolving = 1;
    pthread_mutex_unlock(&a->mu);
    tr__actor_where r;
    int rc = tr__actor_resolve(a->node, &ac->id, wait_ms, &r);
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
    int grace = r.inc == ac->broken_inc && tr__now_ns() - ac->broken_at < BROKEN_GRACE_NS;
    if (r.remote[0] && !grace) return connect_remote(a, ac, &r);
    int fd = grace || r.remote[0] ? -1 : tr__unix_connect_nb(r.path); /* never blocks, even on a
                                                                         full backlog */
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
    /* Tell the worker our object store index first (large results are transferred to
     * us); a fresh socket's buffer takes these few bytes at once. */
    tr__buf hello = TR__BUF_INIT;
    int ok =
        tr__caller_frame(&hello, a->objects ? tr__objects_client(a->objects) : -1, 0, 0) == 0 &&
        send(fd, hello.data, hello.len, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)hello.len;
    tr__buf_free(&hello);
    if (ok && a->rings && !r.remote[0] && ring_offer(ac, fd)) ok = 0;
    if (!ok) {
        epoll_ctl(a->ep, EPOLL_CTL_DEL, fd, NULL);
        close(fd);
        return 0; /* treated like a worker not yet up: tried again */
    }
    ac->fd = fd;
    ac->inc = r.inc;
    ac->want_out = 0;
    learn_retries(ac, r.task_retries);
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

/* An exported call is done: its twin gets the result - a small one copied once, a large
 * one (an object already) renamed, no byte moved - or the failure. Called with mu held. */
static void fill_twin(tr__actors *a, slot *s) {
    tr_ref twin = ref_of(a, s);
    if (s->exported == 2) { /* exported while pending: the driver need not read for it */
        s->exported = 1;
        a->pending_exports--;
    }
    int rc;
    if (s->obj_result) {
        rc = tr__objects_move(a->objects, s->result_ref, twin, 10000);
        if (!rc) {
            s->result_ref = twin;     /* our pin moved with it */
        } else if (rc == TR_ESTATE) { /* in use by its old name: one copy */
            const void *d = s->data;
            size_t n = s->len;
            rc = d ? 0 : tr__objects_view(a->objects, s->result_ref, 10000, &d, &n);
            if (!rc) rc = tr__objects_fulfill(a->objects, twin, 0, d, n);
        }
    } else { /* a failure's message goes with its NUL, as a call's is read */
        size_t n = s->data ? s->len + (s->rc ? 1 : 0) : 0;
        rc = tr__objects_fulfill(a->objects, twin, s->rc, s->data, n);
    }
    if (rc) { /* (the store is full): the borrowers get why */
        char msg[600];
        int k = snprintf(msg, sizeof msg, "the call's result could not be shared: %s",
                         tr__last_error());
        size_t n = k < 0 ? 0 : (size_t)k >= sizeof msg ? sizeof msg - 1 : (size_t)k;
        if (tr__objects_fulfill(a->objects, twin, rc, msg, n + 1) &&
            tr__objects_fail_bare(a->objects, twin, rc))
            TR_LOG_WARN("CLIENT-TWIN", "an exported result's twin stays unfilled: %s",
                        tr__last_error());
    }
}

static int owns(const tr__actors *a, tr_ref ref) {
    uint64_t tag;
    memcpy(&tag, ref.b + 8, 8);
    return tag == a->tag;
}

int tr__actors_owns(const tr__actors *a, tr_ref ref) {
    return owns(a, ref);
}

static slot *find_slot(tr__actors *a, tr_ref ref);

int tr__actors_live(tr__actors *a, tr_ref ref) {
    pthread_mutex_lock(&a->mu);
    int live = find_slot(a, ref) != NULL;
    pthread_mutex_unlock(&a->mu);
    return live;
}

static slot *find_slot(tr__actors *a, tr_ref ref) {
    uint64_t key, tag;
    memcpy(&key, ref.b, 8);
    memcpy(&tag, ref.b + 8, 8);
    if (tag != a->tag) return NULL;
    return tr__idmap_get(&a->slots, key);
}

/* Links the call's arguments that are other calls' results to their producers. Called
 * with mu held; on failure the caller drops what was linked (drop_args). */
static int link_producers(tr__actors *a, slot *s, const tr_ref *refs) {
    for (size_t i = 0; i < s->n_args; i++) {
        if (s->args[i].store) continue; /* an object, or a result's twin */
        slot *d = find_slot(a, refs[i]);
        if (!d)
            return tr__err(TR_ESTALE,
                           "tr_call_refs: argument %zu is neither an object nor a live result "
                           "ref of a call made by this process",
                           i);
        if (!d->done) {
            edge *e = malloc(sizeof *e);
            if (!e) return tr__err(TR_ENOMEM, "tr_call_refs");
            e->consumer = s;
            e->next = d->consumers;
            d->consumers = e;
            s->waiting++;
        }
        s->args[i].from = d;
        d->users++;
    }
    return 0;
}

/* Appends a call that must wait (for argument results, or behind another held call) to
 * the actor's held queue, with copies of what it will encode. */
static int hold(aconn *ac, slot *s, const char *method, const void *args, size_t len) {
    s->method = strdup(method);
    s->body = len ? malloc(len) : NULL;
    if (!s->method || (len && !s->body)) return tr__err(TR_ENOMEM, "tr_call");
    if (len) memcpy(s->body, args, len);
    s->body_len = len;
    attach(ac, s);
    s->held = 1;
    if (ac->held_tail)
        ac->held_tail->next = s;
    else
        ac->held_head = s;
    ac->held_tail = s;
    return 0;
}

static void cv_wait(tr__actors *a, int64_t deadline);
static void drive_others(tr__actors *a, aconn *skip);
static void progress(tr__actors *a, int64_t deadline);

/* Whether calls need a thread of ours that no caller may lend: exported calls pending
 * (their borrowers wait for them), calls queued for an actor not connected yet (they go
 * out when it is), calls held until results they take are in (those must be read). A
 * call that has gone out runs whether or not anyone waits; these would not. Under mu. */
static int driver_needed(tr__actors *a) {
    if (a->pending_exports || a->queued_unconnected) return 1;
    size_t pos = 0;
    void *v;
    while (tr__idmap_next(&a->actors, &pos, NULL, &v)) {
        const aconn *ac = v;
        if (ac->held_head && !ac->dead) return 1;
        if (ac->orphan_end > ac->sent && !ac->dead) return 1; /* (see tr__actors_release) */
    }
    return 0;
}

/* Lets go of the remote holds of containers that are gone (freed by their last holder,
 * any process of the node). Under mu. */
static void sweep_containers(tr__actors *a) {
    for (rcontainer **pp = &a->containers; *pp;) {
        rcontainer *c = *pp;
        if (tr__objects_exists(a->objects, c->obj)) {
            pp = &c->next;
            continue;
        }
        for (size_t i = 0; i < c->n; i++) /* (never waits) */
            tr__actors_remote_release(a, c->refs[i], 0);
        *pp = c->next;
        free(c->refs);
        free(c);
    }
}

/* Calls left behind a full socket or ring (or a RING answer not read yet) by a caller
 * that has not come back to send them (or to wait, which sends them) for a whole look,
 * while no thread of ours waits, become the driver's to send, as released ones are:
 * every call submitted runs, waited for or not (Ray's). Clears `backlog` once no
 * connection has bytes left. Under mu. */
static void look_backlog(tr__actors *a) {
    int left = 0;
    size_t pos = 0;
    void *v;
    while (tr__idmap_next(&a->actors, &pos, NULL, &v)) {
        aconn *ac = v;
        if (ac->dead || ac->fd < 0 || !tr__buf_avail(&ac->out)) {
            ac->looked = 0;
            continue;
        }
        left = 1;
        /* (not while a thread of ours waits: it sends them, and the driver would read
         * beside it) */
        if (ac->looked && ac->looked_sent == ac->sent && ac->orphan_end < ac->queued &&
            !a->reader && !a->waiters)
            ac->orphan_end = ac->queued; /* (driver_needed until it has all gone) */
        ac->looked = 1;
        ac->looked_sent = ac->sent;
    }
    if (!left) a->backlog = 0;
}

/* The driver: sends and reads while driver_needed, so that every call submitted runs
 * (as Ray's tasks do) and borrowers get shared results even if no thread of ours ever
 * waits; asleep otherwise (a plain call's caller reads its own reply, the hot path),
 * but for a look at containers every CONTAINER_SWEEP_MS while there are any, and at
 * calls left unsent every BACKLOG_LOOK_NS while there are any. */
static void *driver_main(void *arg) {
    tr__actors *a = arg;
    int64_t next_sweep = 0, next_look = 0;
    pthread_mutex_lock(&a->mu);
    while (!a->closing) {
        int64_t now = tr__now_ns();
        if (a->containers && now >= next_sweep) {
            sweep_containers(a);
            next_sweep = tr__deadline(CONTAINER_SWEEP_MS);
        }
        if (a->backlog && now >= next_look) {
            look_backlog(a);
            next_look = now + BACKLOG_LOOK_NS;
        }
        if (!driver_needed(a)) {
            int64_t until = a->containers ? next_sweep : 0;
            if (a->backlog && (!until || next_look < until)) until = next_look;
            if (until) {
                struct timespec ts = {until / 1000000000, until % 1000000000};
                pthread_cond_timedwait(&a->driver_cv, &a->mu, &ts);
            } else {
                pthread_cond_wait(&a->driver_cv, &a->mu);
            }
            continue;
        }
        drive_others(a, NULL);
        progress(a, tr__deadline(50));
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* The driver has work (driver_needed): woken, started at the first need. Under mu. */
static void want_driver(tr__actors *a) {
    pthread_cond_signal(&a->driver_cv);
    if (a->driver_started || a->closing) return;
    if (pthread_create(&a->driver, NULL, driver_main, a) == 0)
        a->driver_started = 1;
    else
        TR_LOG_WARN("CLIENT-DRIVER", "no driver thread: calls go out and shared results are "
                                     "read only while this process waits");
}

/* A call never sent leaves its actor's stream: its bytes are cut out of `out`, the calls
 * after it move up (its seq is never seen: the worker needs none in order), and it is
 * never sent, not even to a next incarnation. Called with mu held, s in the FIFO, none
 * of its bytes sent. */
static void drop_unsent(aconn *ac, slot *s) {
    size_t len = (size_t)(s->end - s->start), at = (size_t)(s->start - ac->sent);
    char *base = ac->out.data + ac->out.off;
    memmove(base + at, base + at + len, tr__buf_avail(&ac->out) - at - len);
    ac->out.len -= len;
    slot **pp = &ac->head, *prev = NULL;
    while (*pp != s) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    *pp = s->next;
    if (ac->tail == s) ac->tail = prev;
    for (slot *t = *pp; t; t = t->next) {
        t->start -= len;
        t->end -= len;
    }
    s->next = NULL;
    s->in_fifo = 0;
    ac->queued -= len;
    if (ac->orphan_end > s->start)
        ac->orphan_end = ac->orphan_end >= s->end ? ac->orphan_end - len : s->start;
    if (s->x) { /* (no resend of it either) */
        free(s->x->frame);
        s->x->frame = NULL;
        s->x->retries = 0;
    }
}

int tr__actors_cancel(tr__actors *a, tr_ref ref, int force, tr_actor_id *kill_out) {
    pthread_mutex_lock(&a->mu);
    slot *s = find_slot(a, ref);
    int rc = 0, running = 0;
    uint64_t board_key = 0, word = 0; /* a call of this node: its worker is told */
    int interrupt = 0;                /* a task running: signaled too */
    if (!s) {
        rc = tr__err(TR_ESTALE, "tr_cancel: not a live ref of a call or task this process "
                                "made (only its owner cancels it)");
    } else if (force && !(s->x && s->x->task)) {
        rc = tr__err(TR_EINVAL, "tr_cancel: force is for tasks (an actor's call is not killed)");
    } else if (!s->done) {
        aconn *ac = s->ac;
        if (s->held) { /* waiting for its arguments: it never goes out */
            slot **pp = &ac->held_head;
            slot *prev = NULL;
            while (*pp && *pp != s) {
                prev = *pp;
                pp = &(*pp)->next;
            }
            if (*pp) {
                *pp = s->next;
                if (ac->held_tail == s) ac->held_tail = prev;
                s->next = NULL;
                s->held = 0;
            }
        } else if (ac && s->in_fifo && s->start >= ac->sent) {
            /* never sent (its actor not connected yet, or behind a full socket): it goes
             * from the stream, and never runs (a canceled flag alone let its bytes go out
             * later, and the worker, whose board had no word for it yet, ran it) */
            drop_unsent(ac, s);
        } else if (ac) {
            running = s->start < ac->sent; /* (it may be running there) */
            if (force && running && s->x && s->x->task) *kill_out = ac->id;
            /* (a call sent, on this node: its worker sees the word before it runs it, and
             * while it runs, tr_ctx_canceled; a task's is interrupted, SIGURG) */
            if (!force && a->objects && !ac->link) {
                board_key = tr__id_key(ac->id.b);
                word = tr__board_cancel_word(tr__objects_client(a->objects), s->seq);
                interrupt = running && s->x && s->x->task;
            } else if (!force && ac->link && ac->fd >= 0) {
                /* (an actor on another node: its node's relay writes it there; a link
                 * that ended has nothing left to tell) */
                (void)tr__remote_cancel(a->remotes, ac->link, ac->id.b, s->seq,
                                        running && s->x && s->x->task);
            }
        }
        s->canceled = s->in_fifo; /* a reply may still come: it is dropped */
        slot_fail(a, s, TR_ECANCELED,
                  running && !(force && s->x && s->x->task)
                      ? "canceled (tr_cancel): it had started; it runs on, its result is dropped"
                      : "canceled (tr_cancel)");
        if (ac && ac->held_head) release_held(a, ac); /* calls it held up */
    }
    int killing = !rc && force && s && s->x && s->x->task && running;
    pthread_mutex_unlock(&a->mu);
    if (board_key) { /* its worker checks the word against its call (tr_ctx_canceled) */
        pid_t pid = tr__objects_board_cancel(a->objects, board_key, word);
        if (pid > 0 && interrupt) kill(pid, SIGURG);
    }
    return rc ? rc : killing;
}

int tr__actors_export(tr__actors *a, tr_ref ref) {
    pthread_mutex_lock(&a->mu);
    slot *s = find_slot(a, ref);
    int rc = 0;
    if (!s) {
        rc = tr__err(TR_ESTALE, "unknown or released ref (passing on a call result)");
    } else if (!s->exported) {
        rc = tr__objects_promise(a->objects, ref);
        if (!rc && s->done) {
            s->exported = 1;
            fill_twin(a, s);
        } else if (!rc) {
            s->exported = 2;
            a->pending_exports++;
            want_driver(a);
            wake(a);
        }
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int tr__actors_put_refs(tr__actors *a, const void *data, size_t len, const tr_ref *refs, size_t n,
                        tr_ref *out) {
    size_t n_remote = 0;
    for (size_t i = 0; i < n; i++)
        n_remote += (size_t)tr__actors_is_remote(a, refs[i]);
    if (!n_remote) /* (the store holds them all) */
        return tr__objects_put_refs(a->objects, data, len, refs, n, out);
    tr_ref *local = calloc(n, sizeof *local);
    rcontainer *c = calloc(1, sizeof *c);
    if (!local || !c || !(c->refs = calloc(n, sizeof *c->refs))) {
        free(local);
        if (c) free(c->refs);
        free(c);
        return tr__err(TR_ENOMEM, "tr_put_refs");
    }
    size_t n_local = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (!tr__actors_is_remote(a, refs[i])) {
            local[n_local++] = refs[i];
        } else if ((rc = tr__actors_remote_hold(a, refs[i], 0, REMOTE_HOLD_MS))) {
            rc = tr__err_wrap(rc, "tr_put_refs: contained ref %zu", i);
        } else {
            c->refs[c->n++] = refs[i];
        }
    }
    if (!rc) rc = tr__objects_put_refs(a->objects, data, len, local, n_local, out);
    free(local);
    pthread_mutex_lock(&a->mu);
    if (rc) {
        for (size_t i = 0; i < c->n; i++)
            tr__actors_remote_release(a, c->refs[i], 0);
        free(c->refs);
        free(c);
    } else {
        c->obj = *out;
        c->next = a->containers;
        a->containers = c;
        want_driver(a);
    }
    sweep_containers(a);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int tr__actors_share(tr__actors *a, const tr_ref *refs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!tr__ref_is_call(&refs[i]) || !owns(a, refs[i])) continue;
        int rc = tr__actors_export(a, refs[i]);
        /* released here: its twin, if it was shared before, lives in the store (the
         * store's lookup that follows says if not) */
        if (rc && rc != TR_ESTALE) return tr__err_wrap(rc, "contained ref %zu", i);
    }
    return 0;
}

/* Pins the refs a call's arguments contain (exported first if ours) for the call. */
static int keep_refs(tr__actors *a, slot *s, const tr_ref *keep, size_t n_keep) {
    if (!n_keep) return 0;
    if (!keep) return tr__err(TR_EINVAL, "tr_call_contains: contained is NULL");
    int rc = tr__actors_share(a, keep, n_keep);
    if (rc) return rc;
    if (!s->x && !(s->x = calloc(1, sizeof *s->x))) return tr__err(TR_ENOMEM, "tr_call_contains");
    slot_extra *x = s->x;
    x->keep = calloc(n_keep, sizeof *x->keep);
    if (!x->keep) return tr__err(TR_ENOMEM, "tr_call_contains");
    for (size_t i = 0; i < n_keep; i++) {
        if (!tr__ref_is_object(&keep[i]) && !tr__ref_is_call(&keep[i]))
            return tr__err(TR_EINVAL, "tr_call_contains: contained ref %zu is not a ref", i);
        if (tr__actors_is_remote(a, keep[i])) {
            /* another node's: held there while the call is in flight (a message at the
             * first hold of ours on it), since a callee elsewhere pulls it from there; a
             * copy here is pinned instead only if its node has let go of it already */
            if (!x->rkeep && (x->rkeep = calloc(n_keep, sizeof *x->rkeep))) x->cap_rkeep = n_keep;
            if (x->n_rkeep >= x->cap_rkeep) return tr__err(TR_ENOMEM, "tr_call_contains");
            int hrc = tr__actors_remote_hold(a, keep[i], 0, REMOTE_HOLD_MS);
            if (!hrc) {
                x->rkeep[x->n_rkeep++] = keep[i];
                continue;
            }
            if ((hrc != TR_ENOTFOUND && hrc != TR_EOBJECT_LOST && hrc != TR_EOWNER_DIED) ||
                tr__objects_pin(a->objects, keep[i], 0, NULL, NULL) != 0)
                return tr__err_wrap(hrc, "tr_call_contains: contained ref %zu", i);
            x->keep[x->n_keep++] = keep[i];
            continue;
        }
        rc = tr__objects_pin(a->objects, keep[i], 0, NULL, NULL);
        if (rc) return tr__err_wrap(rc, "tr_call_contains: contained ref %zu", i);
        x->keep[x->n_keep++] = keep[i];
    }
    return 0;
}

static inline __attribute__((always_inline)) int
submit(tr__actors *a, tr_actor_id id, const char *method, const void *args, size_t len,
       const tr_ref *refs, size_t n_refs, const tr_ref *keep, size_t n_keep, int task, int retries,
       size_t n_returns, int nowait, tr_ref *out);

/* The hot path: a plain call, with the rest of submit() folded away. */
int tr__actors_call(tr__actors *a, tr_actor_id id, const char *method, const void *args, size_t len,
                    const tr_ref *refs, size_t n_refs, tr_ref *out) {
    return submit(a, id, method, args, len, refs, n_refs, NULL, 0, 0, TR_RETRIES_ACTOR, 1, 0, out);
}

int tr__actors_call_nowait(tr__actors *a, tr_actor_id id, const char *method, const void *args,
                           size_t len, tr_ref *out) {
    return submit(a, id, method, args, len, NULL, 0, NULL, 0, 0, TR_RETRIES_ACTOR, 1, 1, out);
}

int tr__actors_call_contains(tr__actors *a, tr_actor_id id, const char *method, const void *args,
                             size_t len, const tr_ref *refs, size_t n_refs, const tr_ref *keep,
                             size_t n_keep, tr_ref *out) {
    return submit(a, id, method, args, len, refs, n_refs, keep, n_keep, 0, TR_RETRIES_ACTOR, 1, 0,
                  out);
}

int tr__actors_submit(tr__actors *a, tr_actor_id id, const char *method, const void *args,
                      size_t len, const tr_ref *refs, size_t n_refs, const tr_ref *keep,
                      size_t n_keep, int task, int retries, size_t n_returns, tr_ref *out) {
    if (n_returns != TR_STREAMING && (n_returns < 1 || n_returns > 1024))
        return tr__err(TR_EINVAL, "num_returns %zu: 1..1024", n_returns);
    return submit(a, id, method, args, len, refs, n_refs, keep, n_keep, task, retries, n_returns, 0,
                  out);
}

size_t tr__actors_pending(tr__actors *a, tr_actor_id id) {
    pthread_mutex_lock(&a->mu);
    aconn *ac = tr__idmap_get(&a->actors, tr__id_key(id.b));
    size_t n = ac && memcmp(ac->id.b, id.b, 16) == 0 ? ac->n_pending : 0;
    pthread_mutex_unlock(&a->mu);
    return n;
}

static void drop_kids(tr__actors *a, slot *s);

/* The k result refs of a call with several results: slots in the map, done when the
 * hidden call is (split_to_kids). Called with mu held. */
static int make_kids(tr__actors *a, slot *s, size_t k) {
    slot_extra *x = s->x;
    x->kids = calloc(k, sizeof *x->kids);
    if (!x->kids) return tr__err(TR_ENOMEM, "tr_call_multi");
    for (size_t i = 0; i < k; i++) {
        slot *kid = slot_new();
        if (!kid) {
            drop_kids(a, s);
            return tr__err(TR_ENOMEM, "tr_call_multi");
        }
        do
            kid->key = ++a->next_ref ^ a->salt;
        while (kid->key == 0);
        if (tr__idmap_put(&a->slots, kid->key, kid)) {
            free(kid);
            drop_kids(a, s);
            return tr__err(TR_ENOMEM, "tr_call_multi");
        }
        x->kids[x->n_kids++] = kid;
    }
    return 0;
}

/* Undoes make_kids (kids not done, or done and not handed out yet). */
static void drop_kids(tr__actors *a, slot *s) {
    slot_extra *x = s->x;
    if (!x) return;
    for (size_t i = 0; i < x->n_kids; i++) {
        tr__idmap_del(&a->slots, x->kids[i]->key);
        slot_free(a, x->kids[i]);
    }
    x->n_kids = 0;
}

/* nowait: TR_EAGAIN, nothing done, where it would wait: mu held by another thread, or the
 * actor not connected (tr_call_nowait; no refs, no keep list then). */
static inline __attribute__((always_inline)) int
submit(tr__actors *a, tr_actor_id id, const char *method, const void *args, size_t len,
       const tr_ref *refs, size_t n_refs, const tr_ref *keep, size_t n_keep, int task, int retries,
       size_t n_returns, int nowait, tr_ref *out) {
    if (!method || !*method || !out || (!args && len) || (!refs && n_refs))
        return tr__err(TR_EINVAL, "tr_call: NULL or empty argument");
    size_t mlen = strlen(method);
    if (mlen > (task ? 511u : 255u)) /* (a task's: function, 0x1f, namespace: tasks.h) */
        return tr__err(TR_EINVAL, "tr_call: method name longer than 255 bytes");
    if (len + mlen + 64 + 16 * n_refs > a->max_msg)
        return tr__err(TR_EMSGSIZE,
                       "call arguments of %zu bytes exceed the message limit of %zu "
                       "(max_message_bytes)",
                       len, a->max_msg);
    int stream = n_returns == TR_STREAMING; /* (one ref: the stream's) */
    if (stream) n_returns = 1;
    slot *s = slot_new();
    if (!s) return tr__err(TR_ENOMEM, "tr_call");
    int own = !task && retries != TR_RETRIES_ACTOR; /* (a call's own: tr_call_opts) */
    if ((task || own || n_returns > 1 || stream) && !(s->x = calloc(1, sizeof *s->x))) {
        free(s);
        return tr__err(TR_ENOMEM, "tr_call");
    }
    if (stream) s->x->stream = 1;
    if (task) {
        s->x->retries = retries;
        s->x->task = 1;
    } else if (own) {
        s->x->retries = retries;
        s->x->own_retries = 1;
    }
    int rc = 0;
    if (n_refs) { /* objects are kept alive until the call completes */
        s->args = calloc(n_refs, sizeof *s->args);
        if (!s->args) {
            free(s);
            return tr__err(TR_ENOMEM, "tr_call");
        }
        s->n_args = n_refs;
        for (size_t i = 0; i < n_refs; i++) {
            /* a live result of ours is linked below; one we released that came back to us
             * resolves, as anyone else's, through its twin */
            if (tr__ref_is_call(&refs[i]) && owns(a, refs[i]) && tr__actors_live(a, refs[i]))
                continue;
            if (!tr__ref_is_object(&refs[i]) && !tr__ref_is_call(&refs[i])) {
                drop_args(a, s);
                drop_keep(a, s);
                free(s->args);
                free(s->x); /* (its keep list is gone already, its frame not made) */
                free(s);
                return tr__err(TR_ESTALE, "tr_call_refs: argument %zu is not a ref", i);
            }
            s->args[i].ref = refs[i];
            s->args[i].store = 1;
            tr__seg_store_id(refs[i].b, s->args[i].ref.b); /* another's result: its twin */
            rc = tr__objects_pin(a->objects, refs[i], 0, NULL, NULL);
            if (rc == TR_ENOTFOUND && tr__ref_is_call(&refs[i]) && owns(a, refs[i]))
                rc = tr__err(TR_ESTALE,
                             "tr_call_refs: argument %zu is a released result ref of "
                             "this process (and not shared)",
                             i);
            uint32_t num = tr__ref_node(&refs[i]), mine = tr__objects_node_num(a->objects);
            if (rc == TR_ENOTFOUND && num && mine && num != mine) {
                /* another node's object, not here: held there for the call (the callee
                 * pulls it from there); one its node no longer has fails in the callee */
                rc = 0;
                if (!s->x && !(s->x = calloc(1, sizeof *s->x))) continue;
                slot_extra *x = s->x;
                if (!x->rkeep && (x->rkeep = calloc(n_refs + n_keep, sizeof *x->rkeep)))
                    x->cap_rkeep = n_refs + n_keep;
                if (x->n_rkeep < x->cap_rkeep &&
                    tr__actors_remote_hold(a, refs[i], 0, REMOTE_HOLD_MS) == 0)
                    x->rkeep[x->n_rkeep++] = refs[i];
                continue;
            }
            if (rc) {
                rc = tr__err_wrap(rc, "tr_call_refs: object argument %zu", i);
                drop_args(a, s);
                drop_keep(a, s);
                free(s->args);
                free(s->x); /* (its keep list is gone already, its frame not made) */
                free(s);
                return rc;
            }
            s->args[i].pinned = 1;
        }
    }
    if ((rc = keep_refs(a, s, keep, n_keep))) {
        drop_args(a, s);
        drop_keep(a, s);
        free(s->args);
        free(s->x); /* (its keep list is gone already, its frame not made) */
        free(s);
        return rc;
    }
    if (!nowait) {
        pthread_mutex_lock(&a->mu);
    } else if (pthread_mutex_trylock(&a->mu) != 0) {
        free(s->x);
        free(s);
        return tr__err(TR_EAGAIN, "tr_call_nowait: another thread holds the caller's lock");
    }
    aconn *ac = get_aconn(a, &id);
    if (!ac) {
        rc = TR_ENOTFOUND;
        goto fail;
    }
    if (ac->unknown) {
        rc = tr__err(TR_ENOTFOUND, "tr_call: no such actor");
        goto fail;
    }
    if (nowait && ac->fd < 0 && !ac->dead) { /* (connecting may ask the node, and wait) */
        rc = tr__err(TR_EAGAIN, "tr_call_nowait: the actor is not connected yet");
        goto fail;
    }
    if ((rc = link_producers(a, s, refs))) goto fail;
    do
        s->key = ++a->next_ref ^ a->salt;
    while (s->key == 0);
    if ((rc = tr__idmap_put(&a->slots, s->key, s))) goto fail;
    if (n_returns > 1 && (rc = make_kids(a, s, n_returns))) {
        tr__idmap_del(&a->slots, s->key);
        goto fail;
    }
    int queued = 0;
    s->pending = 1; /* (the node's metrics: troupe_calls_pending) */
    if (tr__proc_cnt()) tr__cnt_add((uint64_t *)&tr__proc_cnt()->calls_pending, 1);
    if (ac->dead || ac->ending) {
        slot_fail(a, s, TR_EACTOR_DIED, ac->reason);
    } else if (s->waiting || ac->held_head) {
        if ((rc = hold(ac, s, method, args, len))) {
            tr__idmap_del(&a->slots, s->key);
            goto fail;
        }
    } else if (encode_call(a, ac, s, method, args ? args : "", len) == 0) {
        queued = 1;
        if (ac->fd >= 0) flush(a, ac);
    }
    if (ac->fd < 0 && !ac->dead && !ac->resolving && (queued || s->held) &&
        (ac->head ? ac->head == s : ac->held_head == s))
        connect_actor(a, ac, 0); /* first call for this actor: see if it is up already */
    if (ac->unknown) {           /* the node has never heard of this actor (mark_dead failed s) */
        tr__idmap_del(&a->slots, s->key);
        drop_kids(a, s);
        pthread_mutex_unlock(&a->mu);
        slot_free(a, s);
        return tr__err(TR_ENOTFOUND, "tr_call: no such actor");
    }
    if (ac->fd < 0 && !ac->dead && ac->head && !a->queued_unconnected) {
        a->queued_unconnected = 1;
        wake(a); /* a reader asleep with no deadline must come back to send it */
    }
    if ((ac->fd < 0 && !ac->dead && ac->head) || s->held)
        want_driver(a);  /* it goes out (and runs) even if nobody waits for it */
    if (n_returns > 1) { /* the kids are the refs; the call itself is hidden */
        slot_extra *x = s->x;
        for (size_t i = 0; i < x->n_kids; i++) { /* (nobody else has them yet) */
            if (!x->split) x->kids[i]->ac = s->ac;
            memcpy(out[i].b, &x->kids[i]->key, 8);
            memcpy(out[i].b + 8, &a->tag, 8);
        }
        tr__idmap_del(&a->slots, s->key);
        s->released = 1;
        slot_maybe_free(a, s);
        pthread_mutex_unlock(&a->mu);
        return 0;
    }
    memcpy(out->b, &s->key, 8);
    memcpy(out->b + 8, &a->tag, 8);
    pthread_mutex_unlock(&a->mu);
    return 0;
fail:
    drop_kids(a, s);
    drop_args(a, s);
    drop_keep(a, s);
    pthread_mutex_unlock(&a->mu);
    free(s->args);
    free(s->method);
    free(s->body);
    free(s->x); /* (its keep list is gone already, its frame not made) */
    free(s);
    return rc;
}

/* ------------------------------------------------------------------ waiting */

/* Sleeps on the condition variable (never as the reader) until woken or the deadline. */
static void cv_wait(tr__actors *a, int64_t deadline) {
    a->waiters++;
    struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
    pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    a->waiters--;
}

#define RING_POLLS_PER_EPOLL 16 /* the reader's polls of its call rings per look at sockets */
#define RING_ROOM_MS 2          /* a reader with calls waiting for room looks again this often */

/* Whether one of the rings has bytes to read. */
static int rings_ready(tr__ring *const *r, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (tr__ring_readable(r[i])) return 1;
    return 0;
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
    /* the rings to poll without mu (a copy of `ringed`; one that goes meanwhile waits in
     * grave, which has room for all of them) */
    a->n_polled = 0;
    if (a->n_ringed && grow((void **)&a->polled, &a->cap_polled, a->n_ringed, sizeof *a->polled)) {
        size_t cap = a->cap_polled;
        tr__ring **g = realloc(a->grave, cap * sizeof *g);
        if (g) {
            a->grave = g;
            for (size_t i = 0; i < a->n_ringed; i++)
                a->polled[i] = a->ringed[i]->ring;
            a->n_polled = a->n_ringed;
        }
    }
    int partial = a->n_polled < a->n_ringed; /* (out of memory: no sleep on the rings) */
    int stuck = 0; /* calls waiting for room on a ring (the worker rings once it reads) */
    for (size_t i = 0; i < a->n_ringed && !stuck; i++)
        stuck = tr__buf_avail(&a->ringed[i]->out) > 0;
    a->polling = a->n_polled > 0;
    int remote_backlog = a->remote_backlog; /* (read under mu: submitters write it) */
    pthread_mutex_unlock(&a->mu);
    struct epoll_event evs[32];
    int ms = tr__ms_left(deadline);
    if (remote_backlog && (ms < 0 || ms > 5)) ms = 5;
    if (partial && (ms < 0 || ms > 1)) ms = 1;
    if (stuck && (ms < 0 || ms > RING_ROOM_MS)) ms = RING_ROOM_MS;
    /* Polls a while before sleeping ("call_spin_us"): a reply often comes within
     * microseconds, and a wake-up from sleep across vCPUs costs more than the call (but
     * for calls that keep taking longer than the poll: tr__spin). Call rings are polled
     * in memory, the sockets every RING_POLLS_PER_EPOLL polls; a sleep says so in each
     * ring first, so that its worker rings the doorbell. */
    tr__ring **polled = a->polled;
    size_t n_polled = a->n_polled;
    int n = epoll_wait(a->ep, evs, 32, 0), ready = rings_ready(polled, n_polled);
    if (n == 0 && !ready && ms != 0) {
        int64_t t0 = tr__now_ns();
        if (a->spin_ns && tr__spin_try(&a->spin) && tr__cpus_free()) {
            int64_t until = t0 + a->spin_ns;
            if (ms > 0 && until > t0 + (int64_t)ms * 1000000) until = 0;
            for (unsigned k = 1; n == 0 && !ready && tr__now_ns() < until; k++) {
                tr__cpu_relax();
                ready = rings_ready(polled, n_polled);
                if (!n_polled || k % RING_POLLS_PER_EPOLL == 0) n = epoll_wait(a->ep, evs, 32, 0);
            }
        }
        if (n == 0 && !ready) {
            for (size_t i = 0; i < n_polled; i++)
                tr__ring_sleep(polled[i]);
            if (!(ready = rings_ready(polled, n_polled))) n = epoll_wait(a->ep, evs, 32, ms);
            for (size_t i = 0; i < n_polled; i++)
                tr__ring_wake(polled[i]);
        }
        if (a->spin_ns) tr__spin_waited(&a->spin, tr__now_ns() - t0, a->spin_ns, n > 0 || ready);
    }
    pthread_mutex_lock(&a->mu);
    a->polling = 0;
    for (size_t i = 0; i < a->n_grave; i++)
        tr__ring_free(a->grave[i]);
    a->n_grave = 0;
    if (a->remote_backlog) { /* links that were full may take more now */
        a->remote_backlog = 0;
        size_t pos = 0;
        void *v;
        while (tr__idmap_next(&a->actors, &pos, NULL, &v)) {
            aconn *ac = v;
            if (ac->link && tr__buf_avail(&ac->out) && !ac->reading) flush(a, ac);
        }
    }
    for (int i = 0; i < n; i++) {
        aconn *ac = evs[i].data.ptr;
        if (!ac) { /* the wake eventfd */
            uint64_t v;
            ssize_t r = read(a->wake_fd, &v, sizeof v);
            (void)r;
            continue;
        }
        if (evs[i].events & EPOLLOUT) flush(a, ac);
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(a, ac, 1);
    }
    /* (downward: one whose connection fails leaves, and the last takes its place) */
    for (size_t i = a->n_ringed; i-- > 0;) {
        if (i >= a->n_ringed) continue;
        aconn *ac = a->ringed[i];
        if (ac->ring && tr__ring_readable(ac->ring))
            on_readable(a, ac, 0);
        else if (stuck && i < a->n_ringed && tr__buf_avail(&ac->out) && !ac->reading)
            flush(a, ac); /* (room made without its doorbell: never left waiting) */
    }
    a->reader = 0;
    if (a->waiters) pthread_cond_broadcast(&a->cv);
}

/* Any thread that waits (and the driver, while it is needed) also sends the calls queued
 * for every other actor that has come up meanwhile: a quick node query per such actor, at
 * most every 2 ms each. Called with mu held. */
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

/* A done slot's result for tr_get. A large result's view is taken here, without mu: it
 * may have been spilled meanwhile and need reading back from disk. */
static int finish_get(tr__actors *a, slot *s, int64_t deadline, const void **data, size_t *len) {
    while (s->obj_result && !s->data) {
        const void *v;
        size_t n;
        tr_ref was = s->result_ref;
        s->viewing++;
        pthread_mutex_unlock(&a->mu);
        int rc = tr__objects_view(a->objects, was, tr__ms_left(deadline), &v, &n);
        pthread_mutex_lock(&a->mu);
        s->viewing--;
        if (rc == TR_ESTALE && memcmp(was.b, s->result_ref.b, 16) != 0 && !s->released)
            continue;      /* exported meanwhile: the object took its twin's name */
        if (s->released) { /* released by another thread meanwhile */
            slot_maybe_free(a, s);
            return tr__err(TR_ESTALE, "tr_get: the ref was released while being read");
        }
        if (rc) return rc;
        if (!s->data) {
            s->data = (char *)v;
            s->len = n;
        }
        break;
    }
    if (data) *data = s->data;
    if (len) *len = s->len;
    if (s->rc) return tr__err(s->rc, "%s", s->data ? s->data : tr__strerror(s->rc));
    return 0;
}

static int32_t *blocked_word;

void tr__actors_set_blocked_word(int32_t *word) {
    blocked_word = word;
}

/* This thread waits for a result (once per get or wait: *marked), or no longer does. */
static inline void mark_blocked(int *marked, int on) {
    if (!blocked_word || *marked == on) return;
    __atomic_add_fetch(blocked_word, on ? 1 : -1, __ATOMIC_RELAXED);
    *marked = on;
}

/* A get's deadline, read from the clock the first time it is needed (*d INT64_MIN until
 * then): the get of a call that is done reads no clock. */
static inline int64_t lazy_deadline(int64_t *d, int timeout_ms) {
    if (*d == INT64_MIN) *d = tr__deadline(timeout_ms);
    return *d;
}

int tr__actors_get(tr__actors *a, tr_ref ref, int timeout_ms, const void **data, size_t *len,
                   int64_t *waited_from) {
    int64_t deadline = INT64_MIN;
    if (waited_from) *waited_from = 0;
    pthread_mutex_lock(&a->mu);
    int rc, passes = 0, marked = 0;
    for (;;) {
        slot *s = find_slot(a, ref);
        if (!s) { /* another's result, or one of ours released that came back: its twin */
            pthread_mutex_unlock(&a->mu);
            if (!tr__ref_is_call(&ref)) {
                mark_blocked(&marked, 0);
                return tr__err(TR_ESTALE, "tr_get: unknown or released ref");
            }
            if (timeout_ms != 0) mark_blocked(&marked, 1); /* (it may wait there) */
            if (waited_from) *waited_from = tr__now_ns();
            rc = tr__objects_get(a->objects, ref, tr__ms_left(lazy_deadline(&deadline, timeout_ms)),
                                 data, len);
            mark_blocked(&marked, 0);
            if (rc == TR_ENOTFOUND && owns(a, ref))
                rc = tr__err(TR_ESTALE, "tr_get: unknown or released ref");
            return rc;
        }
        if (s->done) {
            rc = finish_get(a, s,
                            s->obj_result && !s->data ? lazy_deadline(&deadline, timeout_ms)
                                                      : TR__NO_DEADLINE,
                            data, len);
            break;
        }
        /* Even a zero timeout makes one pass of progress (the driver may be asleep). */
        if (waited_from && !*waited_from) *waited_from = tr__now_ns();
        lazy_deadline(&deadline, timeout_ms);
        if (passes++ > 0 && tr__now_ns() >= deadline) {
            rc =
                tr__err(TR_ETIMEDOUT, "tr_get: the call has not finished within %d ms", timeout_ms);
            break;
        }
        mark_blocked(&marked, 1);
        aconn *ac = s->ac;
        if (ac->fd < 0) {
            int held = s->held; /* s may be gone once mu has been dropped */
            if ((rc = drive_unconnected(a, ac, deadline)) && rc != TR_ETIMEDOUT) break;
            if (!held) continue; /* a held call also needs its producers' replies read */
        }
        drive_others(a, ac);
        progress(a, deadline);
    }
    pthread_mutex_unlock(&a->mu);
    mark_blocked(&marked, 0);
    return rc;
}

int tr__actors_stream_next(tr__actors *a, tr_ref ref, int timeout_ms, tr_ref *item) {
    if (!item) return tr__err(TR_EINVAL, "tr_stream_next: item is NULL");
    int64_t deadline = tr__deadline(timeout_ms);
    pthread_mutex_lock(&a->mu);
    int rc, passes = 0, marked = 0;
    for (;;) {
        slot *s = find_slot(a, ref);
        if (!s || !s->x || !s->x->stream) {
            rc = tr__err(TR_ESTALE, "tr_stream_next: not a live stream of this process (a call "
                                    "or task made with num_returns TR_STREAMING)");
            break;
        }
        slot_extra *x = s->x;
        if (x->taken < x->n_items) { /* handed out: the user's now, as a call's ref */
            slot *it = x->items[x->taken];
            if ((rc = tr__idmap_put(&a->slots, it->key, it))) break;
            x->taken++;
            *item = ref_of(a, it);
            rc = 0;
            break;
        }
        if (s->done) {
            rc = x->lost ? tr__err(TR_ENOMEM, "tr_stream_next: an item of the stream was lost "
                                              "(out of memory)")
                         : 1;
            break;
        }
        if (passes++ > 0 && tr__now_ns() >= deadline) {
            rc = tr__err(TR_ETIMEDOUT, "tr_stream_next: no item within %d ms", timeout_ms);
            break;
        }
        mark_blocked(&marked, 1);
        aconn *ac = s->ac;
        if (ac->fd < 0) {
            int held = s->held;
            if ((rc = drive_unconnected(a, ac, deadline)) && rc != TR_ETIMEDOUT) break;
            if (!held) continue;
        }
        drive_others(a, ac);
        progress(a, deadline);
    }
    pthread_mutex_unlock(&a->mu);
    mark_blocked(&marked, 0);
    return rc;
}

int tr__actors_wait(tr__actors *a, const tr_ref *refs, size_t n, size_t num_ready, int timeout_ms,
                    uint8_t *ready, size_t *n_ready) {
    if ((!refs && n) || num_ready > n)
        return tr__err(TR_EINVAL, "tr_wait: refs is NULL or num_ready > n");
    int64_t deadline = tr__deadline(timeout_ms);
    pthread_mutex_lock(&a->mu);
    int rc = 0, passes = 0, marked = 0;
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
        mark_blocked(&marked, 1);
        if (unconnected) {
            int left = tr__ms_left(deadline);
            int64_t slice = tr__deadline(left < 0 || left > 5 ? 5 : left);
            rc = drive_unconnected(a, unconnected, slice);
            if (rc && rc != TR_ETIMEDOUT) goto out;
            rc = 0;
            drive_others(a, unconnected);
            progress(a, tr__now_ns()); /* and read whatever the connected actors sent */
            continue;
        }
        drive_others(a, NULL);
        progress(a, deadline);
    }
out:
    pthread_mutex_unlock(&a->mu);
    mark_blocked(&marked, 0);
    return rc;
}

int tr__actors_release(tr__actors *a, tr_ref ref) {
    pthread_mutex_lock(&a->mu);
    slot *s = find_slot(a, ref);
    if (!s) { /* a borrow of another's result, or of ours released that came back */
        pthread_mutex_unlock(&a->mu);
        if (tr__ref_is_call(&ref) && tr__objects_release(a->objects, ref) == 0) return 0;
        return tr__err(TR_ESTALE, "tr_ref_release: unknown or released ref");
    }
    tr__idmap_del(&a->slots, s->key);
    s->released = 1; /* freed now, or once done, viewed and read by the calls it feeds */
    /* A call not sent yet goes out even if nobody will wait for it: the driver sends it
     * (past a full socket or ring, or the first calls on a ring, which wait for the
     * worker's answer to our RING). (Here, not at submit: a caller that waits for its own
     * calls sends and reads them, and a driver woken then would read beside it.) */
    if (!s->done && s->ac && s->in_fifo && s->end > s->ac->sent && !s->ac->dead) {
        if (s->end > s->ac->orphan_end) s->ac->orphan_end = s->end;
        want_driver(a);
    }
    slot_maybe_free(a, s);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

void tr__actors_destroy(tr__actors *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->closing = 1;
    int joined = a->driver_started;
    pthread_cond_broadcast(&a->cv);
    pthread_cond_signal(&a->driver_cv);
    wake(a);
    pthread_mutex_unlock(&a->mu);
    if (joined) pthread_join(a->driver, NULL);
    for (rcontainer *c = a->containers, *cn; c; c = cn) { /* (their holds go with our links) */
        cn = c->next;
        free(c->refs);
        free(c);
    }
    a->containers = NULL;
    if (a->objects) tr__objects_set_puller(a->objects, NULL, NULL); /* it pulled through us */
    size_t pos = 0;
    void *v;
    /* Held calls first: they let go of the producers they were going to read, so that
     * every slot below is freed exactly once (released ones through its queue, the others
     * through the map). */
    while (tr__idmap_next(&a->actors, &pos, NULL, &v))
        for (slot *s = ((aconn *)v)->held_head; s; s = s->next)
            drop_args(a, s);
    pos = 0;
    while (tr__idmap_next(&a->actors, &pos, NULL, &v)) {
        aconn *ac = v;
        if (ac->fd >= 0) close(ac->fd);
        tr__ring_free(ac->ring);
        tr__buf_free(&ac->ctl);
        for (int q = 0; q < 2; q++)
            for (slot *s = q ? ac->held_head : ac->head, *n; s; s = n) {
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
    free(a->ringed);
    free(a->polled);
    free(a->grave);
    tr__remotes_destroy(a->remotes);
    close(a->ep);
    close(a->wake_fd);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    pthread_cond_destroy(&a->driver_cv);
    free(a);
}
