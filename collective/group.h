/* collective/group.h - a collective group in this process: joining (rendezvous through the
 * node's registry), leaving, and the versioned backend ops table the op API (ops.h)
 * dispatches through. Thread safety: one op at a time per group (as MPI communicators);
 * different groups may be used from different threads.
 */
#ifndef TR_COLLECTIVE_GROUP_H
#define TR_COLLECTIVE_GROUP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/nodeconn.h"
#include "troupe/troupe.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TR__COLL_BARRIER = 1,
    TR__COLL_ALLREDUCE = 2,
    TR__COLL_BROADCAST = 3,
    TR__COLL_REDUCE = 4,
    TR__COLL_ALLGATHER = 5,
    TR__COLL_GATHER = 6,
    TR__COLL_SCATTER = 7,
    TR__COLL_REDUCE_SCATTER = 8,
    TR__COLL_ALLTOALL = 9,
    TR__COLL_SEND = 10, /* point to point: root is the peer */
    TR__COLL_RECV = 11,
};

/* The shape of a data op, as the op API hands it to a backend: `count` elements per rank
 * (see each op in troupe.h), root -1 where there is none. */
typedef struct tr__coll_args {
    int kind;
    const void *send;
    void *recv;
    size_t count;
    tr_dtype dtype;
    tr_redop op;
    int root;
} tr__coll_args;

/* A group whose ranks are on several nodes of a cluster, as tr__group_join_span hands it to
 * its backend's init_span. */
typedef struct tr__coll_span {
    uint64_t nonce;           /* the declaration's: its rendezvous keys are under it */
    const char *const *nodes; /* nodes[r]: rank r's node, "IP:port" (during init_span only) */
    const char *host;         /* this rank's IP (of nodes[rank]): where it listens */
    int hier;                 /* allreduce in two levels where ranks share nodes */
} tr__coll_span;

/* What a backend is, for the layers that do not call it (its table's `flags`). */
enum {
    /* Its ops take host memory only: where the build stages device buffers
     * (tr__coll_device_stager) and this process sees a device, ops whose buffers are
     * device memory run on pinned host copies. */
    TR__COLL_HOST_MEMORY = 1u << 0,
    /* Its data moves through the segment: the node gives its groups staging slots and
     * channels (registry.c; tr__coll_seg_size's `data`). */
    TR__COLL_SEG_DATA = 1u << 1,
    /* Its progress needs no thread of its own, so its waits may spin long where every
     * rank has a core, and ranks record their core binding at join (steps.c). */
    TR__COLL_SPIN = 1u << 2,
};

/* A backend, as a versioned ops table (NCCL's ncclNet_vX): a later version only adds
 * members at the end. group.c is the only caller; it checks the arguments, and nothing in
 * it knows one backend from another: what a backend does not do, its table says (NULL).
 *
 * Threads and locks. The group takes no lock around an entry: the rule is the caller's,
 * one op at a time per group (MPI's communicators; troupe.h says "not with the group's
 * ops"), so an entry may keep state in g->impl without a lock of its own. A backend that
 * runs threads of its own (gloo's I/O thread, nccl's watchdog) guards what they share
 * itself. No entry is called with a lock held, and every wait is bounded by the deadline
 * it gets (an absolute one, core/clock.h).
 *
 * Results. 0, or a negative TR_E* with tr__err's message. An op that fails with anything
 * but TR_EINVAL leaves the group unusable (group.c records why; a backend may set
 * g->broken itself). TR_EINVAL (arguments the ranks disagree on) must leave the group
 * usable and every buffer of the op as it was, on every rank. */
