/* actor/control.h - the caller's side of the node's actor directory: create, resolve (where
 * an actor's worker listens), wait until ready, look up by name, kill, describe. Every
 * function is one request/reply on the process's node connection (core/nodeconn.h); none
 * is on a call's hot path (actor/calls.h). Thread safety: any thread.
 */
#ifndef TR_ACTOR_CONTROL_H
#define TR_ACTOR_CONTROL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/nodeconn.h"
#include "core/sched.h"
#include "core/rpc.h"
#include "troupe/troupe.h"

/* Where an actor is, as the node reports it. */
typedef struct tr__actor_where {
    int state; /* TR__ACTOR_* (actor/protocol.h) */
    uint64_t inc;
    int task_retries;      /* tr_actor_options.max_task_retries, as created */
    char path[512];        /* its worker's socket while ALIVE */
    char reason[512];      /* why it died, when DEAD */
    char remote[160];      /* "HOST:PORT": it lives on that node of the cluster (no path) */
    char token[256];       /* the cluster's token, to reach that node */
    tr__rpc_tls_files tls; /* and the TLS files to reach it with (all "": plain) */
} tr__actor_where;

/* ns: the creator's namespace ("" or NULL: the default), that of opts->name when opts->ns
 * is NULL, and the one its worker's runtime makes and finds names in (its node sets the
 * worker's TROUPE_NAMESPACE); the node keeps a name of another namespace as ns, 0x1f,
 * name (tr__actor_qualify). */
int tr__actor_create(tr__nodeconn *node, const char *ns, const char *cls,
                     const tr_actor_options *opts, const void *args, size_t len, tr_actor_id *out);
/* A task pool's worker (class TR__TASKS_CLASS, actor/tasks.h): what opts asks for is
 * reserved for its life (its GPUs, custom resources), task_res (may be NULL; "CPU" alone)
 * only while it runs a task: the node checks that both together could ever fit, and
 * counts task_res as in use while the worker's board entry says it runs a task. */
int tr__actor_create_task_worker(tr__nodeconn *node, const tr_actor_options *opts,
                                 const tr__res *task_res, tr_actor_id *out);
/* Asks the node; with wait_ms > 0 the node answers once the actor is ALIVE or DEAD, or
 * after wait_ms. Returns 0, TR_ENOTFOUND, or a transport code. */
int tr__actor_resolve(tr__nodeconn *node, const tr_actor_id *id, int wait_ms, tr__actor_where *out);
int tr__actor_wait_ready(tr__nodeconn *node, tr_actor_id id, int timeout_ms);
int tr__actor_by_name(tr__nodeconn *node, const char *ns, const char *name, tr_actor_id *out);
/* Of a name the node keeps (tr__actor_qualify): the name alone, and in *ns_len the length
 * of its namespace, the bytes before it less the 0x1f (0: the default). */
static inline const char *tr__actor_unqualify(const char *kept, size_t *ns_len) {
    const char *sep = strchr(kept, 0x1f);
    *ns_len = sep ? (size_t)(sep - kept) : 0;
    return sep ? sep + 1 : kept;
}
/* The name the node keeps for name in namespace ns (NULL or "": name itself), into
 * out[cap]. Returns 0, or TR_EINVAL (a 0x1f byte, a namespace over 255 bytes, too long). */
int tr__actor_qualify(const char *ns, const char *name, char *out, size_t cap);
int tr__actor_kill(tr__nodeconn *node, tr_actor_id id, int no_restart);
/* From the actor's own worker as it ends (its last handle went: handles.h): the node
 * marks it dead for good, with why as its reason, and lets the process exit by itself. */
int tr__actor_ending(tr__nodeconn *node, tr_actor_id id, const char *why);
int tr__actor_info(tr__nodeconn *node, tr_actor_id id, tr_actor_details *out);
/* The actor's binding_data (tr_actor_binding_data): *out malloc'd, or NULL if none. */
int tr__actor_binding_data(tr__nodeconn *node, tr_actor_id id, char **out);
/* Placement groups (actor/pgroup.h has the node's side): as the tr_placement_group_*
 * functions, a group's name in namespace ns (as an actor's: tr__actor_qualify; the info's
 * name without it). tr__pg_wait polls the node (backing off to 20 ms). */
int tr__pg_create(tr__nodeconn *node, const char *ns, const tr_bundle *bundles, size_t n,
                  int strategy, const char *name, tr_pg_id *out);
int tr__pg_wait(tr__nodeconn *node, tr_pg_id pg, int timeout_ms);
int tr__pg_info(tr__nodeconn *node, tr_pg_id pg, tr_pg_info *out);
int tr__pg_remove(tr__nodeconn *node, tr_pg_id pg);
int tr__pg_by_name(tr__nodeconn *node, const char *ns, const char *name, tr_pg_id *out);

/* The node's address in its cluster, "IP:port", and (tls not NULL) whether the cluster's
 * links use TLS: 0, or TR_ENOTFOUND (in no cluster). */
int tr__node_cluster_address(tr__nodeconn *node, char *out, size_t cap, int *tls);

#endif
