/* actor/worker.c - the worker main loop (epoll, one thread), and for an actor with
 * max_concurrency > 1 the pool of threads that runs its calls (worker.h). */
#include "actor/worker.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actor/calls.h"
#include "actor/control.h"
#include "actor/ctx.h"
#include "actor/handles.h"
#include "actor/protocol.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/ring.h"
#include "core/status.h"
#include "core/trace.h"
#include "core/wait.h"
#include "actor/tasks.h"
#include "objectstore/client.h"

#define NODE_TIMEOUT_MS 10000
#define FLUSH_AFTER_NS 20000 /* a call slower than this gets its reply sent at once */
#define FLUSH_BYTES (256u << 10)
#define RING_ROOM_MS 2          /* results waiting for room on a ring: looked at this often */
#define RING_POLLS_PER_EPOLL 16 /* the loop's polls of its call rings per look at its sockets */
#define KEEP_NS 10000           /* a binding's lock kept this long into the poll (class idle) */

size_t tr__ctx_num_refs(const tr_ctx *ctx) {
    return ctx ? ctx->n_refs : 0;
}

int tr__ctx_ref(const tr_ctx *ctx, size_t i, const void **data, size_t *len) {
    if (!ctx || i >= ctx->n_refs || !data || !len)
        return tr__err(TR_EINVAL, "tr_ctx_ref: no object argument %zu", i);
    *data = ctx->ref_data[i];
    *len = ctx->ref_len[i];
    return 0;
}

/* Lets go of a container result not sent (the method replied again, or failed). */
static void drop_result_obj(tr_ctx *ctx) {
    if (!ctx->has_result_obj) return;
    ctx->has_result_obj = 0;
    if (ctx->result_obj_open)
        tr__objects_abort(ctx->objects, ctx->result_obj);
    else
        tr__objects_release(ctx->objects, ctx->result_obj);
    ctx->result_obj_open = 0;
}

void tr__ctx_drop_result_obj(tr_ctx *ctx) {
    drop_result_obj(ctx);
}

int tr__ctx_take_result_obj(tr_ctx *ctx, tr_ref *out) {
    if (!ctx->has_result_obj) return tr__err(TR_ESTATE, "no result object");
    if (ctx->result_obj_open) {
        int rc = tr__objects_seal(ctx->objects, ctx->result_obj);
        if (rc) {
            drop_result_obj(ctx);
            return rc;
        }
        ctx->result_obj_open = 0;
    }
    *out = ctx->result_obj;
    ctx->has_result_obj = 0;
    return 0;
}

int tr__ctx_reply_alloc(tr_ctx *ctx, size_t len, void **buf) {
    if (!ctx || !buf) return tr__err(TR_EINVAL, "tr_ctx_reply_alloc: NULL argument");
    *buf = NULL;
    tr__buf_reset(&ctx->result);
    drop_result_obj(ctx);
    ctx->direct_used = 0;
    ctx->fwd_used = 0;
    ctx->dev_used = 0;
    if (ctx->direct && len <= ctx->direct_cap) { /* the graph's slot itself */
        *buf = ctx->direct;
        ctx->direct_len = len;
        ctx->direct_used = 1;
        return 0;
    }
    if (ctx->in_graph && ctx->direct && ctx->objects) { /* over the slot: an object, sealed */
        tr_ref obj;                                     /* once the method returns (dag/exec.c) */
        int rc = tr__objects_create(ctx->objects, len, &obj, buf);
        if (rc) return rc;
        ctx->result_obj = obj;
        ctx->has_result_obj = 1;
        ctx->result_obj_open = 1;
        return 0;
    }
    int rc = tr__buf_reserve(&ctx->result, len ? len : 1);
    if (rc) return rc;
    ctx->result.len = len;
    *buf = ctx->result.data;
    return 0;
}

/* A reply is a reply_alloc and one copy into it: the slot, an object over a graph's slot
 * (whose ref the slot carries, dag/exec.c), or the result buffer. (memmove: data may be
 * the slot or the buffer itself, a method replying what it replied before.) A graph
 * step's reply that lies within its input, where the step may forward it, is not copied
 * at all: the step's output says where it lies (dag/exec.c). */
int tr__ctx_reply(tr_ctx *ctx, const void *data, size_t len) {
    if (!ctx || (!data && len)) return tr__err(TR_EINVAL, "tr_ctx_reply: NULL argument");
    uintptr_t p = (uintptr_t)data, lo = (uintptr_t)ctx->fwd_lo;
    if (ctx->fwd_lo && len && p >= lo && p - lo <= ctx->fwd_cap && len <= ctx->fwd_cap - (p - lo)) {
        tr__buf_reset(&ctx->result);
        drop_result_obj(ctx);
        ctx->direct_used = 0;
        ctx->dev_used = 0;
        ctx->fwd_ptr = data;
        ctx->fwd_len = len;
        ctx->fwd_used = 1;
        return 0;
    }
    void *buf; /* (replaces a tr_ctx_reply_device too) */
    int rc = tr__ctx_reply_alloc(ctx, len, &buf);
    if (!rc && len) memmove(buf, data, len);
    return rc;
}

int tr__ctx_multi_encode(tr__buf *b, const void *const *data, const size_t *len, size_t n) {
    if (!data || !len || n < 1 || n > 1024)
        return tr__err(TR_EINVAL, "tr_ctx_reply_multi: 1..1024 parts, data and len");
    size_t total = 8 + 8 * n;
    for (size_t i = 0; i < n; i++) {
        if (!data[i] && len[i]) return tr__err(TR_EINVAL, "tr_ctx_reply_multi: part %zu", i);
        total += len[i];
    }
    tr__buf_reset(b);
    uint32_t k = (uint32_t)n;
    int rc = tr__buf_reserve(b, total);
    if (rc) return rc;
    tr__buf_append(b, "TRMR", 4);
    tr__buf_append(b, &k, 4);
    for (size_t i = 0; i < n; i++) {
        uint64_t l = len[i];
        tr__buf_append(b, &l, 8);
    }
    for (size_t i = 0; i < n; i++)
        if (len[i]) tr__buf_append(b, data[i], len[i]);
    return b->oom ? tr__err(TR_ENOMEM, "tr_ctx_reply_multi") : 0;
}

int tr__ctx_reply_multi(tr_ctx *ctx, const void *const *data, const size_t *len, size_t n) {
    if (!ctx) return tr__err(TR_EINVAL, "tr_ctx_reply_multi: no context");
    if (ctx->direct) return tr__err(TR_ESTATE, "tr_ctx_reply_multi: not in a compiled graph");
    drop_result_obj(ctx);
    ctx->dev_used = 0;
    return tr__ctx_multi_encode(&ctx->result, data, len, n);
}

int tr__ctx_reply_contains(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs,
                           size_t n) {
    if (!ctx || (!refs && n) || (!data && len) || n > (1u << 20))
        return tr__err(TR_EINVAL, "tr_ctx_reply_contains: bad arguments");
    if (n && (ctx->in_graph || ctx->direct || !ctx->objects))
        return tr__err(TR_ESTATE, "tr_ctx_reply_contains: a compiled graph's step cannot "
                                  "return refs (return the value)");
    if (!n) return tr__ctx_reply(ctx, data, len);
    tr_ref obj;
    int rc = tr__objects_put_refs(ctx->objects, data, len, refs, n, &obj);
    return rc ? rc : tr__ctx_reply_object(ctx, obj);
}

int tr__ctx_reply_object(tr_ctx *ctx, tr_ref obj) {
    if (!ctx) return tr__err(TR_EINVAL, "tr_ctx_reply_contains: bad arguments");
    if (ctx->in_graph || ctx->direct || !ctx->objects) {
        if (ctx->objects) tr__objects_release(ctx->objects, obj);
        return tr__err(TR_ESTATE, "tr_ctx_reply_contains: a compiled graph's step cannot "
                                  "return refs (return the value)");
    }
    tr__buf_reset(&ctx->result);
    drop_result_obj(ctx);
    ctx->direct_used = 0;
    ctx->fwd_used = 0;
    ctx->dev_used = 0;
    ctx->result_obj = obj;
    ctx->has_result_obj = 1;
    return 0;
}

int tr__ctx_canceled(const tr_ctx *ctx) {
    if (!ctx || !ctx->board || !ctx->cancel_word) return 0;
    for (int i = 0; i < TR__SEG_BOARD_CANCELS; i++)
        if (__atomic_load_n(&ctx->board->cancel[i], __ATOMIC_ACQUIRE) == ctx->cancel_word) return 1;
    return 0;
}

int tr__ctx_verror(tr_ctx *ctx, const char *fmt, va_list ap) {
    if (!ctx || !fmt) return TR_ETASK;
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    ctx->has_err = 1;
    return TR_ETASK;
}

int tr__ctx_error(tr_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tr__ctx_verror(ctx, fmt, ap);
    va_end(ap);
    return rc;
}

int tr__ctx_set_error(tr_ctx *ctx, const char *msg) {
    return msg ? tr__ctx_error(ctx, "%s", msg) : TR_ETASK;
}

/* TROUPE_GPUS, read once as the worker starts (before any thread) */
static char gpu_ids[64 * 97];

const char *tr__ctx_gpu_ids(const tr_ctx *ctx) {
    return ctx ? gpu_ids : "";
}

tr_runtime *tr__ctx_runtime(tr_ctx *ctx) {
    return ctx ? ctx->rt : NULL;
}

const char *tr__ctx_method(const tr_ctx *ctx) {
    return ctx && ctx->method ? ctx->method : "";
}

