/* collective/group.h - a collective group in this process: joining (rendezvous through the
 * node's registry), the versioned backend ops table the op API dispatches through, and
 * the ops. Thread safety: one op at a time per group (as MPI communicators); different
 * groups may be used from different threads.
 */
#ifndef TR_COLLECTIVE_GROUP_H
#define TR_COLLECTIVE_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "core/nodeconn.h"
#include "troupe/troupe.h"

enum { TR__COLL_BARRIER = 1, TR__COLL_ALLREDUCE = 2, TR__COLL_BROADCAST = 3 };

/* A backend, as a versioned ops table (NCCL's ncclNet_vX): a later version only adds
 * members at the end. Every op gets an absolute deadline (core/clock.h). */
typedef struct tr__coll_backend_v1 {
    int version; /* 1 */
    const char *name;
    int (*barrier)(tr_group *g, int64_t deadline);
    int (*allreduce)(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     tr_redop op, int64_t deadline);
    int (*broadcast)(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                     int64_t deadline);
} tr__coll_backend_v1;

extern const tr__coll_backend_v1 tr__coll_shm_v1;

struct tr_group {
    tr__nodeconn *node;
    const tr__coll_backend_v1 *be;
    char name[200];
    int world, rank;
    uint64_t seq; /* ops issued */
    int broken;   /* a failed op leaves the group unusable: its code */
    char broken_msg[300];
    void *seg; /* backend state: the shm segment */
    size_t seg_size;
};

int tr__group_init(tr__nodeconn *node, int world, int rank, const char *backend, const char *name,
                   int timeout_ms, tr_group **out);
void tr__group_destroy(tr_group *g);

#endif
