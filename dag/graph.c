/* dag/graph.c - the driver's side of a compiled graph (troupe/dag.h): building, checking,
 * laying out the channels, executions, teardown. The layout: every node whose value
 * someone reads gets one channel (dag/chan.h) with a reader index per reading (a bound
 * node's input, or one of the graph's outputs); the driver writes the input node's
 * channel and reads the outputs' ones; each actor runs its nodes in node order, which is
 * topological (a node binds only to nodes made before it). */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "collective/group.h"
#include "collective/shm/segment.h"
#include "core/abi.h"
#include "core/buf.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/reduce.h"
#include "core/ids.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "core/trace.h"
#include "actor/calls.h"
#include "actor/control.h"
#include "actor/protocol.h"
#include "dag/bridge.h"
#include "dag/chan.h"
#include "dag/graph.h"
#include "dag/plan.h"
#include "objectstore/client.h"
#include "troupe/dag.h"

#define TEARDOWN_MS 2000 /* how long a teardown waits for the actors to leave */
#define SPIN_NS 50000    /* waits spin this long where every party has a core */
#define YIELD_NS 20000   /* and yield this long where they share cores */

typedef struct node {
    int is_input;
    int coll; /* a collective node: its allreduce's number (from 1); 0 otherwise */
    int coll_rank, coll_world;
    tr_dtype dtype;
    tr_redop op;
    tr_actor_id actor;
    char *method;
    tr_dag_node *inputs;
    uint32_t *in_reader; /* its reader index on each input's channel */
    size_t n_inputs;
    tr_dag_transport transport;
    int rank;           /* its actor's rank in the segment */
    uint32_t n_readers; /* of its value */
    uint64_t chan_off;  /* its channel's offset from the tr__dag_hdr; 0: none */
    tr__chan ch;        /* this process's handle on it */
    int here;           /* ch is open (its channel is on the driver's node) */
    int reaches_output;
} node;

struct tr_dag {
    tr__dag_env env; /* what the runtime it was made from lends it */
    node *nodes;
    size_t n, cap;
    tr_dag_node *outputs;
    uint32_t *out_reader;
    size_t n_outputs;
    tr_dag_options opts;
    uint32_t slots; /* each channel's (chan_slots) */
    int compiled, torn;
    int attached; /* actors were sent their attach messages */
    int n_colls;  /* collective nodes' allreduces */
    int broken;   /* an actor died: every call says so */
    char broken_msg[300];
    char name[32];
    uint8_t secret[TR__DAG_SECRET]; /* across nodes: what the bridges' hellos prove (bridge.h) */
    tr_group *seg;
    tr__dag_hdr *h;
    uint64_t bytes;
    tr_actor_id *actors;
    size_t n_actors;
    int gpu;        /* some edge carries device values (dag/gpu.h) */
    int *nccl_rank; /* by actor: its rank in the graph's nccl group, or -1 */
    int nccl_world;
    char (*nccl_shared)[16]; /* by actor: the GPU it shares with another nccl rank, or "" */
    int64_t spin_ns;
    uint64_t next_exec, release_base;
    uint32_t execs_uncounted; /* executions begun and not yet in the metrics (count_execs) */
    unsigned char *released;  /* window of 4 x max_inflight executions from release_base */
    tr__objects *objects;     /* the runtime's store: values over a slot travel as objects */
    tr_ref *in_refs;          /* by input slot: the object its value went as, if any */
    unsigned char *in_ref_set;
    tr_ref *pins; /* by (execution in the window, output): objects viewed */
    unsigned char *pinned;
    /* tr_dag_fd: an eventfd, and the thread that counts executions into it */
    int efd;
    pthread_t watcher;
    int watching;
    uint32_t watch_stop;
    uint64_t watch_from;
    tr__event submitted; /* executions submitted (what the watcher waits on) */
    /* A graph whose actors are on several nodes (dag/bridge.h): node 0 is the driver's,
     * each has a segment of its own; values cross between them through the bridges. */
    int nn;
    char (*naddr)[80]; /* by node: its cluster address, "IP:port" */
    int *act_node;     /* by actor index: its node */
    int *act_rank;     /* by actor index: its rank in its node's segment */
    int *nworld;       /* by node: its segment's members (its actors, and rank 0) */
    uint64_t *noff;    /* [k * n + v]: value v's channel on node k (0: none there) */
    uint32_t *nread;   /* [k * n + v]: its readers there */
    uint32_t *breader; /* by value: the bridge's reader index on its writer's node */
    uint64_t *nbytes;  /* by node */
    tr__dag_bridge *bridge;
    int link_failed; /* (atomic) the bridge's part ended: link_code, link_msg */
    int link_code;
    char link_msg[400];
};

void *tr__dag_owner(const tr_dag *g) {
    return g ? g->env.owner : NULL;
}

static char *id_short(tr_actor_id id, char *buf) {
    char full[33];
    tr__hex(id.b, 16, full);
    memcpy(buf, full, 8);
    buf[8] = 0;
    return buf;
}

int tr__dag_create(const tr__dag_env *env, tr_dag **out) {
    if (!env || !out) return tr__err(TR_EINVAL, "tr_dag_create: NULL argument");
    tr_dag *g = calloc(1, sizeof *g);
    if (!g) return tr__err(TR_ENOMEM, "tr_dag_create");
    g->env = *env;
    g->nodes = calloc(8, sizeof *g->nodes);
    if (!g->nodes) {
        free(g);
        return tr__err(TR_ENOMEM, "tr_dag_create");
    }
    g->cap = 8;
    g->n = 1; /* node 0: the input */
    g->nodes[0].is_input = 1;
    *out = g;
    return 0;
}

static int building(tr_dag *g, const char *fn) {
    if (!g) return tr__err(TR_EINVAL, "%s: NULL graph", fn);
    if (g->compiled || g->torn) return tr__err(TR_ESTATE, "%s: the graph is compiled already", fn);
    return 0;
}

int tr__dag_input(tr_dag *g, tr_dag_node *out) {
    int rc = building(g, "tr_dag_input");
    if (rc) return rc;
    if (!out) return tr__err(TR_EINVAL, "tr_dag_input: out is NULL");
    *out = 0;
    return 0;
}

/* A new node at g->nodes[g->n] (the caller fills it in, then counts it); NULL: no memory. */
static node *add_node(tr_dag *g, tr_actor_id actor, const char *method, const tr_dag_node *inputs,
                      size_t n_inputs) {
    if (g->n == g->cap) {
        node *nn = realloc(g->nodes, 2 * g->cap * sizeof *nn);
        if (!nn) return NULL;
        g->nodes = nn;
        g->cap *= 2;
    }
    node *n = &g->nodes[g->n];
    memset(n, 0, sizeof *n);
    n->actor = actor;
    n->method = strdup(method);
    n->inputs = malloc(n_inputs * sizeof *n->inputs);
    n->in_reader = calloc(n_inputs, sizeof *n->in_reader);
    if (!n->method || !n->inputs || !n->in_reader) {
        free(n->method);
        free(n->inputs);
        free(n->in_reader);
        return NULL;
    }
    memcpy(n->inputs, inputs, n_inputs * sizeof *inputs);
    n->n_inputs = n_inputs;
    return n;
}

int tr__dag_bind(tr_dag *g, tr_actor_id actor, const char *method, const tr_dag_node *inputs,
                 size_t n_inputs, tr_dag_node *out) {
    int rc = building(g, "tr_dag_bind");
    if (rc) return rc;
    if (!method || !*method || strlen(method) > 200 || !inputs || n_inputs < 1 || n_inputs > 16 ||
        !out)
        return tr__err(TR_EINVAL,
                       "tr_dag_bind: a method name (1-200 bytes), 1-16 inputs and out, please");
    for (size_t i = 0; i < n_inputs; i++)
        if (inputs[i] >= g->n)
            return tr__err(TR_EINVAL,
                           "tr_dag_bind: input %zu is node %u, not one of this graph's nodes "
                           "made before this one (so no graph has a cycle)",
                           i, inputs[i]);
    if (!add_node(g, actor, method, inputs, n_inputs)) return tr__err(TR_ENOMEM, "tr_dag_bind");
    *out = (tr_dag_node)g->n++;
    return 0;
}

