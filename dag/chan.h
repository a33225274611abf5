/* dag/chan.h - a compiled graph's channel: a ring of pre-allocated slots in shared memory
 * that carries one value per execution from one writer to a fixed set of readers.
 *
 * Executions are numbered 0, 1, 2, ...; value v goes through slot v % slots. A slot's
 * `seq` counts the values written through it, so value v is there once seq reaches
 * v / slots + 1. Each reader has a `consumed` count on a cache line of its own: the
 * values it is done with, in order; the writer may put value v in once every reader's
 * count reaches v - slots + 1. The writer remembers the lowest count it saw and reads the
 * readers' lines only when that no longer covers the value it writes, so a reader's
 * release stays in its own cache most of the time (about one line transfer per `slots`
 * values). The sequence word, the length and the first 32 bytes of the value
 * share one cache line: a small value costs its reader one line. The writer writes
 * straight into the slot, readers read in place (16-byte aligned), nothing is copied on
 * the way.
 *
 * A value's publication and a reader's release are core/wait's asymmetric events
 * (tr__event_publish: a store, no fence; a waiter pays a membarrier before it sleeps), so a
 * pipelined step takes no locked instruction for its channels; a value that a reader waits
 * for is published with a fence (tr__chan_write_end's `now`).
 * Waits use core/wait (spin, yield or sleep as the caller says, once; then sleep) in
 * slices of 100 ms: between slices, and whenever the stop word is set and the channel's
 * words woken (tr__chan_wake_all), a wait ends with TR_ECLOSED; at the deadline with
 * TR_ETIMEDOUT; a check callback, if any, can end it with its own code (a dead peer).
 * Each process uses a channel through a tr__chan of its own memory: the header is checked
 * once (tr__chan_open) and its dimensions copied, so a peer that rewrites the shared
 * header later cannot move any access outside the channel; every field a peer writes per
 * value is checked before use (a length over the slot, an unknown code or flag give
 * TR_EPROTO, never a read outside the slot). Thread safety: one writer thread, and one
 * thread per reader index.
 */
#ifndef TR_DAG_CHAN_H
#define TR_DAG_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/wait.h"

#define TR__CHAN_MAGIC 0x316e616863727475ull /* "utrchan1" */
#define TR__CHAN_SHM_V1 1                    /* the transport (tcp and nccl come later) */
#define TR__CHAN_MAX_READERS 8
#define TR__CHAN_MAX_SLOTS 1024

/* flags (at most one): the payload is a 16-byte object ref; or it describes a device
 * value sent by NCCL (16 bytes) or left in a CUDA IPC buffer (80 bytes): dag/gpu.h; or
 * the value lies elsewhere in the graph's segment, in the slot of a step's input that it
 * forwards (16 bytes: tr__chan_fwd; only where the driver alone reads it, dag/exec.c) */
enum { TR__CHAN_REF = 1, TR__CHAN_DEV_NCCL = 2, TR__CHAN_DEV_IPC = 4, TR__CHAN_FWD = 8 };

/* A forwarded value's payload: where it lies, from the graph's header (dag/plan.h). */
typedef struct tr__chan_fwd {
    uint64_t off, len;
} tr__chan_fwd;

typedef struct tr__chan_hdr {
    uint64_t magic;
    uint32_t version;    /* the transport: TR__CHAN_SHM_V1 */
    uint32_t slots;      /* values in flight at most */
    uint64_t slot_bytes; /* the payload each slot holds */
    uint32_t readers;
    uint32_t stride; /* bytes from one slot to the next */
    uint64_t size;   /* the whole channel, this header included */
} __attribute__((aligned(64))) tr__chan_hdr;

/* One line per reader after the header. */
typedef struct tr__chan_reader {
    tr__event consumed; /* values this reader is done with */
} __attribute__((aligned(64))) tr__chan_reader;

/* A process's handle on a channel: the header's dimensions, checked, in its own memory. */
typedef struct tr__chan {
    char *base; /* the channel's header in this process's mapping */
    uint32_t slots, readers, stride;
    uint64_t slot_bytes;
    uint32_t seen; /* the writer's: the lowest `consumed` it read last */
} tr__chan;

