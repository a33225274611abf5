/* collective/declare.h - groups declared from the driver over actor handles (as Ray's
 * declare_collective_group): the declaration (world, backend, which actor is which rank)
 * is stored in the node's KV store under "troupe/groups/<name>" (the cluster's, when the
 * actors are on several nodes); each actor opens the group on first use, finding its rank
 * by its own actor id, then joins as with tr_group_join (tr__group_join_span across
 * nodes). Which backend a declaration over several nodes gets is decided here too
 * (tr__group_declare_placed). Thread safety: any thread.
 */
#ifndef TR_COLLECTIVE_DECLARE_H
#define TR_COLLECTIVE_DECLARE_H

#include "collective/group.h"

/* cluster: the node is in a cluster, whose KV store (the head's) keeps every group
 * declaration there (tr__group_open looks nowhere else then), else the node's own store.
 * hosts NULL: every actor is on one node. Else the group spans nodes: hosts[i] is
 * actors[i]'s node ("IP:port"), nonce tells this declaration from an earlier one of the
 * name (whose rendezvous keys go), hier asks for the two-level allreduce
 * (tr__group_join_span). */
int tr__group_declare(tr__nodeconn *node, const tr_actor_id *actors, size_t n, const int *ranks,
                      const char *backend, const char *name, int cluster, const char *const *hosts,
                      uint64_t nonce, int hier);
/* tr_group_declare's choice, once the façade knows where each actor lives (it asks the
 * actor layer): actor_nodes[i] is actors[i]'s node (a socket path or a name without ':':
 * this node; else another's "IP:port"), here this node's cluster address ("IP:port", ""
 * outside a cluster), cluster whether it is in one. All on one node: the backend asked
 * for ("auto" and "hier": shm, the fastest there). Across nodes: gloo (also for "auto";
 * "hier": gloo in two levels) with each rank's node and a random nonce; another backend is
 * TR_EINVAL naming the nodes. Bad actors, ranks, backend or name: TR_EINVAL, as
 * tr__group_declare. Thread safety: any thread. */
int tr__group_declare_placed(tr__nodeconn *node, const tr_actor_id *actors, size_t n,
                             const int *ranks, const char *backend, const char *name,
                             const char *const *actor_nodes, const char *here, int cluster);
/* self: this process's actor id. Waits up to timeout_ms for the declaration. */
/* 1 if a group is declared under name (its node's store, or the cluster's), 0 if not, or
 * a negative code. */
int tr__group_declared(tr__nodeconn *node, const char *name);
int tr__group_open(tr__nodeconn *node, const char *node_path, size_t max_msg,
                   const tr_actor_id *self, const char *name, int timeout_ms, tr_group **out);

#endif
