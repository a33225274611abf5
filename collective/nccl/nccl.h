/* collective/nccl/nccl.h - what the CUDA build adds to collective groups (built only with
 * --config=cuda, where TR_WITH_CUDA is defined): the `nccl` backend (its async and
 * multi-GPU forms are entries of its table), and staging of device buffers for the CPU
 * backends (stage.c). Only collective/backends.c registers them; dag/ uses the helpers.
 */
#ifndef TR_COLLECTIVE_NCCL_H
#define TR_COLLECTIVE_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "collective/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The backend (in collective/backends.c's list in this build): besides the ops, its
 * table's init_devs and multigpu (one communicator rank per device this process drives),
 * set_stream and synchronize (the async form). */
extern const tr__coll_backend_v2 tr__coll_nccl_v2;

/* bytes at buf to every rank of dst[0..n) at once (one NCCL group), waiting until all
 * have it; no header, no agreement check (a compiled graph's channels carry both). */
int tr__nccl_send_many(tr_group *g, const void *buf, size_t bytes, const int *dst, int n,
                       int64_t deadline);

/* stage.c. Whether this process sees a CUDA device (once per process; 0 without a GPU or
 * a driver, so GPU-less machines never look at a pointer). */
int tr__gpu_present(void);
/* Whether p is device memory (host memory, registered or not, is not). */
int tr__gpu_is_device(const void *p);
/* Device buffers on the backends that take host memory (TR__COLL_HOST_MEMORY): staged
 * through pinned host memory kept with the group (g->stage), one buffer per group grown as
 * needed (backends.c lends it as tr__coll_device_stager). */
extern const tr__coll_stager tr__gpu_stager;

#ifdef __cplusplus
}
#endif
#endif
