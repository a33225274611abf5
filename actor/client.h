/* actor/client.h - the caller's side of actors: actor creation/lookup/kill through the
 * node, and method calls sent straight to each actor's worker over one connection per
 * actor, set up once (as Ray's direct actor calls).
 *
 * Hot path: the calling thread encodes and writes its CALL frame itself; a thread
 * waiting for a result reads the replies itself (leader/followers: one waiter at a time
 * reads all connections through one epoll set; others sleep on a condition variable and
 * are woken once per batch). No background thread. Calls to an actor that is not up yet
 * are queued in order and sent by whichever thread next waits.
 * Thread safety: every function may be called from any thread.
 */
#ifndef TR_ACTOR_CLIENT_H
#define TR_ACTOR_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/nodeconn.h"
#include "objectstore/client.h"
#include "troupe/troupe.h"

typedef struct tr__actors tr__actors;

int tr__actors_create(tr__nodeconn *node, tr__objects *objects, size_t max_msg, tr__actors **out);
/* Drops every connection and result; pending calls are abandoned. */
void tr__actors_destroy(tr__actors *a);

int tr__actor_create(tr__actors *a, const char *cls, const tr_actor_options *opts, const void *args,
                     size_t len, tr_actor_id *out);
int tr__actor_wait_ready(tr__actors *a, tr_actor_id id, int timeout_ms);
int tr__actor_by_name(tr__actors *a, const char *name, tr_actor_id *out);
int tr__actor_kill(tr__actors *a, tr_actor_id id, int no_restart);

int tr__actors_call(tr__actors *a, tr_actor_id id, const char *method, const void *args, size_t len,
                    const tr_ref *refs, size_t n_refs, tr_ref *out);
int tr__actors_get(tr__actors *a, tr_ref ref, int timeout_ms, const void **data, size_t *len);
int tr__actors_wait(tr__actors *a, const tr_ref *refs, size_t n, size_t num_ready, int timeout_ms,
                    uint8_t *ready, size_t *n_ready);
int tr__actors_release(tr__actors *a, tr_ref ref);

#endif
