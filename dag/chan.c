/* dag/chan.c - see chan.h. */
#include "dag/chan.h"

#include <string.h>

#include "core/clock.h"
#include "core/status.h"

#define SLICE_NS 100000000 /* a wait calls its check at least this often */
#define PAYLOAD_OFF sizeof(tr__chan_slot)

_Static_assert(sizeof(tr__chan_slot) == 32, "payload 32 bytes into seq's cache line");
_Static_assert(sizeof(tr__chan_hdr) == 64 && sizeof(tr__chan_reader) == 64,
               "a line each: the slots start on a cache line");

static size_t stride_of(uint64_t slot_bytes) {
    return (PAYLOAD_OFF + (size_t)slot_bytes + 63) & ~(size_t)63;
}

/* Bytes before the first slot: the header and the readers' lines. */
static size_t slots_off(uint32_t readers) {
    return sizeof(tr__chan_hdr) + readers * sizeof(tr__chan_reader);
}

size_t tr__chan_size(uint32_t slots, uint64_t slot_bytes, uint32_t readers) {
    if (slots < 1 || slots > TR__CHAN_MAX_SLOTS || readers < 1 || readers > TR__CHAN_MAX_READERS ||
        slot_bytes > (1ull << 30))
        return 0;
    return slots_off(readers) + (size_t)slots * stride_of(slot_bytes);
}

static void fill(tr__chan *c, void *mem, const tr__chan_hdr *h) {
    c->base = mem;
    c->slots = h->slots;
    c->readers = h->readers;
    c->stride = h->stride;
    c->slot_bytes = h->slot_bytes;
    c->seen = 0;
}

int tr__chan_init(tr__chan *c, void *mem, size_t avail, uint32_t slots, uint64_t slot_bytes,
                  uint32_t readers) {
    size_t size = tr__chan_size(slots, slot_bytes, readers);
    if (!size || ((uintptr_t)mem & 63) || size > avail)
        return tr__err(TR_EINVAL, "channel: %u slots of %llu bytes for %u readers in %zu bytes",
                       slots, (unsigned long long)slot_bytes, readers, avail);
    tr__chan_hdr *h = mem, mine = {0, TR__CHAN_SHM_V1, slots, slot_bytes, readers, 0, size};
    mine.stride = (uint32_t)stride_of(slot_bytes);
    h->version = mine.version;
    h->slots = slots;
    h->slot_bytes = slot_bytes;
    h->readers = readers;
    h->stride = mine.stride;
    h->size = size;
    __atomic_store_n(&h->magic, TR__CHAN_MAGIC, __ATOMIC_RELEASE);
    fill(c, mem, &mine);
    return 0;
}

int tr__chan_open(tr__chan *c, void *mem, size_t avail) {
    if (((uintptr_t)mem & 63) || avail < sizeof(tr__chan_hdr))
        return tr__err(TR_EPROTO, "channel: no room for a channel header here");
    tr__chan_hdr h;
    const tr__chan_hdr *shared = mem;
    if (__atomic_load_n(&shared->magic, __ATOMIC_ACQUIRE) != TR__CHAN_MAGIC)
        return tr__err(TR_EPROTO, "channel: no channel header here");
    memcpy(&h, shared, sizeof h); /* one copy, checked, then only the copy is used */
    size_t size = tr__chan_size(h.slots, h.slot_bytes, h.readers);
    if (h.version != TR__CHAN_SHM_V1 || !size || h.size != size || size > avail ||
        h.stride != stride_of(h.slot_bytes))
        return tr__err(TR_EPROTO,
                       "channel: a malformed header (version %u, %u slots of %llu bytes, %u "
                       "readers, %llu bytes in all, %zu mapped)",
                       h.version, h.slots, (unsigned long long)h.slot_bytes, h.readers,
                       (unsigned long long)h.size, avail);
    fill(c, mem, &h);
    return 0;
}

static tr__chan_slot *slot_of(tr__chan *c, uint64_t v) {
    return (tr__chan_slot *)(c->base + slots_off(c->readers) + (size_t)(v % c->slots) * c->stride);
}

static tr__event *consumed_of(tr__chan *c, uint32_t r) {
    return &((tr__chan_reader *)(c->base + sizeof(tr__chan_hdr)) + r)->consumed;
}

int64_t tr__chan_deadline(tr__chan_wait *w) {
    if (w->deadline == TR__CHAN_LAZY) w->deadline = tr__deadline(w->timeout_ms);
    return w->deadline;
}

int tr__chan_wait_event(tr__event *ev, uint32_t target, const tr__chan_wait *w) {
    int64_t spin = w->spin_ns; /* once: an idle graph's waits sleep, slice after slice */
    int64_t deadline = w->deadline;
    for (;;) {
        uint32_t cur = tr__event_seq(ev);
        if ((int32_t)(cur - target) >= 0) return 0;
        if (w->stop && __atomic_load_n(w->stop, __ATOMIC_ACQUIRE))
            return tr__err(TR_ECLOSED, "channel: the graph is stopping");
        if (w->check) {
            int rc = w->check(w->arg);
            if (rc) return rc;
        }
        int64_t now = tr__now_ns();
        if (deadline == TR__CHAN_LAZY) /* (its first look that found nothing: from now) */
            deadline = w->timeout_ms < 0 ? TR__NO_DEADLINE : now + (int64_t)w->timeout_ms * 1000000;
        if (deadline != TR__NO_DEADLINE && now >= deadline)
            return tr__err(TR_ETIMEDOUT, "channel: timed out");
        int64_t slice = now + SLICE_NS;
        if (deadline != TR__NO_DEADLINE && deadline < slice) slice = deadline;
        int rc = tr__event_wait_asym(ev, cur, slice, spin, w->stop);
        if (rc && rc != TR_ETIMEDOUT && rc != TR_ECLOSED) return rc;
        spin = 0;
    }
}

