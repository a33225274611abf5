/* actor/ctx.h - what a method's tr_ctx holds: one per thread that runs methods (the
 * worker's loop, and each compiled graph's loop, dag/exec.c). Internal. */
#ifndef TR_ACTOR_CTX_H
#define TR_ACTOR_CTX_H

#include <stdarg.h>
#include <stddef.h>

#include "core/buf.h"
#include "troupe/troupe.h"

struct tr_ctx {
    tr_runtime *rt;
    const char *method;   /* the method running (tr_ctx_method) */
    char method_buf[256]; /* its name, for a class's dispatch */
    tr_actor_id id;
    tr__buf result;
    /* a result that contains refs (tr_ctx_reply_contains) is a container object, made at
     * once (before the method may let go of what it contains), held until it is sent */
    struct tr__objects *objects; /* the worker's store client (NULL: none) */
    tr_ref result_obj;
    int has_result_obj;
    int result_obj_open; /* created, not sealed yet: tr_ctx_reply_alloc's, in a graph */
    char err[1024];
    int has_err;
    /* the call's arguments passed by reference, resolved before the method runs: pinned
     * views of objects, or views of values the frame carries */
    const void **ref_data;
    size_t *ref_len;
    size_t n_refs, cap_refs;
    /* where a reply goes straight to, if it fits (a compiled graph's output slot): then
     * direct_len is its length and `result` stays empty */
    void *direct;
    size_t direct_cap, direct_len;
    int direct_used;
    /* a compiled graph's step whose input may go on as its output (dag/exec.c): a reply
     * that lies within [fwd_lo, fwd_lo + fwd_cap) is not copied; fwd_used says it was, and
     * fwd_ptr, fwd_len where it lies */
    const void *fwd_lo, *fwd_ptr;
    size_t fwd_cap, fwd_len;
    int fwd_used;
    /* a compiled graph's step (dag/exec.c): tr_ctx_reply_device leaves its device value
     * here for the step to send on */
    int in_graph;
    const void *dev_ptr;
    size_t dev_len;
    int dev_used;
    /* the worker's entry on the node's board, and the word that a caller's tr_cancel of
     * the call this ctx runs now writes there (tr__board_cancel_word; 0: no call) */
    struct tr__seg_board *board;
    uint64_t cancel_word;
    int failed; /* tr_ctx_failed: the call failed, though it replies a value */
    /* a call on a pool's thread (max_concurrency > 1, groups): its pool, whose next call
     * begins once this one has (gate_open: its method started, or said so) */
    void *gate;
    int gate_open;
    /* the call this ctx runs now, as tr_ctx_yield sends its items to it (worker.c: the
     * worker, its client and the call's seq; NULL in a compiled graph's step) */
    void *yield_w, *yield_c;
    uint64_t yield_seq;
    /* tr_ctx_exit_actor: the actor ends once the method returns, its call failing with
     * TR_EACTOR_DIED and this text */
    int exiting;
    int ended_actor; /* a pool thread's call ended the actor: its reply is on its way */
    char exit_why[400];
};

/* tr_ctx_exit_actor (worker.c): TR_EACTOR_DIED once set; TR_ESTATE in a task or a
 * compiled graph's step, TR_EINVAL without ctx. */
int tr__ctx_exit_actor(tr_ctx *ctx, const char *why);

/* troupe.h's tr_ctx_* functions, as the façade (api/ctx.c) and the graph's steps
 * (dag/exec.c) call them: the same behaviour, the same messages. Thread safety: the
 * method's thread. */
size_t tr__ctx_num_refs(const tr_ctx *ctx);
int tr__ctx_ref(const tr_ctx *ctx, size_t i, const void **data, size_t *len);
int tr__ctx_reply(tr_ctx *ctx, const void *data, size_t len);
/* tr_ctx_reply_alloc: len bytes the method writes its result into (the graph's slot, an
 * object over a slot, or the result buffer). */
int tr__ctx_reply_alloc(tr_ctx *ctx, size_t len, void **buf);
/* A graph's step takes the result object (sealed now if the method wrote it in place):
 * 0 and *out, or a code (it is gone then). */
int tr__ctx_take_result_obj(tr_ctx *ctx, tr_ref *out);
/* Lets go of a result object not sent (aborted if never sealed). */
void tr__ctx_drop_result_obj(tr_ctx *ctx);
int tr__ctx_reply_multi(tr_ctx *ctx, const void *const *data, const size_t *len, size_t n);
/* n parts as one reply's bytes ("TRMR", u32 n, n u64 lengths, the parts: calls.c's
 * split_to_kids reads them) into b, reset first. 0, TR_EINVAL, TR_ENOMEM. */
int tr__ctx_multi_encode(tr__buf *b, const void *const *data, const size_t *len, size_t n);
/* tr__ctx_reply, and the refs the result contains (the façade exported this process's own
 * call refs among them first). */
int tr__ctx_reply_contains(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs, size_t n);
/* The result is object obj, a container the caller made (our hold on it is handed over:
 * released if it cannot be the result). */
int tr__ctx_reply_object(tr_ctx *ctx, tr_ref obj);
/* tr_ctx_yield(_contains): one item of the call's stream, sent to its caller now. */
int tr__ctx_yield(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs, size_t n);
/* One item that is object obj, a container the caller made (our hold on it is handed over,
 * released if it cannot go). */
int tr__ctx_yield_object(tr_ctx *ctx, tr_ref obj);
/* Whether the caller canceled the call running (tr_cancel of a task running on this
 * node): 1 or 0. */
int tr__ctx_canceled(const tr_ctx *ctx);
/* The call has begun (tr_ctx_started): its pool's next call may begin. */
void tr__ctx_started(tr_ctx *ctx);
int tr__ctx_error(tr_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int tr__ctx_verror(tr_ctx *ctx, const char *fmt, va_list ap);
int tr__ctx_set_error(tr_ctx *ctx, const char *msg);
const char *tr__ctx_gpu_ids(const tr_ctx *ctx);
tr_runtime *tr__ctx_runtime(tr_ctx *ctx);
const char *tr__ctx_method(const tr_ctx *ctx);
tr_actor_id tr__ctx_actor_id(const tr_ctx *ctx);
/* Defined by dag/ (exec.c; gpu.c in the CUDA build): a graph step's device reply. */
int tr__ctx_reply_device(tr_ctx *ctx, const void *dev, size_t len);

#endif