typedef struct tr__coll_backend_v2 {
    int version; /* 2 */
    const char *name;
    /* ---- version 1 */
    /* Join, after the node's rendezvous (g->seg mapped, g->spin_limit set): sets up
     * g->impl (may leave it NULL). Called once, by the joining thread, before the group is
     * anyone else's; may block until the deadline (the join's: the rendezvous shares it).
     * On failure fini still runs if g->impl was set. NULL: nothing to set up. */
    int (*init)(tr_group *g, int64_t deadline);
    /* Leave: tears g->impl down (called only if it is set). Once, by the thread that
     * destroys the group, with no op running and the group off the live list; bounded
     * (nccl waits up to 5 s for its work, then aborts). */
    void (*fini)(tr_group *g);
    /* The ops, from the thread that runs the op. Required, except data_op (NULL: the op
     * API answers TR_EINVAL naming the backend). */
    int (*barrier)(tr_group *g, int64_t deadline);
    int (*allreduce)(tr_group *g, const void *send, void *recv, size_t count, tr_dtype dtype,
                     tr_redop op, int64_t deadline);
    int (*broadcast)(tr_group *g, void *buf, size_t count, tr_dtype dtype, int root,
                     int64_t deadline);
    /* reduce, allgather, gather, scatter, reduce_scatter, alltoall */
    int (*data_op)(tr_group *g, const tr__coll_args *a, int64_t deadline);
    /* point to point, in order per pair of ranks */
    int (*send)(tr_group *g, const void *buf, size_t count, tr_dtype dtype, int dst,
                int64_t deadline);
    int (*recv)(tr_group *g, void *buf, size_t count, tr_dtype dtype, int src, int64_t deadline);
    /* ---- version 2: every member optional; NULL (0) where the backend does not do it */
    unsigned flags; /* TR__COLL_*, read at join */
    /* Join as init does, for a rank that drives several devices (devs[0..ndev): device
     * ordinals as this process sees them, 1 <= ndev <= TR__COLL_MAX_DEV, checked):
     * tr_group_join_multigpu takes the first backend built in that has it. */
    int (*init_devs)(tr_group *g, const int *devs, int ndev, int64_t deadline);
    /* Join as init does, for a group whose ranks are on several nodes (tr__group_join_span):
     * no node's rendezvous and no segment (g->seg is NULL), the rendezvous is the
     * backend's own (in the cluster's KV store, under the span's nonce). */
    int (*init_span)(tr_group *g, const tr__coll_span *span, int64_t deadline);
    /* Devices this rank drives (1 or more), for the _multigpu ops' checks: any thread,
     * never blocks. Required where multigpu is set. */
    int (*devices)(const tr_group *g);
    /* A _multigpu op, as an op: send[i] and recv[i] on this rank's device i (checked
     * against devices()); root: a rank of the devices' communicator (process rank *
     * devices + device index), or -1. */
    int (*multigpu)(tr_group *g, int kind, const void *const *send, void *const *recv, size_t count,
                    tr_dtype dtype, tr_redop op, int root, int64_t deadline);
    /* The async form (tr_group_set_stream): as an op (never with one); may start a thread
     * of the backend's. NULL: TR_EINVAL naming the backend. */
    int (*set_stream)(tr_group *g, void *stream);
    /* Until the ops enqueued so far have finished, as an op. Its own TR_ETIMEDOUT leaves
     * the group usable (the ops go on), any other failure does not. NULL: the backend's
     * ops have finished when they return (0 at once). */
    int (*synchronize)(tr_group *g, int64_t deadline);
    /* tr_group_set_single_copy's setting (1, 0, -1: checked), not with an op; never
     * blocks. NULL: the backend ignores it. */
    void (*set_single_copy)(tr_group *g, int on);
} tr__coll_backend_v2;

/* The backends: each file defines its table; collective/backends.c lists those built in. */
extern const tr__coll_backend_v2 tr__coll_shm_v2;  /* shm/shm.c */
extern const tr__coll_backend_v2 tr__coll_gloo_v2; /* gloo/gloo.cc */
/* (tr__coll_nccl_v2: nccl/nccl.h, in the CUDA build only) */

/* The backends built into this troupe, NULL-terminated (backends.c). */
extern const tr__coll_backend_v2 *const tr__coll_backends[];
/* Their names, for messages: "shm, gloo, auto; nccl needs the CUDA build, --config=cuda". */
extern const char tr__coll_backends_built[];
/* The backend built in under `name` ("auto": shm, the fastest on one node), or NULL. Any
 * thread. */
const tr__coll_backend_v2 *tr__coll_backend_find(const char *name);

/* Device buffers on a backend that takes host memory only (TR__COLL_HOST_MEMORY): the
 * CUDA build's staging (collective/nccl/stage.c), which backends.c lends as
 * tr__coll_device_stager; NULL in the default build. */
typedef struct tr__coll_stager {
    /* At join, by the joining thread: sets g->stage where this process sees a device
     * (asked once per process), leaves it NULL where it does not. */
    int (*open)(tr_group *g);
    /* An op whose buffers may be device memory, as an op: op() on host copies of those
     * that are (through pinned memory kept in g->stage). */
    int (*run)(tr_group *g, const tr__coll_args *a, int64_t deadline,
               int (*op)(tr_group *g, const tr__coll_args *host, int64_t deadline));
    /* At destroy, after fini: frees g->stage. */
    void (*close)(tr_group *g);
} tr__coll_stager;
extern const tr__coll_stager *const tr__coll_device_stager;

/* Devices one rank may drive (init_devs). */
#define TR__COLL_MAX_DEV 16

