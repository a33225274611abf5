/* actor/bulk.h - an object's bytes from one node to another over a plain TCP connection
 * of their own, beside the node's link (issue 12: a pull at one TCP stream's speed).
 *
 * Through the link (gRPC), each piece of a pulled object is copied twice on the receiving
 * side: by gRPC out of the socket into its buffers, then by the puller into the store. On a
 * machine where sender and receiver share the cores, that third copy is a third of the
 * work. Here the bytes go from the sender's store straight into the socket and from the
 * socket straight into the receiver's store.
 *
 * Authentication: the puller asks for the object on its link (token-checked, TLS if set),
 * and the relay offers it here under a ticket of 16 random bytes, good for one connection
 * within OFFER_TTL; a connection that does not open with a live ticket within a second is
 * closed, and at most BULK_CONNS are served at once. The bytes themselves travel in the
 * clear, so a cluster with TLS does not offer (its pulls go through the link).
 *
 * Wire: the puller connects and writes the ticket; the node writes the object's bytes
 * from the start to the end and closes. A short stream is an error the puller sees.
 */
#ifndef TR_ACTOR_BULK_H
#define TR_ACTOR_BULK_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr__bulk tr__bulk;

/* Listens on ip (an IPv4 address of this machine), any free port. Returns 0, TR_EIO,
 * TR_ENOMEM. */
int tr__bulk_create(const char *ip, tr__bulk **out);
int tr__bulk_port(const tr__bulk *b);
/* Offers len bytes at data under a fresh *ticket. release(arg) is called exactly once,
 * from any thread, when nothing will read data any more: served, expired, refused or at
 * destroy (also on failure here). Returns 0, TR_ENOMEM (too many offers). */
int tr__bulk_offer(tr__bulk *b, const void *data, size_t len, void (*release)(void *), void *arg,
                   uint8_t ticket[16]);
/* Releases the offers past their time (nobody came for them: a puller that died). The
 * relay calls it about once a second; offers and accepts do it too. */
void tr__bulk_sweep(tr__bulk *b);
/* Stops listening, ends the connections being served and releases every offer; waits
 * for its threads. NULL: no-op. */
void tr__bulk_destroy(tr__bulk *b);

/* The puller's side: connects to host:port, sends ticket and reads len bytes into dst,
 * until deadline (tr__now_ns). stop(arg), asked every 100 ms, ends it early when it says
 * non-zero. Returns 0, TR_ECONNECT (no connection), TR_ECLOSED (the stream ended short),
 * TR_ETIMEDOUT, TR_ECANCELED (stop said so), TR_EIO. */
int tr__bulk_fetch(const char *host, int port, const uint8_t ticket[16], void *dst, size_t len,
                   int64_t deadline, int (*stop)(void *), void *arg);

#endif