int tr__dag_allreduce(tr_dag *g, const tr_dag_node *inputs, size_t n, tr_dtype dtype, tr_redop op,
                      tr_dag_node *outs) {
    int rc = building(g, "tr_dag_allreduce");
    if (rc) return rc;
    if (!inputs || !outs || n < 1 || n > TR__COLL_MAX_WORLD || !tr__dtype_size(dtype) ||
        (unsigned)op > TR_AVG)
        return tr__err(TR_EINVAL, "tr_dag_allreduce: 1-%d inputs, a dtype and an op, please",
                       TR__COLL_MAX_WORLD);
    for (size_t i = 0; i < n; i++) {
        if (inputs[i] >= g->n || g->nodes[inputs[i]].is_input)
            return tr__err(TR_EINVAL, "tr_dag_allreduce: input %zu is not a bound node", i);
        for (size_t j = 0; j < i; j++)
            if (!memcmp(&g->nodes[inputs[i]].actor, &g->nodes[inputs[j]].actor,
                        sizeof(tr_actor_id)))
                return tr__err(TR_EINVAL,
                               "tr_dag_allreduce: inputs %zu and %zu are on the same actor", j, i);
    }
    size_t first = g->n; /* all n nodes or none */
    int id = g->n_colls + 1;
    for (size_t i = 0; i < n; i++) {
        node *nd = add_node(g, g->nodes[inputs[i]].actor, "allreduce", &inputs[i], 1);
        if (!nd) {
            while (g->n > first) {
                node *x = &g->nodes[--g->n];
                free(x->method);
                free(x->inputs);
                free(x->in_reader);
            }
            return tr__err(TR_ENOMEM, "tr_dag_allreduce");
        }
        nd->coll = id;
        nd->coll_rank = (int)i;
        nd->coll_world = (int)n;
        nd->dtype = dtype;
        nd->op = op;
        outs[i] = (tr_dag_node)g->n++;
    }
    g->n_colls = id;
    return 0;
}

int tr__dag_output(tr_dag *g, const tr_dag_node *nodes, size_t n) {
    int rc = building(g, "tr_dag_output");
    if (rc) return rc;
    if (!nodes || n < 1 || n > 64) return tr__err(TR_EINVAL, "tr_dag_output: 1-64 nodes, please");
    for (size_t i = 0; i < n; i++)
        if (nodes[i] >= g->n)
            return tr__err(TR_EINVAL, "tr_dag_output: node %u is not of this graph", nodes[i]);
    tr_dag_node *o = malloc(n * sizeof *o);
    uint32_t *r = calloc(n, sizeof *r);
    if (!o || !r) {
        free(o);
        free(r);
        return tr__err(TR_ENOMEM, "tr_dag_output");
    }
    memcpy(o, nodes, n * sizeof *o);
    free(g->outputs);
    free(g->out_reader);
    g->outputs = o;
    g->out_reader = r;
    g->n_outputs = n;
    return 0;
}

int tr__dag_set_transport(tr_dag *g, tr_dag_node nd, tr_dag_transport t) {
    int rc = building(g, "tr_dag_set_transport");
    if (rc) return rc;
    if (nd >= g->n ||
        (t != TR_DAG_AUTO && t != TR_DAG_SHM && t != TR_DAG_NCCL && t != TR_DAG_CUDA_IPC))
        return tr__err(TR_EINVAL, "tr_dag_set_transport: unknown node or transport");
#ifndef TR_WITH_CUDA
    if (t == TR_DAG_NCCL || t == TR_DAG_CUDA_IPC)
        return tr__err(TR_EINVAL, "tr_dag_set_transport: device transports need the CUDA build "
                                  "(--config=cuda)");
#endif
    g->nodes[nd].transport = t;
    return 0;
}

/* ------------------------------------------------------------------------- compile */

static int name_node(tr_dag *g, tr_dag_node i, char *buf, size_t cap) {
    if (g->nodes[i].is_input) return snprintf(buf, cap, "node %u (the input)", i);
    char a[9];
    return snprintf(buf, cap, "node %u (actor %s, method '%s')", i, id_short(g->nodes[i].actor, a),
                    g->nodes[i].method);
}

static int plan_gpu(tr_dag *g);
static int check_gpus(tr_dag *g);

/* Which nodes reach an output, who reads what (reader indices), which actor is which
 * rank, and where each channel lies; then the device edges (plan_gpu). */
static int plan(tr_dag *g) {
    char what[300];
    if (!g->n_outputs) return tr__err(TR_EINVAL, "tr_dag_compile: the graph has no outputs");
    for (size_t k = 0; k < g->n_outputs; k++)
        g->nodes[g->outputs[k]].reaches_output = 1;
    for (size_t i = g->n; i-- > 1;) /* inputs come before their readers */
        if (g->nodes[i].reaches_output)
            for (size_t j = 0; j < g->nodes[i].n_inputs; j++)
                g->nodes[g->nodes[i].inputs[j]].reaches_output = 1;
    for (tr_dag_node i = 1; i < g->n; i++) {
        if (g->nodes[i].reaches_output) continue;
        name_node(g, i, what, sizeof what);
        return tr__err(TR_EINVAL, "tr_dag_compile: the value of %s reaches no output", what);
    }
    for (tr_dag_node i = 1; i < g->n; i++) {
        node *n = &g->nodes[i];
        for (size_t j = 0; j < n->n_inputs; j++) /* (inputs are earlier nodes: bind) */
            n->in_reader[j] = g->nodes[n->inputs[j]].n_readers++;
    }
    for (size_t k = 0; k < g->n_outputs; k++)
        g->out_reader[k] = g->nodes[g->outputs[k]].n_readers++;
    g->bytes = sizeof(tr__dag_hdr);
    for (tr_dag_node i = 0; i < g->n; i++) {
        node *n = &g->nodes[i];
        if (n->n_readers > TR__CHAN_MAX_READERS) {
            name_node(g, i, what, sizeof what);
            return tr__err(TR_EINVAL, "tr_dag_compile: %u readers of %s (at most %d)", n->n_readers,
                           what, TR__CHAN_MAX_READERS);
        }
        if (!n->n_readers) continue;
        size_t sz = tr__chan_size(g->slots, g->opts.slot_bytes, n->n_readers);
        if (!sz || g->bytes + sz > TR__COLL_MAX_EXTRA)
            return tr__err(TR_EINVAL,
                           "tr_dag_compile: channels of %u slots of %llu bytes do not fit",
                           g->opts.max_inflight, (unsigned long long)g->opts.slot_bytes);
        n->chan_off = g->bytes;
        g->bytes += sz;
    }
    g->actors = calloc(g->n, sizeof *g->actors);
    if (!g->actors) return tr__err(TR_ENOMEM, "tr_dag_compile");
    for (tr_dag_node i = 1; i < g->n; i++) {
        node *n = &g->nodes[i];
        size_t a = 0;
        while (a < g->n_actors && memcmp(&g->actors[a], &n->actor, sizeof n->actor))
            a++;
        if (a == g->n_actors) g->actors[g->n_actors++] = n->actor;
        n->rank = (int)a + 1;
    }
    if (g->n_actors + 1 > TR__COLL_MAX_WORLD)
        return tr__err(TR_EINVAL, "tr_dag_compile: %zu actors (at most %d)", g->n_actors,
                       TR__COLL_MAX_WORLD - 1);
    return plan_gpu(g);
}

/* The node that writes value v: the driver's (0) for the input. */
static int wnode(const tr_dag *g, tr_dag_node v) {
    return v == 0 ? 0 : g->act_node[g->nodes[v].rank - 1];
}

/* where[a]: actor a's node as tr_actor_info names it (a socket path: the driver's; else
 * "IP:port"). One node: nothing to do. Several: each node's members and ranks, every
 * reading's reader index on its own node's copy of the channel (the bridge one more on the
 * writer's node where others read the value), and each node's layout (dag/bridge.h). */
