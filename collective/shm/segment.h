/* collective/shm/segment.h - the shared segment of a collective group: a header (each
 * rank's step counter and op descriptors, the dead-rank mask) and, for the shm backend,
 * two staging slots per rank (by step parity) and the send/recv channels. Created,
 * pre-faulted and owned by the node (the group registry); every rank maps it. Other
 * backends get the header alone (they use the dead mask).
 */
#ifndef TR_COLLECTIVE_SHM_SEGMENT_H
#define TR_COLLECTIVE_SHM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"

#define TR__COLL_MAGIC 0x346c6c6f63727475ull /* "utrcoll4" */
#define TR__COLL_MAX_WORLD 64
#define TR__COLL_SLOT (256u << 10) /* a rank's staging slot: one chunk (measured best) */
/* A send/recv channel's buffer, one per ordered pair of ranks: 64 KiB, less in large
 * groups so that all of them stay within ~4 MiB (at least 4 KiB each): the node
 * pre-faults them, and 64 KiB x 64 x 64 ranks would be 256 MiB. */
static inline size_t tr__coll_chan_size(int world) {
    size_t c = ((size_t)4 << 20) / ((size_t)world * (size_t)world);
    c = c > (64u << 10) ? (64u << 10) : c < 4096 ? 4096 : c;
    return c & ~(size_t)4095;
}

/* One direction of a point-to-point channel: the sender posts a chunk, the receiver
 * consumes it. Both counters are events (spin, then futex). */
typedef struct tr__coll_chan {
    tr__event posted, consumed;
    uint64_t bytes; /* of the chunk posted */
    uint64_t count; /* the whole message's elements, and its dtype: checked by recv */
    uint32_t dtype;
    int32_t error; /* set by the receiver on a mismatch; the sender reports it too */
} tr__coll_chan;

typedef struct tr__coll_desc {
    uint64_t seq;  /* op number on this group, from 1 */
    uint32_t kind; /* TR__COLL_ALLREDUCE, ... */
    uint32_t dtype, op;
    int32_t root;
    uint64_t count;
    uint64_t addr;    /* single copy: where this rank's data lies in its own memory */
    uint64_t addr2;   /* ...and its second buffer (a single-copy allreduce's recv) */
    uint32_t single;  /* single copy: 1 this rank can read its peers' memory, 2 it wants to */
    uint32_t entered; /* gloo: 1 it runs the op, 2 it stands in for the ranks that do */
} __attribute__((aligned(64))) tr__coll_desc; /* (a line each: a rank writes one parity's while
                                                  peers may hold the other's, read by an op's
                                                  agreement check) */

/* An allreduce, broadcast or allgather of at most TR__COLL_TINY bytes a rank (shm): the
 * rank's value and what op it is, beside its posted counter, so that a peer that sees the
 * counter move has them too. */
#define TR__COLL_TINY 16
typedef struct tr__coll_tiny {
    uint64_t sig; /* the op: its number (low 32 bits), kind, root, dtype, reduction op, count */
    unsigned char data[TR__COLL_TINY];
} tr__coll_tiny;

/* A rank's public state, on its own cache lines: only the rank writes it. The first line
 * is what peers wait on: its counter, its core, a tiny op's value (by op parity). */
typedef struct tr__coll_rank {
    tr__event posted;      /* steps this rank has posted (see shm.c) */
    int32_t cpu;           /* the core it posted from (a hint for waiters' spinning) */
    int32_t pinned;        /* 1 + the one core it is bound to (cpu_binding), 0 if it floats */
    tr__coll_tiny tiny[2]; /* a tiny op's value, by op parity (shm.c) */
    uint64_t probe;        /* address of a known word in its memory, for peers to read (shm) */
    int32_t can_read;      /* 1: it can read every peer's memory (single copy), 2: not; 0: yet */
    tr__coll_desc desc[2]; /* its view of its current op, by op parity */
} __attribute__((aligned(64))) tr__coll_rank;

#ifndef __cplusplus
_Static_assert(offsetof(tr__coll_rank, probe) == 64, "a rank's first line: counter and tiny op");
#endif

typedef struct tr__coll_hdr {
    uint64_t magic;
    uint32_t world;
    uint32_t slot; /* bytes per staging slot; 0 when the segment is the header alone */
    uint64_t size;
    uint64_t dead; /* bit per rank: set by the node when a member dies or leaves */
    int32_t pid[TR__COLL_MAX_WORLD];
    tr__coll_rank rk[TR__COLL_MAX_WORLD];
} tr__coll_hdr;

static inline size_t tr__coll_hdr_bytes(void) {
    return (sizeof(tr__coll_hdr) + 4095) & ~(size_t)4095;
}
static inline size_t tr__coll_chan_hdrs(int world) {
    return ((size_t)world * (size_t)world * sizeof(tr__coll_chan) + 4095) & ~(size_t)4095;
}
/* The segment's size for a group of `world` ranks; `data`: with the shm data path. */
static inline size_t tr__coll_seg_size(int world, int data) {
    if (!data) return tr__coll_hdr_bytes();
    return tr__coll_hdr_bytes() + 2 * (size_t)world * TR__COLL_SLOT + tr__coll_chan_hdrs(world) +
           (size_t)world * (size_t)world * tr__coll_chan_size(world);
}
/* Rank r's staging slot for step `step` (slots alternate by step parity). */
static inline char *tr__coll_slot(tr__coll_hdr *h, int r, uint32_t step) {
    return (char *)h + tr__coll_hdr_bytes() + (2 * (size_t)r + (step & 1)) * h->slot;
}
static inline char *tr__coll_chans(tr__coll_hdr *h) {
    return (char *)h + tr__coll_hdr_bytes() + 2 * (size_t)h->world * h->slot;
}
/* The channel from src to dst, and its buffer. */
static inline tr__coll_chan *tr__coll_chan_of(tr__coll_hdr *h, int src, int dst) {
    return (tr__coll_chan *)tr__coll_chans(h) + src * (int)h->world + dst;
}
static inline char *tr__coll_chan_buf(tr__coll_hdr *h, int src, int dst) {
    return tr__coll_chans(h) + tr__coll_chan_hdrs((int)h->world) +
           ((size_t)src * h->world + (size_t)dst) * tr__coll_chan_size((int)h->world);
}

#endif
