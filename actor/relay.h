/* actor/relay.h - a node's side of the links that callers on other nodes open to it
 * (actor/remote.h has the message format): each actor a link names gets a connection to
 * its worker here, made once the node's directory says the actor is alive, with a CALLER
 * frame that names no object store (results come back inline, up to the message limit);
 * CALL bytes go to the worker as they come, RESULT bytes go back on the link as the worker
 * writes them. An actor that is unknown, dead, or whose worker connection ends gets an
 * EOF message (the caller asks its own node what became of it).
 *
 * Threads: the RPC server's thread hands messages over (and writes to a connected worker
 * itself when nothing is queued); a thread of the relay resolves actors, connects and
 * reads the workers. A link that ends closes its worker connections.
 */
#ifndef TR_ACTOR_RELAY_H
#define TR_ACTOR_RELAY_H

#include <stddef.h>

#include "core/rpc.h"

typedef struct tr__relay tr__relay;

/* node_path: this node's socket (actors are resolved there). bulk_ip: the address where
 * callers' pulls may take whole objects on connections of their own (actor/bulk.h); NULL:
 * none (a cluster with TLS: pulls then go through the link, piece by piece). */
int tr__relay_create(const char *node_path, size_t max_msg, const char *bulk_ip, tr__relay **out);
/* The handlers to give tr__rpc_server_on_stream; valid until the relay is destroyed. */
const tr__rpc_stream_handlers *tr__relay_handlers(tr__relay *r);
/* Call after the RPC server is destroyed (no stream is live). NULL: no-op. */
void tr__relay_destroy(tr__relay *r);

#endif