static int plan_nodes(tr_dag *g, char (*where)[256]) {
    char what[300];
    g->nn = 1;
    g->act_node = calloc(g->n_actors + 1, sizeof *g->act_node);
    g->act_rank = calloc(g->n_actors + 1, sizeof *g->act_rank);
    g->naddr = calloc(TR__DAG_MAX_NODES, sizeof *g->naddr);
    if (!g->act_node || !g->act_rank || !g->naddr) return tr__err(TR_ENOMEM, "tr_dag_compile");
    for (size_t a = 0; a < g->n_actors; a++) {
        if (where[a][0] == '/' || !strchr(where[a], ':')) continue; /* the driver's node */
        int k = 1;
        while (k < g->nn && strcmp(g->naddr[k], where[a]) != 0)
            k++;
        if (k == g->nn) {
            if (g->nn == TR__DAG_MAX_NODES)
                return tr__err(TR_EINVAL, "tr_dag_compile: actors on more than %d nodes",
                               TR__DAG_MAX_NODES);
            char ip[80], *colon;
            snprintf(ip, sizeof ip, "%s", where[a]);
            struct in_addr probe;
            if (strlen(where[a]) >= sizeof g->naddr[0] || !(colon = strrchr(ip, ':')) ||
                (*colon = '\0', inet_pton(AF_INET, ip, &probe) != 1))
                return tr__err(TR_EINVAL,
                               "tr_dag_compile: node '%s' is not an IPv4 address and port: a "
                               "graph across nodes needs one",
                               where[a]);
            snprintf(g->naddr[g->nn++], sizeof g->naddr[0], "%s", where[a]);
        }
        g->act_node[a] = k;
    }
    for (size_t a = 0; a < g->n_actors; a++)
        g->act_rank[a] = (int)a + 1; /* one node: the actors' ranks in the one segment */
    if (g->nn == 1) return 0;
    if (g->gpu)
        return tr__err(TR_EINVAL, "tr_dag_compile: device edges between the nodes of a cluster "
                                  "are not supported (yet)");
    for (tr_dag_node i = 1; i < g->n; i++) { /* a collective node's shm group: one node */
        if (!g->nodes[i].coll) continue;
        for (tr_dag_node m = 1; m < i; m++)
            if (g->nodes[m].coll == g->nodes[i].coll && wnode(g, m) != wnode(g, i)) {
                name_node(g, i, what, sizeof what);
                return tr__err(TR_EINVAL,
                               "tr_dag_compile: %s: a collective node's actors must share a node",
                               what);
            }
    }
    tr__nodeconn *nc;
    int tls = 0;
    int rc = tr__nodeconn_open(g->env.address, g->env.max_msg, &nc);
    if (!rc) {
        rc = tr__node_cluster_address(nc, g->naddr[0], sizeof g->naddr[0], &tls);
        tr__nodeconn_close(nc);
    }
    if (!rc && tls)
        rc = tr__err(TR_EINVAL,
                     "tr_dag_compile: the graph's actors are on %d nodes of a cluster with TLS; "
                     "its bridges would carry the values between them in the clear (TLS "
                     "covers the nodes' gRPC links only): keep a graph's actors on one node",
                     g->nn);
    if (rc) return rc;
    size_t n = g->n, nn = (size_t)g->nn;
    g->nworld = calloc(nn, sizeof *g->nworld);
    g->noff = calloc(nn * n, sizeof *g->noff);
    g->nread = calloc(nn * n, sizeof *g->nread);
    g->breader = calloc(n, sizeof *g->breader);
    g->nbytes = calloc(nn, sizeof *g->nbytes);
    if (!g->nworld || !g->noff || !g->nread || !g->breader || !g->nbytes)
        return tr__err(TR_ENOMEM, "tr_dag_compile");
    for (size_t k = 0; k < nn; k++)
        g->nworld[k] = 1; /* rank 0: the driver here, the bridge elsewhere */
    for (size_t a = 0; a < g->n_actors; a++)
        g->act_rank[a] = g->nworld[g->act_node[a]]++;
    for (tr_dag_node i = 1; i < g->n; i++) {
        node *m = &g->nodes[i];
        size_t k = (size_t)wnode(g, i);
        for (size_t j = 0; j < m->n_inputs; j++)
            m->in_reader[j] = g->nread[k * n + m->inputs[j]]++;
    }
    for (size_t o = 0; o < g->n_outputs; o++)
        g->out_reader[o] = g->nread[g->outputs[o]]++;
    for (tr_dag_node v = 0; v < g->n; v++) {
        size_t w = (size_t)wnode(g, v);
        int elsewhere = 0;
        for (size_t k = 0; k < nn; k++)
            elsewhere |= k != w && g->nread[k * n + v] > 0;
        if (elsewhere) g->breader[v] = g->nread[w * n + v]++;
    }
    for (size_t k = 0; k < nn; k++) {
        uint64_t bytes = sizeof(tr__dag_hdr);
        for (tr_dag_node v = 0; v < g->n; v++) {
            uint32_t r = g->nread[k * n + v];
            if (!r) continue;
            if (r > TR__CHAN_MAX_READERS) {
                name_node(g, v, what, sizeof what);
                return tr__err(TR_EINVAL, "tr_dag_compile: %u readers of %s on one node", r, what);
            }
            size_t sz = tr__chan_size(g->slots, g->opts.slot_bytes, r);
            if (!sz || bytes + sz > TR__COLL_MAX_EXTRA)
                return tr__err(TR_EINVAL, "tr_dag_compile: channels do not fit");
            g->noff[k * n + v] = bytes;
            bytes += sz;
        }
        g->nbytes[k] = bytes;
    }
    for (tr_dag_node v = 0; v < g->n; v++) /* the driver's node's layout */
        g->nodes[v].chan_off = g->noff[v];
    g->bytes = g->nbytes[0];
    return 0;
}

/* Node k's bridge: the values it sends (written there, read elsewhere) and receives. */
static size_t node_sends(const tr_dag *g, int k, tr__dag_send *out) {
    size_t c = 0, n = g->n;
    for (tr_dag_node v = 0; v < g->n; v++) {
        if (wnode(g, v) != k) continue;
        tr__dag_send sd = {v, g->noff[(size_t)k * n + v], g->breader[v], 0, {0}};
        for (int d = 0; d < g->nn; d++)
            if (d != k && g->nread[(size_t)d * n + v]) sd.dst[sd.n_dst++] = (uint32_t)d;
        if (sd.n_dst) {
            if (out) out[c] = sd;
            c++;
        }
    }
    return c;
}

static size_t node_recvs(const tr_dag *g, int k, tr__dag_recv *out) {
    size_t c = 0, n = g->n;
    for (tr_dag_node v = 0; v < g->n; v++) {
        int w = wnode(g, v);
        if (w == k || !g->nread[(size_t)k * n + v]) continue;
        if (out) out[c] = (tr__dag_recv){v, g->noff[(size_t)k * n + v], (uint32_t)w};
        c++;
    }
    return c;
}

static int is_dev(const node *n) {
    return n->transport == TR_DAG_NCCL || n->transport == TR_DAG_CUDA_IPC;
}

/* Runs one execution's steps on paper, each actor in its order, to see that no actor
 * waits for ever: a step reads its inputs in order (an nccl input once its writer sends
 * and all its readers are there: NCCL does not promise that one receive of a grouped
 * send completes without the others), then runs; an nccl write waits for all its
 * readers, a collective node for all its participants. Returns the node an actor is stuck at, or 0
 * if every actor finishes. */
static tr_dag_node stuck_at(tr_dag *g) {
    size_t na = g->n_actors;
    size_t *at = calloc(na, sizeof *at), *phase = calloc(na, sizeof *phase);
    unsigned char *done = calloc(g->n, 1), *posted = calloc(g->n, 1), *reg = calloc(na, 1);
    uint32_t *waiting = calloc(g->n, sizeof *waiting), *need = calloc(g->n, sizeof *need);
    int *arrived = calloc((size_t)g->n_colls + 1, sizeof *arrived);
    unsigned char *here = calloc(g->n, 1);
    tr_dag_node stuck = 0;
    if (!at || !phase || !done || !posted || !reg || !waiting || !need || !arrived || !here)
        goto out; /* (out of memory: the real run will tell) */
    done[0] = 1;  /* the driver's input */
    for (tr_dag_node i = 1; i < g->n; i++)
        for (size_t j = 0; j < g->nodes[i].n_inputs; j++)
            need[g->nodes[i].inputs[j]]++;
    for (int moved = 1; moved;) {
        moved = 0;
        for (size_t a = 0; a < na; a++)
            for (;;) {
                tr_dag_node m = (tr_dag_node)at[a];
                while (m < g->n && (m == 0 || g->nodes[m].rank != (int)a + 1))
                    m++;
                at[a] = m;
                if (m >= g->n) break;
                node *n = &g->nodes[m];
                if (phase[a] < n->n_inputs) {
                    tr_dag_node x = n->inputs[phase[a]];
                    if (g->nodes[x].transport == TR_DAG_NCCL) {
                        /* as NCCL promises no more: x's readers all receive together, once
                         * its writer sends */
                        if (!reg[a]) {
                            reg[a] = 1;
                            waiting[x]++;
                        }
                        if (!posted[x] || waiting[x] < need[x]) break;
                        reg[a] = 0;
                    } else if (!done[x]) {
                        break;
                    }
                    phase[a]++;
                } else if (n->coll) {
                    if (!here[m]) {
                        here[m] = 1;
                        arrived[n->coll]++;
                    }
                    if (arrived[n->coll] < n->coll_world) break;
                    done[m] = 1;
                    at[a]++, phase[a] = 0;
                } else {
                    posted[m] = 1;
                    if (n->transport == TR_DAG_NCCL && waiting[m] < need[m]) break;
                    done[m] = 1;
                    at[a]++, phase[a] = 0;
                }
                moved = 1;
            }
    }
    for (size_t a = 0; a < na && !stuck; a++)
        if (at[a] < g->n) stuck = (tr_dag_node)at[a];
out:
    free(at), free(phase), free(done), free(posted), free(reg), free(waiting), free(need),
        free(arrived), free(here);
    return stuck;
}

/* Device edges: where they may go, the graph's nccl group (every actor with an nccl
 * edge, a rank each), and that the nccl rendezvous cannot deadlock. */