/* A group: what every backend uses. A backend's own state is behind impl. */
struct tr_group {
    tr__nodeconn *node; /* the group's own connection to the node */
    const tr__coll_backend_v2 *be;
    char name[200];
    int world, rank;
    int broken; /* a failed op leaves the group unusable: its code */
    char broken_msg[300];
    void *seg; /* the group's shared segment (dead-rank mask, the step protocol; shm's data
                  path); NULL for a group across nodes */
    size_t seg_size;
    void *impl;     /* the backend's state (init sets it, fini clears it) */
    void *stage;    /* device buffers staged through host memory: tr__coll_stager's */
    int timeout_ms; /* what TR_GROUP_TIMEOUT means for this group */
    int checks;     /* check that ranks agree on each op (tr_group_set_checks) */
    /* the step protocol over the segment (steps.c), whichever backend runs it */
    uint64_t seq;        /* ops issued */
    uint32_t agree_step; /* this rank's step count as its current op began (the
                            agreement riding on the op: gloo) */
    uint32_t seen_all;   /* every rank was seen to have posted this many steps */
    uint64_t flow_key;   /* tr__flight_flow_key(name) */
    int cnt_backend;     /* tr__cnt_backend(be->name) */
    int64_t spin_limit;  /* how long waits spin before sleeping */
    int pinned;          /* 1 + the one core this process is bound to, 0 if it floats
                            (recorded by TR__COLL_SPIN backends only) */
    int cores_own;       /* every rank is bound to a core no other rank has: waits spin
                            for any peer (a TR__COLL_SPIN backend's init finds it) */
    char node_path[108];
    struct tr_group *live_next; /* this process's live groups (group.c) */
};

#define TR__GROUP_DEFAULT_TIMEOUT_MS 60000
/* What TR_FOREVER means for a join: the node's rendezvous and Gloo's connection set-up
 * need a finite bound. */
#define TR__GROUP_FOREVER_MS 3600000
/* Backends keep rendezvous keys in the node's KV store under this + "<group>/". */
#define TR__COLL_KV_PREFIX "troupe/coll/"

/* A group name: 1-199 bytes, no '/' (its keys must not be a prefix of another group's),
 * no NUL. */
static inline int tr__coll_name_ok(const char *name, size_t n) {
    return name && n > 0 && n < 200 && !memchr(name, '/', n) && !memchr(name, '\0', n);
}

/* Joins through a connection of the group's own to the node at `node_path` (a rendezvous
 * waits there without holding the process's shared connection, so threads may join
 * groups concurrently; the node takes that connection's close for the rank's exit). */
int tr__group_join(const char *node_path, size_t max_msg, int world, int rank, const char *backend,
                   const char *name, int timeout_ms, tr_group **out);
/* A group whose process drives ndev devices (devs: ordinals as this process sees them),
 * for the _multigpu ops, on the first backend built in with init_devs (nccl: a
 * communicator of world * ndev ranks). */
int tr__group_join_devs(const char *node_path, size_t max_msg, int world, int rank, const int *devs,
                        int ndev, const char *name, int timeout_ms, tr_group **out);
/* Joins a declared group whose ranks are on several nodes of a cluster, on `backend`
 * (one with init_span: gloo): the rendezvous runs in the cluster's KV store under
 * TR__COLL_KV_PREFIX "<name>/<nonce>/" (nonce: the declaration's, so no key of an earlier
 * group of that name is ever read), not in the node's registry. nodes[r]: rank r's node,
 * "IP:port" (the backend listens on this rank's IP). hier: allreduce in two levels where
 * ranks share nodes - shm inside each node, Gloo between one leader per node
 * (collective/gloo/gloo.cc). */
#define TR__COLL_HOST_MAX 80
int tr__group_join_span(const char *node_path, size_t max_msg, int world, int rank,
                        const char *backend, const char *name, uint64_t nonce,
                        const char *const *nodes, int hier, int timeout_ms, tr_group **out);
/* A group with no ops for other modules' shared state (dag/: a compiled graph's
 * channels): the node's rendezvous, a segment of the header (members' pids, dead mask)
 * and `extra` bytes after it (tr__coll_hdr_bytes() on, pre-faulted and zeroed), each
 * member's leave or death in the dead mask. tr__group_destroy leaves it. */
#define TR__COLL_SEGMENT_BACKEND "segment"
#define TR__COLL_MAX_EXTRA (256ull << 20)
int tr__group_join_segment(const char *node_path, size_t max_msg, int world, int rank,
                           const char *name, uint64_t extra, int timeout_ms, tr_group **out);
/* Calls off a segment group still gathering: its waiting joins fail with TR_ECANCELED.
 * TR_ENOTFOUND if there is none (complete, gone, or never made). */
int tr__group_cancel_segment(const char *node_path, size_t max_msg, const char *name);
/* Leaves the group and frees the handle (NULL: nothing). Not with the group's ops. */
int tr__group_destroy(tr_group *g);
/* Takes g off this process's list of live groups (tr_group_get, tr_group_is_initialized):
 * a group a backend made for itself, which users must not find. */
void tr__group_hide(tr_group *g);
/* Whether this process holds a live handle of group `name` on the node at node_path. */
int tr__group_is_initialized(const char *node_path, const char *name);
/* That handle (the most recently joined, if several), or NULL. */
tr_group *tr__group_find(const char *node_path, const char *name);

#ifdef __cplusplus
}
#endif
#endif
