/* tests/abi/old_binary.c - a program built against troupe 0.1's headers (tests/abi/
 * troupe-0.1: tr_actor_class without its later `dispatch` field), run against today's
 * library (tools/install_test.sh builds it with `cc -I tests/abi/troupe-0.1` and links the
 * installed libtroupe.so.1): the struct_size rule keeps it working. It registers a class
 * with the old struct (in the driver and in its workers, which run this same program),
 * creates an actor with the old options struct, calls it, reads the old details struct.
 * Prints "old binary: ok" and exits 0, or says what failed and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "troupe/troupe.h"

static int twice(tr_ctx *ctx, void *self, const void *args, size_t len) {
    (void)self;
    int64_t v;
    if (len != 8) return tr_ctx_error(ctx, "twice wants 8 bytes");
    memcpy(&v, args, 8);
    v *= 2;
    return tr_ctx_reply(ctx, &v, 8);
}

static const tr_method_def methods[] = {{"twice", twice}};

static int fail(const char *what, int rc) {
    printf("old binary: %s: %s (%s)\n", what, tr_last_error(), tr_errname(rc));
    return 1;
}

int main(void) {
    tr_config *cfg;
    tr_actor_class cls = TR_ACTOR_CLASS_INIT; /* 0.1's size */
    cls.name = "Old";
    cls.methods = methods;
    cls.n_methods = 1;
    int rc = tr_config_create(&cfg);
    if (!rc) rc = tr_config_add_class(cfg, &cls);
    if (rc) return fail("tr_config_add_class", rc);
    tr_runtime *rt;
    if ((rc = tr_init(cfg, &rt))) return fail("tr_init", rc);
    tr_config_destroy(cfg);
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.name = "old-one";
    tr_actor_id a;
    if ((rc = tr_actor_create(rt, "Old", &o, NULL, 0, &a)) ||
        (rc = tr_actor_wait_ready(rt, a, 30000)))
        return fail("tr_actor_create", rc);
    int64_t v = 21, got = 0;
    tr_ref r;
    const void *p;
    size_t n;
    if ((rc = tr_call(rt, a, "twice", &v, 8, &r)) || (rc = tr_get(rt, r, 10000, &p, &n)))
        return fail("tr_call", rc);
    memcpy(&got, p, n == 8 ? 8 : 0);
    if (got != 42) {
        printf("old binary: twice(21) = %lld\n", (long long)got);
        return 1;
    }
    /* a method the old class lacks: no dispatch (the field it never had reads as NULL) */
    tr_ref r2;
    if ((rc = tr_call(rt, a, "other", &v, 8, &r2))) return fail("tr_call other", rc);
    if ((rc = tr_get(rt, r2, 10000, &p, &n)) != TR_ENOMETHOD)
        return fail("a method the class lacks", rc ? rc : TR_EINTERNAL);
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    if ((rc = tr_actor_info(rt, a, &d))) return fail("tr_actor_info", rc);
    if (strcmp(d.name, "old-one") != 0 || strcmp(d.class_name, "Old") != 0) {
        printf("old binary: details say %s/%s\n", d.class_name, d.name);
        return 1;
    }
    tr_shutdown(rt);
    printf("old binary: ok (library %s, ABI %u)\n", tr_version_string(), tr_abi_version());
    return 0;
}
