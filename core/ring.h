/* core/ring.h - a pair of byte rings in shared memory between two processes: the
 * shared-memory path of actor calls (actor/calls.c, actor/worker.c, docs/DESIGN notes in
 * actor/README.md).
 *
 * One side (A, the caller) makes the rings in a memfd and passes the descriptor over the
 * pair's Unix socket; the other (B, the actor's worker) maps it. Each direction is a
 * single-producer single-consumer ring of bytes: the frames the socket would carry, cut
 * anywhere, so each side's framing and parsing are the socket's. Nothing on the way costs
 * a syscall while the reader is awake (polling); a side that goes to sleep says so in the
 * shared header, and the other then rings its doorbell (a WAKE frame on the socket, which
 * the sleeper's epoll waits on) once: after writing (the sleeper waits for bytes), or after
 * reading from a ring whose writer waits for room.
 *
 * The peer is not trusted: each side keeps its own positions privately and only publishes
 * them; a peer position read from the header is checked against them (a ring whose writer
 * says it wrote more than the ring holds, or whose reader says it read more than was
 * written, is broken: TR_EPROTO), and bytes are copied out before anything parses them.
 * A writer reads its reader's position only when the room it counted from the last one
 * runs out (that line is the reader's: a load per message moved it across CPUs and back),
 * so a lying reader is caught then.
 * Thread safety: a ring's side is used by one thread at a time (its owner's lock).
 */
#ifndef TR_CORE_RING_H
#define TR_CORE_RING_H

#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

typedef struct tr__ring tr__ring;

/* The capacity of each direction when the caller does not say (bytes, a power of two). */
#define TR__RING_CAP ((size_t)64 << 10)

/* Side A: makes the pair (cap bytes each way, a power of two from 4 KiB to 64 MiB) in a
 * new memfd. *fd: the descriptor to pass to side B (the caller closes it once sent; the
 * mapping stays). Returns 0, TR_EINVAL, TR_ENOMEM, TR_EIO. */
int tr__ring_create(size_t cap, tr__ring **out, int *fd);
/* Side B: maps the pair in fd (taken: closed here, whatever the result), after checking
 * that its size and header are those of a pair. Returns 0, TR_EPROTO (not a pair),
 * TR_ENOMEM, TR_EIO. */
int tr__ring_attach(int fd, tr__ring **out);
/* Unmaps. NULL: no-op. */
void tr__ring_free(tr__ring *r);

/* Whether the peer wrote bytes this side has not read (a load: for polling). */
int tr__ring_readable(const tr__ring *r);
/* Appends what the peer wrote to in. Returns bytes read (>= 0), TR_EPROTO (the ring is
 * broken), TR_ENOMEM. *wake: set to 1 if the peer waits for room and should be rung. */
int64_t tr__ring_read(tr__ring *r, tr__buf *in, int *wake);
/* Whether the ring toward the peer has room (a load: for polling). */
int tr__ring_writable(const tr__ring *r);
/* Moves what fits of out's unread bytes into the ring (consumed from out). Returns bytes
 * written (>= 0), or TR_EPROTO (broken). *wake: set to 1 if the peer sleeps and should
 * be rung. */
int64_t tr__ring_write(tr__ring *r, tr__buf *out, int *wake);

/* This side goes to sleep (on its socket): the peer is to ring after it writes. Then
 * re-check readable: a write that raced this may not have rung. */
void tr__ring_sleep(tr__ring *r);
/* This side has bytes the ring did not take: the peer is to ring after it reads. Then
 * write again: a read that raced this may not have rung. */
void tr__ring_want_room(tr__ring *r);
/* This side is awake again (polls: the peer need not ring). */
void tr__ring_wake(tr__ring *r);

#endif
