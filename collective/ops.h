/* collective/ops.h - the op API: tr__group_X is what the public tr_X (troupe.h, which
 * documents each: arguments, codes, thread safety) does, and the façade (api/collective.c)
 * forwards to it; layers below the façade (dag/, gloo's two-level allreduce) call these.
 * Each checks its arguments (messages name the public function), then dispatches through
 * the group's backend table (group.h). Thread safety: one op at a time per group.
 */
#ifndef TR_COLLECTIVE_OPS_H
#define TR_COLLECTIVE_OPS_H

#include <stddef.h>

#include "collective/group.h"
#include "troupe/troupe.h"

#ifdef __cplusplus
extern "C" {
#endif

int tr__group_rank(const tr_group *g);
int tr__group_size(const tr_group *g);
int tr__group_set_checks(tr_group *g, int on);
int tr__group_set_single_copy(tr_group *g, int on);
int tr__group_set_timeout(tr_group *g, int timeout_ms);

int tr__group_barrier(tr_group *g, int timeout_ms);
int tr__group_allreduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        tr_redop op, int timeout_ms);
int tr__group_broadcast(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                        int timeout_ms);
int tr__group_reduce(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     tr_redop op, int root, int timeout_ms);
int tr__group_allgather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                        int timeout_ms);
int tr__group_gather(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     int root, int timeout_ms);
int tr__group_scatter(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                      int root, int timeout_ms);
int tr__group_reduce_scatter(tr_group *g, const void *send, void *recv, size_t count,
                             tr_dtype dtype, tr_redop op, int timeout_ms);
int tr__group_alltoall(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                       int timeout_ms);
int tr__group_send(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                   int timeout_ms);
int tr__group_recv(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int timeout_ms);

/* The multi-device forms and the async form: TR_EINVAL naming the backend where the
 * group's has no such entry (group.h). */
int tr__group_allreduce_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, tr_redop op, int timeout_ms);
int tr__group_broadcast_multigpu(tr_group *g, void *const *bufs, size_t count, tr_dtype dtype,
                                 int root_rank, int root_gpu, int timeout_ms);
int tr__group_reduce_multigpu(tr_group *g, const void *const *send, void *const *recv, size_t count,
                              tr_dtype dtype, tr_redop op, int root_rank, int root_gpu,
                              int timeout_ms);
int tr__group_allgather_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                 size_t count, tr_dtype dtype, int timeout_ms);
int tr__group_reduce_scatter_multigpu(tr_group *g, const void *const *send, void *const *recv,
                                      size_t count, tr_dtype dtype, tr_redop op, int timeout_ms);
int tr__group_set_stream(tr_group *g, void *stream);
int tr__group_synchronize(tr_group *g, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
