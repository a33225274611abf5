/* api/cmd/worker_main.c - troupe-worker: the generic worker, for actor classes that live in a
 * shared object instead of the driver's executable (config key "worker_library", or
 * "worker_command" = "troupe-worker MODULE.so").
 *
 *   troupe-worker MODULE.so          (run by a node, never by hand)
 *
 * It loads libtroupe (shared, RTLD_GLOBAL: the module's tr_* calls bind to it), then the
 * module, calls the module's
 *
 *   int troupe_module_init(tr_config *cfg);   registers its classes (tr_config_add_class)
 *
 * and runs the role its node gave it (a worker, or the embedded node) with that config.
 * libtroupe is found at $TROUPE_LIBRARY, else next to this program (../lib/libtroupe.so.1,
 * libtroupe.so.1, libtroupe.so; ../libtroupe.so in the build tree: bazel-bin/api/cmd/),
 * else by the dynamic linker's search for libtroupe.so.1.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "troupe/troupe.h"

typedef int (*init_fn)(tr_config *);
typedef int (*create_fn)(tr_config **);
typedef int (*main_fn)(const tr_config *);
typedef const char *(*error_fn)(void);

static void *load_libtroupe(void) {
    const char *env = getenv("TROUPE_LIBRARY");
    if (env && *env) return dlopen(env, RTLD_NOW | RTLD_GLOBAL);
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash) *slash = '\0';
        const char *tries[] = {"%s/../lib/libtroupe.so.1", "%s/libtroupe.so.1", "%s/libtroupe.so",
                               "%s/../libtroupe.so"};
        for (size_t i = 0; i < sizeof tries / sizeof tries[0]; i++) {
            char cand[PATH_MAX + 32];
            snprintf(cand, sizeof cand, tries[i], self);
            if (access(cand, R_OK) == 0) return dlopen(cand, RTLD_NOW | RTLD_GLOBAL);
        }
    }
    return dlopen("libtroupe.so.1", RTLD_NOW | RTLD_GLOBAL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: troupe-worker MODULE.so (started by a troupe node: set the "
                        "config key worker_library)\n");
        return 2;
    }
    void *lib = load_libtroupe();
    if (!lib) {
        fprintf(stderr, "troupe-worker: cannot load libtroupe: %s\n", dlerror());
        return 2;
    }
    create_fn create = (create_fn)dlsym(lib, "tr_config_create");
    main_fn run = (main_fn)dlsym(lib, "tr_worker_main");
    error_fn last_error = (error_fn)dlsym(lib, "tr_last_error");
    if (!create || !run || !last_error) {
        fprintf(stderr, "troupe-worker: libtroupe lacks tr_config_create/tr_worker_main\n");
        return 2;
    }
    void *mod = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!mod) {
        fprintf(stderr, "troupe-worker: cannot load %s: %s\n", argv[1], dlerror());
        return 2;
    }
    init_fn init = (init_fn)dlsym(mod, "troupe_module_init");
    if (!init) {
        fprintf(stderr, "troupe-worker: %s has no troupe_module_init\n", argv[1]);
        return 2;
    }
    tr_config *cfg = NULL;
    int rc = create(&cfg);
    if (!rc) rc = init(cfg);
    if (rc) {
        fprintf(stderr, "troupe-worker: %s: troupe_module_init: %s (%d)\n", argv[1], last_error(),
                rc);
        return 2;
    }
    run(cfg); /* in a worker or the node: runs it and exits */
    fprintf(stderr, "troupe-worker: %s (it is started by a troupe node, not by hand)\n",
            last_error());
    return 2;
}