typedef struct tr__chan_slot {
    tr__event seq; /* values written through this slot */
    int32_t code;  /* 0: a value; else a TR_E* and its message */
    uint32_t flags;
    uint64_t len;
    uint64_t pad;
    /* the payload follows: 16-byte aligned, 32 bytes into seq's line */
} tr__chan_slot;

/* What a wait may do and when it ends. */
typedef struct tr__chan_wait {
    int64_t deadline;        /* tr__deadline(); TR__NO_DEADLINE: none; TR__CHAN_LAZY: timeout_ms
                              * from the wait's first look that finds nothing (no clock read
                              * for a value already there: tr__chan_lazy) */
    int64_t spin_ns;         /* as tr__event_wait_spin */
    const uint32_t *stop;    /* ends waits with TR_ECLOSED once non-zero; may be NULL */
    int (*check)(void *arg); /* called between slices; non-zero ends the wait with it */
    void *arg;
    int timeout_ms; /* with TR__CHAN_LAZY: the timeout (< 0: none) */
} tr__chan_wait;

#define TR__CHAN_LAZY (INT64_MIN + 1)

/* A wait of timeout_ms (< 0: none) whose deadline is read from the clock only once it has
 * to wait (a pipelined reader or writer finds its slot ready and reads no clock). */
static inline void tr__chan_lazy(tr__chan_wait *w, int timeout_ms) {
    w->deadline = TR__CHAN_LAZY;
    w->timeout_ms = timeout_ms;
}

/* The wait's deadline, from the clock now if it was lazy (and kept for its next waits). */
int64_t tr__chan_deadline(tr__chan_wait *w);

/* Bytes a channel of these dimensions takes (0 if they are out of range). */
size_t tr__chan_size(uint32_t slots, uint64_t slot_bytes, uint32_t readers);
/* Lays a channel out in zeroed memory of `avail` bytes (its creator), opening it in *c. */
int tr__chan_init(tr__chan *c, void *mem, size_t avail, uint32_t slots, uint64_t slot_bytes,
                  uint32_t readers);
/* A peer's handle on a channel it maps: TR_EPROTO unless the header is sound and fits. */
int tr__chan_open(tr__chan *c, void *mem, size_t avail);

/* Writer: waits until value v's slot is free, then gives its payload area. */
int tr__chan_write_begin(tr__chan *c, uint64_t v, void **buf, size_t *cap, const tr__chan_wait *w);
/* Publishes value v: len bytes written into the area, or an error code and message.
 * `now`: a reader is likely waiting for it (the writer had waited for its own input, or
 * nothing else is in flight): the store is fenced, seen at once. A plain store (a
 * pipeline's) costs the writer no stall, but can sit in its store buffer a while (~0.1 us
 * here) while the reader polls the line. */
void tr__chan_write_end(tr__chan *c, uint64_t v, int32_t code, uint32_t flags, size_t len, int now);

/* Reader: waits until value v is there and views it in place (until the release). */
int tr__chan_read(tr__chan *c, uint64_t v, const tr__chan_wait *w, const void **data, size_t *len,
                  int32_t *code, uint32_t *flags);
/* Whether value v is there (no wait). */
int tr__chan_ready(tr__chan *c, uint64_t v);
/* Whether value v's slot is free: tr__chan_write_begin would not wait (no wait). */
int tr__chan_writable(tr__chan *c, uint64_t v);
/* Reader `reader` is done with every value up to v (values are let go of in order). */
void tr__chan_release(tr__chan *c, uint64_t v, uint32_t reader);

/* The channels' wait, for any event word of the graph: until ev reaches `target`
 * (wrapping counts, compared as a difference), ending as the channels' waits do. */
int tr__chan_wait_event(tr__event *ev, uint32_t target, const tr__chan_wait *w);

/* Wakes every waiter on the channel without moving anything (after setting a stop word). */
void tr__chan_wake_all(tr__chan *c);

#endif
