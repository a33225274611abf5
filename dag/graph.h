/* dag/graph.h - the driver's side of a compiled graph, as the façade (api/dag.c) calls it:
 * one entry point per public tr_dag_* function (troupe/dag.h says what each does; errors
 * name the public function), and what a graph borrows from the runtime it is made from.
 * dag/ never calls up into api/: the façade lends the graph its runtime's parts here and
 * destroys the graphs a runtime still has when it shuts down (a hook it registers).
 * Thread safety: as troupe/dag.h (a graph is one thread's at a time).
 */
#ifndef TR_DAG_GRAPH_H
#define TR_DAG_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "actor/calls.h"
#include "core/nodeconn.h"
#include "objectstore/client.h"
#include "troupe/dag.h"

/* What a graph borrows from its runtime, which outlives it (the runtime's shutdown
 * destroys its graphs first). */
typedef struct tr__dag_env {
    tr__nodeconn *node;   /* the runtime's node connection (actor info, readiness) */
    tr__actors *actors;   /* its actor client (the attach calls) */
    tr__objects *objects; /* its object store client (values over a slot) */
    const char *address;  /* its node's address (the graph's segment group) */
    size_t max_msg;       /* its node's message limit */
    void *owner;          /* the runtime itself, opaque here (tr__dag_owner) */
} tr__dag_env;

int tr__dag_create(const tr__dag_env *env, tr_dag **out);
void *tr__dag_owner(const tr_dag *g);
int tr__dag_input(tr_dag *g, tr_dag_node *out);
int tr__dag_bind(tr_dag *g, tr_actor_id actor, const char *method, const tr_dag_node *inputs,
                 size_t n_inputs, tr_dag_node *out);
int tr__dag_allreduce(tr_dag *g, const tr_dag_node *inputs, size_t n, tr_dtype dtype, tr_redop op,
                      tr_dag_node *outs);
int tr__dag_output(tr_dag *g, const tr_dag_node *nodes, size_t n);
int tr__dag_set_transport(tr_dag *g, tr_dag_node nd, tr_dag_transport t);
int tr__dag_compile(tr_dag *g, const tr_dag_options *opts);
int tr__dag_execute(tr_dag *g, const void *input, size_t len, uint64_t *exec);
int tr__dag_execute_ref(tr_dag *g, tr_ref input, uint64_t *exec);
int tr__dag_get(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, const void **data,
                size_t *len);
int tr__dag_get_ref(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, tr_ref *out);
int tr__dag_ready(tr_dag *g, uint64_t exec);
int tr__dag_fd(tr_dag *g);
int tr__dag_release(tr_dag *g, uint64_t exec);
int tr__dag_to_dot(tr_dag *g, char **out);
/* Tears the graph down and frees it: 0 or the first error seen tearing down. */
int tr__dag_destroy(tr_dag *g);

#endif