const tr_method_def *tr__find_method_or_dispatch(const tr_actor_class *cls, const char *m, size_t n,
                                                 tr_method_def *own, char *name, size_t cap) {
    const tr_method_def *def = tr__find_method(cls, m, n);
    if (def || !cls->dispatch || n == 0 || n >= cap || memchr(m, '\0', n)) return def;
    memcpy(name, m, n);
    name[n] = '\0';
    own->name = name;
    own->fn = cls->dispatch;
    return own;
}

tr_actor_id tr__ctx_actor_id(const tr_ctx *ctx) {
    tr_actor_id none = {{0}};
    return ctx ? ctx->id : none;
}

typedef struct client {
    int fd;
    int caller;   /* the caller's object store index (from CALLER), or -1 */
    int relayed;  /* the caller is another node's, through the relay (caller: the relay's) */
    unsigned tag; /* relayed: the relay's tag for its connection (cancels), or 0 */
    pid_t pid;    /* the caller's process, from SO_PEERCRED (0 if unknown) */
    tr__buf in, out;
    int want_out;
    /* Call rings (core/ring.h), once the caller's RING frame was answered: its calls come
     * on the ring into `in`, results go from `out` to the ring, and the socket carries
     * only doorbells (read into ctl) and its end */
    tr__ring *ring;
    tr__buf ctl;
    int passed_fd; /* a descriptor that came on the socket (the RING's), or -1 */
    struct client *next;
    /* an actor with max_concurrency > 1 (pool): out and want_out are under the pool's
     * lock; calls of this client queued or running hold it (refs), so that one whose
     * caller went (gone) frees it with its last */
    int refs, gone;
    int broken; /* a write to it failed (its socket shut: the loop drops it); under pool_mu */
} client;

struct pool;

typedef struct worker {
    tr__worker_env env;
    const tr__worker_builtin *builtins;
    size_t n_builtins;
    int ep, lfd;
    tr__nodeconn *node;
    tr__objects *objects;
    const tr_actor_class *cls;
    void *self;
    tr_ctx ctx;
    tr__hist calls_run; /* calls run on ctx, not yet in the board's (flush_client) */
    tr__burst runs;     /* ... and not yet on the timeline */
    size_t max_msg;
    int64_t spin_ns; /* polls this long after an event before it sleeps (the node's) */
    client *clients;
    int n_rings;           /* clients with call rings */
    tr__seg_board *board;  /* its entry on the node's board (tasks.h, tr_cancel), or NULL */
    int task_worker;       /* a pool worker of tasks: it says on the board when it is busy */
    struct pool *pool;     /* max_concurrency > 1, or concurrency groups: the threads that run
                              the default group's calls; NULL: the loop runs them */
    struct cgroup *groups; /* the actor's concurrency groups (tr_concurrency_group) */
    size_t n_groups;
    pthread_mutex_t pool_mu; /* every pool's: their queues, and each client's out and refs */
    pthread_t loop;          /* the thread that runs tr__worker_run's loop */
    int ending;              /* its last handle went (TR__END_METHOD), or a method ended
                                it (tr_ctx_exit_actor): the loop ends */
    char end_why[400];       /* (end_mu) the node's reason for its end ("": no handle left) */
    int exited;              /* (atomic) ended by tr_ctx_exit_actor: no call taken runs */
    int end_reply;           /* (atomic) a pool thread's call ended it: its reply not out yet */
    int end_queued;          /* the loop queued that call on a pool (the loop's own) */
    int wake_fd;             /* an eventfd in the loop's epoll: a pool thread wakes it */
} worker;

/* The actor's method lock (env.mu): static, so that a graph's loop thread that outlives
 * tr__worker_run still finds a lock (held for good once the destructor ran). */
static pthread_mutex_t method_mu = PTHREAD_MUTEX_INITIALIZER;
static int method_mu_wanted; /* (atomic) tr__method_lock's waiters */

/* A worker of the task pool (actor/tasks.h) runs the remote functions its executable
 * registered (tr_config_add_function): each call's method names the function. */
static const tr_config *task_cfg;

static int task_dispatch(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    const char *name = tr__ctx_method(ctx);
    tr_task_fn fn = tr__config_find_function(task_cfg, name, strlen(name));
    if (!fn)
        return tr__ctx_error(ctx,
                             "no remote function '%s' is registered in this executable "
                             "(tr_config_add_function)",
                             name);
    return fn(ctx, args, len);
}

static const tr_actor_class *tasks_class(const tr_config *cfg) {
    static tr_actor_class cls;
    tr__actor_class_init(&cls);
    cls.name = TR__TASKS_CLASS;
    cls.dispatch = task_dispatch;
    task_cfg = cfg;
    return &cls;
}

static volatile sig_atomic_t stop_requested;
static void on_term(int sig) {
    (void)sig;
    stop_requested = 1;
}

static pthread_mutex_t end_mu = PTHREAD_MUTEX_INITIALIZER; /* (worker.end_why) */

/* The actor ends (why: what the node keeps as its reason; NULL: no handle of it is left):
 * the loop stops taking calls, and the worker exits orderly. Any thread. */
static void begin_end(worker *w, const char *why) {
    pthread_mutex_lock(&end_mu);
    if (why && !w->end_why[0]) snprintf(w->end_why, sizeof w->end_why, "%s", why);
    pthread_mutex_unlock(&end_mu);
    if (why) __atomic_store_n(&w->exited, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&w->ending, 1, __ATOMIC_RELEASE);
    stop_requested = 1;
    uint64_t one = 1; /* (a pool thread: the loop may sleep in epoll_wait) */
    if (!pthread_equal(pthread_self(), w->loop) &&
        (w->wake_fd < 0 || write(w->wake_fd, &one, sizeof one) != sizeof one))
        pthread_kill(w->loop, SIGTERM);
}

int tr__ctx_exit_actor(tr_ctx *ctx, const char *why) {
    if (!ctx) return tr__err(TR_EINVAL, "tr_ctx_exit_actor: ctx is NULL");
    if (ctx->in_graph || tr__tasks_namespace(NULL, 0))
        return tr__err(TR_ESTATE, "tr_ctx_exit_actor: not in an actor's method (a %s)",
                       ctx->in_graph ? "compiled graph's step" : "task");
    snprintf(ctx->exit_why, sizeof ctx->exit_why, "%.300s", why && *why ? why : "exited");
    ctx->exiting = 1;
    return TR_EACTOR_DIED;
}

static void free_client(client *c) {
    tr__buf_free(&c->in);
    tr__buf_free(&c->out);
    tr__buf_free(&c->ctl);
    tr__ring_free(c->ring);
    if (c->passed_fd >= 0) close(c->passed_fd);
    free(c);
}

static void pool_drop_client(worker *w, client *c);

