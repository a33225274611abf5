/* examples/module_adder.c - actor classes in a shared object, for the generic worker
 * (troupe-worker, config key "worker_library"), so that workers need not be the driver's
 * executable. It links no troupe code: its tr_* calls bind to the libtroupe the worker
 * loaded. Built outside Bazel (tools/install_test.sh does this):
 *
 *   cc -shared -fPIC $(pkg-config --cflags troupe) module_adder.c -o module_adder.so
 *   cc $(pkg-config --cflags troupe) module_driver.c $(pkg-config --libs troupe) -o driver
 *   ./driver ./module_adder.so
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "troupe/troupe.h"

typedef struct adder {
    int64_t total;
} adder;

static int adder_new(tr_ctx *ctx, const void *args, size_t len, void **self) {
    adder *a = calloc(1, sizeof *a);
    if (!a) return tr_ctx_error(ctx, "out of memory");
    if (len == 8) memcpy(&a->total, args, 8);
    *self = a;
    return 0;
}

static void adder_free(void *self) {
    free(self);
}

static int adder_add(tr_ctx *ctx, void *self, const void *args, size_t len) {
    adder *a = self;
    int64_t v;
    if (len != 8) return tr_ctx_error(ctx, "add wants 8 bytes, got %zu", len);
    memcpy(&v, args, 8);
    a->total += v;
    return tr_ctx_reply(ctx, &a->total, 8);
}

static int adder_pid(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self, (void)args, (void)len;
    int64_t pid = getpid();
    return tr_ctx_reply(ctx, &pid, 8);
}

static const tr_method_def adder_methods[] = {{"add", adder_add}, {"pid", adder_pid}};

TR_API int troupe_module_init(tr_config *cfg);
TR_API int troupe_module_init(tr_config *cfg) {
    tr_actor_class c = TR_ACTOR_CLASS_INIT;
    c.name = "ModuleAdder";
    c.ctor = adder_new;
    c.dtor = adder_free;
    c.methods = adder_methods;
    c.n_methods = sizeof adder_methods / sizeof adder_methods[0];
    return tr_config_add_class(cfg, &c);
}
