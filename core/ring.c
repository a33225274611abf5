/* core/ring.c - see ring.h.
 *
 * The memfd holds a header page, then ring 0 (A writes, B reads), then ring 1 (B writes,
 * A reads). Positions count bytes since the start and only grow (a byte's place is
 * position & (cap - 1)). Each side's published words sit on cache lines of their own.
 * The sleep handshake is Dekker's, in sequentially consistent stores and loads (no
 * fences: TSan does not take them): a sleeper stores its flag and re-checks the peer's
 * position; a writer stores its position and loads the flag.
 */
#include "core/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

#define RING_MAGIC 0x474e4952707574ULL /* "tupRING" */
#define HDR_SIZE 4096
#define MIN_CAP ((size_t)4 << 10)
#define MAX_CAP ((size_t)64 << 20)

typedef struct side_words {
    _Alignas(64) uint64_t wrote;    /* bytes this side wrote into its ring */
    _Alignas(64) uint64_t read;     /* bytes this side read from the peer's ring */
    _Alignas(64) uint32_t sleeping; /* this side sleeps: ring after writing */
    uint32_t want_room;             /* ...and after reading */
} side_words;

typedef struct ring_hdr {
    uint64_t magic;
    uint64_t cap;
    side_words side[2];
} ring_hdr;

_Static_assert(sizeof(ring_hdr) <= HDR_SIZE, "the header fits its page");

struct tr__ring {
    ring_hdr *h;
    size_t map_len, cap;
    int me; /* 0: A, 1: B */
    unsigned char *out_ring, *in_ring;
    uint64_t wrote, read; /* our positions (the published ones are copies) */
    uint64_t peer_read;   /* the peer's read position last loaded: a writer reloads it only
                           * when that leaves no room (its line stays the peer's: a load of
                           * it per write moved it to us and back, two cache-line trips
                           * across CPUs on every message) */
};

static int map(int fd, size_t cap, int me, tr__ring **out) {
    size_t len = HDR_SIZE + 2 * cap;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return tr__err_errno(errno, "mapping a call ring of %zu bytes", len);
    tr__ring *r = calloc(1, sizeof *r);
    if (!r) {
        munmap(p, len);
        return tr__err(TR_ENOMEM, "a call ring");
    }
    r->h = p;
    r->map_len = len;
    r->cap = cap;
    r->me = me;
    unsigned char *rings = (unsigned char *)p + HDR_SIZE;
    r->out_ring = rings + (size_t)me * cap;
    r->in_ring = rings + (size_t)(1 - me) * cap;
    *out = r;
    return 0;
}