static void drop_client(worker *w, client *c) {
    if (c->ring) w->n_rings--;
    for (client **pp = &w->clients; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    if (w->pool) {
        pool_drop_client(w, c);
        return;
    }
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free_client(c);
}

const tr_method_def *tr__find_method(const tr_actor_class *cls, const char *m, size_t n) {
    for (size_t i = 0; i < cls->n_methods; i++) {
        const char *name = cls->methods[i].name;
        if (strlen(name) == n && memcmp(name, m, n) == 0) return &cls->methods[i];
    }
    return NULL;
}

#define ARG_SEAL_TIMEOUT_MS 10000
/* ...and for a call's result passed by another process than its owner (its twin, a promise
 * until the result is in: docs/OWNERSHIP.md), as long as a call may take: the wait ends
 * at once if its owner dies (the promise goes with it) or its node is lost */
#define ARG_PROMISE_TIMEOUT_MS 600000

/* Lets go of the objects among the first ctx->n_refs arguments. */
static void unpin_refs(worker *w, tr_ctx *ctx, const uint8_t *refs) {
    for (size_t i = 0; i < ctx->n_refs; i++) {
        tr_ref r;
        memcpy(r.b, refs + 16 * i, 16);
        if (tr__ref_is_object(&r)) tr__objects_unpin(w->objects, r);
    }
    ctx->n_refs = 0;
}

static const uint8_t zero_ref[16];

/* Resolves the call's arguments passed by reference: objects are pinned and viewed
 * (waiting for a seal), values carried inline are viewed in the frame. On failure appends
 * an error RESULT and returns 1 (-1 if even that failed). */
static int resolve_refs(worker *w, tr_ctx *ctx, tr__buf *out, uint64_t seq, const uint8_t *refs,
                        size_t n, const void *inl, size_t inl_len) {
    if (n > ctx->cap_refs) {
        const void **d = realloc(ctx->ref_data, n * sizeof *d);
        if (d) ctx->ref_data = d;
        size_t *l = realloc(ctx->ref_len, n * sizeof *l);
        if (l) ctx->ref_len = l;
        if (!d || !l) return tr__result_frame(out, seq, TR_ENOMEM, "", 1) ? -1 : 1;
        ctx->cap_refs = n;
    }
    for (size_t i = 0; i < n; i++) {
        tr_ref r;
        memcpy(r.b, refs + 16 * i, 16);
        int rc;
        if (memcmp(r.b, zero_ref, 16) == 0)
            rc = tr__call_inline_next(&inl, &inl_len, &ctx->ref_data[i], &ctx->ref_len[i]);
        else if (tr__ref_is_object(&r))
            rc = tr__objects_pin(w->objects, r,
                                 (r.b[15] & TR__REF_CALL_BIT) ? ARG_PROMISE_TIMEOUT_MS
                                                              : ARG_SEAL_TIMEOUT_MS,
                                 &ctx->ref_data[i], &ctx->ref_len[i]);
        else
            rc = tr__err(TR_EINVAL, "not an object ref");
        if (rc) {
            char msg[400];
            snprintf(msg, sizeof msg, "argument %zu: %s", i, tr__last_error());
            ctx->n_refs = i;
            unpin_refs(w, ctx, refs);
            return tr__result_frame(out, seq, rc, msg, strlen(msg) + 1) ? -1 : 1;
        }
    }
    ctx->n_refs = n;
    if (inl_len) { /* values nobody asked for: a malformed call */
        char msg[] = "malformed call: inline values left over";
        unpin_refs(w, ctx, refs);
        return tr__result_frame(out, seq, TR_EPROTO, msg, sizeof msg) ? -1 : 1;
    }
    return 0;
}

/* A large result goes into the object store and is transferred to the caller, so that
 * it survives even if we die before the caller reads the reply. */
/* A result that contains refs is a container object (tr_ctx_reply_contains made it): its
 * refs live while it does, so the caller can borrow them whenever it reads it
 * (docs/OWNERSHIP.md). It goes to the caller as a large result does. */
static int send_container(worker *w, tr_ref r, client *c, tr__buf *out, uint64_t seq) {
    if (c->relayed && c->caller >= 0) {
        /* a caller on another node: the bytes go inline, the container to the relay,
         * which keeps it (and so its refs) for the caller's link */
        const void *v;
        size_t n;
        size_t at = out->len;
        int rc = tr__objects_view(w->objects, r, 10000, &v, &n);
        if (!rc && n + 64 > w->max_msg)
            rc = tr__err(TR_EMSGSIZE,
                         "a result of %zu bytes with refs exceeds the message "
                         "limit of %zu (max_message_bytes)",
                         n, w->max_msg);
        if (!rc) rc = tr__result_frame_kept(out, seq, r.b, v, n);
        if (!rc) rc = tr__objects_transfer(w->objects, r, c->caller, c->pid);
        if (!rc) return 0;
        out->len = at; /* (the frame, or what of it was made, goes: an error instead) */
        tr__objects_release(w->objects, r);
        return tr__result_frame(out, seq, rc, tr__last_error(), strlen(tr__last_error()) + 1);
    }
    int rc = c->caller < 0 ? tr__err(TR_ESTATE, "the caller did not say its store index: a "
                                                "result with refs cannot reach it")
                           : tr__objects_transfer(w->objects, r, c->caller, c->pid);
    if (rc) {
        tr__objects_release(w->objects, r);
        return tr__result_frame(out, seq, rc, tr__last_error(), strlen(tr__last_error()) + 1);
    }
    return tr__result_frame_ref(out, seq, r.b);
}

static int store_result(worker *w, client *c, tr__buf *out, uint64_t seq, const void *data,
                        size_t len) {
    tr_ref r;
    int rc = c->caller < 0 ? tr__err(TR_EINVAL, "the caller did not say its store index")
                           : tr__objects_put(w->objects, data, len, &r);
    if (!rc && (rc = tr__objects_transfer(w->objects, r, c->caller, c->pid)))
        tr__objects_release(w->objects, r);
    if (!rc) return tr__result_frame_ref(out, seq, r.b);
    /* no store for it: the socket, if the frame limit allows */
    return len + 64 <= w->max_msg
               ? tr__result_frame(out, seq, 0, data, len)
               : tr__result_frame(out, seq, rc, tr__last_error(), strlen(tr__last_error()) + 1);
}

/* The class's idle (tr_actor_class): a lock its binding kept since the thread's last method
 * goes, before the thread waits for anything. */
static inline void worker_idle(const worker *w) {
    if (w->cls->idle) w->cls->idle();
}

/* Runs one call on ctx (the loop's, or a pool thread's) and appends its RESULT frame to out
 * (c->out, or a pool thread's own buffer). *ended (may be NULL): when the method returned
 * (tr__now_ns), if one ran; else left as it was. */
static int group_of(const worker *w, const char *m, size_t mlen, size_t *base);

static int run_call(worker *w, tr_ctx *ctx, client *c, tr__buf *out, uint64_t seq, const char *body,
                    size_t n, int64_t *ended) {
    const char *m;
    size_t mlen, alen, n_refs, inl_len;
    const void *args, *refs, *inl;
    int rc = tr__call_parse(body, n, &m, &mlen, &args, &alen, &refs, &n_refs, &inl, &inl_len);
    if (rc) return rc;
    if (w->task_worker) { /* a task: its function, and its submitter's namespace */
        size_t ns_len;
        const char *ns = tr__tasks_split(m, &mlen, &ns_len);
        tr__tasks_set_namespace(ns, ns_len);
    }
    if (memchr(m, '@', mlen)) { /* "method@group": the call chose its concurrency group */
        size_t base;
        if (group_of(w, m, mlen, &base) < 0) {
            char msg[300];
            int k = snprintf(msg, sizeof msg, "the actor has no concurrency group '%.*s'",
                             (int)(mlen - base - 1 > 100 ? 100 : mlen - base - 1), m + base + 1);
            return tr__result_frame(out, seq, TR_EINVAL, msg, (size_t)k + 1);
        }
        mlen = base;
    }
    int builtin = mlen > 9 && memcmp(m, "__troupe_", 9) == 0; /* not on a method's path */
    if (builtin) worker_idle(w); /* (one may wait: for a group's peers, the node) */
    if (builtin && mlen == sizeof TR__END_METHOD - 1 && memcmp(m, TR__END_METHOD, mlen) == 0) {
        /* (no handle of the actor is left: the calls before this one have their replies;
         * the loop ends as on SIGTERM, and the worker exits orderly) */
        begin_end(w, NULL);
        return tr__result_frame(out, seq, 0, "", 0);
    }
    for (size_t i = 0; builtin && i < w->n_builtins; i++) {
        const tr__worker_builtin *b = &w->builtins[i];
        if (strlen(b->name) != mlen || memcmp(b->name, m, mlen) != 0) continue;
        tr__buf_reset(&ctx->result);
        ctx->has_err = 0;
        int r = b->fn(&w->env, ctx, args, alen);
        if (r != 0 || ctx->result.oom)
            return tr__result_frame(out, seq, r ? r : TR_ENOMEM,
                                    ctx->has_err ? ctx->err : tr__last_error(),
                                    strlen(ctx->has_err ? ctx->err : tr__last_error()) + 1);
        return tr__result_frame(out, seq, 0, ctx->result.data, ctx->result.len);
    }
    tr_method_def own;
    const tr_method_def *def =
        tr__find_method_or_dispatch(w->cls, m, mlen, &own, ctx->method_buf, sizeof ctx->method_buf);
    if (!def) {
        char msg[400];
        int k = snprintf(msg, sizeof msg, "class '%s' has no method '%.*s'", w->cls->name,
                         (int)(mlen > 200 ? 200 : mlen), m);
        return tr__result_frame(out, seq, TR_ENOMETHOD, msg, (size_t)k + 1);
    }
    if (n_refs) {
        /* (its arguments may wait for a call queued after it, which must not wait for it:
         * the next call may begin) */
        worker_idle(w);
        tr__ctx_started(ctx);
        int rr = resolve_refs(w, ctx, out, seq, refs, n_refs, inl, inl_len);
        if (rr) return rr < 0 ? TR_ENOMEM : 0;
    }
    tr__buf_reset(&ctx->result);
    drop_result_obj(ctx);
    ctx->has_err = 0;
    pthread_mutex_t *mu = w->pool ? NULL : &method_mu; /* (N > 1: no lock between calls) */
    if (mu && pthread_mutex_trylock(mu) != 0) {        /* (a graph's step runs: it may need the
                                                        * binding's lock) */
        worker_idle(w);
        tr__method_lock(mu, &method_mu_wanted);
    }
    ctx->method = def->name;
    if (w->board) { /* (its caller can cancel the call: tr_ctx_canceled; one on another
                     * node through our relay) */
        if (w->task_worker) __atomic_store_n(&w->board->busy, 1, __ATOMIC_RELAXED);
        ctx->board = w->board;
        ctx->cancel_word = c->relayed ? (c->tag ? tr__board_relay_cancel_word(c->tag, seq) : 0)
                           : c->caller >= 0 ? tr__board_cancel_word(c->caller, seq)
                                            : 0;
    }
    /* a C method has begun once entered; a binding's dispatch says when (tr_ctx_started:
     * its call may go on elsewhere, e.g. on an event loop) */
    if (def->fn != w->cls->dispatch) tr__ctx_started(ctx);
    ctx->yield_w = w; /* (tr_ctx_yield's items go to c, before the RESULT) */
    ctx->yield_c = c;
    ctx->yield_seq = seq;
    /* (canceled before it started here: it is not run; its caller dropped it already) */
    int64_t t0 = tr__now_ns();
    ctx->failed = 0;
    tr__trace_method = def->name; /* (what its collective ops were called from) */
    int book_was = tr__book_on;   /* (its collective ops' accounting gathered, and sent out
                                   * before its reply leaves: core/trace.h) */
    tr__book_on = 1;
    int r = tr__ctx_canceled(ctx) ? tr__ctx_error(ctx, "canceled (tr_cancel) before it ran")
                                  : def->fn(ctx, w->self, args, alen);
    if (ctx != &w->ctx) worker_idle(w); /* (a pool's thread: it waits for its next call) */
    tr__book_flush();
    tr__book_on = book_was;
    tr__trace_method = NULL;
    ctx->yield_w = ctx->yield_c = NULL;
    int64_t t1 = tr__now_ns();
    if (ended) *ended = t1;
    /* (the timeline: the call's run, linked to its submission by a caller on this node; the
     * loop's own go in with its replies, flush_client) */
    uint64_t flow = c->pid > 0 && !c->relayed ? tr__trace_call_flow(c->pid, w->ctx.id.b, seq) : 0;
    if (ctx != &w->ctx) {
        tr__trace_ev_add(TR__EV_RUN, t0, t1, def->name, strlen(def->name), flow, 0,
                         r != 0 || ctx->failed);
    } else {
        if (w->runs.n == TR__BURST) tr__burst_flush(&w->runs, TR__EV_RUN, NULL);
        tr__burst_push_flow(&w->runs, t0, t1, def->name, flow, r != 0 || ctx->failed);
    }
    if (w->board) { /* (the node's metrics: calls by class, their durations; the loop's
                     * own go in when its replies go out: flush_client) */
        int failed = r != 0 || ctx->result.oom || ctx->failed;
        if (ctx == &w->ctx)
            tr__hist_add_local(&w->calls_run, (uint64_t)(t1 - t0), failed);
        else
            tr__board_count_call(w->board, (uint64_t)(t1 - t0), failed);
        ctx->cancel_word = 0;
        if (w->task_worker) __atomic_store_n(&w->board->busy, 0, __ATOMIC_RELAXED);
    }
    ctx->method = NULL;
    if (mu) pthread_mutex_unlock(mu);
    if (n_refs) unpin_refs(w, ctx, refs);
    if (ctx->exiting) { /* (tr_ctx_exit_actor: whatever it replied, its caller hears why) */
        ctx->exiting = 0;
        drop_result_obj(ctx);
        if (ctx != &w->ctx) { /* (a pool thread's: the loop's drain waits for its reply) */
            ctx->ended_actor = 1;
            __atomic_store_n(&w->end_reply, 1, __ATOMIC_RELEASE);
        }
        begin_end(w, ctx->exit_why);
        char msg[700], hex[33];
        tr__hex(w->ctx.id.b, 16, hex);
        int k = snprintf(msg, sizeof msg, "the actor %s ended in method '%.200s': %s", hex,
                         def->name, ctx->exit_why);
        size_t n = k < 0 ? 0 : (size_t)k < sizeof msg ? (size_t)k : sizeof msg - 1;
        return tr__result_frame(out, seq, TR__RC_ACTOR_ENDED, msg, n + 1);
    }
    if (r != 0 || ctx->result.oom) {
        drop_result_obj(ctx);
        if (!ctx->has_err) {
            if (ctx->result.oom)
                snprintf(ctx->err, sizeof ctx->err, "method '%s': out of memory for its result",
                         def->name);
            else
                snprintf(ctx->err, sizeof ctx->err, "method '%s' returned %d", def->name, r);
        }
        return tr__result_frame(out, seq, TR_ETASK, ctx->err, strlen(ctx->err) + 1);
    }
    if (ctx->has_result_obj) {
        ctx->has_result_obj = 0; /* ours to transfer or release now */
        return send_container(w, ctx->result_obj, c, out, seq);
    }
    if (ctx->result.len > TR__INLINE_RESULT_MAX && w->objects && c->caller >= 0 && !c->relayed)
        return store_result(w, c, out, seq, ctx->result.data, ctx->result.len);
    if (ctx->result.len + 64 > w->max_msg) {
        snprintf(ctx->err, sizeof ctx->err,
                 "method '%s': its result of %zu bytes exceeds the message limit of %zu "
                 "(max_message_bytes)",
                 def->name, ctx->result.len, w->max_msg);
        return tr__result_frame(out, seq, TR_EMSGSIZE, ctx->err, strlen(ctx->err) + 1);
    }
    return tr__result_frame(out, seq, 0, ctx->result.data, ctx->result.len);
}

/* Writes what it can without blocking. Returns 0, or -1 if the caller went away (c is
 * freed then). */
/* Moves results to the client's ring; rings its doorbell if it sleeps. Returns 0, or
 * TR_EPROTO if the ring is broken. Caller holds what guards c->out. */
static int ring_flush(client *c) {
    int wake = 0;
    if (tr__ring_write(c->ring, &c->out, &wake) < 0) return TR_EPROTO;
    if (tr__buf_avail(&c->out)) { /* (full: the caller rings once it reads) */
        tr__ring_want_room(c->ring);
        if (tr__ring_write(c->ring, &c->out, &wake) < 0) return TR_EPROTO;
    }
    if (wake) tr__send_empty_frame(c->fd, TR__MSG_WAKE, 0);
    return 0;
}

static int flush_client(worker *w, client *c) {
    /* the loop's calls run so far are counted before their replies go: a caller that has
     * its reply finds the call in the node's metrics (a few atomic adds a batch, not three
     * a call) */
    if (w->calls_run.n && w->board) tr__hist_merge(&w->board->call, &w->calls_run);
    tr__burst_flush(&w->runs, TR__EV_RUN, NULL); /* (and onto the timeline, one add) */
    if (c->ring) {
        if (!ring_flush(c)) return 0;
        TR_LOG_WARN_LIMITED("WORKER-RING", "dropping a caller: %s", tr__last_error());
        drop_client(w, c);
        return -1;
    }
    if (tr__write_some(c->fd, &c->out)) {
        drop_client(w, c); /* caller gone: its calls' results have nowhere to go */
        return -1;
    }
    int want = tr__buf_avail(&c->out) > 0; /* the socket is full: told when it takes more */
    if (want != c->want_out) {
        struct epoll_event ev = {.events = want ? EPOLLIN | EPOLLOUT : EPOLLIN, .data.ptr = c};
        epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want;
    }
    return 0;
}

/* The CALLER frame (consumed here): the caller's object store index; a relay's also says
 * so, and its tag for the connection. */
static void on_caller_frame(client *c, const char *body, size_t len) {
    tr__dec d;
    int64_t idx = -1, relayed = 0, tag = 0;
    if (tr__dec_init(&d, body, len) == 0) {
        size_t k = tr__obj_len(d.root);
        if (k >= 1 && k <= 3) tr__obj_int(tr__obj_at(d.root, 0), "client", &idx);
        if (k == 2 || k == 3) tr__obj_int(tr__obj_at(d.root, 1), "relayed", &relayed);
        if (k == 3) tr__obj_int(tr__obj_at(d.root, 2), "tag", &tag);
        tr__dec_free(&d);
    }
    c->caller = idx >= 0 && idx < 256 ? (int)idx : -1;
    c->relayed = relayed == 1;
    c->tag = c->relayed && tag > 0 && tag <= TR__BOARD_TAG_MAX ? (unsigned)tag : 0;
    tr__buf_consume(&c->in, TR__FRAME_HDR + len);
}

/* ------------------------------------------------------------------ max_concurrency > 1
 *
 * The loop reads calls and queues them; a pool of threads (one made whenever a call is
 * queued and no thread is idle, up to max_concurrency; they live as long as the worker)
 * runs them, each on a tr_ctx of its own and with no method lock, and writes each result
 * to its caller's socket as it is done: results come back in the order calls finish (the
 * caller matches them by seq). The pools' lock (one for all of them) guards the queues and
 * each client's out buffer; the loop still owns reading, accepting and dropping clients.
 * An actor with concurrency groups has a pool per group beside its default one, and the
 * loop queues each call on its group's (group_of). */

/* A call for the pool: a copy of its frame's body (the loop's read buffer moves on). */
typedef struct job {
    struct job *next;
    client *c;
    uint64_t seq;
    int after_end; /* it came after the actor's end call: not run */
    size_t len;
    char body[];
} job;

typedef struct pool {
    pthread_mutex_t *mu;    /* the worker's pool_mu */
    pthread_cond_t cv;      /* a job queued, or stop */
    pthread_cond_t done_cv; /* a thread ended */
    job *head, *tail;
    size_t queued;
    int max, threads, idle, stop;
    /* calls begin in the order they were queued: each takes a ticket as it is taken off
     * the queue and waits until the gate reaches it; the gate moves on once the call
     * before has begun (its method was entered, or, through a class's dispatch, said so:
     * tr_ctx_started) or ended */
    uint64_t next_ticket, gate;
    pthread_cond_t gate_cv;
    worker *w;
} pool;

void tr__ctx_started(tr_ctx *ctx) {
    pool *p = ctx ? ctx->gate : NULL;
    if (!p || ctx->gate_open) return;
    ctx->gate_open = 1;
    pthread_mutex_lock(p->mu);
    p->gate++;
    pthread_cond_broadcast(&p->gate_cv);
    pthread_mutex_unlock(p->mu);
}

static void ctx_init(tr_ctx *ctx, const worker *w) {
    memset(ctx, 0, sizeof *ctx);
    ctx->rt = w->ctx.rt;
    ctx->id = w->ctx.id;
    ctx->objects = w->objects;
}

static void ctx_free(tr_ctx *ctx) {
    tr__buf_free(&ctx->result);
    drop_result_obj(ctx);
    free(ctx->ref_data);
    free(ctx->ref_len);
}

/* A concurrency group: its name, its methods ("m1,m2"), its pool. */
typedef struct cgroup {
    char name[64];
    char *methods;
    pool *pool;
} cgroup;

/* Sends what c->out holds now; asks the loop to finish it when the socket is full, and
 * has the loop drop a caller whose socket broke (it sees EOF). Caller holds pool_mu. */
static void pool_flush_locked(worker *w, client *c) {
    if (c->ring) {
        if (ring_flush(c)) { /* (the loop drops it) */
            shutdown(c->fd, SHUT_RDWR);
            tr__buf_reset(&c->out);
            c->broken = 1;
        }
        return;
    }
    if (tr__write_some(c->fd, &c->out)) {
        shutdown(c->fd, SHUT_RDWR);
        tr__buf_reset(&c->out);
        c->broken = 1;
    }
    int want = tr__buf_avail(&c->out) > 0;
    if (want != c->want_out) {
        struct epoll_event ev = {.events = want ? EPOLLIN | EPOLLOUT : EPOLLIN, .data.ptr = c};
        epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want;
    }
}

/* The ctx's call, for tr_ctx_yield: its worker and client, or TR_ESTATE. */
static int yield_to(tr_ctx *ctx, worker **w, client **c) {
    *w = ctx ? ctx->yield_w : NULL;
    *c = ctx ? ctx->yield_c : NULL;
    if (*w && *c) return 0;
    return tr__err(TR_ESTATE, "tr_ctx_yield: not in an actor's call or a task (a compiled "
                              "graph's step cannot yield)");
}

/* One item to c now, as an ITEM frame (a RESULT's body, any of its forms), before the
 * call's RESULT: made and sent on the loop's thread (whose call runs now: c is ours), or
 * under pool_mu on a pool's, so that nothing is handed to a caller that went (obj, a
 * container made for it, is released then). A caller gone, or whose connection broke,
 * is TR_ECANCELED: the generator may stop. */
static int yield_item(tr_ctx *ctx, worker *w, client *c, const void *data, size_t len,
                      const tr_ref *obj) {
    tr__buf b = TR__BUF_INIT;
    uint64_t seq = ctx->yield_seq;
    int rc;
    if (w->pool) pthread_mutex_lock(&w->pool_mu);
    if (c->gone || c->broken) {
        rc = tr__err(TR_ECANCELED, "tr_ctx_yield: the caller went");
        if (obj) tr__objects_release(w->objects, *obj);
    } else if (obj) {
        rc = send_container(w, *obj, c, &b, seq);
    } else if (len > TR__INLINE_RESULT_MAX && w->objects && c->caller >= 0 && !c->relayed) {
        rc = store_result(w, c, &b, seq, data, len);
    } else {
        rc = tr__result_frame(&b, seq, 0, data, len);
    }
    if (!rc && !tr__buf_avail(&b)) rc = tr__err(TR_ENOMEM, "tr_ctx_yield: out of memory");
    if (!rc) {
        b.data[b.off + offsetof(tr__frame_hdr, type)] = TR__MSG_ITEM;
        if (tr__buf_append(&c->out, b.data + b.off, tr__buf_avail(&b))) {
            /* (what the frame hands over goes with the caller's connection) */
            shutdown(c->fd, SHUT_RDWR);
            c->broken = 1;
            rc = tr__err(TR_ENOMEM, "tr_ctx_yield: out of memory");
        } else {
            pool_flush_locked(w, c); /* (a broken caller: the loop drops it) */
        }
    }
    if (w->pool) pthread_mutex_unlock(&w->pool_mu);
    tr__buf_free(&b);
    return rc;
}

/* Items take a RESULT's forms: inline, an object of the store handed to the caller (over
 * TR__INLINE_RESULT_MAX), a container (with refs). A failure to store one (a full store)
 * is the item's: its ref's get says why. */
int tr__ctx_yield(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs, size_t n) {
    if (!ctx || (!data && len) || (!refs && n) || n > (1u << 20))
        return tr__err(TR_EINVAL, "tr_ctx_yield: bad arguments");
    worker *w;
    client *c;
    int rc = yield_to(ctx, &w, &c);
    if (rc) return rc;
    if (n) {
        if (!w->objects) return tr__err(TR_ESTATE, "tr_ctx_yield_contains: no object store");
        tr_ref obj;
        rc = tr__objects_put_refs(w->objects, data, len, refs, n, &obj);
        return rc ? rc : tr__ctx_yield_object(ctx, obj);
    }
    if (len + 64 > w->max_msg && (c->relayed || c->caller < 0 || !w->objects))
        return tr__err(TR_EMSGSIZE,
                       "tr_ctx_yield: an item of %zu bytes exceeds the message limit of %zu "
                       "(max_message_bytes)",
                       len, w->max_msg);
    return yield_item(ctx, w, c, data, len, NULL);
}

int tr__ctx_yield_object(tr_ctx *ctx, tr_ref obj) {
    worker *w;
    client *c;
    int rc = yield_to(ctx, &w, &c);
    if (rc) {
        if (ctx && ctx->objects) tr__objects_release(ctx->objects, obj);
        return rc;
    }
    return yield_item(ctx, w, c, NULL, 0, &obj);
}

static void *pool_thread(void *arg) {
    pool *p = arg;
    worker *w = p->w;
    tr_ctx *ctx = malloc(sizeof *ctx);
    tr__buf out = TR__BUF_INIT;
    pthread_mutex_lock(p->mu);
    if (ctx) ctx_init(ctx, w);
    while (ctx) {
        while (!p->head && !p->stop) {
            p->idle++;
            pthread_cond_wait(&p->cv, p->mu);
            p->idle--;
        }
        if (p->stop) break;
        job *j = p->head;
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        p->queued--;
        client *c = j->c;
        uint64_t ticket = p->next_ticket++;
        while (p->gate != ticket && !p->stop)
            pthread_cond_wait(&p->gate_cv, p->mu);
        /* (a call whose caller went is not run, nor one that came after the actor's end:
         * its caller hears TR_EACTOR_DIED as the worker goes) */
        if (c->gone || p->stop || j->after_end || __atomic_load_n(&w->exited, __ATOMIC_ACQUIRE)) {
            p->gate++;
            pthread_cond_broadcast(&p->gate_cv);
        } else {
            ctx->gate = p;
            ctx->gate_open = 0;
            pthread_mutex_unlock(p->mu);
            tr__buf_reset(&out);
            int rc = run_call(w, ctx, c, &out, j->seq, j->body, j->len, NULL);
            tr__ctx_started(ctx); /* (if it had not: it ended) */
            ctx->gate = NULL;
            pthread_mutex_lock(p->mu);
            if (!c->gone) {
                if (rc || tr__buf_append(&c->out, out.data + out.off, tr__buf_avail(&out))) {
                    TR_LOG_WARN_LIMITED("WORKER-BADCALL", "dropping a caller: %s",
                                        tr__last_error());
                    shutdown(c->fd, SHUT_RDWR); /* the loop drops it */
                } else {
                    pool_flush_locked(w, c);
                }
            }
            if (ctx->ended_actor) { /* (its reply is out, or its caller gone: under pool_mu) */
                ctx->ended_actor = 0;
                __atomic_store_n(&w->end_reply, 0, __ATOMIC_RELEASE);
            }
        }
        if (--c->refs == 0 && c->gone) free_client(c);
        free(j);
    }
    pthread_mutex_unlock(p->mu);
    if (ctx) ctx_free(ctx);
    free(ctx);
    tr__buf_free(&out);
    pthread_mutex_lock(p->mu);
    p->threads--;
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(p->mu);
    return NULL;
}

/* One more thread. Caller holds pool_mu. Returns 0 or TR_ENOMEM. */
static int pool_spawn(pool *p) {
    pthread_attr_t at;
    pthread_t t;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &at, pool_thread, p);
    pthread_attr_destroy(&at);
    if (e) return tr__err(TR_ENOMEM, "a thread for the actor's calls: %s", strerror(e));
    p->threads++;
    return 0;
}

