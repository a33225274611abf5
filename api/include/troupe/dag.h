/* troupe/dag.h - compiled graphs: a static graph of actor method calls compiled once into
 * pre-allocated shared-memory channels, then executed many times (Ray's Compiled Graphs).
 *
 *   tr_dag *g;                    tr_dag_create(rt, &g);
 *   tr_dag_node in, a, b;         tr_dag_input(g, &in);
 *                                 tr_dag_bind(g, actor1, "f", &in, 1, &a);
 *                                 tr_dag_bind(g, actor2, "g", &a, 1, &b);
 *                                 tr_dag_output(g, &b, 1);
 *                                 tr_dag_compile(g, NULL);
 *   uint64_t e;                   tr_dag_execute(g, "x", 1, &e);
 *   const void *v; size_t n;      tr_dag_get(g, e, 0, 1000, &v, &n);  ... tr_dag_release(g, e);
 *                                 tr_dag_destroy(g);
 *
 * A bound node runs its actor's method with its first input as the method's arguments and
 * the others as its call refs (tr_ctx_num_refs, tr_ctx_ref), as tr_call_refs passes them;
 * what the method replies flows to the nodes bound to it and to the outputs. Each actor
 * runs a graph's steps on a thread of its own, in execution order, never at the same time
 * as another of its methods (from any graph or classic call): the actor's lock is held
 * only while a method runs. An error a method returns reaches the execution's outputs as
 * TR_ETASK with its message (downstream steps skip it); the graph goes on. An actor that
 * dies fails every pending execution with TR_EACTOR_DIED and tears the graph down; the
 * other actors stay usable. Executions are numbered from 0 in submission order and up to
 * max_inflight are in flight; each holds its output slots until tr_dag_release.
 * Thread safety: a graph is used by one thread at a time.
 */
#ifndef TROUPE_DAG_H
#define TROUPE_DAG_H

#include <stddef.h>
#include <stdint.h>

#include "troupe/troupe.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tr_dag tr_dag;
typedef uint32_t tr_dag_node; /* a node of its graph */

/* Edge transports (tr_dag_set_transport): auto picks shm on one node; between the nodes of
 * a cluster (actors bound on several nodes) an edge crosses over TCP between the nodes'
 * bridges, set up at compile time (docs/CLUSTER.md; device transports there are refused). In the
 * CUDA build
 * (--config=cuda), a node's value may be device memory (its method replies with
 * tr_ctx_reply_device; a host reply is copied up), carried device to device to the actors
 * that read it, whose methods get a device pointer (valid until they return: finish with
 * it first) of the value's length:
 * - TR_DAG_NCCL: NCCL send/recv on the graph's own communicator (its actors with nccl
 *   edges, one GPU each, distinct GPUs), set up at compile time; the writer sends to all
 *   its readers at once and waits until they have it, each reader receives as it takes
 *   the input. Compile refuses a graph whose order of sends and receives could deadlock.
 * - TR_DAG_CUDA_IPC: the writer copies the value into a device buffer of its own that
 *   its readers map (CUDA IPC): for actors sharing a GPU. slot_bytes >= 80.
 * Device edges end at actors' method nodes (not outputs, not collective nodes); a value
 * over slot_bytes is an error (TR_EMSGSIZE), not an object. A device reply on an shm
 * edge is copied into the slot. */
typedef enum tr_dag_transport {
    TR_DAG_AUTO = 0,
    TR_DAG_SHM = 1,
    TR_DAG_NCCL = 2,
    TR_DAG_CUDA_IPC = 3
} tr_dag_transport;

typedef struct tr_dag_options {
    uint32_t struct_size;  /* TR_STRUCT_SIZE(tr_dag_options) */
    uint32_t max_inflight; /* executions in flight at most (slots per channel); default 8 */
    uint64_t slot_bytes;   /* values up to this go in the channels; larger ones as objects
                              in the store, by reference; default 64 KiB */
    int submit_timeout_ms; /* how long tr_dag_execute waits for a free slot; default 10 s */
    int attach_timeout_ms; /* how long compile waits for the actors; default 10 s */
} tr_dag_options;

#define TR_DAG_OPTIONS_INIT                                                                        \
    { TR_STRUCT_SIZE(tr_dag_options), 8, 65536, 10000, 10000 }
/* Same as TR_DAG_OPTIONS_INIT, for bindings. Thread safety: any thread. */
TR_API void tr_dag_options_init(tr_dag_options *opts);

/* A new, empty graph. Returns 0, TR_EINVAL, TR_ENOMEM. */
TR_API int tr_dag_create(tr_runtime *rt, tr_dag **out);
/* The graph's input node (the same node each time). Returns 0, TR_EINVAL, TR_ESTATE
 * (compiled). */
TR_API int tr_dag_input(tr_dag *g, tr_dag_node *out);
/* A node running actor's `method` on the values of `inputs` (nodes of this graph, at
 * least one). Returns 0, TR_EINVAL (unknown node, empty method), TR_ESTATE, TR_ENOMEM. */
TR_API int tr_dag_bind(tr_dag *g, tr_actor_id actor, const char *method, const tr_dag_node *inputs,
                       size_t n_inputs, tr_dag_node *out);
