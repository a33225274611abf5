/* objectstore/allreduce.h - allreduce through the object store: the baseline path (what
 * ray.put/ray.get users do) that the collective path is measured against. Each rank puts
 * its buffer, publishes the ref in the node's KV store, gets every other rank's object
 * zero-copy and reduces in rank order (so all ranks end bitwise equal), then waits until
 * every rank has read before letting its own object go.
 *
 * Keys: "troupe/objar/<name>/<round>/<rank>" (the ref) and ".../done/<rank>". A rank
 * deletes its keys of round r-2 during round r: every rank has finished round r-2 by then.
 * Thread safety: any thread; one call per (name, rank) at a time.
 */
#ifndef TR_OBJECTSTORE_ALLREDUCE_H
#define TR_OBJECTSTORE_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "core/nodeconn.h"
#include "objectstore/client.h"

int tr__object_allreduce(tr__nodeconn *node, tr__objects *objects, const char *name, int rank,
                         int world, uint64_t round, void *buf, size_t count, tr_dtype dtype,
                         tr_redop op, int timeout_ms);

#endif
