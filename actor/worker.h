/* actor/worker.h - the worker process's main loop: asks the node what to run, constructs
 * the actor, listens on its own socket, and executes calls on the thread that reads them
 * (no hand-off), in the order each connection sent them.
 *
 * One thread. Replies to a batch of calls read together go out in one write.
 */
#ifndef TR_ACTOR_WORKER_H
#define TR_ACTOR_WORKER_H

#include "core/config.h"
#include "core/nodeconn.h"
#include "objectstore/client.h"
#include "troupe/troupe.h"

/* Runs the worker until its node goes away or it is told to stop. Returns the process
 * exit status. rt is the worker's own runtime (for calls made inside methods). */
int tr__worker_run(tr_runtime *rt, tr__nodeconn *node, tr__objects *objects, const tr_config *cfg,
                   const char *actor_hex);

#endif