/* A collective node: n nodes, outs[i] on the actor of inputs[i] (bound nodes on distinct
 * actors), each the allreduce of the n inputs' values as arrays of dtype (the same
 * length on all, of any size: over slot_bytes, each out is an object of the store as a
 * method's value would be), through an shm group of the graph's own. An input that failed gives
 * every out its error (a method's TR_ETASK and its message); lengths that differ, or a
 * value that is not whole elements, give every out TR_EINVAL. Returns 0, TR_EINVAL,
 * TR_ESTATE, TR_ENOMEM. */
TR_API int tr_dag_allreduce(tr_dag *g, const tr_dag_node *inputs, size_t n, tr_dtype dtype,
                            tr_redop op, tr_dag_node *outs);
/* The graph's outputs, in order (several: Ray's MultiOutputNode); replaces earlier ones.
 * Returns 0, TR_EINVAL, TR_ESTATE. */
TR_API int tr_dag_output(tr_dag *g, const tr_dag_node *nodes, size_t n);
/* The transport of node's output edges. Returns 0, TR_EINVAL, TR_ESTATE. */
TR_API int tr_dag_set_transport(tr_dag *g, tr_dag_node node, tr_dag_transport t);

/* Compiles the graph (opts may be NULL): checks it, has the node make the graph's shared
 * segment, lays the channels out in it, and starts each actor's loop. Refuses, naming the node: no
 * outputs, a node whose value reaches no output, more than 8 readers of one value, an actor that is
 * not alive or has no such method. A failed compile is final: destroy the graph. Returns 0,
 * TR_EINVAL, TR_ENOMETHOD, TR_EACTOR_DIED, TR_ETIMEDOUT, TR_ESTATE (compiled already, or failed),
 * TR_ECONNECT, TR_EPROTO (an actor refused its part), TR_ENOMEM. */
TR_API int tr_dag_compile(tr_dag *g, const tr_dag_options *opts);

/* Submits one execution with `input` (copied into the input channel, or put in the store
 * if it is larger than slot_bytes), waiting up to the submit timeout for a free slot;
 * *exec gets its number. Returns 0, TR_ETIMEDOUT, TR_EACTOR_DIED, TR_ESTATE (not compiled,
 * torn down), TR_EINVAL. */
TR_API int tr_dag_execute(tr_dag *g, const void *input, size_t len, uint64_t *exec);
/* The same with the input an object of the store (tr_put), passed by reference: the graph
 * pins it until its readers are done, so the caller may release its ref at once. A ref
 * that is not in the store gives the execution's outputs the error. */
TR_API int tr_dag_execute_ref(tr_dag *g, tr_ref input, uint64_t *exec);
/* Output `output` of execution `exec`, waiting up to timeout_ms: a view valid until
 * tr_dag_release(g, exec). Returns 0, TR_ETASK (a method failed; its message in
 * tr_last_error), TR_EMSGSIZE (an input or result the store could not take), TR_ETIMEDOUT,
 * TR_EACTOR_DIED, TR_EINVAL (no such output or execution, released), TR_ESTATE,
 * TR_EPROTO (a malformed value in the channel). */
TR_API int tr_dag_get(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, const void **data,
                      size_t *len);
/* Output `output` of execution `exec` as an object of the store that this process holds
 * (tr_get views it, tr_ref_release lets go): a value over slot_bytes is already one (no
 * copy), a smaller one is put (one copy). To pass a graph's result on (tr_call_refs,
 * tr_dag_execute_ref) beyond tr_dag_release. A process holds an object once, as with
 * tr_get: asking twice for the same object gives one hold. Returns as tr_dag_get, and
 * TR_ENOMEM. */
TR_API int tr_dag_get_ref(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, tr_ref *out);
/* Whether every output of `exec` is there (no wait): 1, 0, or a TR_E* code. */
TR_API int tr_dag_ready(tr_dag *g, uint64_t exec);
/* A descriptor for event loops (epoll, libuv, asyncio): an eventfd in semaphore mode
 * that counts the executions whose outputs are all there, in submission order from the
 * oldest not yet released: each read of it takes one. A thread of the graph's keeps it
 * up and sleeps while none is pending. If the graph goes down it stays readable and
 * tr_dag_get says why. Owned by the graph (closed by tr_dag_destroy). Returns the fd, or
 * TR_ESTATE (not compiled), TR_EACTOR_DIED, TR_ENOMEM, TR_EIO. */
TR_API int tr_dag_fd(tr_dag *g);
/* Lets go of an execution's outputs (their slots take later executions, once every
 * earlier execution is let go of too). Returns 0, TR_EINVAL (not submitted, or released
 * already), TR_ESTATE (not compiled, torn down). */
TR_API int tr_dag_release(tr_dag *g, uint64_t exec);

/* Graphviz text of the graph into a malloc'd string (*out; tr_free). Returns 0, TR_ENOMEM. */
TR_API int tr_dag_to_dot(tr_dag *g, char **out);

/* Tears the graph down (its actors' loops end, its channels go) and frees it. Returns 0 or
 * the first error seen while tearing down. tr_shutdown destroys the graphs its runtime
 * still has (their handles are invalid then). */
TR_API int tr_dag_destroy(tr_dag *g);

#ifdef __cplusplus
}
#endif
#endif