static pool *pool_create(worker *w, int max) {
    pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->mu = &w->pool_mu;
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    pthread_cond_init(&p->gate_cv, NULL);
    p->max = max;
    p->w = w;
    pthread_mutex_lock(p->mu);
    int rc = pool_spawn(p); /* one from the start: a call never waits for a thread to exist */
    pthread_mutex_unlock(p->mu);
    if (rc) {
        free(p);
        return NULL;
    }
    return p;
}

/* The actor's concurrency groups from their encoding ("name=max:m1,m2;...", control.c;
 * NULL: none), each with a pool of its own. 1, or 0 (no memory or thread). */
static int parse_groups(worker *w, const char *enc) {
    if (!enc || !*enc) return 1;
    size_t n = 1;
    for (const char *c = enc; *c; c++)
        n += *c == ';';
    if (!(w->groups = calloc(n, sizeof *w->groups))) return 0;
    for (const char *at = enc; at && *at && w->n_groups < n;) {
        const char *end = strchr(at, ';'), *eq = strchr(at, '='), *colon = strchr(at, ':');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (!eq || !colon || eq > colon || (size_t)(colon - at) >= len ||
            (size_t)(eq - at) >= sizeof w->groups->name)
            break; /* (the node passes what control.c checked) */
        cgroup *g = &w->groups[w->n_groups];
        memcpy(g->name, at, (size_t)(eq - at));
        g->name[eq - at] = '\0';
        long max = strtol(eq + 1, NULL, 10); /* (bounded as control.c bounds it) */
        max = max < 1 ? 1 : max > TR__MAX_CONCURRENCY ? TR__MAX_CONCURRENCY : max;
        g->methods = strndup(colon + 1, len - (size_t)(colon + 1 - at));
        if (!g->methods || !(g->pool = pool_create(w, (int)max))) {
            free(g->methods);
            return 0;
        }
        w->n_groups++;
        at = end ? end + 1 : NULL;
    }
    return 1;
}

