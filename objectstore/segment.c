/* objectstore/segment.c - allocator and object table inside the shared segment.
 *
 * Blocks: a 64-byte header (size | flags) before each 64-aligned payload, so payloads are
 * cache-line aligned; a free block keeps its free-list links in its payload and its size
 * in its last 8 bytes, so a block being freed can merge with the free block before it
 * (boundary tags). Free blocks live in one of TR__SEG_NBINS lists by floor(log2(size)).
 */
#include "objectstore/segment.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
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

static inline blk *B(tr__seg *s, uint64_t o) {
    return (blk *)(s->data + o);
}
static inline links *L(tr__seg *s, uint64_t o) {
    return (links *)(s->data + o + HDR);
}
/* A block's tag, read once (shared memory). */
static inline uint64_t tag(tr__seg *s, uint64_t o) {
    return TR__SEG_LOAD(B(s, o)->sz_flags);
}
static inline void set_footer(tr__seg *s, uint64_t o, uint64_t size) {
    memcpy(s->data + o + size - 8, &size, 8);
}
/* Whether o, read from shared memory (a list link, a bin's head), may be a free block:
 * 64-aligned, with its header and links (a free block is at least MIN_BLOCK) inside the
 * data region. Nothing read from the segment is followed before this holds. */
static inline int blk_ok(const tr__seg *s, uint64_t o) {
    return !(o & (TR__SEG_ALIGN - 1)) && o <= s->data_size - MIN_BLOCK;
}

static int bin_of(uint64_t size) {
    if (size < MIN_BLOCK) return 0; /* (a corrupt size; and clz(0) is undefined) */
    int b = 63 - __builtin_clzll(size);
    b -= 7; /* MIN_BLOCK = 128 = 2^7 goes in bin 0 */
    return b >= TR__SEG_NBINS ? TR__SEG_NBINS - 1 : b;
}

/* Lists free block o of sz bytes at the head of its bin. */
static void list_push(tr__seg *s, uint64_t o, uint64_t sz) {
    int b = bin_of(sz);
    uint64_t next = TR__SEG_LOAD(s->h->bins[b]);
    links *l = L(s, o);
    l->prev = TR__SEG_NULL;
    l->next = next; /* kept as it is: a corrupt one fails the next alloc that reaches it */
    if (next != TR__SEG_NULL && blk_ok(s, next)) L(s, next)->prev = o;
    s->h->bins[b] = o;
}

/* Unlinks free block o of sz bytes from its bin. */
static void list_unlink(tr__seg *s, uint64_t o, uint64_t sz) {
    links *l = L(s, o);
    /* links come from shared memory: read once, never followed out of the data region */
    uint64_t prev = TR__SEG_LOAD(l->prev), next = TR__SEG_LOAD(l->next);
    if (prev != TR__SEG_NULL) {
        if (blk_ok(s, prev)) L(s, prev)->next = next;
    } else {
        s->h->bins[bin_of(sz)] = next;
    }
    if (next != TR__SEG_NULL && blk_ok(s, next)) L(s, next)->prev = prev;
}

/* Marks block o free (size sz, o + sz within the data region), fixes the next block's
 * PREV_FREE, and lists it. */
