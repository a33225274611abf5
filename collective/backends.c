/* collective/backends.c - the backends built into this troupe, found by name: shm and gloo
 * always; nccl, and the staging of device buffers for the others, in the CUDA build only
 * (TR_WITH_CUDA). The one file that knows which backends exist. */
#include <stddef.h>
#include <string.h>

#include "collective/group.h"
#ifdef TR_WITH_CUDA
#include "collective/nccl/nccl.h"
#endif

const tr__coll_backend_v2 *const tr__coll_backends[] = {
    &tr__coll_shm_v2,
    &tr__coll_gloo_v2,
#ifdef TR_WITH_CUDA
    &tr__coll_nccl_v2,
#endif
    NULL,
};

#ifdef TR_WITH_CUDA
const char tr__coll_backends_built[] = "shm, gloo, nccl, auto";
const tr__coll_stager *const tr__coll_device_stager = &tr__gpu_stager;
#else
const char tr__coll_backends_built[] = "shm, gloo, auto; nccl needs the CUDA build, --config=cuda";
const tr__coll_stager *const tr__coll_device_stager = NULL;
#endif

const tr__coll_backend_v2 *tr__coll_backend_find(const char *name) {
    if (!name) return NULL;
    /* "auto": on one node (tr_group_join's groups always are) shm is the fastest */
    if (strcmp(name, "auto") == 0) return &tr__coll_shm_v2;
    for (size_t i = 0; tr__coll_backends[i]; i++)
        if (strcmp(name, tr__coll_backends[i]->name) == 0) return tr__coll_backends[i];
    return NULL;
}