int tr__ring_create(size_t cap, tr__ring **out, int *fd) {
    if (!out || !fd || cap < MIN_CAP || cap > MAX_CAP || (cap & (cap - 1)))
        return tr__err(TR_EINVAL, "a call ring of %zu bytes (a power of two, 4 KiB-64 MiB)", cap);
    int f = memfd_create("troupe-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0) return tr__err_errno(errno, "memfd_create");
    /* (sealed at its size: the peer cannot shrink it under our mapping) */
    if (ftruncate(f, (off_t)(HDR_SIZE + 2 * cap)) != 0 ||
        fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(f);
        return tr__err_errno(e, "sizing a call ring");
    }
    int rc = map(f, cap, 0, out);
    if (rc) {
        close(f);
        return rc;
    }
    (*out)->h->cap = cap;
    __atomic_store_n(&(*out)->h->magic, RING_MAGIC, __ATOMIC_RELEASE);
    *fd = f;
    return 0;
}

int tr__ring_attach(int fd, tr__ring **out) {
    struct stat st;
    int seals = fcntl(fd, F_GET_SEALS);
    int rc = 0;
    if (fstat(fd, &st) != 0 || seals < 0 || !(seals & F_SEAL_SHRINK)) {
        rc = tr__err(TR_EPROTO, "the call ring passed is not a sealed memfd");
    } else {
        size_t len = (size_t)st.st_size, cap = (len - HDR_SIZE) / 2;
        if (len <= HDR_SIZE || len != HDR_SIZE + 2 * cap || cap < MIN_CAP || cap > MAX_CAP ||
            (cap & (cap - 1)))
            rc = tr__err(TR_EPROTO, "the call ring passed has a size of %zu bytes", len);
        else if (!(rc = map(fd, cap, 1, out)) &&
                 (__atomic_load_n(&(*out)->h->magic, __ATOMIC_ACQUIRE) != RING_MAGIC ||
                  (*out)->h->cap != cap)) {
            tr__ring_free(*out);
            *out = NULL;
            rc = tr__err(TR_EPROTO, "the call ring passed has a bad header");
        }
    }
    close(fd);
    return rc;
}

void tr__ring_free(tr__ring *r) {
    if (!r) return;
    munmap(r->h, r->map_len);
    free(r);
}

static inline side_words *mine(const tr__ring *r) {
    return &r->h->side[r->me];
}

static inline side_words *peer(const tr__ring *r) {
    return &r->h->side[1 - r->me];
}

int tr__ring_readable(const tr__ring *r) {
    return __atomic_load_n(&peer(r)->wrote, __ATOMIC_SEQ_CST) != r->read;
}

int tr__ring_writable(const tr__ring *r) {
    uint64_t done = __atomic_load_n(&peer(r)->read, __ATOMIC_SEQ_CST);
    return r->wrote - done < r->cap;
}

/* Copies n bytes at position pos of a ring into dst. */
static void copy_out(const tr__ring *r, uint64_t pos, void *dst, size_t n) {
    size_t at = (size_t)(pos & (r->cap - 1)), first = r->cap - at < n ? r->cap - at : n;
    memcpy(dst, r->in_ring + at, first);
    if (n > first) memcpy((char *)dst + first, r->in_ring, n - first);
}

static void copy_in(tr__ring *r, uint64_t pos, const void *src, size_t n) {
    size_t at = (size_t)(pos & (r->cap - 1)), first = r->cap - at < n ? r->cap - at : n;
    memcpy(r->out_ring + at, src, first);
    if (n > first) memcpy(r->out_ring, (const char *)src + first, n - first);
}

int64_t tr__ring_read(tr__ring *r, tr__buf *in, int *wake) {
    uint64_t wrote = __atomic_load_n(&peer(r)->wrote, __ATOMIC_ACQUIRE);
    uint64_t n = wrote - r->read;
    if (n == 0) return 0;
    if (n > r->cap)
        return tr__err(TR_EPROTO,
                       "the call ring's writer says it wrote %llu bytes "
                       "more than were read (a ring holds %zu)",
                       (unsigned long long)n, r->cap);
    if (tr__buf_reserve(in, (size_t)n)) return TR_ENOMEM;
    copy_out(r, r->read, in->data + in->len, (size_t)n);
    in->len += (size_t)n;
    r->read = wrote;
    __atomic_store_n(&mine(r)->read, r->read, __ATOMIC_SEQ_CST); /* (then its flags) */
    side_words *p = peer(r);
    if (wake && __atomic_load_n(&p->want_room, __ATOMIC_SEQ_CST) &&
        __atomic_exchange_n(&p->want_room, 0, __ATOMIC_ACQ_REL))
        *wake = 1;
    return (int64_t)n;
}

int64_t tr__ring_write(tr__ring *r, tr__buf *out, int *wake) {
    size_t avail = tr__buf_avail(out);
    if (avail == 0) return 0;
    uint64_t done = r->peer_read; /* (at most the peer's: room counted from it is there) */
    if (r->wrote - done + avail > r->cap) {
        done = __atomic_load_n(&peer(r)->read, __ATOMIC_SEQ_CST);
        if (done > r->wrote || r->wrote - done > r->cap || done < r->peer_read)
            return tr__err(TR_EPROTO, "the call ring's reader says it read bytes never written");
        r->peer_read = done;
    }
    size_t room = r->cap - (size_t)(r->wrote - done), n = avail < room ? avail : room;
    if (n == 0) return 0;
    copy_in(r, r->wrote, out->data + out->off, n);
    tr__buf_consume(out, n);
    r->wrote += n;
    __atomic_store_n(&mine(r)->wrote, r->wrote, __ATOMIC_SEQ_CST);
    side_words *p = peer(r);
    if (wake && __atomic_load_n(&p->sleeping, __ATOMIC_SEQ_CST) &&
        __atomic_exchange_n(&p->sleeping, 0, __ATOMIC_ACQ_REL))
        *wake = 1;
    return (int64_t)n;
}

void tr__ring_sleep(tr__ring *r) {
    __atomic_store_n(&mine(r)->sleeping, 1, __ATOMIC_SEQ_CST);
}

void tr__ring_want_room(tr__ring *r) {
    __atomic_store_n(&mine(r)->want_room, 1, __ATOMIC_SEQ_CST);
}

void tr__ring_wake(tr__ring *r) {
    side_words *m = mine(r);
    if (__atomic_load_n(&m->sleeping, __ATOMIC_RELAXED))
        __atomic_store_n(&m->sleeping, 0, __ATOMIC_RELAXED);
}