/* Whether a call's frame body is the actor's end (TR__END_METHOD). */
static int is_end_call(const char *body, size_t len) {
    const char *m;
    size_t mlen, alen, n_refs, inl_len;
    const void *args, *refs, *inl;
    if (tr__call_parse(body, len, &m, &mlen, &args, &alen, &refs, &n_refs, &inl, &inl_len))
        return 0;
    return mlen == sizeof TR__END_METHOD - 1 && memcmp(m, TR__END_METHOD, mlen) == 0;
}

/* Queues a call of c on p (the loop's thread). A call read after the actor's end call
 * (from any caller: the loop reads in order) is queued marked, and not run: the calls
 * queued before it, in every pool, still are. Returns 0 or TR_ENOMEM. */
static int pool_submit(worker *w, pool *p, client *c, uint64_t seq, const char *body, size_t len) {
    job *j = malloc(sizeof *j + len);
    if (!j) return tr__err(TR_ENOMEM, "queueing a call of %zu bytes", len);
    j->next = NULL;
    j->c = c;
    j->seq = seq;
    j->after_end = w->end_queued;
    if (!w->end_queued && is_end_call(body, len)) w->end_queued = 1;
    j->len = len;
    memcpy(j->body, body, len);
    pthread_mutex_lock(p->mu);
    c->refs++;
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->queued++;
    if (p->queued > (size_t)p->idle && p->threads < p->max) pool_spawn(p); /* (else: later) */
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(p->mu);
    return 0;
}

