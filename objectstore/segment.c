/* objectstore/segment.c - allocator and object table inside the shared segment.
 *
 * Blocks: a 64-byte header (size | flags) before each 64-aligned payload, so payloads are
 * cache-line aligned; a free block keeps its free-list links in its payload and its size
 * in its last 8 bytes, so a block being freed can merge with the free block before it
 * (boundary tags). Free blocks live in one of TR__SEG_NBINS lists by floor(log2(size)).
 */
#include "objectstore/segment.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/ids.h"
#include "core/log.h"
#include "core/status.h"

#define HDR TR__SEG_ALIGN
#define F_FREE 1ull
#define F_PREV_FREE 2ull
#define SIZE_MASK (~(uint64_t)(TR__SEG_ALIGN - 1))
#define MIN_BLOCK (2 * TR__SEG_ALIGN)

typedef struct {
    uint64_t sz_flags;
} blk; /* at the start of each block's 64-byte header */

typedef struct {
    uint64_t next, prev; /* data offsets of free blocks, or TR__SEG_NULL */
} links;

static inline char *data(tr__seg_hdr *h) {
    return (char *)h + h->data_off;
}
static inline blk *B(tr__seg_hdr *h, uint64_t o) {
    return (blk *)(data(h) + o);
}
static inline links *L(tr__seg_hdr *h, uint64_t o) {
    return (links *)(data(h) + o + HDR);
}
static inline uint64_t bsize(tr__seg_hdr *h, uint64_t o) {
    return B(h, o)->sz_flags & SIZE_MASK;
}
static inline void set_footer(tr__seg_hdr *h, uint64_t o, uint64_t size) {
    memcpy(data(h) + o + size - 8, &size, 8);
}

static int bin_of(uint64_t size) {
    int b = 63 - __builtin_clzll(size);
    b -= 7; /* MIN_BLOCK = 128 = 2^7 goes in bin 0 */
    if (b < 0) b = 0;
    return b >= TR__SEG_NBINS ? TR__SEG_NBINS - 1 : b;
}

static void list_push(tr__seg_hdr *h, uint64_t o) {
    int b = bin_of(bsize(h, o));
    links *l = L(h, o);
    l->prev = TR__SEG_NULL;
    l->next = h->bins[b];
    if (l->next != TR__SEG_NULL) L(h, l->next)->prev = o;
    h->bins[b] = o;
}

static void list_unlink(tr__seg_hdr *h, uint64_t o) {
    links *l = L(h, o);
    /* links come from shared memory: never follow one out of the data region */
    if (l->prev != TR__SEG_NULL) {
        if (l->prev < h->data_size) L(h, l->prev)->next = l->next;
    } else {
        h->bins[bin_of(bsize(h, o))] = l->next;
    }
    if (l->next != TR__SEG_NULL && l->next < h->data_size) L(h, l->next)->prev = l->prev;
}

/* Marks block o free (size sz), fixes the next block's PREV_FREE, and lists it. */
static void make_free(tr__seg_hdr *h, uint64_t o, uint64_t sz) {
    uint64_t prev_flag = B(h, o)->sz_flags & F_PREV_FREE;
    B(h, o)->sz_flags = sz | F_FREE | prev_flag;
    set_footer(h, o, sz);
    if (o + sz < h->data_size) B(h, o + sz)->sz_flags |= F_PREV_FREE;
    list_push(h, o);
}

size_t tr__seg_size_for(size_t capacity) {
    size_t cap = 4096;
    while (cap < capacity / 2048 && cap < (1u << 22))
        cap *= 2;
    size_t table = cap * sizeof(tr__obj_entry);
    size_t hdr = (sizeof(tr__seg_hdr) + 4095) & ~(size_t)4095;
    size_t data_sz = (capacity + 4095) & ~(size_t)4095;
    return hdr + ((table + 4095) & ~(size_t)4095) + data_sz + 4096;
}

int tr__seg_format(void *base, size_t size) {
    tr__seg_hdr *h = base;
    size_t hdr = (sizeof(tr__seg_hdr) + 4095) & ~(size_t)4095;
    size_t cap = 4096;
    /* the table scales with the data: one slot per 2 KiB (4% of it), 4096 .. 4M slots */
    while (cap * 2 * sizeof(tr__obj_entry) + cap * 2 * 2048 < size - hdr && cap < (1u << 22))
        cap *= 2;
    size_t table = (cap * sizeof(tr__obj_entry) + 4095) & ~(size_t)4095;
    if (size < hdr + table + 2 * 4096)
        return tr__err(TR_EINVAL, "object store segment of %zu bytes is too small", size);
    memset(h, 0, sizeof *h);
    h->total_size = size;
    h->table_off = hdr;
    h->table_cap = cap;
    h->data_off = hdr + table;
    h->data_size = (size - hdr - table) & SIZE_MASK;
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int e = pthread_mutex_init(&h->mu, &a);
    pthread_mutexattr_destroy(&a);
    if (e) return tr__err_errno(e, "pthread_mutex_init (shared)");
    for (int i = 0; i < TR__SEG_NBINS; i++)
        h->bins[i] = TR__SEG_NULL;
    B(h, 0)->sz_flags = 0;
    make_free(h, 0, h->data_size);
    h->magic = TR__SEG_MAGIC; /* last: a segment is valid once this is set */
    return 0;
}

