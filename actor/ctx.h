/* actor/ctx.h - what a method's tr_ctx holds: one per thread that runs methods (the
 * worker's loop, and each compiled graph's loop, dag/exec.c). Internal. */
#ifndef TR_ACTOR_CTX_H
#define TR_ACTOR_CTX_H

#include <stddef.h>

#include "core/buf.h"
#include "troupe/troupe.h"

struct tr_ctx {
    tr_runtime *rt;
    const char *method;   /* the method running (tr_ctx_method) */
    char method_buf[256]; /* its name, for a class's dispatch */
    tr_actor_id id;
    tr__buf result;
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
    /* a compiled graph's step (dag/exec.c): tr_ctx_reply_device leaves its device value
     * here for the step to send on */
    int in_graph;
    const void *dev_ptr;
    size_t dev_len;
    int dev_used;
};

#endif