static int plan_gpu(tr_dag *g) {
    char what[300], other[300];
    g->nccl_rank = malloc(g->n_actors * sizeof *g->nccl_rank);
    if (!g->nccl_rank) return tr__err(TR_ENOMEM, "tr_dag_compile");
    for (size_t a = 0; a < g->n_actors; a++)
        g->nccl_rank[a] = -1;
    for (tr_dag_node i = 0; i < g->n; i++) {
        node *n = &g->nodes[i];
        if (!is_dev(n)) continue;
        g->gpu = 1;
        name_node(g, i, what, sizeof what);
        if (n->is_input || n->coll)
            return tr__err(TR_EINVAL, "tr_dag_compile: %s: device transports are for method nodes",
                           what);
        if (n->transport == TR_DAG_CUDA_IPC && g->opts.slot_bytes < 80)
            return tr__err(TR_EINVAL, "tr_dag_compile: %s: cuda_ipc edges need slot_bytes >= 80",
                           what);
        for (size_t k = 0; k < g->n_outputs; k++)
            if (g->outputs[k] == i)
                return tr__err(TR_EINVAL,
                               "tr_dag_compile: %s is an output, and its transport carries "
                               "device values: they end at actors' methods",
                               what);
        if (n->transport == TR_DAG_NCCL && g->nccl_rank[n->rank - 1] < 0)
            g->nccl_rank[n->rank - 1] = g->nccl_world++;
        for (tr_dag_node m = i + 1; m < g->n; m++)
            for (size_t j = 0; j < g->nodes[m].n_inputs; j++) {
                if (g->nodes[m].inputs[j] != i) continue;
                name_node(g, m, other, sizeof other);
                if (g->nodes[m].coll)
                    return tr__err(TR_EINVAL,
                                   "tr_dag_compile: %s reads the device value of %s: collective "
                                   "nodes take host values",
                                   other, what);
                if (g->nodes[m].rank == n->rank)
                    return tr__err(TR_EINVAL,
                                   "tr_dag_compile: %s reads the device value of %s on the same "
                                   "actor: use shm there",
                                   other, what);
                if (n->transport == TR_DAG_NCCL && g->nccl_rank[g->nodes[m].rank - 1] < 0)
                    g->nccl_rank[g->nodes[m].rank - 1] = g->nccl_world++;
            }
    }
    tr_dag_node at = g->nccl_world || g->n_colls ? stuck_at(g) : 0;
    if (at) {
        name_node(g, at, what, sizeof what);
        return tr__err(TR_EINVAL,
                       "tr_dag_compile: the graph's nccl sends and receives (or collective "
                       "nodes) would wait for each other: %s never runs; order the nodes so that "
                       "each actor takes an nccl input before what waits for its writer",
                       what);
    }
    return 0;
}

/* Every actor at either end of a device edge has a GPU. Two actors of the nccl edges
 * sharing one are told so as they attach: NCCL refuses two ranks of a communicator on one
 * GPU of one host, so each refuses unless its process is an NCCL host of its own (a
 * distinct NCCL_HOSTID, which only it can see: dag/exec.c). */
static int check_gpus(tr_dag *g) {
    char what[300];
    free(g->nccl_shared);
    g->nccl_shared = calloc(g->n_actors ? g->n_actors : 1, sizeof *g->nccl_shared);
    if (!g->nccl_shared) return tr__err(TR_ENOMEM, "tr_dag_compile");
    for (tr_dag_node i = 1; i < g->n; i++) {
        node *n = &g->nodes[i];
        int dev_in = 0;
        for (size_t j = 0; j < n->n_inputs; j++)
            dev_in |= is_dev(&g->nodes[n->inputs[j]]);
        if (!is_dev(n) && !dev_in) continue;
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        int r = tr__actor_info(g->env.node, n->actor, &d);
        if (r) return r;
        name_node(g, i, what, sizeof what);
        if (!d.gpus[0])
            return tr__err(TR_ERESOURCES,
                           "tr_dag_compile: the actor of %s moves device values and has no GPU "
                           "(create it with num_gpus)",
                           what);
        int a = n->rank - 1; /* (its GPU, for now; shared or not below) */
        if (g->nccl_rank[a] >= 0)
            snprintf(g->nccl_shared[a], sizeof g->nccl_shared[a], "%.*s", (int)strcspn(d.gpus, ","),
                     d.gpus);
    }
    char(*gpu)[16] = malloc(g->n_actors * sizeof *gpu + 1);
    if (!gpu) return tr__err(TR_ENOMEM, "tr_dag_compile");
    memcpy(gpu, g->nccl_shared, g->n_actors * sizeof *gpu);
    for (size_t a = 0; a < g->n_actors; a++) {
        int shared = 0;
        for (size_t b = 0; b < g->n_actors && gpu[a][0]; b++)
            shared |= b != a && strcmp(gpu[a], gpu[b]) == 0;
        if (!shared) g->nccl_shared[a][0] = 0;
    }
    free(gpu);
    return 0;
}

/* The first node of the actor of rank `rank` (it names the actor in errors). */
static tr_dag_node first_node_of(tr_dag *g, int rank) {
    tr_dag_node i = 1;
    while (i < g->n && g->nodes[i].rank != rank)
        i++;
    return i;
}

/* The bridge part of the attach message of node k's first actor (k > 0): it lays that
 * node's channels out and runs its bridge (dag/exec.c). */
static void attach_bridge(tr_dag *g, int k, tr__buf *b) {
    size_t n = g->n, nc = 0;
    for (tr_dag_node v = 0; v < g->n; v++)
        nc += g->nread[(size_t)k * n + v] > 0;
    size_t ns = node_sends(g, k, NULL), nr = node_recvs(g, k, NULL);
    tr__dag_send *sd = calloc(ns + 1, sizeof *sd);
    tr__dag_recv *rv = calloc(nr + 1, sizeof *rv);
    if (!sd || !rv) {
        b->oom = 1;
        free(sd);
        free(rv);
        return;
    }
    node_sends(g, k, sd);
    node_recvs(g, k, rv);
    char ip[80];
    snprintf(ip, sizeof ip, "%s", g->naddr[k]);
    char *colon = strrchr(ip, ':');
    if (colon) *colon = '\0';
    tr__enc_str(b, "bridge");
    size_t m = tr__enc_map_open(b);
    tr__enc_str(b, "secret"); /* (the attach message goes over the cluster's link) */
    tr__enc_bin(b, g->secret, sizeof g->secret);
    tr__enc_str(b, "node");
    tr__enc_int(b, k);
    tr__enc_str(b, "host");
    tr__enc_str(b, ip);
    tr__enc_str(b, "slots");
    tr__enc_uint(b, g->slots);
    tr__enc_str(b, "slot_bytes");
    tr__enc_uint(b, g->opts.slot_bytes);
    tr__enc_str(b, "chans"); /* [offset, readers] of each channel there */
    tr__enc_array(b, (uint32_t)nc);
    for (tr_dag_node v = 0; v < g->n; v++) {
        if (!g->nread[(size_t)k * n + v]) continue;
        tr__enc_array(b, 2);
        tr__enc_uint(b, g->noff[(size_t)k * n + v]);
        tr__enc_uint(b, g->nread[(size_t)k * n + v]);
    }
    tr__enc_str(b, "sends"); /* [value, offset, reader, [nodes]] */
    tr__enc_array(b, (uint32_t)ns);
    for (size_t i = 0; i < ns; i++) {
        tr__enc_array(b, 4);
        tr__enc_uint(b, sd[i].v);
        tr__enc_uint(b, sd[i].off);
        tr__enc_uint(b, sd[i].reader);
        tr__enc_array(b, sd[i].n_dst);
        for (uint32_t d = 0; d < sd[i].n_dst; d++)
            tr__enc_uint(b, sd[i].dst[d]);
    }
    tr__enc_str(b, "recvs"); /* [value, offset, from node] */
    tr__enc_array(b, (uint32_t)nr);
    for (size_t i = 0; i < nr; i++) {
        tr__enc_array(b, 3);
        tr__enc_uint(b, rv[i].v);
        tr__enc_uint(b, rv[i].off);
        tr__enc_uint(b, rv[i].src);
    }
    tr__enc_map_close(b, m);
    free(sd);
    free(rv);
}

/* The segment's name on node k: the graph's on the driver's, and one per other node. */
static void seg_name(const tr_dag *g, int k, char *out, size_t cap) {
    if (k == 0)
        snprintf(out, cap, "%s", g->name);
    else
        snprintf(out, cap, "%s-n%d", g->name, k);
}

/* Whether node i's step may forward its input (dag/exec.c: parse_fwd): the driver alone
 * reads its output, in a graph on one node with no device edge. A collective node's goes
 * further: it reduces into its input's slot and forwards that, so its input must have no
 * other reader (the driver included). */
static int forwards(const tr_dag *g, tr_dag_node i) {
    const node *n = &g->nodes[i];
    if (g->nn > 1 || g->gpu) return 0;
    if (n->coll && (n->n_inputs != 1 || g->nodes[n->inputs[0]].n_readers != 1)) return 0;
    uint32_t outs = 0;
    for (size_t k = 0; k < g->n_outputs; k++)
        outs += g->outputs[k] == i;
    return outs == n->n_readers;
}