static void make_free(tr__seg *s, uint64_t o, uint64_t sz) {
    uint64_t prev_flag = tag(s, o) & F_PREV_FREE;
    B(s, o)->sz_flags = sz | F_FREE | prev_flag;
    set_footer(s, o, sz);
    if (o + sz < s->data_size) B(s, o + sz)->sz_flags |= F_PREV_FREE;
    list_push(s, o, sz);
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

static void fill(tr__seg *s, void *base, uint64_t table_off, uint64_t table_cap, uint64_t data_off,
                 uint64_t data_size) {
    memset(s, 0, sizeof *s);
    s->h = base;
    s->table = (tr__obj_entry *)((char *)base + table_off);
    s->table_cap = table_cap;
    s->data_off = data_off;
    s->data = (char *)base + data_off;
    s->data_size = data_size;
}

int tr__seg_format(tr__seg *s, void *base, size_t size) {
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
    fill(s, base, hdr, cap, hdr + table, (size - hdr - table) & SIZE_MASK); /* as written */
    B(s, 0)->sz_flags = 0;
    make_free(s, 0, s->data_size);
    __atomic_store_n(&h->magic, TR__SEG_MAGIC, __ATOMIC_RELEASE); /* last: now it is valid */
    return 0;
}

int tr__seg_open(tr__seg *s, void *base, size_t size) {
    const tr__seg_hdr *h = base;
    tr__seg_hdr g; /* one copy of the geometry, checked, then only the copy is used */
    if (size < sizeof g || __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != TR__SEG_MAGIC)
        return tr__err(TR_EPROTO, "object store segment: no header here");
    memcpy(&g, h, offsetof(tr__seg_hdr, mu));
    if (g.total_size != size || g.table_off < sizeof g || g.table_off > size ||
        (g.table_off & (TR__SEG_ALIGN - 1)) || g.table_cap == 0 ||
        (g.table_cap & (g.table_cap - 1)) || g.table_cap > (1u << 22) ||
        g.table_off + g.table_cap * sizeof(tr__obj_entry) > g.data_off || g.data_off > size ||
        (g.data_off & (TR__SEG_ALIGN - 1)) || g.data_size > size - g.data_off ||
        (g.data_size & (TR__SEG_ALIGN - 1)) || g.data_size < MIN_BLOCK)
        return tr__err(TR_EPROTO,
                       "object store segment header is invalid (table %llu slots at %llu, data "
                       "%llu bytes at %llu, %llu bytes in all, %zu mapped)",
                       (unsigned long long)g.table_cap, (unsigned long long)g.table_off,
                       (unsigned long long)g.data_size, (unsigned long long)g.data_off,
                       (unsigned long long)g.total_size, size);
    fill(s, base, g.table_off, g.table_cap, g.data_off, g.data_size);
    return 0;
}

int tr__seg_set_spill_dir(tr__seg *s, const char *dir) {
    size_t n = strlen(dir);
    if (n >= sizeof s->spill_dir)
        return tr__err(TR_EINVAL, "spill directory of %zu bytes (at most %zu)", n,
                       sizeof s->spill_dir - 1);
    memcpy(s->spill_dir, dir, n + 1);
    return 0;
}

void tr__seg_lock(tr__seg *s) {
    int e = pthread_mutex_lock(&s->h->mu);
    if (e == EOWNERDEAD) {
        /* A process died holding the lock. Operations under it are short and leave the
         * structures consistent at every store except mid-list-update; carry on. */
        TR_LOG_WARN("STORE-LOCK-RECOVERED", "a process died holding the object store lock");
        pthread_mutex_consistent(&s->h->mu);
    }
}

void tr__seg_unlock(tr__seg *s) {
    pthread_mutex_unlock(&s->h->mu);
}

uint64_t tr__seg_max_alloc(const tr__seg *s) {
    return s->data_size - HDR;
}

int tr__seg_alloc(tr__seg *s, uint64_t size, uint64_t *off) {
    if (size > s->data_size)
        return tr__err(TR_ENOMEM, "object of %llu bytes", (unsigned long long)size);
    uint64_t need = (size + HDR + TR__SEG_ALIGN - 1) & SIZE_MASK;
    if (need < MIN_BLOCK) need = MIN_BLOCK;
    for (int b = bin_of(need); b < TR__SEG_NBINS; b++) {
        int scanned = 0;
        for (uint64_t o = TR__SEG_LOAD(s->h->bins[b]); o != TR__SEG_NULL && scanned < 64;
             o = TR__SEG_LOAD(L(s, o)->next), scanned++) {
            if (!blk_ok(s, o)) return tr__err(TR_EPROTO, "object store free list is corrupt");
            uint64_t sz = tag(s, o) & SIZE_MASK;
            if (sz < need) continue;
            if (sz > s->data_size - o)
                return tr__err(TR_EPROTO, "object store free block is corrupt");
            list_unlink(s, o, sz);
            if (sz - need >= MIN_BLOCK) { /* split: the tail stays free */
                B(s, o + need)->sz_flags = 0;
                make_free(s, o + need, sz - need);
                sz = need;
            } else if (o + sz < s->data_size) {
                B(s, o + sz)->sz_flags &= ~F_PREV_FREE;
            }
            B(s, o)->sz_flags = sz | (tag(s, o) & F_PREV_FREE);
            s->h->bytes_used += sz;
            *off = o + HDR;
            return 0;
        }
    }
    return tr__err(TR_ENOMEM, "no free block of %llu bytes", (unsigned long long)need);
}

int tr__seg_free(tr__seg *s, uint64_t off) {
    if (off < HDR || off >= s->data_size || (off & (TR__SEG_ALIGN - 1)))
        return tr__err(TR_EPROTO, "free of a bad offset");
    uint64_t o = off - HDR, t = tag(s, o), sz = t & SIZE_MASK;
    if ((t & F_FREE) || sz < MIN_BLOCK || sz > s->data_size - o)
        return tr__err(TR_EPROTO, "free of a block that is not allocated");
    s->h->bytes_used -= sz;
    uint64_t next = o + sz;
    if (next < s->data_size) { /* merge forward, if the next block's tag is sound */
        uint64_t nt = tag(s, next), nsz = nt & SIZE_MASK;
        if ((nt & F_FREE) && nsz >= MIN_BLOCK && nsz <= s->data_size - next) {
            list_unlink(s, next, nsz);
            sz += nsz;
        }
    }
    if ((t & F_PREV_FREE) && o >= MIN_BLOCK) { /* merge backward through the footer */
        uint64_t psz = TR__SEG_LOAD(*(uint64_t *)(s->data + o - 8));
        if (psz <= o && psz >= MIN_BLOCK && !(psz & (TR__SEG_ALIGN - 1))) {
            uint64_t p = o - psz;
            list_unlink(s, p, psz);
            o = p;
            sz += psz;
        }
    }
    B(s, o)->sz_flags &= F_PREV_FREE;
    make_free(s, o, sz);
    return 0;
}

/* Both halves: call refs' twins share their owner's bytes 8..15 and count in 0..7. */
static inline uint64_t slot_of(const uint8_t id[16], uint64_t cap) {
    uint64_t k, hi;
    memcpy(&k, id, 8);
    memcpy(&hi, id + 8, 8);
    k ^= hi * 0x9e3779b97f4a7c15ull;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k & (cap - 1);
}

tr__obj_entry *tr__seg_find(tr__seg *s, const uint8_t id[16]) {
    tr__obj_entry *t = s->table;
    uint64_t cap = s->table_cap, i = slot_of(id, cap);
    for (uint64_t n = 0; n < cap; n++, i = (i + 1) & (cap - 1)) {
        if (t[i].state == TR__OBJ_EMPTY) return NULL;
        if (memcmp(t[i].id, id, 16) == 0) return &t[i];
    }
    return NULL;
}

tr__obj_entry *tr__seg_insert(tr__seg *s, const uint8_t id[16], int *rc) {
    tr__obj_entry *t = s->table;
    uint64_t cap = s->table_cap, i = slot_of(id, cap), n = 0;
    if (s->h->n_objects + 1 > cap - cap / 8) { /* keep probe runs short */
        *rc = tr__err(TR_ENOMEM, "the object table is full (%llu objects)",
                      (unsigned long long)s->h->n_objects);
        return NULL;
    }
    /* (bounded: the count that says there is room is shared memory too) */
    for (; n < cap; n++, i = (i + 1) & (cap - 1)) {
        if (t[i].state == TR__OBJ_EMPTY) break;
        if (memcmp(t[i].id, id, 16) == 0) {
            *rc = tr__err(TR_EEXIST, "an object with this id exists");
            return NULL;
        }
    }
    if (n == cap) {
        *rc = tr__err(TR_ENOMEM, "the object table is full");
        return NULL;
    }
    memset(&t[i], 0, sizeof t[i]);
    memcpy(t[i].id, id, 16);
    t[i].state = TR__OBJ_CREATED;
    t[i].busy = -1;
    s->h->n_objects++;
    *rc = 0;
    return &t[i];
}

/* Takes the entry out of the table (backward shift) and nothing else. */
static void unlink_entry(tr__seg *s, tr__obj_entry *e) {
    tr__obj_entry *t = s->table;
    uint64_t cap_t = s->table_cap, mask = cap_t - 1;
    s->h->n_objects--;
    /* Backward-shift deletion keeps probe runs without tombstones. (At most one pass
     * round the table: the states are shared memory, and could all say full.) */
    uint64_t hole = (uint64_t)(e - t), j = (hole + 1) & mask;
    for (uint64_t k = 1; k < cap_t && t[j].state != TR__OBJ_EMPTY; k++, j = (j + 1) & mask) {
        uint64_t home = slot_of(t[j].id, cap_t);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t[hole] = t[j];
            hole = j;
        }
    }
    memset(&t[hole], 0, sizeof t[hole]);
}

