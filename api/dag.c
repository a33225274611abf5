/* api/dag.c - troupe/dag.h's public entry points: each forwards to the driver's side of a
 * compiled graph (dag/graph.h), lending a new graph its runtime's parts and registering
 * its teardown with the runtime's shutdown. */
#include "api/rt.h"
#include "core/status.h"
#include "dag/graph.h"
#include "troupe/dag.h"

static void teardown_at_shutdown(void *g) {
    (void)tr__dag_destroy(g); /* (tr_shutdown has nobody to tell of an error) */
}

TR_API int tr_dag_create(tr_runtime *rt, tr_dag **out) {
    if (!rt || !out) return tr__err(TR_EINVAL, "tr_dag_create: NULL argument");
    tr__dag_env env = {.node = rt->node,
                       .actors = rt->actors,
                       .objects = rt->objects,
                       .address = rt->address,
                       .max_msg = rt->cfg->max_msg,
                       .owner = rt};
    int rc = tr__dag_create(&env, out);
    if (!rc && (rc = tr__runtime_on_shutdown(rt, teardown_at_shutdown, *out))) {
        tr__dag_destroy(*out);
        *out = NULL;
    }
    return rc;
}

TR_API void tr_dag_options_init(tr_dag_options *opts) {
    if (!opts) return;
    tr_dag_options def = TR_DAG_OPTIONS_INIT;
    *opts = def;
}

TR_API int tr_dag_input(tr_dag *g, tr_dag_node *out) {
    return tr__dag_input(g, out);
}

TR_API int tr_dag_bind(tr_dag *g, tr_actor_id actor, const char *method, const tr_dag_node *inputs,
                       size_t n_inputs, tr_dag_node *out) {
    return tr__dag_bind(g, actor, method, inputs, n_inputs, out);
}

TR_API int tr_dag_allreduce(tr_dag *g, const tr_dag_node *inputs, size_t n, tr_dtype dtype,
                            tr_redop op, tr_dag_node *outs) {
    return tr__dag_allreduce(g, inputs, n, dtype, op, outs);
}

TR_API int tr_dag_output(tr_dag *g, const tr_dag_node *nodes, size_t n) {
    return tr__dag_output(g, nodes, n);
}

TR_API int tr_dag_set_transport(tr_dag *g, tr_dag_node node, tr_dag_transport t) {
    return tr__dag_set_transport(g, node, t);
}

TR_API int tr_dag_compile(tr_dag *g, const tr_dag_options *opts) {
    return tr__dag_compile(g, opts);
}

TR_API int tr_dag_execute(tr_dag *g, const void *input, size_t len, uint64_t *exec) {
    return tr__dag_execute(g, input, len, exec);
}

TR_API int tr_dag_execute_ref(tr_dag *g, tr_ref input, uint64_t *exec) {
    return tr__dag_execute_ref(g, input, exec);
}

TR_API int tr_dag_get(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, const void **data,
                      size_t *len) {
    return tr__dag_get(g, exec, output, timeout_ms, data, len);
}

TR_API int tr_dag_get_ref(tr_dag *g, uint64_t exec, size_t output, int timeout_ms, tr_ref *out) {
    return tr__dag_get_ref(g, exec, output, timeout_ms, out);
}

TR_API int tr_dag_ready(tr_dag *g, uint64_t exec) {
    return tr__dag_ready(g, exec);
}

TR_API int tr_dag_fd(tr_dag *g) {
    return tr__dag_fd(g);
}

TR_API int tr_dag_release(tr_dag *g, uint64_t exec) {
    return tr__dag_release(g, exec);
}

TR_API int tr_dag_to_dot(tr_dag *g, char **out) {
    return tr__dag_to_dot(g, out);
}

TR_API int tr_dag_destroy(tr_dag *g) {
    if (!g) return 0;
    tr__runtime_off_shutdown(tr__dag_owner(g), teardown_at_shutdown, g);
    return tr__dag_destroy(g);
}
