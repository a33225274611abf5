/* objectstore/segment.h - the layout of the node's shared-memory object store and the
 * operations on it: an allocator (boundary tags, size-class free lists) and an object
 * table (open addressing, keyed by object id), both in the one shared segment.
 *
 * Layout: [header | object table | data]. Offsets, never pointers, are stored in shared
 * memory, so every process may map the segment at its own address. Every process that
 * maps the segment may write all of it, so none trusts what it reads there: each works
 * through its own view (tr__seg), whose geometry (where the table and the data are, and
 * their sizes) is copied once - written by tr__seg_format, or checked by tr__seg_open -
 * and never read from the shared header again, and whose spill directory is the node's
 * (never the segment's). What stays shared is mutable state (the lock, the free lists,
 * the counters, the entries), and every offset read from it is read once and
 * bounds-checked against the view before use: a corrupt segment gives TR_EPROTO, never
 * an access outside it. Every function here must be called with the segment's lock held
 * (tr__seg_lock), except tr__seg_format, tr__seg_open and tr__seg_set_spill_dir.
 */
#ifndef TR_OBJECTSTORE_SEGMENT_H
#define TR_OBJECTSTORE_SEGMENT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/counters.h"
#include "core/wait.h"

#define TR__SEG_MAGIC 0x312d6570756f7274ull /* "troupe-1" */
#define TR__SEG_ALIGN 64
#define TR__SEG_NBINS 48
#define TR__SEG_MAX_CLIENTS 256
#define TR__SEG_NULL UINT64_MAX
#define TR__SEG_BOARD 512 /* workers' busy flags and cancels (actor/tasks.h, tr_cancel) */

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
    uint16_t creator;                           /* client index */
    uint16_t flags;                             /* TR__ENT_* */
    uint64_t holders[TR__SEG_MAX_CLIENTS / 64]; /* clients holding a reference */
    uint64_t viewers[TR__SEG_MAX_CLIENTS / 64]; /* clients that may be reading it: pinned */
    uint64_t tick;                              /* last use, for LRU */
    int32_t busy;                               /* client spilling or restoring it, or -1 */
    uint32_t n_refs;       /* refs this object contains (stored after its data) */
    uint32_t contained_by; /* objects that contain a ref to this one: they keep it alive */
    int32_t err;           /* TR__ENT_ERROR: the code a get returns (the data: its message) */
} tr__obj_entry;

/* Entry flags. A *promise* is the CREATED entry of a call result's object twin, made by
 * the call's owner when the ref escapes before the result is in (docs/OWNERSHIP.md): no
 * block yet (off 0, size 0), filled and sealed when the result arrives. An *error entry*
 * is sealed with the failure of the call it stands for: a get returns `err`, with the
 * data as its message. */
#define TR__ENT_PROMISE 0x1
#define TR__ENT_ERROR 0x2

/* The cancel words a board entry keeps: the last this many tr_cancel()s of its worker's
 * calls (an earlier one, overwritten, is not seen there: its caller failed it all the same). */
#define TR__SEG_BOARD_CANCELS 4

/* A worker (a task worker, or an actor's) on the node's notice board (tr__seg_hdr.board). */
typedef struct tr__seg_board {
    uint64_t key;    /* its actor id's key; 0: free */
    int32_t busy;    /* a task worker runs a task now */
    int32_t pid;     /* its process */
    uint32_t next;   /* the cancel word the next tr_cancel writes, modulo TR__SEG_BOARD_CANCELS */
    int32_t blocked; /* a task worker's threads waiting in tr_get/tr_wait (for its task's
                        children, say): the pool starts another worker beside it */
    /* callers' tr_cancel()s of calls it has queued or runs: (caller index + 1) << 48 | the
     * call's seq (tr__board_cancel_word); 0: none */
    uint64_t cancel[TR__SEG_BOARD_CANCELS];
    /* What it ran, for the node's metrics (api/node/metrics.c sums them by class): calls
     * (tasks too) and those that failed, and a histogram of their durations (bucket i:
     * those of at most tr__hist_bound_ns[i], the last one: longer), with their sum.
     * Relaxed atomic adds by the worker's threads; zeroed when the entry is claimed. */
    tr__hist call;
    tr__coll_counters coll; /* its collective ops (core/counters.h) */
} tr__seg_board;

/* Counts one call of `ns` (failed: err) in a board entry. */
static inline void tr__board_count_call(tr__seg_board *e, uint64_t ns, int err) {
    tr__hist_add(&e->call, ns, err);
}

/* The word a caller of store index `caller` writes into a task worker's `cancel` to
 * cancel its call `seq` (the frame seq on its connection), which the worker compares with
 * the call it runs. */
static inline uint64_t tr__board_cancel_word(int caller, uint64_t seq) {
    return (uint64_t)(caller + 1) << 48 | (seq & 0xffffffffffffULL);
}

/* The word for a call that came from another node through this node's relay
 * (actor/relay.c): the relay's `tag` for the caller's connection (1..TR__BOARD_TAG_MAX,
 * told the worker in the CALLER frame) instead of a caller's index, which it never
 * equals (the top bit is set). The relay writes it when the caller's CANCEL comes. */