/* The loop lets go of a client: its calls queued are not run, those running reply to
 * nobody; the last of them frees it. */
static void pool_drop_client(worker *w, client *c) {
    pool *p = w->pool;
    pthread_mutex_lock(p->mu);
    epoll_ctl(w->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    c->gone = 1;
    int last = c->refs == 0;
    pthread_mutex_unlock(p->mu);
    if (last) free_client(c);
}

/* Stops the pool: queued calls are dropped, running ones finish. Returns the threads
 * still in a method after wait_ms (0: all ended, and the pool is freed). */
static int pool_stop(pool *p, int wait_ms) {
    pthread_mutex_lock(p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->gate_cv);
    while (p->head) {
        job *j = p->head;
        p->head = j->next;
        if (--j->c->refs == 0 && j->c->gone) free_client(j->c);
        free(j);
    }
    p->tail = NULL;
    p->queued = 0;
    pthread_cond_broadcast(&p->cv);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (p->threads > 0)
        if (pthread_cond_timedwait(&p->done_cv, p->mu, &until) == ETIMEDOUT) break;
    int left = p->threads;
    pthread_mutex_unlock(p->mu);
    if (left) return left;
    pthread_cond_destroy(&p->gate_cv);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
    return 0;
}

/* Whether the list "m1,m2" names method m (n bytes). */
static int lists(const char *list, const char *m, size_t n) {
    for (const char *at = list; at && *at;) {
        const char *end = strchr(at, ',');
        size_t k = end ? (size_t)(end - at) : strlen(at);
        if (k == n && memcmp(at, m, n) == 0) return 1;
        at = end ? end + 1 : NULL;
    }
    return 0;
}

/* The concurrency group of a call of method m (mlen bytes): the one its "@group" names
 * (-2 if none of the actor's is), else the one that lists it, else -1 (the default); *base
 * gets the method's own name's length. */
static int group_of(const worker *w, const char *m, size_t mlen, size_t *base) {
    const char *at = memchr(m, '@', mlen);
    *base = at ? (size_t)(at - m) : mlen;
    for (size_t i = 0; i < w->n_groups; i++) {
        const char *g = w->groups[i].name;
        if (at ? strlen(g) == mlen - *base - 1 && memcmp(g, at + 1, mlen - *base - 1) == 0
               : lists(w->groups[i].methods, m, mlen))
            return (int)i;
    }
    return at ? -2 : -1;
}

/* The pool a call's frame body goes to (the default one where it cannot be parsed, or
 * names no group of the actor's: run_call fails it). */
static pool *pool_of(worker *w, const char *body, size_t len) {
    if (!w->n_groups) return w->pool;
    const char *m;
    size_t mlen, alen, n_refs, inl_len, base;
    const void *args, *refs, *inl;
    if (tr__call_parse(body, len, &m, &mlen, &args, &alen, &refs, &n_refs, &inl, &inl_len))
        return w->pool;
    int g = group_of(w, m, mlen, &base);
    return g >= 0 ? w->groups[g].pool : w->pool;
}

/* The caller's RING frame (consumed): the memfd it passed with the frame mapped, its
 * calls and our results on the rings from the next byte; answered on the socket (seq 0:
 * on; else a TR_* code, and the socket goes on as before). A relay's connection, a second
 * RING, one without a descriptor or after calls, is refused. Returns 0, or -1 if the
 * answer did not go (the caller is dropped). */
static int on_ring_frame(worker *w, client *c) {
    if (w->pool) pthread_mutex_lock(&w->pool_mu);
    int rc;
    if (c->ring || c->relayed || c->passed_fd < 0 || c->refs || tr__buf_avail(&c->out)) {
        rc = tr__err(TR_EPROTO, "a RING frame without its descriptor, or after calls");
    } else {
        rc = tr__ring_attach(c->passed_fd, &c->ring);
        c->passed_fd = -1;
    }
    if (rc) TR_LOG_WARN_LIMITED("WORKER-RING", "call rings refused: %s", tr__last_error());
    int sent = tr__send_empty_frame(c->fd, TR__MSG_RING, rc ? (uint64_t)(int64_t)rc : 0);
    if (sent && c->ring) { /* (the caller would wait for the answer) */
        tr__ring_free(c->ring);
        c->ring = NULL;
    }
    if (!rc && !sent) w->n_rings++;
    if (w->pool) pthread_mutex_unlock(&w->pool_mu);
    return sent ? -1 : 0;
}

/* Reads what came for c: its socket's bytes (sock: it is readable) into in, or, with
 * rings, its doorbells from the socket (dropped) and the ring's bytes into in. Returns 1
 * if the caller is gone or broke its side (its socket's end, a bad ring, a frame other
 * than WAKE on the socket), else 0. The loop's thread. */
static int client_read(client *c, int sock) {
    if (!c->ring) return sock && tr__read_some_fd(c->fd, &c->in, &c->passed_fd) < 0;
    int gone = sock && tr__read_some(c->fd, &c->ctl) < 0;
    for (;;) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&c->ctl, 0, &h, &body);
        if (r == 0) break;
        if (r < 0 || h.type != TR__MSG_WAKE) {
            TR_LOG_WARN_LIMITED("WORKER-BADFRAME", "dropping a caller: %s on its socket",
                                r < 0 ? tr__last_error() : "a frame other than WAKE");
            tr__buf_reset(&c->ctl);
            return 1;
        }
        tr__buf_consume(&c->ctl, TR__FRAME_HDR);
    }
    int wake = 0;
    if (tr__ring_read(c->ring, &c->in, &wake) < 0) {
        TR_LOG_WARN_LIMITED("WORKER-RING", "dropping a caller: %s", tr__last_error());
        return 1;
    }
    if (wake) tr__send_empty_frame(c->fd, TR__MSG_WAKE, 0);
    return gone;
}

/* The RING frame at the front of c->in (its body len bytes): consumed and answered; once
 * the rings are on, the socket's bytes after it are doorbells. Returns 0, or -1 if c was
 * dropped (the answer did not go). */
static int take_ring_frame(worker *w, client *c, size_t len) {
    tr__buf_consume(&c->in, TR__FRAME_HDR + len);
    if (on_ring_frame(w, c)) {
        drop_client(w, c);
        return -1;
    }
    if (c->ring) {
        tr__buf_append(&c->ctl, c->in.data + c->in.off, tr__buf_avail(&c->in));
        tr__buf_reset(&c->in);
    }
    return 0;
}

static void on_client_pooled(worker *w, client *c, uint32_t events) {
    pool *p = w->pool;
    if ((events & EPOLLOUT) || c->ring) { /* (a ring's room comes with a doorbell) */
        pthread_mutex_lock(p->mu);
        pool_flush_locked(w, c);
        pthread_mutex_unlock(p->mu);
    }
    int sock = (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0;
    if (!sock && !c->ring) return;
    int closing = client_read(c, sock);
    for (;;) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&c->in, w->max_msg, &h, &body);
        if (r == 0) break;
        if (r > 0 && h.type == TR__MSG_CALLER) {
            on_caller_frame(c, body, h.len);
            continue;
        }
        if (r > 0 && h.type == TR__MSG_RING) {
            if (take_ring_frame(w, c, h.len)) return; /* (c was dropped) */
            continue;
        }
        if (r < 0 || h.type != TR__MSG_CALL ||
            pool_submit(w, pool_of(w, body, h.len), c, h.seq, body, h.len)) {
            TR_LOG_WARN_LIMITED("WORKER-BADFRAME", "dropping a caller: %s",
                                r < 0 ? tr__last_error() : "unexpected message type");
            if (r == TR_EMSGSIZE) {
                pthread_mutex_lock(p->mu);
                if (!tr__result_frame(&c->out, h.seq, r, "", 1)) tr__write_some(c->fd, &c->out);
                pthread_mutex_unlock(p->mu);
            }
            drop_client(w, c);
            return;
        }
        tr__buf_consume(&c->in, TR__FRAME_HDR + h.len);
    }
    if (closing) drop_client(w, c);
}

