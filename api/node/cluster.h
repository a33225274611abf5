/* api/node/cluster.h - a node's part in a cluster of nodes (issue 12): membership, actors
 * placed on other nodes, and the relay that lets callers elsewhere reach ours.
 *
 * The head (config cluster_port >= 0, no cluster_head) listens for other nodes over gRPC
 * (core/rpc: token, loopback unless cluster_bind says otherwise) and keeps the node table:
 * every node's id, address, resources and liveness. A node that joins (cluster_head set)
 * listens too (its address: cluster_bind, else the local address that faces the head),
 * registers with the head (refused: the node does not start), and heartbeats every 500
 * ms; the head marks a node lost after 3 s without one, and a node marks its head lost
 * after 3 s without an answer (both logged, both in `troupe status`). A node the head
 * no longer knows (the head restarted) registers again. Any node answers "status" over
 * the network with its own tr_node_status (`troupe status --address HOST:PORT`).
 *
 * Actors across nodes. An actor that can never fit on the node asked (by its totals,
 * custom resources included; every node also has "node:<its IP>" = 1) goes to the head,
 * which places it on the live node that fits and has had the fewest placed ("place"), has
 * that node create it ("create": on a connection to its own socket per creator, so the
 * actor lives as long as its creator's connection - or its node - does), and keeps it in
 * its directory ("where", "by_name"). A node asked about an actor id it does not know
 * finds its node (its own record, else the head's) and asks there ("resolve", "kill",
 * "info"); a caller learns the node's address and opens a link to it (actor/remote.h,
 * actor/relay.h). These forwarded requests run on threads of their own (they wait on
 * other nodes) and are replied to from the node's loop.
 *
 * Placement groups across nodes. A driver's tr_placement_group_* requests go to the head
 * ("pg_create", "pg_info", "pg_remove", "pg_by_name"), which plans each group over the
 * live nodes' available resources and has the chosen nodes reserve their parts
 * ("pg_reserve"; undone by "pg_release"), all or none, else it stays pending and is tried
 * again; an actor into a group goes to the node of its bundle ("place" with the group).
 *
 * Threads: the RPC server's thread answers other nodes; a thread of the cluster's
 * heartbeats and sweeps; forwarded requests each on one of their own. The node's loop
 * thread calls tr__cluster_forward / _conn_closed / _close and reads the table (status). */
#ifndef TR_API_CLUSTER_H
#define TR_API_CLUSTER_H

#include <uv.h>

#include "core/buf.h"
#include "core/codec.h"
#include "core/rpc.h"
#include "core/config.h"
#include "core/sched.h"
#include "core/server.h"
#include "api/node/membership.h"
#include "objectstore/store.h"

typedef struct tr__cluster tr__cluster;

/* The files a cluster node keeps in its session directory (the directory of its socket,
 * 0700): its cluster token (0600; one line) and its cluster address ("IP:PORT"). */
#define TR__CLUSTER_TOKEN_FILE "cluster-token"
#define TR__CLUSTER_ADDRESS_FILE "cluster-address"

/* The token of a node of this machine's user at `address` ("HOST:PORT": its port, and its
 * IP or, for a loopback node, a loopback host), read from its session directory under base
 * (the user's "<tmpdir>/troupe-<uid>"): 0, TR_ENOTFOUND (no such node here: a token found
 * here never goes to another host), or TR_EINVAL (HOST:PORT malformed). Any thread. */
int tr__cluster_local_token(const char *base, const char *address, char *out, size_t cap);

/* *out NULL when cfg asks for no cluster. A cluster port never runs without a token: a
 * head given none generates one; another node given none takes the token of a head of
 * this machine at the address it joins (tr__cluster_local_token), else fails saying how
 * to give one. Either writes its token and address into its session directory. sock: the
 * node's own socket (reported); total: its resources; gpus: its devices. Fails, with the
 * reason, when it cannot listen or the head refuses it or cannot be reached within 10 s. */