void tr__seg_forget(tr__seg *s, tr__obj_entry *e) {
    if (e >= s->table && e < s->table + s->table_cap) unlink_entry(s, e);
}

/* Removes one entry; appends the ids of the objects it contained to *work. */
static void remove_one(tr__seg *s, tr__obj_entry *e, uint8_t **work, size_t *n, size_t *cap) {
    if (e < s->table || e >= s->table + s->table_cap) return;
    /* The entry is shared memory: each field once, then only the copies. Overflow-safe
     * bounds: a corrupt entry must not make us read outside the data. */
    uint64_t off = TR__SEG_LOAD(e->off), size = TR__SEG_LOAD(e->size);
    uint32_t state = TR__SEG_LOAD(e->state), n_refs = TR__SEG_LOAD(e->n_refs);
    uint64_t room = off <= s->data_size ? s->data_size - off : 0;
    uint64_t r16 = size <= room ? ((size + 15) & ~(uint64_t)15) : UINT64_MAX;
    if (n_refs && off && state != TR__OBJ_CREATED && r16 <= room && n_refs <= (room - r16) / 16) {
        if (*n + n_refs > *cap) {
            size_t c = (*cap ? *cap * 2 : 64) + n_refs;
            uint8_t *w = realloc(*work, c * 16);
            if (w) {
                *work = w;
                *cap = c;
            }
        }
        if (*n + n_refs <= *cap) {
            memcpy(*work + 16 * *n, tr__seg_refs_of(s, off, size), 16ull * n_refs);
            *n += n_refs;
        }
    }
    if (off) tr__seg_free(s, off);
    if (state == TR__OBJ_SEALED || state == TR__OBJ_SPILLING) s->h->bytes_objects -= size;
    if (state == TR__OBJ_SPILLED || state == TR__OBJ_RESTORING) s->h->bytes_spilled -= size;
    if (state >= TR__OBJ_SPILLING && s->spill_dir[0]) { /* a spill file exists, or is begun */
        char path[700];
        tr__seg_spill_path(s, e->id, path, sizeof path);
        unlink(path);
    }
    unlink_entry(s, e);
}

