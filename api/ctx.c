/* api/ctx.c - the tr_ctx_* functions a method calls (troupe.h): forwards to the worker's
 * side (actor/ctx.h), and to dag/ for a device reply. */
#include <stdarg.h>

#include "actor/calls.h"
#include "core/buf.h"
#include "actor/ctx.h"
#include "api/rt.h"
#include "core/status.h"
#include "troupe/troupe.h"

TR_API int tr_ctx_exit_actor(tr_ctx *ctx, const char *why) {
    return tr__ctx_exit_actor(ctx, why);
}

TR_API int tr_ctx_reply(tr_ctx *ctx, const void *data, size_t len) {
    return tr__ctx_reply(ctx, data, len);
}

TR_API int tr_ctx_reply_alloc(tr_ctx *ctx, size_t len, void **buf) {
    return tr__ctx_reply_alloc(ctx, len, buf);
}

/* The refs a result or an item contains (n of them, over data): this process's own call
 * refs among them are shared; with another node's ref among them, the whole value is made
 * a container here (tr__actors_put_refs: this process holds those refs at their nodes while
 * it lives): 1 and *obj; 0 if the store's own container will do; or a code. */
static int container_of(tr_runtime *rt, const void *data, size_t len, const tr_ref *refs, size_t n,
                        const char *what, tr_ref *obj) {
    if (!n || !refs || !rt || !rt->actors) return 0;
    int rc = tr__actors_share(rt->actors, refs, n);
    if (rc) return tr__err_wrap(rc, "%s", what);
    for (size_t i = 0; i < n; i++) {
        if (!tr__actors_is_remote(rt->actors, refs[i])) continue;
        if (!data && len) return tr__err(TR_EINVAL, "%s: bad arguments", what);
        rc = tr__actors_put_refs(rt->actors, data, len, refs, n, obj);
        return rc ? tr__err_wrap(rc, "%s", what) : 1;
    }
    return 0;
}

TR_API int tr_ctx_reply_contains(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs,
                                 size_t n) {
    tr_ref obj;
    int rc = container_of(tr__ctx_runtime(ctx), data, len, refs, n, "tr_ctx_reply_contains", &obj);
    if (rc < 0) return rc;
    return rc ? tr__ctx_reply_object(ctx, obj) : tr__ctx_reply_contains(ctx, data, len, refs, n);
}

TR_API int tr_ctx_reply_multi(tr_ctx *ctx, const void *const *data, const size_t *len, size_t n) {
    return tr__ctx_reply_multi(ctx, data, len, n);
}

TR_API int tr_ctx_reply_multi_contains(tr_ctx *ctx, const void *const *data, const size_t *len,
                                       size_t n, const tr_ref *refs, size_t n_refs) {
    if (!n_refs) return tr__ctx_reply_multi(ctx, data, len, n);
    if (!ctx || !refs) return tr__err(TR_EINVAL, "tr_ctx_reply_multi_contains: bad arguments");
    tr__buf b = TR__BUF_INIT;
    int rc = tr__ctx_multi_encode(&b, data, len, n);
    if (!rc) rc = tr_ctx_reply_contains(ctx, b.data + b.off, tr__buf_avail(&b), refs, n_refs);
    tr__buf_free(&b);
    return rc;
}

TR_API int tr_ctx_yield(tr_ctx *ctx, const void *data, size_t len) {
    return tr__ctx_yield(ctx, data, len, NULL, 0);
}

TR_API int tr_ctx_yield_contains(tr_ctx *ctx, const void *data, size_t len, const tr_ref *refs,
                                 size_t n) {
    tr_ref obj;
    int rc = container_of(tr__ctx_runtime(ctx), data, len, refs, n, "tr_ctx_yield_contains", &obj);
    if (rc < 0) return rc;
    return rc ? tr__ctx_yield_object(ctx, obj) : tr__ctx_yield(ctx, data, len, refs, n);
}

TR_API int tr_ctx_reply_device(tr_ctx *ctx, const void *dev, size_t len) {
    return tr__ctx_reply_device(ctx, dev, len);
}

TR_API int tr_ctx_error(tr_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = tr__ctx_verror(ctx, fmt, ap);
    va_end(ap);
    return rc;
}

TR_API int tr_ctx_set_error(tr_ctx *ctx, const char *msg) {
    return tr__ctx_set_error(ctx, msg);
}

TR_API void tr_ctx_started(tr_ctx *ctx) {
    tr__ctx_started(ctx);
}

TR_API int tr_ctx_canceled(const tr_ctx *ctx) {
    return tr__ctx_canceled(ctx);
}

TR_API void tr_ctx_failed(tr_ctx *ctx) {
    if (ctx) ctx->failed = 1;
}

TR_API tr_runtime *tr_ctx_runtime(tr_ctx *ctx) {
    return tr__ctx_runtime(ctx);
}

TR_API const char *tr_ctx_method(const tr_ctx *ctx) {
    return tr__ctx_method(ctx);
}

TR_API tr_actor_id tr_ctx_actor_id(const tr_ctx *ctx) {
    return tr__ctx_actor_id(ctx);
}

TR_API const char *tr_ctx_gpu_ids(const tr_ctx *ctx) {
    return tr__ctx_gpu_ids(ctx);
}

TR_API size_t tr_ctx_num_refs(const tr_ctx *ctx) {
    return tr__ctx_num_refs(ctx);
}

TR_API int tr_ctx_ref(const tr_ctx *ctx, size_t i, const void **data, size_t *len) {
    return tr__ctx_ref(ctx, i, data, len);
}
