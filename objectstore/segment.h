/* objectstore/segment.h - the layout of the node's shared-memory object store and the
 * operations on it: an allocator (boundary tags, size-class free lists) and an object
 * table (open addressing, keyed by object id), both in the one shared segment.
 *
 * Layout: [header | object table | data]. Offsets, never pointers, are stored in shared
 * memory, so every process may map the segment at its own address. Every function here
 * must be called with the segment's lock held (tr__seg_lock), except tr__seg_format and
 * tr__seg_check. Anything read from the segment is bounds-checked before use: a corrupt
 * segment gives TR_EPROTO, never a crash.
 */
#ifndef TR_OBJECTSTORE_SEGMENT_H
#define TR_OBJECTSTORE_SEGMENT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"

#define TR__SEG_MAGIC 0x312d6570756f7274ull /* "troupe-1" */
#define TR__SEG_ALIGN 64
#define TR__SEG_NBINS 48
#define TR__SEG_MAX_CLIENTS 256
#define TR__SEG_NULL UINT64_MAX

/* SEALED objects live in the data region. Under memory pressure an allocating process
 * spills the least recently used sealed object that nobody is viewing to a file:
 * SEALED -> SPILLING (still resident, being written) -> SPILLED (only on disk); a get
 * brings it back: SPILLED -> RESTORING (block allocated, being read) -> SEALED. */
enum {
    TR__OBJ_EMPTY = 0,
    TR__OBJ_CREATED = 1,
    TR__OBJ_SEALED = 2,
    TR__OBJ_SPILLING = 3,
    TR__OBJ_SPILLED = 4,
    TR__OBJ_RESTORING = 5,
};

typedef struct tr__obj_entry {
    uint8_t id[16];
    uint64_t off;  /* payload offset in the data region */
    uint64_t size; /* object bytes */
    uint32_t state;
    uint16_t creator; /* client index */
    uint16_t pad;
    uint64_t holders[TR__SEG_MAX_CLIENTS / 64]; /* clients holding a reference */
    uint64_t viewers[TR__SEG_MAX_CLIENTS / 64]; /* clients that may be reading it: pinned */
    uint64_t tick;                              /* last use, for LRU */
    int32_t busy;                               /* client spilling or restoring it, or -1 */
    uint32_t n_refs;       /* refs this object contains (stored after its data) */
    uint32_t contained_by; /* objects that contain a ref to this one: they keep it alive */
    uint32_t pad2;
} tr__obj_entry;

typedef struct tr__seg_hdr {
    uint64_t magic;
    uint64_t total_size;
    uint64_t table_off; /* from the segment base */
    uint64_t table_cap; /* power of two */
    uint64_t data_off;  /* from the segment base */
    uint64_t data_size;
    pthread_mutex_t mu; /* robust, process-shared */
    uint64_t bins[TR__SEG_NBINS];
    uint64_t bytes_used; /* allocated blocks, headers included */
    uint64_t bytes_objects;
    uint64_t n_objects;
    uint64_t bytes_spilled; /* objects now on disk */
    uint64_t spills, restores;
    uint64_t tick;
    tr__event sealed; /* signalled on every seal and delete */
    int32_t client_pid[TR__SEG_MAX_CLIENTS];
    char spill_dir[512]; /* set by the node */
    uint32_t node_num;   /* the node's number in its cluster (0: none), in every new id */
} tr__seg_hdr;

/* Bytes a segment needs for `capacity` bytes of objects. */
size_t tr__seg_size_for(size_t capacity);
/* Formats a fresh segment of `size` bytes at base (zeroed memory). Returns 0 or code. */
int tr__seg_format(void *base, size_t size);
/* Checks the header of a mapped segment against its mapped size. Returns 0 or TR_EPROTO. */
int tr__seg_check(const void *base, size_t size);

/* Takes the lock; recovers it (and says so) if its holder died. */
void tr__seg_lock(tr__seg_hdr *h);
void tr__seg_unlock(tr__seg_hdr *h);

/* Allocates a block for `size` payload bytes; *off is the payload's data offset.
 * Returns 0 or TR_ENOMEM (no free block big enough). */
int tr__seg_alloc(tr__seg_hdr *h, uint64_t size, uint64_t *off);
/* Frees a payload. Returns 0 or TR_EPROTO (not an allocated block). */
int tr__seg_free(tr__seg_hdr *h, uint64_t off);
/* The largest payload that could ever be allocated (an empty segment). */
uint64_t tr__seg_max_alloc(const tr__seg_hdr *h);

tr__obj_entry *tr__seg_find(tr__seg_hdr *h, const uint8_t id[16]);
/* Inserts an EMPTY->CREATED entry. Returns it, or NULL with TR_EEXIST / TR_ENOMEM (full). */
tr__obj_entry *tr__seg_insert(tr__seg_hdr *h, const uint8_t id[16], int *rc);
/* Frees the entry's block (and spill file) and removes it from the table; objects it
 * contained lose that reference and go too when nothing else keeps them. */
void tr__seg_remove(tr__seg_hdr *h, tr__obj_entry *e);
/* "<spill_dir>/o-<hex id>". */
void tr__seg_spill_path(const tr__seg_hdr *h, const uint8_t id[16], char *out, size_t cap);
/* The entry at table index i (for scans). */
tr__obj_entry *tr__seg_entry(tr__seg_hdr *h, uint64_t i);

static inline void *tr__seg_data(tr__seg_hdr *h) {
    return (char *)h + h->data_off;
}
static inline int tr__seg_holders_empty(const tr__obj_entry *e) {
    for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64; i++)
        if (e->holders[i]) return 0;
    return 1;
}
static inline void tr__seg_bit(uint64_t *set, int client, int on) {
    uint64_t bit = 1ull << (client & 63);
    if (on)
        set[client >> 6] |= bit;
    else
        set[client >> 6] &= ~bit;
}
static inline void tr__seg_hold(tr__obj_entry *e, int client, int on) {
    tr__seg_bit(e->holders, client, on);
    if (!on) tr__seg_bit(e->viewers, client, 0); /* no view without a hold */
}
/* No process holds it and no object contains it: it can go. */
static inline int tr__seg_unheld(const tr__obj_entry *e) {
    return tr__seg_holders_empty(e) && e->contained_by == 0;
}
/* Bytes of its block: the data, then (for a container) 16 bytes per contained ref. */
static inline uint64_t tr__seg_alloc_len(uint64_t size, uint64_t n_refs) {
    return n_refs ? ((size + 15) & ~(uint64_t)15) + 16 * n_refs : size;
}
static inline uint8_t *tr__seg_refs_of(tr__seg_hdr *h, const tr__obj_entry *e) {
    return (uint8_t *)h + h->data_off + e->off + (((e->size + 15) & ~(uint64_t)15));
}
static inline int tr__seg_viewed(const tr__obj_entry *e) {
    for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64; i++)
        if (e->viewers[i]) return 1;
    return 0;
}

#endif
