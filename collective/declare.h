/* collective/declare.h - groups declared from the driver over actor handles (as Ray's
 * declare_collective_group): the declaration (world, backend, which actor is which rank)
 * is stored in the node's KV store under "troupe/groups/<name>" (the cluster's, when the
 * actors are on several nodes); each actor opens the group on first use, finding its rank
 * by its own actor id, then joins as with tr_group_init (tr__group_init_span across
 * nodes). Thread safety: any thread.
 */
#ifndef TR_COLLECTIVE_DECLARE_H
#define TR_COLLECTIVE_DECLARE_H

#include "collective/group.h"

/* hosts NULL: every actor is on this node (the node's KV store). Else the group spans the
 * nodes of a cluster: hosts[i] is actors[i]'s node's IP, nonce tells this declaration from
 * an earlier one of the name, and the declaration goes in the cluster's KV store (the
 * head's), where the actors' tr__group_open finds it. */
int tr__group_declare(tr__nodeconn *node, const tr_actor_id *actors, size_t n, const int *ranks,
                      const char *backend, const char *name, const char *const *hosts,
                      uint64_t nonce);
/* self: this process's actor id. Waits up to timeout_ms for the declaration. */
int tr__group_open(tr__nodeconn *node, const char *node_path, size_t max_msg,
                   const tr_actor_id *self, const char *name, int timeout_ms, tr_group **out);

#endif