int tr__cluster_start(const tr_config *cfg, const char *sock, const tr__res *total, int gpus,
                      uv_loop_t *loop, tr__cluster **out);
/* The directory's forward hook (actor/directory.h): takes the request (returns 1) unless
 * cl is NULL, closing, or has too many in flight. Loop thread. */
int tr__cluster_forward(tr__cluster *cl, int type, tr__conn *c, uint64_t seq, const tr__obj *body);
/* A connection of the node closed: the actors it created on other nodes go. Loop thread. */
void tr__cluster_conn_closed(tr__cluster *cl, tr__conn *c);
/* The node stops: waits for forwarded requests in flight, releases the loop's handle.
 * Loop thread, before the loop's last run. */
void tr__cluster_close(tr__cluster *cl);
/* The node's object store: the cluster writes the node's number into it (now, and if the
 * head numbers the node anew), for the ids of the objects made here. */
void tr__cluster_set_store(tr__cluster *cl, tr__store *store);
/* This node's number in the cluster (0: none). */
uint32_t tr__cluster_node_num(tr__cluster *cl);
/* The cluster's token ("" for none), and its TLS files (the CA, this node's certificate
 * and key, for its drivers and workers to reach other nodes with; NULL or all "": plain). */
const char *tr__cluster_token(tr__cluster *cl);
const tr__rpc_tls_files *tr__cluster_tls_files(tr__cluster *cl);
/* Whether the head counts the node at address lost: 1, else 0 (alive, unknown, cl NULL, or
 * the head itself out of reach: then no one is counted lost). Any thread. */
int tr__cluster_counts_lost(tr__cluster *cl, const char *address);
/* This node's RPC address ("IP:port"): 0, or TR_ENOTFOUND where it is in no cluster. */
int tr__cluster_self_address(tr__cluster *cl, char *out, size_t cap);
/* The RPC address of node number num, alive: 0, TR_ENOTFOUND (not in this node's copy of
 * the table: not yet, or not any more), TR_EOWNER_DIED (the head counts it lost: its
 * processes, which own its objects, are gone) or TR_EOBJECT_LOST (the head out of reach). */
int tr__cluster_node_address(tr__cluster *cl, uint32_t num, char *out, size_t cap);
/* The node's live actors, objects and their bytes, for the cluster's table (its heartbeats
 * carry them to the head). Loop thread; nothing when cl is NULL. */
void tr__cluster_set_counts(tr__cluster *cl, uint64_t actors, uint64_t objects, uint64_t bytes);
/* `,"cluster":{...}` for the node's status JSON (nothing when cl is NULL). */
void tr__cluster_status_json(tr__cluster *cl, tr__buf *j);
/* The head's table: its nodes alive and lost (drivers' client nodes not counted); 0 on
 * another node, or none (its metrics count no nodes: the head's do). Returns 1 on the
 * head. */
int tr__cluster_node_counts(tr__cluster *cl, int *alive, int *lost);
/* Calls fn for each node of the head's table (NULL cluster, or not the head: none);
 * returns how many. Under the cluster's lock: fn must not call back into it. */
int tr__cluster_each_node(tr__cluster *cl, void (*fn)(void *ctx, const tr__member *m, int head),
                          void *ctx);
/* This node's /metrics endpoint, "HOST:PORT" ("": none), which its heartbeats tell the
 * head. */
void tr__cluster_set_metrics(tr__cluster *cl, const char *hostport);
/* The head: writes path, Prometheus' file_sd JSON of every live node's /metrics endpoint
 * (a group per node, labelled troupe_node, troupe_role, troupe_cluster), if it changed.
 * Another node, or none: nothing. 0 or TR_EIO. */
int tr__cluster_write_sd(tr__cluster *cl, const char *path);
void tr__cluster_stop(tr__cluster *cl);

#endif
