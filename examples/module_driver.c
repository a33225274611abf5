/* examples/module_driver.c - a driver whose actors' classes live in a module
 * (examples/module_adder.c) that the generic worker loads: config key "worker_library".
 * The driver itself registers no class.
 *
 *   module_driver MODULE.so      prints "ModuleAdder: 5 + 7 = 12 (worker pid N)"
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "troupe/troupe.h"

static int fail(const char *what, int rc) {
    fprintf(stderr, "module_driver: %s: %s (%s)\n", what, tr_last_error(), tr_errname(rc));
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: module_driver MODULE.so\n");
        return 2;
    }
    tr_config *cfg;
    int rc = tr_config_create(&cfg);
    if (!rc) rc = tr_config_set(cfg, "worker_library", argv[1]);
    if (rc) return fail("worker_library", rc);
    tr_runtime *rt;
    rc = tr_init(cfg, &rt);
    tr_config_destroy(cfg);
    if (rc) return fail("tr_init", rc);
    int64_t five = 5, seven = 7, sum = 0, pid = 0;
    tr_actor_id a;
    tr_ref r;
    const void *p;
    size_t n;
    if ((rc = tr_actor_create(rt, "ModuleAdder", NULL, &five, 8, &a)) ||
        (rc = tr_actor_wait_ready(rt, a, 30000)) || (rc = tr_call(rt, a, "add", &seven, 8, &r)) ||
        (rc = tr_get(rt, r, 10000, &p, &n)))
        return fail("calling ModuleAdder", rc);
    memcpy(&sum, p, n == 8 ? 8 : 0);
    tr_ref_release(rt, r);
    if ((rc = tr_call(rt, a, "pid", NULL, 0, &r)) || (rc = tr_get(rt, r, 10000, &p, &n)))
        return fail("calling ModuleAdder", rc);
    memcpy(&pid, p, n == 8 ? 8 : 0);
    printf("ModuleAdder: 5 + 7 = %lld (worker pid %lld)\n", (long long)sum, (long long)pid);
    tr_shutdown(rt);
    return sum == 12 ? 0 : 1;
}
