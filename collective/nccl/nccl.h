/* collective/nccl/nccl.h - what the CUDA build adds to collective groups (built only with
 * --config=cuda, where TR_WITH_CUDA is defined): the `nccl` backend, its async and
 * multi-GPU forms, and staging of device buffers for the CPU backends (stage.c).
 */
#ifndef TR_COLLECTIVE_NCCL_H
#define TR_COLLECTIVE_NCCL_H

#include <stddef.h>
#include <stdint.h>

#include "collective/group.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const tr__coll_backend_v1 tr__coll_nccl_v1;

/* The async form: ops enqueue on `stream` (a cudaStream_t; NULL: the group's own, and ops
 * wait) and return once enqueued; a watchdog thread aborts the communicator when one
 * passes its deadline, a peer dies or NCCL reports an error. */
int tr__nccl_set_stream(tr_group *g, void *stream);
/* Until every op enqueued so far has finished: 0, or the first failure. */
int tr__nccl_synchronize(tr_group *g, int64_t deadline);
/* One op over this process's g->ndev devices: send[i] and recv[i] on device i; root is a
 * rank of the communicator (process rank * ndev + device index), or -1. */
int tr__nccl_multi(tr_group *g, int kind, const void *const *send, void *const *recv, size_t count,
                   tr_dtype dtype, tr_redop op, int root, int64_t deadline);

/* bytes at buf to every rank of dst[0..n) at once (one NCCL group), waiting until all
 * have it; no header, no agreement check (a compiled graph's channels carry both). */
int tr__nccl_send_many(tr_group *g, const void *buf, size_t bytes, const int *dst, int n,
                       int64_t deadline);

/* stage.c. Whether this process sees a CUDA device (once per process; 0 without a GPU or
 * a driver, so GPU-less machines never look at a pointer). */
int tr__gpu_present(void);
/* Whether p is device memory (host memory, registered or not, is not). */
int tr__gpu_is_device(const void *p);
/* A CPU backend's op with device buffers: stages them through pinned host memory kept
 * with the group (g->stage). run() is the backend's op on host buffers. */
int tr__gpu_staged(tr_group *g, const tr__coll_args *a, int64_t deadline,
                   int (*run)(tr_group *g, const tr__coll_args *host, int64_t deadline));
void tr__gpu_stage_free(tr_group *g);

#ifdef __cplusplus
}
#endif
#endif
