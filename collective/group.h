/* collective/group.h - a collective group in this process: joining (rendezvous through the
 * node's registry), the versioned backend ops table the op API dispatches through, and
 * the ops. Thread safety: one op at a time per group (as MPI communicators); different
 * groups may be used from different threads.
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

/* A backend, as a versioned ops table (NCCL's ncclNet_vX): a later version only adds
 * members at the end. Every op gets an absolute deadline (core/clock.h). */
typedef struct tr__coll_backend_v1 {
    int version; /* 1 */
    const char *name;
    /* after the node's rendezvous: set up g->impl (may be NULL) / tear it down */
    int (*init)(tr_group *g, int64_t deadline);
    void (*fini)(tr_group *g);
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
} tr__coll_backend_v1;

extern const tr__coll_backend_v1 tr__coll_shm_v1;
/* (tr__coll_nccl_v1: collective/nccl/nccl.h, in the CUDA build) */
#define TR__NCCL_MAX_DEV 16
extern const tr__coll_backend_v1 tr__coll_gloo_v1;

struct tr_group {
    tr__nodeconn *node; /* the group's own connection to the node */
    const tr__coll_backend_v1 *be;
    char name[200];
    int world, rank;
    uint64_t seq;        /* ops issued */
    uint32_t agree_step; /* gloo: this rank's step count as its current op began */
    int broken;          /* a failed op leaves the group unusable: its code */
    char broken_msg[300];
    void *seg; /* the group's shared segment (dead-rank mask; shm's data path) */
    size_t seg_size;
    void *impl;          /* backend state (gloo: its context) */
    int timeout_ms;      /* what TR_GROUP_TIMEOUT means for this group */
    int64_t spin_limit;  /* how long waits spin before sleeping (steps.c) */
    int checks;          /* check that ranks agree on each op (tr_group_set_checks) */
    int pinned;          /* 1 + the one core this process is bound to, 0 if it floats */
    int cores_own;       /* shm: every rank is bound to a core no other rank has */
    int can_read_all;    /* shm: this process can read every peer's memory (single copy) */
    int single_copy;     /* shm: large ops by single copy: 1 on, 0 off, -1 (default) where
                            it pays (tr_group_set_single_copy) */
    int single_pays;     /* shm: this machine's process_vm_readv runs near memcpy's speed */
    uint64_t probe;      /* shm: the word peers read to see whether they can */
    uint64_t single_ops; /* shm: ops this rank did by single copy (tests look) */
    int ndev;            /* nccl: devices this process drives (0: its current one) */
    int devs[TR__NCCL_MAX_DEV];
    int gpu_bufs; /* CPU backends, CUDA build: this process sees a GPU, so buffers
                     may be device memory (nccl/stage.c) */
    void *stage;  /* pinned host memory staging device buffers */
    size_t stage_bytes;
    char node_path[108];
    /* gloo, a group whose ranks are on several nodes of a cluster (tr_group_declare):
     * no node's registry, no segment; rendezvous in the cluster's KV store under
     * span_prefix, Gloo's TCP on this node's cluster address (host), agreement checked
     * by an exchange of the ops' descriptors */
    int span;
    char span_prefix[256];
    char host[64];
    /* ...and its ranks' nodes: node_of[r] numbers rank r's node (in order of first rank),
     * n_nodes of them. hier: allreduce in two levels (collective/gloo/gloo.cc) */
    uint8_t node_of[64];
    int n_nodes, hier;
    const char *const *span_nodes; /* the ranks' nodes, "IP:port", during init only */
    struct tr_group *live_next;    /* this process's live groups (group.c) */
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
int tr__group_init(const char *node_path, size_t max_msg, int world, int rank, const char *backend,
                   const char *name, int timeout_ms, tr_group **out);
/* An nccl group whose process drives ndev devices (devs: CUDA ordinals as this process
 * sees them): a communicator of world * ndev ranks, for the _multigpu ops. */
int tr__group_init_devs(const char *node_path, size_t max_msg, int world, int rank, const int *devs,
                        int ndev, const char *name, int timeout_ms, tr_group **out);
/* Joins a declared gloo group whose ranks are on several nodes of a cluster: the
 * rendezvous runs in the cluster's KV store under TR__COLL_KV_PREFIX "<name>/<nonce>/"
 * (nonce: the declaration's, so no key of an earlier group of that name is ever read),
 * not in the node's registry. nodes[r]: rank r's node, "IP:port" (Gloo listens on this
 * rank's IP). hier: allreduce in two levels where ranks share nodes - shm inside each node,
 * Gloo between one leader per node (collective/gloo/gloo.cc). */
#define TR__COLL_HOST_MAX 80
int tr__group_init_span(const char *node_path, size_t max_msg, int world, int rank,
                        const char *name, uint64_t nonce, const char *const *nodes, int hier,
                        int timeout_ms, tr_group **out);
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
void tr__group_destroy(tr_group *g);
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