void tr__seg_remove(tr__seg *s, tr__obj_entry *e) {
    uint8_t *work = NULL;
    size_t n = 0, cap = 0;
    remove_one(s, e, &work, &n, &cap);
    /* A worklist, not recursion: chains of containers may be long. Entries move when
     * others are removed, so each is found again by id. */
    while (n > 0) {
        n--;
        uint8_t id[16];
        tr__seg_store_id(work + 16 * n, id); /* (a contained call ref: its twin) */
        tr__obj_entry *c = tr__seg_find(s, id);
        if (!c || c->contained_by == 0) continue;
        c->contained_by--;
        if (tr__seg_unheld(c) && c->state >= TR__OBJ_SEALED) remove_one(s, c, &work, &n, &cap);
    }
    free(work);
}

void tr__seg_spill_path(const tr__seg *s, const uint8_t id[16], char *out, size_t cap) {
    char hex[33];
    tr__hex(id, 16, hex);
    snprintf(out, cap, "%s/o-%s", s->spill_dir, hex);
}

tr__seg_board *tr__seg_board_entry(tr__seg *s, uint64_t key, int claim) {
    if (!key) return NULL;
    tr__seg_board *word = NULL;
    tr__seg_lock(s);
    size_t home = (size_t)(key % TR__SEG_BOARD);
    for (size_t n = 0; n < TR__SEG_BOARD && !word; n++) {
        size_t i = (home + n) % TR__SEG_BOARD;
        uint64_t k = TR__SEG_LOAD(s->h->board[i].key);
        int32_t pid = TR__SEG_LOAD(s->h->board[i].pid);
        int stale = claim && k && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
        if (k == key || (claim && (k == 0 || stale))) {
            if (claim) {
                tr__seg_board *b = &s->h->board[i];
                b->key = key;
                b->pid = (int32_t)getpid();
                __atomic_store_n(&b->busy, 0, __ATOMIC_RELAXED);
                __atomic_store_n(&b->blocked, 0, __ATOMIC_RELAXED);
                for (int c = 0; c < TR__SEG_BOARD_CANCELS; c++)
                    __atomic_store_n(&b->cancel[c], 0, __ATOMIC_RELAXED);
                tr__hist dropped;
                memset(&dropped, 0, sizeof dropped);
                tr__hist_sum(&dropped, &b->call, 1);
                tr__coll_counters drop;
                memset(&drop, 0, sizeof drop);
                tr__cnt_coll_add(&drop, &b->coll, 1);
            }
            word = &s->h->board[i];
        } else if (!k && !claim) {
            break;
        }
    }
    tr__seg_unlock(s);
    return word;
}

tr__obj_entry *tr__seg_entry(tr__seg *s, uint64_t i) {
    return i < s->table_cap ? &s->table[i] : NULL;
}