static void on_client(worker *w, client *c, uint32_t events) {
    if ((events & EPOLLOUT) && flush_client(w, c)) return;
    int sock = (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) != 0;
    if (!sock && !c->ring) return;
    int closing = client_read(c, sock);
    int64_t t0 = 0; /* the clock at the batch's first call, then each call's end */
    for (;;) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&c->in, w->max_msg, &h, &body);
        if (r == 0) break;
        if (r > 0 && h.type == TR__MSG_CALLER) {
            on_caller_frame(c, body, h.len);
            continue;
        }
        if (r > 0 && h.type == TR__MSG_RING) {
            if (take_ring_frame(w, c, h.len)) return; /* (c was dropped) */
            continue;
        }
        if (r < 0 || h.type != TR__MSG_CALL) {
            TR_LOG_WARN_LIMITED("WORKER-BADFRAME", "dropping a caller: %s",
                                r < 0 ? tr__last_error() : "unexpected message type");
            if (r == TR_EMSGSIZE) tr__result_frame(&c->out, h.seq, r, "", 1);
            if (flush_client(w, c) == 0) drop_client(w, c);
            return;
        }
        if (stop_requested) break; /* (the actor ends: no call after that runs) */
        if (!t0) t0 = tr__now_ns();
        int64_t t1 = 0; /* (the method's own end: no clock read of the loop's own a call) */
        if ((r = run_call(w, &w->ctx, c, &c->out, h.seq, body, h.len, &t1))) {
            TR_LOG_WARN_LIMITED("WORKER-BADCALL", "dropping a caller: %s", tr__last_error());
            drop_client(w, c);
            return;
        }
        tr__buf_consume(&c->in, TR__FRAME_HDR + h.len);
        if (!t1) t1 = tr__now_ns();
        /* Replies to a batch of quick calls go out together; after a slow call (or a lot
         * of output) flush now, so no result waits behind the calls queued after it. */
        if ((t1 - t0 > FLUSH_AFTER_NS || tr__buf_avail(&c->out) > FLUSH_BYTES) &&
            flush_client(w, c))
            return;
        t0 = t1;
    }
    if (flush_client(w, c)) return;
    if (closing) drop_client(w, c);
}

static void on_accept(worker *w) {
    for (;;) {
        int fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        client *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->caller = -1;
        c->passed_fd = -1;
        struct ucred cred;
        socklen_t clen = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == 0) c->pid = cred.pid;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = w->clients;
        w->clients = c;
    }
}

/* Whether a client's ring has calls to read. */
static int rings_readable(const worker *w) {
    if (!w->n_rings) return 0;
    for (const client *c = w->clients; c; c = c->next)
        if (c->ring && tr__ring_readable(c->ring)) return 1;
    return 0;
}

/* The loop sleeps (on): its callers ring after they write; or it is awake again. */
static void rings_sleep(worker *w, int on) {
    for (client *c = w->clients; c; c = c->next)
        if (c->ring) on ? tr__ring_sleep(c->ring) : tr__ring_wake(c->ring);
}

/* Whether a client's results wait for room on its ring (the caller rings once it reads;
 * the loop looks again every RING_ROOM_MS all the same). */
static int rings_stuck(worker *w) {
    int stuck = 0;
    if (!w->n_rings) return 0;
    if (w->pool) pthread_mutex_lock(&w->pool_mu);
    for (client *c = w->clients; c && !stuck; c = c->next)
        stuck = c->ring && tr__buf_avail(&c->out) > 0;
    if (w->pool) pthread_mutex_unlock(&w->pool_mu);
    return stuck;
}

/* Sends what waits for room on the clients' rings. */
static void rings_push(worker *w) {
    for (client *c = w->clients, *next; c; c = next) {
        next = c->next; /* (c may be dropped, no other) */
        if (!c->ring) continue;
        if (w->pool) {
            pthread_mutex_lock(&w->pool_mu);
            if (tr__buf_avail(&c->out)) pool_flush_locked(w, c);
            pthread_mutex_unlock(&w->pool_mu);
        } else if (tr__buf_avail(&c->out)) {
            flush_client(w, c);
        }
    }
}

/* Takes the calls on the clients' rings (run here, or queued for the pool). */
static void rings_serve(worker *w) {
    for (client *c = w->clients, *next; c; c = next) {
        next = c->next; /* (c may be dropped, no other) */
        if (!c->ring || !tr__ring_readable(c->ring)) continue;
        if (w->pool)
            on_client_pooled(w, c, 0);
        else
            on_client(w, c, 0);
    }
}

static int report_failure(tr__nodeconn *node, const uint8_t id[16], uint64_t inc, const char *msg) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 3);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    tr__enc_str(&b, "inc");
    tr__enc_uint(&b, inc);
    tr__enc_str(&b, "msg");
    tr__enc_str(&b, msg);
    tr__nodeconn_call(node, TR__MSG_WORKER_FAILED, &b, NODE_TIMEOUT_MS, NULL);
    tr__buf_free(&b);
    TR_LOG_INFO("WORKER-FAILED", "%s", msg);
    return 1;
}

/* The node connection only ever carries replies to our own requests; when the loop sees
 * it readable between requests it is either EOF (the node is gone: exit) or a late reply
 * (drop it). */
