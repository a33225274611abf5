/* collective/shm/segment.h - the shared segment of an shm collective group: a header
 * (barrier, dead-rank mask, each rank's op descriptor) then one slot per rank and a result
 * slot, each TR__COLL_SLOT bytes. Created, pre-faulted and owned by the node (the group
 * registry); every rank maps it. Large buffers go through in slot-sized chunks.
 */
#ifndef TR_COLLECTIVE_SHM_SEGMENT_H
#define TR_COLLECTIVE_SHM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"

#define TR__COLL_MAGIC 0x316c6c6f63727475ull /* "utrcoll1" */
#define TR__COLL_MAX_WORLD 64
#define TR__COLL_SLOT (256u << 10) /* ~ cache-sized chunks, pipelined through the slots */
#define TR__COLL_CHAN (64u << 10)  /* a send/recv channel's buffer, one per ordered pair */

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
} tr__coll_desc;

typedef struct tr__coll_hdr {
    uint64_t magic;
    uint32_t world;
    uint32_t slot;
    uint64_t size;
    uint32_t arrived; /* barrier: ranks arrived in this generation */
    uint32_t pad;
    tr__event gen; /* barrier generation; also signalled when a rank dies */
    uint64_t dead; /* bit per rank: set by the node when a member's connection closes */
    int32_t pid[TR__COLL_MAX_WORLD];
    tr__coll_desc desc[TR__COLL_MAX_WORLD];
} tr__coll_hdr;

static inline size_t tr__coll_hdr_bytes(void) {
    return (sizeof(tr__coll_hdr) + 4095) & ~(size_t)4095;
}
static inline size_t tr__coll_chan_hdrs(int world) {
    return ((size_t)world * (size_t)world * sizeof(tr__coll_chan) + 4095) & ~(size_t)4095;
}
static inline size_t tr__coll_seg_size(int world) {
    return tr__coll_hdr_bytes() + (size_t)(world + 1) * TR__COLL_SLOT + tr__coll_chan_hdrs(world) +
           (size_t)world * (size_t)world * TR__COLL_CHAN;
}
/* The channel from src to dst, and its buffer. */
static inline tr__coll_chan *tr__coll_chan_of(struct tr__coll_hdr *h, int src, int dst);
static inline char *tr__coll_chan_buf(struct tr__coll_hdr *h, int src, int dst);
static inline char *tr__coll_slot(tr__coll_hdr *h, int i) { /* i == world: the result */
    return (char *)h + tr__coll_hdr_bytes() + (size_t)i * h->slot;
}
static inline tr__coll_chan *tr__coll_chan_of(tr__coll_hdr *h, int src, int dst) {
    return (tr__coll_chan *)tr__coll_slot(h, (int)h->world + 1) + src * (int)h->world + dst;
}
static inline char *tr__coll_chan_buf(tr__coll_hdr *h, int src, int dst) {
    return tr__coll_slot(h, (int)h->world + 1) + tr__coll_chan_hdrs((int)h->world) +
           ((size_t)src * h->world + (size_t)dst) * TR__COLL_CHAN;
}

#endif