#define TR__BOARD_TAG_MAX 0x7fff
static inline uint64_t tr__board_relay_cancel_word(unsigned tag, uint64_t seq) {
    return (uint64_t)(0x8000u | (tag & TR__BOARD_TAG_MAX)) << 48 | (seq & 0xffffffffffffULL);
}

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
    /* Bumped (never 0) each time the node gives a client index to a new process: a ref
     * names its owner by (index, generation), so any process tells from the ref alone
     * whether its owner is still attached. */
    uint16_t client_gen[TR__SEG_MAX_CLIENTS];
    /* A notice board of task workers: whether one runs a task now, so that every process
     * of the node sends its tasks to idle ones (a parent waiting for its children is
     * busy), and a caller's cancel of the task it runs. Advisory: never trusted for
     * anything but a choice, and a cancel the worker checks against its call. */
    tr__seg_board board[TR__SEG_BOARD];
    uint32_t node_num; /* the node's number in its cluster (0: none), in every new id */
} tr__seg_hdr;

/* Refs (docs/OWNERSHIP.md): b[15] & 0x80 marks an object of the store; a call's result
 * has 0x40 instead, and its *object twin* - the same bytes with 0x80 added - is the
 * store's name for it once it escapes its owner. Object ids never have 0x40. */
#define TR__REF_OBJECT_BIT 0x80
#define TR__REF_CALL_BIT 0x40
static inline int tr__seg_is_call_id(const uint8_t id[16]) {
    return (id[15] & (TR__REF_OBJECT_BIT | TR__REF_CALL_BIT)) == TR__REF_CALL_BIT;
}
/* The store's id for a ref: a call ref's twin, any other ref itself. */
static inline void tr__seg_store_id(const uint8_t in[16], uint8_t out[16]) {
    for (int i = 0; i < 16; i++)
        out[i] = in[i];
    if (tr__seg_is_call_id(in)) out[15] |= TR__REF_OBJECT_BIT;
}

/* One process's view of a segment: the shared header (for its lock, free lists, counters,
 * event and client pids) and this process's own copy of the geometry. The spill
 * directory is the node's (STORE_ATTACH tells each client), never the segment's. */
typedef struct tr__seg {
    tr__seg_hdr *h;
    char *data;           /* the data region */
    tr__obj_entry *table; /* table_cap entries */
    uint64_t table_cap, data_off, data_size;
    char spill_dir[512]; /* "": none (no spill file is made or removed) */
} tr__seg;

/* A value in shared memory that another process may change at any moment: read once,
 * then check and use the copy (a plain read may be made again by the compiler). */
#define TR__SEG_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

/* Bytes a segment needs for `capacity` bytes of objects. */
size_t tr__seg_size_for(size_t capacity);
/* Formats a fresh segment of `size` bytes at base (zeroed memory), and fills *s, the
 * formatting process's view, from what it wrote. Returns 0 or code. */
int tr__seg_format(tr__seg *s, void *base, size_t size);
/* Fills *s for a segment mapped at base (size bytes) from one copy of its header, once
 * that copy is checked against the mapped size. Returns 0 or TR_EPROTO. */
int tr__seg_open(tr__seg *s, void *base, size_t size);
/* Sets the view's spill directory (its own copy). Returns 0 or TR_EINVAL (too long). */
int tr__seg_set_spill_dir(tr__seg *s, const char *dir);

/* Takes the lock; recovers it (and says so) if its holder died. */
void tr__seg_lock(tr__seg *s);
void tr__seg_unlock(tr__seg *s);

/* Allocates a block for `size` payload bytes; *off is the payload's data offset.
 * Returns 0, TR_ENOMEM (no free block big enough) or TR_EPROTO (a corrupt free list). */
int tr__seg_alloc(tr__seg *s, uint64_t size, uint64_t *off);
/* Frees a payload. Returns 0 or TR_EPROTO (not an allocated block). */
int tr__seg_free(tr__seg *s, uint64_t off);
/* The largest payload that could ever be allocated (an empty segment). */
uint64_t tr__seg_max_alloc(const tr__seg *s);

tr__obj_entry *tr__seg_find(tr__seg *s, const uint8_t id[16]);
/* Inserts an EMPTY->CREATED entry. Returns it, or NULL with TR_EEXIST / TR_ENOMEM (full). */
tr__obj_entry *tr__seg_insert(tr__seg *s, const uint8_t id[16], int *rc);
/* Frees the entry's block (and spill file) and removes it from the table; objects it
 * contained lose that reference and go too when nothing else keeps them. */
void tr__seg_remove(tr__seg *s, tr__obj_entry *e);
/* Takes the entry out of the table and does nothing else: its block (if any) and
 * contained refs are now another entry's (a call result renamed to its twin). */
void tr__seg_forget(tr__seg *s, tr__obj_entry *e);
/* "<spill_dir>/o-<hex id>". */
void tr__seg_spill_path(const tr__seg *s, const uint8_t id[16], char *out, size_t cap);
/* The entry at table index i (for scans). */
tr__obj_entry *tr__seg_entry(tr__seg *s, uint64_t i);
/* The board's entry of key (non-zero), claimed for this process if `claim` (a free or
 * stale one: its counters zeroed; NULL: the board is full), else only looked up (NULL:
 * not on the board). Takes the segment lock. */
tr__seg_board *tr__seg_board_entry(tr__seg *s, uint64_t key, int claim);

static inline void *tr__seg_data(const tr__seg *s) {
    return s->data;
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
/* Where the refs of a container whose payload is at off (size data bytes) start: off
 * and size are the caller's checked copies, never re-read from the entry. */
static inline uint8_t *tr__seg_refs_of(const tr__seg *s, uint64_t off, uint64_t size) {
    return (uint8_t *)s->data + off + ((size + 15) & ~(uint64_t)15);
}
static inline int tr__seg_viewed(const tr__obj_entry *e) {
    for (int i = 0; i < TR__SEG_MAX_CLIENTS / 64; i++)
        if (e->viewers[i]) return 1;
    return 0;
}

#endif