int tr__chan_write_begin(tr__chan *c, uint64_t v, void **buf, size_t *cap, const tr__chan_wait *w) {
    if (v >= c->slots) { /* the slot's previous value, v - slots, must be let go of */
        uint32_t need = (uint32_t)(v - c->slots + 1);
        if ((int32_t)(c->seen - need) < 0) { /* look again, waiting where it must */
            uint32_t low = 0;
            for (uint32_t r = 0; r < c->readers; r++) {
                tr__event *ev = consumed_of(c, r);
                int rc = tr__chan_wait_event(ev, need, w);
                if (rc) return rc;
                uint32_t got = tr__event_seq(ev);
                if (r == 0 || (int32_t)(got - low) < 0) low = got;
            }
            c->seen = low;
        }
    }
    *buf = (char *)slot_of(c, v) + PAYLOAD_OFF;
    *cap = (size_t)c->slot_bytes;
    return 0;
}

void tr__chan_write_end(tr__chan *c, uint64_t v, int32_t code, uint32_t flags, size_t len,
                        int now) {
    tr__chan_slot *s = slot_of(c, v);
    s->code = code;
    s->flags = flags;
    s->len = len <= c->slot_bytes ? len : c->slot_bytes;
    /* (release: the fields above are visible before it moves; a fence only if `now`) */
    uint32_t next = (uint32_t)(v / c->slots + 1); /* (what its readers wait for) */
    if (now)
        tr__event_set(&s->seq, next);
    else
        tr__event_publish(&s->seq, next);
}

int tr__chan_writable(tr__chan *c, uint64_t v) {
    if (v < c->slots) return 1;
    uint32_t need = (uint32_t)(v - c->slots + 1);
    if ((int32_t)(c->seen - need) >= 0) return 1;
    for (uint32_t r = 0; r < c->readers; r++)
        if ((int32_t)(tr__event_seq(consumed_of(c, r)) - need) < 0) return 0;
    return 1; /* (tr__chan_write_begin moves c->seen) */
}

int tr__chan_ready(tr__chan *c, uint64_t v) {
    tr__chan_slot *s = slot_of(c, v);
    return (int32_t)(tr__event_seq(&s->seq) - (uint32_t)(v / c->slots + 1)) >= 0;
}

int tr__chan_read(tr__chan *c, uint64_t v, const tr__chan_wait *w, const void **data, size_t *len,
                  int32_t *code, uint32_t *flags) {
    tr__chan_slot *s = slot_of(c, v);
    int rc = tr__chan_wait_event(&s->seq, (uint32_t)(v / c->slots + 1), w);
    if (rc) return rc;
    /* one read of each field a peer wrote, then checked: never trusted twice */
    uint64_t n = __atomic_load_n(&s->len, __ATOMIC_RELAXED);
    int32_t k = __atomic_load_n(&s->code, __ATOMIC_RELAXED);
    uint32_t f = __atomic_load_n(&s->flags, __ATOMIC_RELAXED);
    if (n > c->slot_bytes || (k != 0 && (k > 0 || strcmp(tr__errname(k), "TR_E?") == 0)) ||
        (f != 0 && !(f == TR__CHAN_REF && n == 16) && !(f == TR__CHAN_DEV_NCCL && n == 16) &&
         !(f == TR__CHAN_DEV_IPC && n == 80) && !(f == TR__CHAN_FWD && n == 16)))
        return tr__err(TR_EPROTO, "channel: value %llu is malformed (len %llu, code %d, flags %u)",
                       (unsigned long long)v, (unsigned long long)n, k, f);
    *data = (const char *)s + PAYLOAD_OFF;
    /* the next value's line, on its way while this one is used: in a pipeline it is
     * written by now, and its reader would otherwise wait a line's move between cores for
     * it (one actor's pipelined graph: +17-39%, docs/BENCHMARKS.md, session 18) */
    __builtin_prefetch(slot_of(c, v + 1));
    *len = (size_t)n;
    *code = k;
    *flags = f;
    return 0;
}

void tr__chan_release(tr__chan *c, uint64_t v, uint32_t reader) {
    if (reader >= c->readers) return;
    tr__event *ev = consumed_of(c, reader);
    uint32_t to = (uint32_t)(v + 1);
    if ((int32_t)(to - tr__event_seq(ev)) > 0) tr__event_publish(ev, to);
}

void tr__chan_wake_all(tr__chan *c) {
    for (uint32_t i = 0; i < c->slots; i++)
        tr__event_wake(&slot_of(c, i)->seq);
    for (uint32_t r = 0; r < c->readers; r++)
        tr__event_wake(consumed_of(c, r));
}