/* The attach message of the actor of rank `rank`. */
static void attach_msg(tr_dag *g, int rank, int check, tr__buf *b) {
    size_t steps = 0, fwd = 0;
    for (tr_dag_node i = 1; i < g->n; i++)
        if (g->nodes[i].rank == rank) steps++, fwd += forwards(g, i);
    int my_nccl = g->nccl_rank ? g->nccl_rank[rank - 1] : -1;
    int k = g->nn > 1 ? g->act_node[rank - 1] : 0, host = k > 0 && g->act_rank[rank - 1] == 1;
    size_t kn = (size_t)k * g->n; /* (node k's row of noff, across nodes) */
    size_t m = tr__enc_map_open(b);
    if (host && !check) attach_bridge(g, k, b);
    if (my_nccl >= 0) { /* [group, world, rank, shared GPU]: the graph's nccl group */
        char group[64];
        snprintf(group, sizeof group, "%s-nccl", g->name);
        tr__enc_str(b, "nccl");
        tr__enc_array(b, 4);
        tr__enc_str(b, group);
        tr__enc_int(b, g->nccl_world);
        tr__enc_int(b, my_nccl);
        tr__enc_str(b, g->nccl_shared ? g->nccl_shared[rank - 1] : ""); /* its GPU if shared */
    }
    if (g->gpu) { /* per step: [transport, [nccl ranks of its readers]] */
        tr__enc_str(b, "gpu");
        tr__enc_array(b, (uint32_t)steps);
        for (tr_dag_node i = 1; i < g->n; i++) {
            node *n = &g->nodes[i];
            if (n->rank != rank) continue;
            uint32_t nd = 0;
            for (tr_dag_node m = i + 1; n->transport == TR_DAG_NCCL && m < g->n; m++)
                for (size_t j = 0; j < g->nodes[m].n_inputs; j++)
                    nd += g->nodes[m].inputs[j] == i;
            tr__enc_array(b, 2);
            tr__enc_int(b, is_dev(n) ? n->transport : 0);
            tr__enc_array(b, nd);
            for (tr_dag_node m = i + 1; nd && m < g->n; m++)
                for (size_t j = 0; j < g->nodes[m].n_inputs; j++)
                    if (g->nodes[m].inputs[j] == i)
                        tr__enc_int(b, g->nccl_rank[g->nodes[m].rank - 1]);
        }
    }
    if (fwd) { /* the indexes of its steps that may forward their input */
        tr__enc_str(b, "fwd");
        tr__enc_array(b, (uint32_t)fwd);
        uint64_t s = 0; /* (its steps in the order the "steps" list has them) */
        for (tr_dag_node i = 1; i < g->n; i++) {
            if (g->nodes[i].rank != rank) continue;
            if (forwards(g, i)) tr__enc_uint(b, s);
            s++;
        }
    }
    if (check) {
        tr__enc_str(b, "check");
        tr__enc_bool(b, 1);
    }
    char seg[64];
    seg_name(g, k, seg, sizeof seg);
    tr__enc_str(b, "name");
    tr__enc_str(b, seg);
    tr__enc_str(b, "world");
    tr__enc_int(b, g->nn > 1 ? g->nworld[k] : (int64_t)g->n_actors + 1);
    tr__enc_str(b, "rank");
    tr__enc_int(b, g->act_rank[rank - 1]);
    tr__enc_str(b, "bytes");
    tr__enc_uint(b, g->nn > 1 ? g->nbytes[k] : g->bytes);
    tr__enc_str(b, "timeout_ms");
    tr__enc_int(b, g->opts.attach_timeout_ms);
    tr__enc_str(b, "spin_ns");
    tr__enc_int(b, g->spin_ns);
    tr__enc_str(b, "steps");
    tr__enc_array(b, (uint32_t)steps);
    for (tr_dag_node i = 1; i < g->n; i++) {
        node *n = &g->nodes[i];
        if (n->rank != rank) continue;
        tr__enc_array(b, n->coll ? 4 : 3);
        tr__enc_str(b, n->coll ? "" : n->method);
        tr__enc_uint(b, g->nn > 1 ? g->noff[kn + i] : n->chan_off);
        tr__enc_array(b, (uint32_t)n->n_inputs);
        for (size_t j = 0; j < n->n_inputs; j++) {
            tr__enc_array(b, 2);
            tr__enc_uint(b,
                         g->nn > 1 ? g->noff[kn + n->inputs[j]] : g->nodes[n->inputs[j]].chan_off);
            tr__enc_uint(b, n->in_reader[j]);
        }
        if (n->coll) { /* [group, world, rank, dtype, op]: an shm group of its own */
            char group[64];
            snprintf(group, sizeof group, "%s-ar%d", g->name, n->coll);
            tr__enc_array(b, 5);
            tr__enc_str(b, group);
            tr__enc_int(b, n->coll_world);
            tr__enc_int(b, n->coll_rank);
            tr__enc_int(b, n->dtype);
            tr__enc_int(b, n->op);
        }
    }
    tr__enc_map_close(b, m);
}

/* Sends every actor its attach message (check: only have the steps checked), then waits
 * for the replies; the first failure, naming the actor's first node. */
static int attach_all(tr_dag *g, int check) {
    tr_ref *refs = calloc(g->n_actors, sizeof *refs);
    if (!refs) return tr__err(TR_ENOMEM, "tr_dag_compile");
    size_t sent = 0;
    int rc = 0;
    for (; sent < g->n_actors && !rc; sent++) {
        tr__buf b = TR__BUF_INIT;
        attach_msg(g, (int)sent + 1, check, &b);
        rc = b.oom ? tr__err(TR_ENOMEM, "tr_dag_compile")
                   : tr__actors_call(g->env.actors, g->actors[sent], TR__DAG_ATTACH, b.data, b.len,
                                     NULL, 0, &refs[sent]);
        tr__buf_free(&b);
        if (rc) break;
    }
    for (size_t a = 0; a < sent; a++) {
        int r = tr__actors_get(g->env.actors, refs[a], g->opts.attach_timeout_ms, NULL, NULL, NULL);
        if (r && !rc) {
            char what[300];
            name_node(g, first_node_of(g, (int)a + 1), what, sizeof what);
            rc = tr__err_wrap(r, "tr_dag_compile: %s", what);
        }
        tr__actors_release(g->env.actors, refs[a]);
    }
    free(refs);
    return rc;
}

static tr__chan *chan(tr_dag *g, tr_dag_node i) {
    return &g->nodes[i].ch;
}

/* The members of the driver's node's segment: the driver and the actors there. */
static int local_world(const tr_dag *g) {
    return g->nn > 1 ? g->nworld[0] : (int)g->n_actors + 1;
}

static void stop_all(tr_dag *g);

/* The bridge's check: an actor on this node died (read only: the driver's thread turns
 * it into the graph's state, actor_died). */
static int seg_dead(void *arg) {
    tr_dag *g = arg;
    uint64_t dead = __atomic_load_n(&((tr__coll_hdr *)g->seg->seg)->dead, __ATOMIC_ACQUIRE) >> 1;
    return dead ? tr__err(TR_EACTOR_DIED, "an actor of the graph died") : 0;
}

/* The bridge's part ended (a bridge thread): the graph goes down, and the driver's thread
 * says why (sync_link). */
static void link_fail(void *arg, int code, const char *why) {
    tr_dag *g = arg;
    if (code == 0) code = TR_EACTOR_DIED; /* (a goodbye here: another node tore it down) */
    snprintf(g->link_msg, sizeof g->link_msg, "%s", why);
    g->link_code = code == TR_EPROTO ? TR_EPROTO : TR_EACTOR_DIED;
    __atomic_store_n(&g->link_failed, 1, __ATOMIC_RELEASE);
    stop_all(g);
}

static void sync_link(tr_dag *g) {
    if (g->broken || !__atomic_load_n(&g->link_failed, __ATOMIC_ACQUIRE)) return;
    g->broken = g->link_code;
    snprintf(g->broken_msg, sizeof g->broken_msg, "graph %s: %.200s; the graph is torn down",
             g->name, g->link_msg);
}

/* The driver's node's bridge (a graph across nodes). */
static int start_bridge(tr_dag *g) {
    size_t ns = node_sends(g, 0, NULL), nr = node_recvs(g, 0, NULL);
    tr__dag_send *sd = calloc(ns + 1, sizeof *sd);
    tr__dag_recv *rv = calloc(nr + 1, sizeof *rv);
    int rc = sd && rv ? 0 : tr__err(TR_ENOMEM, "tr_dag_compile");
    char ip[80];
    snprintf(ip, sizeof ip, "%s", g->naddr[0]);
    char *colon = strrchr(ip, ':');
    if (colon) *colon = '\0';
    if (!rc) {
        node_sends(g, 0, sd);
        node_recvs(g, 0, rv);
        const char *names[TR__DAG_MAX_NODES];
        for (int k = 0; k < g->nn; k++)
            names[k] = k ? g->naddr[k] : "the driver's";
        tr__dag_bridge_spec s = {.graph = g->name,
                                 .secret = g->secret,
                                 .node = 0,
                                 .host = ip,
                                 .node_path = g->env.address,
                                 .max_msg = g->env.max_msg,
                                 .h = g->h,
                                 .bytes = g->bytes,
                                 .sends = sd,
                                 .n_sends = ns,
                                 .recvs = rv,
                                 .n_recvs = nr,
                                 .objects = g->objects,
                                 .timeout_ms = g->opts.attach_timeout_ms,
                                 .check = seg_dead,
                                 .check_arg = g,
                                 .names = names,
                                 .n_names = (size_t)g->nn,
                                 .on_fail = link_fail,
                                 .fail_arg = g};
        rc = tr__dag_bridge_start(&s, &g->bridge);
        if (rc) rc = tr__err_wrap(rc, "tr_dag_compile: the links between the graph's nodes");
    }
    free(sd);
    free(rv);
    return rc;
}

