/* api/cluster.h - a node's part in a cluster of nodes (issue 12, first step: membership).
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
 * Threads: the RPC server's thread answers other nodes; a thread of the cluster's
 * heartbeats and sweeps. The node's loop thread only reads the table (status). */
#ifndef TR_API_CLUSTER_H
#define TR_API_CLUSTER_H

#include "core/buf.h"
#include "core/config.h"
#include "core/sched.h"

typedef struct tr__cluster tr__cluster;

/* *out NULL when cfg asks for no cluster. sock: the node's own socket (reported);
 * total: its resources; gpus: its devices. Fails, with the reason, when it cannot listen
 * or the head refuses it or cannot be reached within 10 s. */
int tr__cluster_start(const tr_config *cfg, const char *sock, const tr__res *total, int gpus,
                      tr__cluster **out);
/* `,"cluster":{...}` for the node's status JSON (nothing when cl is NULL). */
void tr__cluster_status_json(tr__cluster *cl, tr__buf *j);
void tr__cluster_stop(tr__cluster *cl);

#endif