static int node_gone(tr__nodeconn *node) {
    char tmp[4096];
    ssize_t n = recv(node->fd, tmp, sizeof tmp, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return 1;
    if (n < 0) return errno != EAGAIN && errno != EINTR;
    pthread_mutex_lock(&node->mu);
    tr__read_some(node->fd, &node->in);
    for (;;) {
        tr__frame_hdr h;
        const char *body;
        int r = tr__frame_parse(&node->in, node->max_msg, &h, &body);
        if (r <= 0) break;
        tr__buf_consume(&node->in, TR__FRAME_HDR + h.len);
    }
    pthread_mutex_unlock(&node->mu);
    return 0;
}

/* Whether a pool has calls queued or running. Under pool_mu. */
static int pool_busy(const pool *p) {
    return p && (p->head || p->threads > p->idle);
}

#define END_DRAIN_MS 10000

/* The actor ends (its last handle went): the calls it has taken finish and their replies
 * go out before its callers are dropped, for up to END_DRAIN_MS. Ended by a method
 * (tr_ctx_exit_actor), only the replies it has go out, that method's among them (a pool
 * thread's: end_reply), and no call taken after it runs. */
static void drain_for_end(worker *w) {
    int64_t until = tr__now_ns() + (int64_t)END_DRAIN_MS * 1000000;
    int calls = !__atomic_load_n(&w->exited, __ATOMIC_ACQUIRE);
    for (;;) {
        int busy = 0;
        if (w->pool) {
            pthread_mutex_lock(&w->pool_mu);
            busy =
                (calls && pool_busy(w->pool)) || __atomic_load_n(&w->end_reply, __ATOMIC_ACQUIRE);
            for (size_t i = 0; calls && i < w->n_groups; i++)
                busy |= pool_busy(w->groups[i].pool);
            for (client *c = w->clients; c; c = c->next) {
                if (!c->gone && !c->broken) pool_flush_locked(w, c);
                busy |= !c->gone && !c->broken && tr__buf_avail(&c->out) > 0;
            }
            pthread_mutex_unlock(&w->pool_mu);
        } else {
            for (client *c = w->clients, *next; c; c = next) {
                next = c->next;
                if (flush_client(w, c)) continue; /* (dropped) */
                busy |= tr__buf_avail(&c->out) > 0;
            }
        }
        if (!busy || tr__now_ns() >= until) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

int tr__worker_run(tr_runtime *rt, tr__nodeconn *node, tr__objects *objects, const tr_config *cfg,
                   const char *node_path, const char *actor_hex, const tr__worker_builtin *builtins,
                   size_t n_builtins) {
    worker w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.pool_mu, NULL); /* (never destroyed: a stuck call's thread may
                                             still take it as the process exits) */
    w.builtins = builtins;
    w.n_builtins = n_builtins;
    const char *gpus = getenv("TROUPE_GPUS"); /* set by the node at spawn */
    snprintf(gpu_ids, sizeof gpu_ids, "%s", gpus ? gpus : "");
    w.node = node;
    w.objects = objects;
    w.max_msg = cfg->max_msg;
    w.lfd = w.ep = w.wake_fd = -1;
    uint8_t id[16];
    /* If the node dies, so do we (the node reaps us; this covers SIGKILL of the node). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!actor_hex || tr__unhex(actor_hex, strlen(actor_hex), id, 16)) {
        TR_LOG_ERROR("WORKER-ENV", "TROUPE_ACTOR is missing or malformed");
        return 2;
    }
    tr__log_set_role("worker");
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    tr__reply r;
    int rc = tr__nodeconn_call(node, TR__MSG_WORKER_START, &b, NODE_TIMEOUT_MS, &r);
    tr__buf_free(&b);
    if (rc) {
        TR_LOG_ERROR("WORKER-START", "node refused: %s", tr__last_error());
        return 2;
    }
    char *cls_name = NULL, *path = NULL;
    const void *args = NULL;
    size_t args_len = 0;
    uint64_t inc = 0;
    if (tr__get_strdup(r.root, "class", &cls_name) || tr__get_strdup(r.root, "path", &path) ||
        tr__get_bin(r.root, "args", &args, &args_len) || tr__get_uint(r.root, "inc", &inc)) {
        TR_LOG_ERROR("WORKER-START", "bad reply: %s", tr__last_error());
        tr__reply_free(&r);
        return 2;
    }
    uint64_t node_max = 0; /* one limit per node: the workers adopt the node's */
    if (tr__get_uint(r.root, "max_msg", &node_max) == 0 && node_max >= 4096) {
        w.max_msg = (size_t)node_max;
        node->max_msg = (size_t)node_max;
    }
    uint64_t spin_us = 0; /* the node's "call_spin_us" (absent from an older node: none) */
    if (tr__get_uint(r.root, "spin_us", &spin_us) == 0 && spin_us <= 10000)
        w.spin_ns = (int64_t)spin_us * 1000;
    int status = 1;
    { /* (its events and collective ops, for the timeline and the flight recorder) */
        const char *label = cls_name;
        size_t label_len = strlen(cls_name);
        char own[64];
        if (tr__obj_type(tr__obj_get(r.root, "label")) == TR__T_STR)
            tr__get_str(r.root, "label", &label, &label_len);
        snprintf(own, sizeof own, "%.*s", (int)label_len, label);
        if (tr__trace_open(node_path, "worker", own, actor_hex))
            TR_LOG_WARN("WORKER-TRACE", "no timeline: %s", tr__last_error());
    }
    memcpy(w.ctx.id.b, id, 16);
    w.ctx.rt = rt;
    w.ctx.objects = objects;
    int task_worker = strcmp(cls_name, TR__TASKS_CLASS) == 0;
    if (task_worker) tr__tasks_note_self(&w.ctx.id);
    w.task_worker = task_worker;
    /* (on the board, a caller's tr_cancel reaches its calls; off it, when the board is full,
     * a canceled call still fails at its caller, and runs here) */
    w.board = objects ? tr__objects_board(objects, tr__id_key(w.ctx.id.b), 1) : NULL;
    if (w.board) /* (its collective ops are counted there too, for the node's metrics) */
        __atomic_store_n(&tr__coll_counters_self, &w.board->coll, __ATOMIC_RELEASE);
    if (w.board && task_worker) /* (a task waiting for its children: tasks.c's pick) */
        tr__actors_set_blocked_word(&w.board->blocked);
    w.cls = task_worker ? tasks_class(cfg) : tr__config_find_class(cfg, cls_name);
    if (!w.cls) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "no actor class '%s' is registered in this executable (tr_config_add_class)",
                 cls_name);
        report_failure(node, id, inc, msg);
        tr__reply_free(&r);
        goto out;
    }
    if (w.cls->ctor) {
        w.ctx.has_err = 0;
        int cr = w.cls->ctor(&w.ctx, args, args_len, &w.self);
        if (cr != 0 || w.ctx.exiting) {
            char msg[1100];
            if (w.ctx.exiting) /* (tr_ctx_exit_actor: it ends, never restarted) */
                snprintf(msg, sizeof msg, "the actor ended in its constructor: %s", w.ctx.exit_why);
            else
                snprintf(msg, sizeof msg, "constructor of '%s' failed: %s", cls_name,
                         w.ctx.has_err ? w.ctx.err : "it returned non-zero");
            report_failure(node, id, inc, msg);
            tr__reply_free(&r);
            goto out;
        }
    }
    int64_t conc = 1;
    if (tr__obj_get(r.root, "conc")) tr__get_int(r.root, "conc", &conc);
    char *groups = NULL; /* "name=max:m1,m2;..." (control.c) */
    if (tr__obj_type(tr__obj_get(r.root, "groups")) == TR__T_STR)
        tr__get_strdup(r.root, "groups", &groups);
    tr__reply_free(&r);
    int pools_ok = parse_groups(&w, groups);
    free(groups);
    if (pools_ok && (conc > 1 || w.n_groups) && !task_worker)
        pools_ok = (w.pool = pool_create(&w, (int)conc)) != NULL;
    if (!pools_ok) {
        report_failure(node, id, inc, "no memory or thread for the actor's call threads");
        goto out;
    }
    w.env = (tr__worker_env){rt,        w.ctx.id,  w.cls,  w.self, &method_mu, &method_mu_wanted,
                             node_path, w.max_msg, objects};

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    w.lfd = tr__unix_listen(path, 128);
    if (w.lfd < 0) {
        report_failure(node, id, inc, tr__last_error());
        goto out;
    }
    tr__set_nonblock(w.lfd, 1);
    w.ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w.lfd};
    epoll_ctl(w.ep, EPOLL_CTL_ADD, w.lfd, &ev);
    struct epoll_event nev = {.events = EPOLLIN, .data.ptr = &w.node};
    epoll_ctl(w.ep, EPOLL_CTL_ADD, node->fd, &nev);
    if ((w.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) >= 0) {
        struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &w.wake_fd};
        epoll_ctl(w.ep, EPOLL_CTL_ADD, w.wake_fd, &wev);
    }

    b = (tr__buf)TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    tr__enc_str(&b, "inc");
    tr__enc_uint(&b, inc);
    rc = tr__nodeconn_call(node, TR__MSG_WORKER_READY, &b, NODE_TIMEOUT_MS, NULL);
    tr__buf_free(&b);
    if (rc) {
        TR_LOG_ERROR("WORKER-READY", "node refused: %s", tr__last_error());
        goto out;
    }

    w.loop = pthread_self();
    struct epoll_event evs[64];
    tr__spin spin = {0}; /* (its callers' pace: whether polling pays) */
    while (!stop_requested) {
        /* After an event, poll for the next one a while before sleeping: a caller in a
         * loop sends its next call within microseconds, and a wake-up from sleep across
         * vCPUs costs more than the call (node config "call_spin_us"). */
        /* (with call rings, the polls look at the rings, and at the sockets every
         * RING_POLLS_PER_EPOLL polls; the sleep says so in each ring first) */
        /* (a lock the class's binding kept since its last method is kept into the poll,
         * KEEP_NS, for a next call that comes at once: its idle lets it go then, before
         * the sleep, and before anything else the loop does) */
        int n = epoll_wait(w.ep, evs, 64, 0);
        if (n == 0 && !rings_readable(&w)) {
            int64_t t0 = tr__now_ns(), until = t0 + w.spin_ns, keep = t0 + KEEP_NS, now = t0;
            int ready = 0;
            for (unsigned k = 1; n == 0 && !ready && w.spin_ns && tr__spin_try(&spin) &&
                                 tr__cpus_free() && (now = tr__now_ns()) < until;
                 k++) {
                if (now >= keep) {
                    worker_idle(&w);
                    keep = INT64_MAX;
                }
                tr__cpu_relax();
                ready = w.n_rings && rings_readable(&w);
                if (!w.n_rings || k % RING_POLLS_PER_EPOLL == 0) n = epoll_wait(w.ep, evs, 64, 0);
            }
            if (n == 0 && !ready) {
                worker_idle(&w);
                int stuck = rings_stuck(&w);
                rings_sleep(&w, 1);
                if (!rings_readable(&w)) n = epoll_wait(w.ep, evs, 64, stuck ? RING_ROOM_MS : -1);
                rings_sleep(&w, 0);
                if (stuck && n == 0) rings_push(&w); /* (room made without its doorbell) */
            }
            if ((n > 0 || ready) && w.spin_ns)
                tr__spin_waited(&spin, tr__now_ns() - t0, w.spin_ns, 1);
        }
        if (n != 0) worker_idle(&w);
        if (n < 0) {
            if (errno == EINTR) continue;
            TR_LOG_ERROR("WORKER-EPOLL", "%s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &w.lfd) {
                on_accept(&w);
            } else if (p == &w.wake_fd) {
                uint64_t v;
                if (read(w.wake_fd, &v, sizeof v) < 0) { /* (EAGAIN: read already) */
                }
            } else if (p == &w.node) {
                if (node_gone(node)) {
                    TR_LOG_DEBUG("WORKER-NODE-GONE", "node connection closed; exiting");
                    stop_requested = 1;
                }
            } else {
                /* A client may have been dropped by an earlier event of this batch only if
                 * it is this one; events are per fd, so p is still valid here. */
                if (w.pool)
                    on_client_pooled(&w, p, evs[i].events);
                else
                    on_client(&w, p, evs[i].events);
            }
        }
        if (w.n_rings) rings_serve(&w);
    }
    worker_idle(&w);
    status = 0;
out:
    if (__atomic_load_n(&w.ending, __ATOMIC_ACQUIRE)) { /* (before its callers see it go) */
        tr_actor_id self;
        memcpy(self.b, id, 16);
        pthread_mutex_lock(&end_mu);
        char why[sizeof w.end_why];
        snprintf(why, sizeof why, "%s",
                 w.end_why[0] ? w.end_why : "ended: no handle of it was left");
        pthread_mutex_unlock(&end_mu);
        if (tr__actor_ending(node, self, why))
            TR_LOG_WARN("WORKER-END", "the node was not told: %s", tr__last_error());
        drain_for_end(&w);
    }
    while (w.clients)
        drop_client(&w, w.clients);
    /* calls running on the pool finish first; one that does not (it waits for something
     * that will never come) leaves the destructor unrun, as the process exits anyway */
    int stop_ms = __atomic_load_n(&w.exited, __ATOMIC_ACQUIRE) ? 200 : NODE_TIMEOUT_MS / 5;
    int stuck = w.pool ? pool_stop(w.pool, stop_ms) : 0;
    for (size_t i = 0; i < w.n_groups; i++) {
        stuck += w.groups[i].pool ? pool_stop(w.groups[i].pool, stop_ms) : 0;
        free(w.groups[i].methods);
    }
    free(w.groups);
    if (stuck)
        TR_LOG_WARN("WORKER-STUCK", "%d call(s) still running at exit: no destructor", stuck);
    /* (calls the loop ran whose replies never left: counted and recorded all the same) */
    if (w.calls_run.n && w.board) tr__hist_merge(&w.board->call, &w.calls_run);
    tr__burst_flush(&w.runs, TR__EV_RUN, NULL);
    /* a compiled graph's loop may be in a method: the destructor waits for it, and no
     * method runs after it (the process exits holding the lock) */
    tr__method_lock(&method_mu, &method_mu_wanted);
    if (!stuck && w.self && w.cls && w.cls->dtor) w.cls->dtor(w.self);
    if (w.lfd >= 0) {
        close(w.lfd);
        unlink(path);
    }
    if (w.ep >= 0) close(w.ep);
    if (w.wake_fd >= 0) close(w.wake_fd);
    tr__buf_free(&w.ctx.result);
    drop_result_obj(&w.ctx);
    free(w.ctx.ref_data);
    free(w.ctx.ref_len);
    free(cls_name);
    free(path);
    tr__log_flush_limits();
    return status;
}