int tr__seg_check(const void *base, size_t size) {
    const tr__seg_hdr *h = base;
    if (size < sizeof *h || h->magic != TR__SEG_MAGIC || h->total_size != size ||
        h->table_off < sizeof *h || h->table_cap == 0 || (h->table_cap & (h->table_cap - 1)) ||
        h->table_cap > (1u << 22) ||
        h->table_off + h->table_cap * sizeof(tr__obj_entry) > h->data_off || h->data_off > size ||
        h->data_size > size - h->data_off)
        return tr__err(TR_EPROTO, "object store segment header is invalid");
    return 0;
}

void tr__seg_lock(tr__seg_hdr *h) {
    int e = pthread_mutex_lock(&h->mu);
    if (e == EOWNERDEAD) {
        /* A process died holding the lock. Operations under it are short and leave the
         * structures consistent at every store except mid-list-update; carry on. */
        TR_LOG_WARN("STORE-LOCK-RECOVERED", "a process died holding the object store lock");
        pthread_mutex_consistent(&h->mu);
    }
}

void tr__seg_unlock(tr__seg_hdr *h) {
    pthread_mutex_unlock(&h->mu);
}

uint64_t tr__seg_max_alloc(const tr__seg_hdr *h) {
    return h->data_size - HDR;
}

int tr__seg_alloc(tr__seg_hdr *h, uint64_t size, uint64_t *off) {
    if (size > h->data_size)
        return tr__err(TR_ENOMEM, "object of %llu bytes", (unsigned long long)size);
    uint64_t need = (size + HDR + TR__SEG_ALIGN - 1) & SIZE_MASK;
    if (need < MIN_BLOCK) need = MIN_BLOCK;
    for (int b = bin_of(need); b < TR__SEG_NBINS; b++) {
        int scanned = 0;
        for (uint64_t o = h->bins[b]; o != TR__SEG_NULL && scanned < 64;
             o = L(h, o)->next, scanned++) {
            if (o >= h->data_size) return tr__err(TR_EPROTO, "object store free list is corrupt");
            uint64_t sz = bsize(h, o);
            if (sz < need) continue;
            list_unlink(h, o);
            if (sz - need >= MIN_BLOCK) { /* split: the tail stays free */
                B(h, o + need)->sz_flags = 0;
                make_free(h, o + need, sz - need);
                sz = need;
            } else if (o + sz < h->data_size) {
                B(h, o + sz)->sz_flags &= ~F_PREV_FREE;
            }
            B(h, o)->sz_flags = sz | (B(h, o)->sz_flags & F_PREV_FREE);
            h->bytes_used += sz;
            *off = o + HDR;
            return 0;
        }
    }
    return tr__err(TR_ENOMEM, "no free block of %llu bytes", (unsigned long long)need);
}

int tr__seg_free(tr__seg_hdr *h, uint64_t off) {
    if (off < HDR || off >= h->data_size || (off & (TR__SEG_ALIGN - 1)))
        return tr__err(TR_EPROTO, "free of a bad offset");
    uint64_t o = off - HDR, sz = bsize(h, o);
    if ((B(h, o)->sz_flags & F_FREE) || sz < MIN_BLOCK || sz > h->data_size - o)
        return tr__err(TR_EPROTO, "free of a block that is not allocated");
    h->bytes_used -= sz;
    uint64_t next = o + sz;
    if (next < h->data_size && (B(h, next)->sz_flags & F_FREE)) { /* merge forward */
        list_unlink(h, next);
        sz += bsize(h, next);
    }
    if (B(h, o)->sz_flags & F_PREV_FREE) { /* merge backward through the footer */
        uint64_t psz;
        memcpy(&psz, data(h) + o - 8, 8);
        if (psz <= o && psz >= MIN_BLOCK) {
            uint64_t p = o - psz;
            list_unlink(h, p);
            o = p;
            sz += psz;
        }
    }
    B(h, o)->sz_flags &= F_PREV_FREE;
    make_free(h, o, sz);
    return 0;
}

static inline tr__obj_entry *table(tr__seg_hdr *h) {
    return (tr__obj_entry *)((char *)h + h->table_off);
}

static inline uint64_t slot_of(const uint8_t id[16], uint64_t cap) {
    uint64_t k;
    memcpy(&k, id, 8);
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k & (cap - 1);
}

