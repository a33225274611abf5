/* dag/bridge.h - a compiled graph's edges between the nodes of a cluster (issue 12).
 *
 * A graph whose actors are on several nodes has a segment on each of those nodes (that
 * node's actors, and the channels they use: dag/plan.h), and on each a bridge that carries
 * over TCP every value one node writes and another reads. On the writer's node a sender
 * reads the value from its channel (as one more reader) and sends it to every node that
 * reads it; on each of those a receiver writes it into that node's copy of the channel (as
 * its writer). The driver's process runs its node's bridge; on another node, the process
 * of the graph's first actor there does (dag/exec.c). A value that went as an object
 * travels as its bytes, and goes into the receiving node's store again if it is larger than
 * a slot. Every value keeps its execution number, code and length; every frame is checked
 * before use.
 *
 * Connections: each bridge listens on its node's cluster address and publishes it in the
 * cluster's KV store under "troupe/dag/<graph>/<node>"; a sender connects to each node it
 * sends to. The receiver speaks first, a challenge (a fresh random nonce); the sender
 * answers with a hello naming the graph and the value and proving it knows the graph's
 * secret: HMAC-SHA256(secret, nonce, value, node, graph). The secret is random per graph,
 * made by the driver at compile time and handed to each node's bridge in its attach message
 * (over the cluster's authenticated links), so nobody outside the graph - the graph's
 * name, sent in the clear, is no credential - can feed a value to a bridge. Hellos are read
 * side by side, all within the compile's deadline; a connection without a valid hello is
 * closed. The values travel in the clear: a cluster with TLS does not build bridges (its
 * graphs stay on one node, compile says so). TCP keepalives end a connection to a node cut
 * off within seconds. A connection that ends or breaks, a frame
 * that does not check, or a dead member of the node's segment (spec.check) ends the
 * bridge's part: on_fail is called once, and the caller takes the graph down there; the
 * other nodes see their connections end and do the same.
 */
#ifndef TR_DAG_BRIDGE_H
#define TR_DAG_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include "dag/plan.h"

#define TR__DAG_MAX_NODES 16
#define TR__DAG_SECRET 32 /* bytes of a graph's secret */

/* A value written on this node and read on others: its channel here, the sender's reader
 * index on it, and the nodes it goes to. */
typedef struct tr__dag_send {
    uint32_t v;
    uint64_t off;
    uint32_t reader;
    uint32_t n_dst;
    uint32_t dst[TR__DAG_MAX_NODES];
} tr__dag_send;

/* A value written on node `src` and read here: this node's copy of its channel. */
typedef struct tr__dag_recv {
    uint32_t v;
    uint64_t off;
    uint32_t src;
} tr__dag_recv;

typedef struct tr__dag_bridge_spec {
    const char *graph;     /* the graph's name (its keys, its connections' hello); < 32 bytes */
    const uint8_t *secret; /* the graph's secret, TR__DAG_SECRET bytes (copied) */
    uint32_t node;         /* this node's number in the graph (the driver's: 0) */
    const char *host;      /* this node's IP: the bridge listens there */
    const char *node_path; /* this node's socket (the cluster's KV store through it) */
    size_t max_msg;
    tr__dag_hdr *h; /* this node's segment area: its channels laid out already */
    uint64_t bytes;
    const tr__dag_send *sends;
    size_t n_sends;
    const tr__dag_recv *recvs;
    size_t n_recvs;
    struct tr__objects *objects; /* this process's store client */
    int timeout_ms;              /* for every connection to be made */
    /* called between waits: non-zero (a TR_E* code) ends the bridge (a dead member) */
    int (*check)(void *arg);
    void *check_arg;
    /* the nodes' names for messages (NULL: their numbers alone), node number -> name */
    const char *const *names;
    size_t n_names;
    /* called once, from a bridge thread, when the bridge's part ends other than by
     * tr__dag_bridge_stop: the code and why (code 0: another node tore the graph down
     * and said goodbye: stop, it is no failure) */
    void (*on_fail)(void *arg, int code, const char *why);
    void *fail_arg;
} tr__dag_bridge_spec;

typedef struct tr__dag_bridge tr__dag_bridge;

/* Listens, publishes, connects to every node this one sends to and takes every connection
 * it receives from, all within spec->timeout_ms, then starts a thread per send and per
 * receive. The spec's arrays and names are copied. Returns 0, TR_ETIMEDOUT (a node did not come),
 * TR_ECONNECT, TR_ENOMEM, TR_EINVAL. */
int tr__dag_bridge_start(const tr__dag_bridge_spec *spec, tr__dag_bridge **out);
/* Marks the end to come a failure: the senders say no goodbye, so the nodes they send to
 * count the graph failed when the connections end (call before the stop word is set). */
void tr__dag_bridge_abort(tr__dag_bridge *b);
/* Ends the bridge (after the segment's stop word is set: the senders' waits end), closes
 * its connections, joins its threads, withdraws its address. NULL: nothing. */
void tr__dag_bridge_stop(tr__dag_bridge *b);

#endif