/* Slack: a channel of up to this many bytes of slots gets twice max_inflight slots. */
#define SLACK_BYTES (1u << 20)

/* Slots per channel: max_inflight, or twice that where the slots stay small. The driver
 * keeps at most max_inflight executions between submit and release, so with twice as many
 * slots a writer finds its readers' counts a window ahead of what it needs, and reads
 * their lines about once per max_inflight values; with exactly max_inflight it reads them
 * for nearly every value of a full pipeline, a cache line moving between cores each time
 * (~15% of a one-actor graph's pipelined rate here: docs/BENCHMARKS.md, session 18). */
static uint32_t chan_slots(const tr_dag_options *o) {
    uint64_t twice = 2 * (uint64_t)o->max_inflight;
    return twice <= TR__CHAN_MAX_SLOTS && twice * o->slot_bytes <= SLACK_BYTES ? (uint32_t)twice
                                                                               : o->max_inflight;
}

static int compile(tr_dag *g, const tr_dag_options *opts) {
    tr_dag_options def = TR_DAG_OPTIONS_INIT;
    g->opts = def;
    if (opts && tr__struct_in(&g->opts, sizeof g->opts, opts, sizeof *opts, "tr_dag_compile"))
        return TR_EINVAL;
    if (g->opts.max_inflight < 1 || g->opts.max_inflight > TR__CHAN_MAX_SLOTS ||
        g->opts.slot_bytes < 16 || g->opts.submit_timeout_ms < -1 || g->opts.attach_timeout_ms < 1)
        return tr__err(TR_EINVAL,
                       "tr_dag_compile: max_inflight 1-%d, slot_bytes >= 16 and "
                       "timeouts, please",
                       TR__CHAN_MAX_SLOTS);
    g->slots = chan_slots(&g->opts);
    int rc = plan(g);
    if (rc) return rc;
    char(*where)[256] = calloc(g->n_actors + 1, sizeof *where); /* each actor's node */
    if (!where) return tr__err(TR_ENOMEM, "tr_dag_compile");
    for (tr_dag_node i = 1; i < g->n && !rc; i++) { /* each actor once, at its first node */
        if (i != first_node_of(g, g->nodes[i].rank)) continue;
        tr_actor_details d = TR_ACTOR_DETAILS_INIT;
        int r = tr__actor_wait_ready(g->env.node, g->nodes[i].actor, g->opts.attach_timeout_ms);
        if (!r) r = tr__actor_info(g->env.node, g->nodes[i].actor, &d);
        if (r || d.state != TR_ACTOR_ALIVE) {
            char what[300];
            name_node(g, i, what, sizeof what);
            if (r)
                rc = tr__err_wrap(r != TR_ETIMEDOUT ? r : TR_EACTOR_DIED,
                                  "tr_dag_compile: the actor of %s is not alive", what);
            else
                rc = tr__err(TR_EACTOR_DIED, "tr_dag_compile: the actor of %s is not alive: %s",
                             what, tr__actor_state_name(d.state));
        }
        snprintf(where[g->nodes[i].rank - 1], sizeof where[0], "%s", d.node);
    }
    if (!rc) rc = plan_nodes(g, where);
    free(where);
    if (rc) return rc;
    if (g->gpu && (rc = check_gpus(g))) return rc;
    uint8_t rnd[8];
    if ((rc = tr__random_bytes(rnd, sizeof rnd)) ||
        (g->nn > 1 && (rc = tr__random_bytes(g->secret, sizeof g->secret))))
        return rc;
    snprintf(g->name, sizeof g->name, "dag-%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
             rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    g->spin_ns = ncpu >= (long)g->n_actors + 1 ? SPIN_NS : -YIELD_NS;
    if ((rc = attach_all(g, 1))) return rc;
    g->attached = 1; /* from here, a failure calls the segment off */
    if ((rc = attach_all(g, 0))) return rc;
    /* every actor's loop here joins the segment: that is the rendezvous (across nodes,
     * each other node's bridge does the same there) */
    rc = tr__group_join_segment(g->env.address, g->env.max_msg, local_world(g), 0, g->name,
                                g->bytes, g->opts.attach_timeout_ms, &g->seg);
    if (rc) return rc;
    g->h = (tr__dag_hdr *)((char *)g->seg->seg + tr__coll_hdr_bytes());
    for (tr_dag_node i = 0; i < g->n && !rc; i++) {
        node *n = &g->nodes[i];
        uint32_t readers = g->nn > 1 ? g->nread[i] : n->n_readers;
        if (!n->chan_off || !readers) continue;
        rc = tr__chan_init(&n->ch, (char *)g->h + n->chan_off, (size_t)(g->bytes - n->chan_off),
                           g->slots, g->opts.slot_bytes, readers);
        n->here = !rc;
    }
    size_t win = 4 * (size_t)g->opts.max_inflight;
    g->objects = g->env.objects;
    g->released = calloc(win, 1);
    g->in_refs = calloc(g->opts.max_inflight, sizeof *g->in_refs);
    g->in_ref_set = calloc(g->opts.max_inflight, 1);
    g->pins = calloc(win * g->n_outputs, sizeof *g->pins);
    g->pinned = calloc(win * g->n_outputs, 1);
    if (!rc && (!g->released || !g->in_refs || !g->in_ref_set || !g->pins || !g->pinned))
        rc = tr__err(TR_ENOMEM, "tr_dag_compile");
    if (rc) return rc;
    __atomic_store_n(&g->h->magic, TR__DAG_MAGIC, __ATOMIC_RELEASE);
    tr__event_signal(&g->h->ready);
    if (g->nn > 1 && (rc = start_bridge(g))) return rc;
    g->compiled = 1;
    return 0;
}

/* A failed compile is final (tr_dag_destroy is all that is left to do): the actors that
 * attached are told at once - the segment is called off while they gather, or stopped
 * once joined - instead of waiting for their rendezvous to time out. */
int tr__dag_compile(tr_dag *g, const tr_dag_options *opts) {
    int rc = building(g, "tr_dag_compile");
    if (rc) return rc;
    if ((rc = compile(g, opts)) == 0) return 0;
    char why[600];
    snprintf(why, sizeof why, "%s", tr__last_error());
    g->torn = 1;
    if (g->seg) {
        __atomic_store_n(&g->h->magic, TR__DAG_MAGIC, __ATOMIC_RELEASE);
        stop_all(g);
        tr__event_signal(&g->h->ready);
    } else if (g->attached) {
        tr__group_cancel_segment(g->env.address, g->env.max_msg, g->name);
    }
    return tr__err(rc, "%s", why);
}

/* -------------------------------------------------------------------------- execute */

static void stop_all(tr_dag *g) {
    __atomic_store_n(&g->h->stop, 1, __ATOMIC_SEQ_CST);
    tr__event_wake(&g->h->ready);
    for (tr_dag_node i = 0; i < g->n; i++)
        if (g->nodes[i].here) tr__chan_wake_all(chan(g, i));
}

/* Waits end, and the graph is torn down, when one of its actors dies. */
static int actor_died(void *arg) {
    tr_dag *g = arg;
    sync_link(g);
    uint64_t dead = __atomic_load_n(&((tr__coll_hdr *)g->seg->seg)->dead, __ATOMIC_ACQUIRE) >> 1;
    if (!dead && !g->broken) return 0;
    if (!g->broken) {
        char a[9];
        size_t r = (size_t)__builtin_ctzll(dead), k = r; /* rank r + 1 here: actor k */
        for (size_t x = 0; g->nn > 1 && x < g->n_actors; x++)
            if (g->act_node[x] == 0 && g->act_rank[x] == (int)r + 1) k = x;
        g->broken = TR_EACTOR_DIED;
        snprintf(g->broken_msg, sizeof g->broken_msg,
                 "graph %s: actor %s died; the graph is torn down", g->name,
                 id_short(g->actors[k < g->n_actors ? k : 0], a));
        tr__dag_bridge_abort(g->bridge); /* the other nodes count it failed too */
        stop_all(g);
    }
    return tr__err(g->broken, "%s", g->broken_msg);
}

static int usable(tr_dag *g, const char *fn) {
    if (!g) return tr__err(TR_EINVAL, "%s: NULL graph", fn);
    if (g->compiled) sync_link(g);
    if (!g->compiled || g->torn)
        return tr__err(TR_ESTATE, "%s: the graph is %s", fn,
                       g->torn ? "torn down" : "not compiled");
    return g->broken ? tr__err(g->broken, "%s", g->broken_msg) : 0;
}

static tr__chan_wait waits(tr_dag *g, int timeout_ms) {
    tr__chan_wait w = {TR__NO_DEADLINE, g->spin_ns, &g->h->stop, actor_died, g, 0};
    tr__chan_lazy(&w, timeout_ms); /* (a ready slot reads no clock) */
    return w;
}

/* Lets go of the object the input slot's last value went as (its readers are done). */
static void input_slot_free(tr_dag *g, size_t slot) {
    if (g->in_ref_set[slot]) tr__objects_unpin(g->objects, g->in_refs[slot]);
    g->in_ref_set[slot] = 0;
}

/* One execution: the input as bytes (ref NULL) or as an object of the store (*ref). */
static int submit(tr_dag *g, const void *input, size_t len, const tr_ref *ref, uint64_t *exec,
                  const char *fn) {
    int rc = usable(g, fn);
    if (rc) return rc;
    if ((!input && len && !ref) || !exec) return tr__err(TR_EINVAL, "%s: NULL argument", fn);
    uint64_t e = g->next_exec;
    /* max_inflight is a bound on what is submitted and not released, whatever the channels
     * could still take (each channel has max_inflight slots: a pipeline of k steps would
     * hold k times as many). Past it no slot can free while this call waits (a graph is
     * one thread's at a time: only its tr_dag_release frees one): the submit waits out its
     * timeout, as for a full channel, unless the graph goes down first, and says why (with
     * no timeout, at once: a wait for ever would never end). */
    if (e - g->release_base >= g->opts.max_inflight) {
        int64_t deadline = tr__deadline(g->opts.submit_timeout_ms);
        for (int left; !(rc = actor_died(g)) && (left = tr__ms_left(deadline)) > 0;) {
            int ms = left > 100 ? 100 : left; /* (a death is looked for every 100 ms) */
            struct timespec ts = {0, (long)ms * 1000000};
            nanosleep(&ts, NULL);
        }
        return rc ? rc
                  : tr__err(TR_ETIMEDOUT,
                            "%s: %u executions (max_inflight) are submitted and not released "
                            "(tr_dag_release them)",
                            fn, g->opts.max_inflight);
    }
    if (g->nodes[0].n_readers) {
        tr__chan_wait w = waits(g, g->opts.submit_timeout_ms);
        void *buf;
        size_t cap;
        if ((rc = tr__chan_write_begin(chan(g, 0), e, &buf, &cap, &w))) {
            sync_link(g);
            return rc == TR_ECLOSED && g->broken ? tr__err(g->broken, "%s", g->broken_msg) : rc;
        }
        size_t slot = (size_t)(e % g->opts.max_inflight);
        int now = e == g->release_base; /* (nothing else in flight: its readers wait for it) */
        input_slot_free(g, slot);
        tr_ref r;
        int as_object = 0; /* the value goes as an object, pinned by the graph */
        if (ref) {
            r = *ref;
            rc = tr__objects_pin(g->objects, r, 0, NULL, NULL);
            as_object = 1;
        } else if (len > cap) { /* larger than a slot: an object in the store, by ref */
            /* held by the graph as a pin, not as this process's hold, so that a hold taken
             * by tr_dag_get_ref is the caller's alone */
            if (!(rc = tr__objects_put(g->objects, input, len, &r))) {
                rc = tr__objects_pin(g->objects, r, 0, NULL, NULL);
                tr__objects_release(g->objects, r);
            }
            as_object = 1;
        }
        if (rc) { /* the slot must move on: the execution carries the error */
            int k = snprintf(buf, cap, "%s: the input: %s", fn, tr__last_error());
            tr__chan_write_end(chan(g, 0), e, rc, 0,
                               k < 0                 ? 0
                               : (size_t)k + 1 > cap ? cap
                                                     : (size_t)k + 1,
                               now);
        } else if (as_object) {
            memcpy(buf, r.b, sizeof r.b);
            g->in_refs[slot] = r;
            g->in_ref_set[slot] = 1;
            tr__chan_write_end(chan(g, 0), e, 0, TR__CHAN_REF, sizeof r.b, now);
        } else {
            if (len) memcpy(buf, input, len);
            tr__chan_write_end(chan(g, 0), e, 0, 0, len, now);
        }
    }
    __atomic_store_n(&g->next_exec, e + 1, __ATOMIC_RELEASE);
    if (g->watching) tr__event_signal(&g->submitted); /* (a syscall only if it sleeps) */
    *exec = e;
    return 0;
}

#define EXECS_PER_COUNT 64 /* a burst's executions go into the metrics this often */

/* The executions begun go into the process's counters (troupe_graph_executions_total) as
 * the driver catches up (it gets the last one submitted, or has released every one), at
 * teardown, and every EXECS_PER_COUNT in a burst: an atomic add per burst, not per
 * execution, and exact whenever the graph is caught up. */
static void count_execs(tr_dag *g, int now) {
    if (!g->execs_uncounted || (!now && g->execs_uncounted < EXECS_PER_COUNT)) return;
    if (tr__proc_cnt()) tr__cnt_add(&tr__proc_cnt()->graph_execs, g->execs_uncounted);
    g->execs_uncounted = 0;
}

int tr__dag_execute(tr_dag *g, const void *input, size_t len, uint64_t *exec) {
    int rc = submit(g, input, len, NULL, exec, "tr_dag_execute");
    if (!rc) g->execs_uncounted++, count_execs(g, 0);
    return rc;
}

int tr__dag_execute_ref(tr_dag *g, tr_ref input, uint64_t *exec) {
    int rc = submit(g, NULL, 0, &input, exec, "tr_dag_execute_ref");
    if (!rc) g->execs_uncounted++, count_execs(g, 0);
    return rc;
}

static int check_exec(tr_dag *g, uint64_t e, const char *fn) {
    if (e >= g->next_exec || e < g->release_base || g->released[e % (4 * g->opts.max_inflight)])
        return tr__err(TR_EINVAL, "%s: execution %llu is not submitted, or released", fn,
                       (unsigned long long)e);
    return 0;
}

int tr__dag_get(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, const void **data,
                size_t *len) {
    int rc = usable(g, "tr_dag_get");
    if (rc || (rc = check_exec(g, exec, "tr_dag_get"))) return rc;
    if (exec + 1 == g->next_exec) count_execs(g, 1); /* (caught up) */
    if (output >= g->n_outputs || !data || !len)
        return tr__err(TR_EINVAL, "tr_dag_get: output %zu of %zu, or a NULL argument", output,
                       g->n_outputs);
    tr__chan_wait w = waits(g, timeout_ms);
    int32_t code;
    uint32_t flags;
    rc = tr__chan_read(chan(g, g->outputs[output]), exec, &w, data, len, &code, &flags);
    if (rc) sync_link(g);
    if (rc) return rc == TR_ECLOSED && g->broken ? tr__err(g->broken, "%s", g->broken_msg) : rc;
    if (code) {
        int n = (int)(*len > 1000 ? 1000 : *len);
        rc = tr__err(code, "%.*s", n, (const char *)*data);
        *data = NULL;
        *len = 0;
    } else if (flags == TR__CHAN_FWD) { /* a step's input gone on: where it lies */
        tr__chan_fwd f;
        memcpy(&f, *data, sizeof f);
        if (f.off < sizeof(tr__dag_hdr) || f.len > g->bytes || f.off > g->bytes - f.len) {
            rc = tr__err(TR_EPROTO,
                         "tr_dag_get: a forwarded value of %llu bytes at %llu, "
                         "outside the graph's %llu bytes",
                         (unsigned long long)f.len, (unsigned long long)f.off,
                         (unsigned long long)g->bytes);
            *data = NULL;
            *len = 0;
        } else {
            *data = (const char *)g->h + f.off;
            *len = (size_t)f.len;
        }
    } else if (flags & ~(uint32_t)TR__CHAN_REF) { /* device edges end at actors */
        rc = tr__err(TR_EPROTO, "tr_dag_get: a device value's payload on an output");
        *data = NULL;
        *len = 0;
    } else if (flags & TR__CHAN_REF) { /* the value is an object: pinned until the release */
        size_t k = (size_t)(exec % (4 * g->opts.max_inflight)) * g->n_outputs + output;
        tr_ref r;
        memcpy(r.b, *data, sizeof r.b);
        int64_t left = tr__ms_left(tr__chan_deadline(&w));
        if (g->pinned[k]) /* viewed before (the slot holds the same ref until the release) */
            return tr__objects_view(g->objects, g->pins[k], left < 0 ? 60000 : (int)left, data,
                                    len);
        if ((rc = tr__objects_pin(g->objects, r, left < 0 ? 60000 : (int)left, data, len))) {
            *data = NULL;
            *len = 0;
            return rc;
        }
        g->pins[k] = r;
        g->pinned[k] = 1;
    }
    return rc;
}

int tr__dag_get_ref(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, tr_ref *out) {
    if (!out) return tr__err(TR_EINVAL, "tr_dag_get_ref: out is NULL");
    const void *d;
    size_t n;
    int rc = tr__dag_get(g, exec, output, timeout_ms, &d, &n);
    if (rc) return rc;
    size_t k = (size_t)(exec % (4 * g->opts.max_inflight)) * g->n_outputs + output;
    if (g->pinned[k]) { /* it went as an object: this process takes a hold of its own */
        const void *v;
        size_t vn;
        rc = tr__objects_get(g->objects, g->pins[k], 0, &v, &vn);
        if (!rc) *out = g->pins[k];
        return rc;
    }
    return tr__objects_put(g->objects, d, n, out); /* from its slot: one copy */
}

int tr__dag_ready(tr_dag *g, uint64_t exec) {
    int rc = usable(g, "tr_dag_ready");
    if (rc || (rc = check_exec(g, exec, "tr_dag_ready"))) return rc;
    if ((rc = actor_died(g))) return rc;
    for (size_t k = 0; k < g->n_outputs; k++)
        if (!tr__chan_ready(chan(g, g->outputs[k]), exec)) return 0;
    return 1;
}

/* The watcher: for each execution in turn, once all its outputs are there (or the graph
 * went down), adds 1 to the eventfd. It only views the channels (no releases), so it runs
 * beside the thread that uses the graph. */
static void *watch(void *arg) {
    tr_dag *g = arg;
    uint64_t e = g->watch_from;
    size_t k = 0; /* the output of e looked at next */
    for (;;) {
        if (__atomic_load_n(&g->watch_stop, __ATOMIC_SEQ_CST)) return NULL;
        uint32_t seen = tr__event_seq(&g->submitted);
        int down = __atomic_load_n(&g->h->stop, __ATOMIC_ACQUIRE) != 0 ||
                   __atomic_load_n(&((tr__coll_hdr *)g->seg->seg)->dead, __ATOMIC_ACQUIRE) >> 1;
        if (down) { /* readable for good: each read takes one, and there are plenty */
            uint64_t many = 1ull << 40;
            if (write(g->efd, &many, sizeof many) < 0) {
            }
            return NULL;
        }
        if (e >= __atomic_load_n(&g->next_exec, __ATOMIC_ACQUIRE)) { /* caught up: sleep */
            tr__event_wait_stop(&g->submitted, seen, tr__deadline(100), 0, &g->watch_stop);
            continue;
        }
        while (k < g->n_outputs && !down) {
            tr__chan_wait w = {tr__deadline(100), 0, &g->watch_stop, NULL, NULL, 0};
            const void *d;
            size_t n;
            int32_t code;
            uint32_t flags;
            int rc = tr__chan_read(chan(g, g->outputs[k]), e, &w, &d, &n, &code, &flags);
            if (rc == TR_ETIMEDOUT) break; /* not yet: look at the stop words, then again */
            if (rc)
                down = 1;
            else
                k++;
        }
        if (down || k < g->n_outputs) continue; /* (down: made readable for good above) */
        uint64_t one = 1;
        if (write(g->efd, &one, sizeof one) != (ssize_t)sizeof one) return NULL;
        e++;
        k = 0;
    }
}

int tr__dag_fd(tr_dag *g) {
    int rc = usable(g, "tr_dag_fd");
    if (rc) return rc;
    if (g->watching) return g->efd;
    g->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
    g->watch_from = g->release_base; /* the oldest execution not let go of */
    if (g->efd < 0) return tr__err_errno(errno, "tr_dag_fd: eventfd");
    if (pthread_create(&g->watcher, NULL, watch, g)) {
        close(g->efd);
        g->efd = -1;
        return tr__err(TR_ENOMEM, "tr_dag_fd: cannot start the watcher thread");
    }
    g->watching = 1;
    return g->efd;
}

int tr__dag_release(tr_dag *g, uint64_t exec) {
    int rc = usable(g, "tr_dag_release");
    if (rc == TR_EACTOR_DIED) rc = 0; /* letting go is always fine */
    if (rc || (rc = check_exec(g, exec, "tr_dag_release"))) return rc;
    size_t win = 4 * (size_t)g->opts.max_inflight;
    g->released[exec % win] = 1;
    for (size_t k = (size_t)(exec % win) * g->n_outputs, o = 0; o < g->n_outputs; o++, k++)
        if (g->pinned[k]) { /* objects viewed through tr_dag_get */
            tr__objects_unpin(g->objects, g->pins[k]);
            g->pinned[k] = 0;
        }
    uint64_t base = g->release_base;
    while (g->release_base < g->next_exec && g->released[g->release_base % win])
        g->released[g->release_base++ % win] = 0;
    if (g->release_base == g->next_exec) count_execs(g, 1); /* (none in flight) */
    /* a channel hears of releases in order: the prefix released so far */
    if (g->release_base != base)
        for (size_t k = 0; k < g->n_outputs; k++)
            tr__chan_release(chan(g, g->outputs[k]), g->release_base - 1, g->out_reader[k]);
    return 0;
}

/* -------------------------------------------------------------------------- the rest */

int tr__dag_to_dot(tr_dag *g, char **out) {
    if (!g || !out) return tr__err(TR_EINVAL, "tr_dag_to_dot: NULL argument");
    tr__buf b = TR__BUF_INIT;
    char line[600], a[9];
    static const char head[] = "digraph troupe_dag {\n  rankdir=LR;\n";
    tr__buf_append(&b, head, sizeof head - 1);
    for (tr_dag_node i = 0; i < g->n; i++) {
        node *n = &g->nodes[i];
        int k = n->is_input
                    ? snprintf(line, sizeof line, "  n%u [label=\"input\" shape=oval];\n", i)
                    : snprintf(line, sizeof line, "  n%u [label=\"%s\\nactor %s\" shape=box];\n", i,
                               n->method, id_short(n->actor, a));
        tr__buf_append(&b, line, (size_t)k);
    }
    const char *slots = g->compiled ? "" : " (not compiled)";
    for (tr_dag_node i = 1; i < g->n; i++) {
        node *n = &g->nodes[i];
        for (size_t j = 0; j < n->n_inputs; j++) {
            int k = snprintf(line, sizeof line, "  n%u -> n%u [label=\"shm %u x %llu B%s\"];\n",
                             n->inputs[j], i, g->opts.max_inflight,
                             (unsigned long long)g->opts.slot_bytes, slots);
            tr__buf_append(&b, line, (size_t)k);
        }
    }
    for (size_t k = 0; k < g->n_outputs; k++) {
        int m = snprintf(line, sizeof line,
                         "  out%zu [label=\"output %zu\" shape=oval];\n  n%u -> out%zu;\n", k, k,
                         g->outputs[k], k);
        tr__buf_append(&b, line, (size_t)m);
    }
    tr__buf_append(&b, "}\n", 3); /* with its NUL */
    if (b.oom) {
        tr__buf_free(&b);
        return tr__err(TR_ENOMEM, "tr_dag_to_dot");
    }
    *out = malloc(b.len);
    if (*out) memcpy(*out, b.data, b.len);
    tr__buf_free(&b);
    return *out ? 0 : tr__err(TR_ENOMEM, "tr_dag_to_dot");
}

int tr__dag_destroy(tr_dag *g) {
    if (!g) return 0;
    int rc = 0;
    count_execs(g, 1);
    if (g->watching) {
        __atomic_store_n(&g->watch_stop, 1, __ATOMIC_SEQ_CST);
        tr__event_wake(&g->submitted);
        for (tr_dag_node i = 0; i < g->n; i++)
            if (g->nodes[i].here) tr__chan_wake_all(chan(g, i));
        pthread_join(g->watcher, NULL);
        close(g->efd);
    }
    if (g->seg) {
        stop_all(g);
        tr__dag_bridge_stop(g->bridge); /* the other nodes see their links end, and stop */
        g->bridge = NULL;
        /* each actor's loop leaves the segment as it ends: wait for them, so that the
         * channels are gone when this returns */
        if (tr__dag_wait_left(g->seg->seg, local_world(g), TEARDOWN_MS))
            rc = tr__err(TR_ETIMEDOUT, "graph %s: actors did not leave within %d ms", g->name,
                         TEARDOWN_MS);
        tr__group_destroy(g->seg);
    }
    for (tr_dag_node i = 1; i < g->n; i++) {
        free(g->nodes[i].method);
        free(g->nodes[i].inputs);
        free(g->nodes[i].in_reader);
    }
    free(g->nodes);
    free(g->outputs);
    free(g->out_reader);
    free(g->actors);
    free(g->nccl_rank);
    free(g->nccl_shared);
    free(g->naddr);
    free(g->act_node);
    free(g->act_rank);
    free(g->nworld);
    free(g->noff);
    free(g->nread);
    free(g->breader);
    free(g->nbytes);
    size_t win = 4 * (size_t)g->opts.max_inflight;
    for (size_t k = 0; g->pinned && k < win * g->n_outputs; k++)
        if (g->pinned[k]) tr__objects_unpin(g->objects, g->pins[k]);
    for (size_t k = 0; g->in_ref_set && k < g->opts.max_inflight; k++)
        input_slot_free(g, k);
    free(g->released);
    free(g->in_refs);
    free(g->in_ref_set);
    free(g->pins);
    free(g->pinned);
    free(g);
    return rc;
}