tr__obj_entry *tr__seg_find(tr__seg_hdr *h, const uint8_t id[16]) {
    tr__obj_entry *t = table(h);
    uint64_t cap = h->table_cap, i = slot_of(id, cap);
    for (uint64_t n = 0; n < cap; n++, i = (i + 1) & (cap - 1)) {
        if (t[i].state == TR__OBJ_EMPTY) return NULL;
        if (memcmp(t[i].id, id, 16) == 0) return &t[i];
    }
    return NULL;
}

tr__obj_entry *tr__seg_insert(tr__seg_hdr *h, const uint8_t id[16], int *rc) {
    tr__obj_entry *t = table(h);
    uint64_t cap = h->table_cap, i = slot_of(id, cap);
    if (h->n_objects + 1 > cap - cap / 8) { /* keep probe runs short */
        *rc = tr__err(TR_ENOMEM, "the object table is full (%llu objects)",
                      (unsigned long long)h->n_objects);
        return NULL;
    }
    for (;; i = (i + 1) & (cap - 1)) {
        if (t[i].state == TR__OBJ_EMPTY) break;
        if (memcmp(t[i].id, id, 16) == 0) {
            *rc = tr__err(TR_EEXIST, "an object with this id exists");
            return NULL;
        }
    }
    memset(&t[i], 0, sizeof t[i]);
    memcpy(t[i].id, id, 16);
    t[i].state = TR__OBJ_CREATED;
    t[i].busy = -1;
    h->n_objects++;
    *rc = 0;
    return &t[i];
}

/* Removes one entry; appends the ids of the objects it contained to *work. */
static void remove_one(tr__seg_hdr *h, tr__obj_entry *e, uint8_t **work, size_t *n, size_t *cap) {
    tr__obj_entry *t = table(h);
    uint64_t cap_t = h->table_cap, mask = cap_t - 1;
    if (e < t || e >= t + cap_t) return;
    /* Overflow-safe bounds: a corrupt entry must not make us read outside the data. */
    uint64_t room = e->off <= h->data_size ? h->data_size - e->off : 0;
    uint64_t r16 = e->size <= room ? ((e->size + 15) & ~(uint64_t)15) : UINT64_MAX;
    if (e->n_refs && e->off && e->state != TR__OBJ_CREATED && r16 <= room &&
        e->n_refs <= (room - r16) / 16) {
        if (*n + e->n_refs > *cap) {
            size_t c = (*cap ? *cap * 2 : 64) + e->n_refs;
            uint8_t *w = realloc(*work, c * 16);
            if (w) {
                *work = w;
                *cap = c;
            }
        }
        if (*n + e->n_refs <= *cap) {
            memcpy(*work + 16 * *n, tr__seg_refs_of(h, e), 16ull * e->n_refs);
            *n += e->n_refs;
        }
    }
    if (e->off) tr__seg_free(h, e->off);
    if (e->state == TR__OBJ_SEALED || e->state == TR__OBJ_SPILLING) h->bytes_objects -= e->size;
    if (e->state == TR__OBJ_SPILLED || e->state == TR__OBJ_RESTORING) h->bytes_spilled -= e->size;
    if (e->state >= TR__OBJ_SPILLING) { /* a spill file exists, or is being written */
        char path[700];
        tr__seg_spill_path(h, e->id, path, sizeof path);
        unlink(path);
    }
    h->n_objects--;
    /* Backward-shift deletion keeps probe runs without tombstones. */
    uint64_t hole = (uint64_t)(e - t);
    for (uint64_t j = (hole + 1) & mask; t[j].state != TR__OBJ_EMPTY; j = (j + 1) & mask) {
        uint64_t home = slot_of(t[j].id, cap_t);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t[hole] = t[j];
            hole = j;
        }
    }
    memset(&t[hole], 0, sizeof t[hole]);
}

void tr__seg_remove(tr__seg_hdr *h, tr__obj_entry *e) {
    uint8_t *work = NULL;
    size_t n = 0, cap = 0;
    remove_one(h, e, &work, &n, &cap);
    /* A worklist, not recursion: chains of containers may be long. Entries move when
     * others are removed, so each is found again by id. */
    while (n > 0) {
        n--;
        tr__obj_entry *c = tr__seg_find(h, work + 16 * n);
        if (!c || c->contained_by == 0) continue;
        c->contained_by--;
        if (tr__seg_unheld(c) && c->state >= TR__OBJ_SEALED) remove_one(h, c, &work, &n, &cap);
    }
    free(work);
}

void tr__seg_spill_path(const tr__seg_hdr *h, const uint8_t id[16], char *out, size_t cap) {
    char hex[33];
    tr__hex(id, 16, hex);
    snprintf(out, cap, "%.*s/o-%s", (int)strnlen(h->spill_dir, sizeof h->spill_dir), h->spill_dir,
             hex);
}

tr__obj_entry *tr__seg_entry(tr__seg_hdr *h, uint64_t i) {
    return i < h->table_cap ? &table(h)[i] : NULL;
}
