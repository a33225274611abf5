/* actor/tasks.h - remote functions (tasks) on the node's task pool.
 *
 * A pool is a set of actors of the built-in class TR__TASKS_CLASS (their worker runs the
 * function a call names: tr_config_add_function), one pool per resource shape, each
 * member a named actor ("__troupe_pool/SHAPE/K") so that every process of the node (of
 * the cluster) finds and shares the same warm workers; members restart forever. A task
 * is a call to the member with the fewest calls pending from this process (a new member
 * is started while every one is busy and the pool is below its size), retried on the
 * member's next incarnation if its worker dies with it in flight (actor/calls.c). Its
 * result ref is that call's: tr_get, ownership and everything else are the calls'.
 * Thread safety: any thread.
 */
#ifndef TR_ACTOR_TASKS_H
#define TR_ACTOR_TASKS_H

#include <stddef.h>

#include "actor/calls.h"
#include "core/nodeconn.h"
#include "troupe/troupe.h"

#define TR__TASKS_CLASS "__troupe_tasks"

typedef struct tr__tasks tr__tasks;

int tr__tasks_create(tr__nodeconn *node, tr__actors *actors, tr__objects *objects, tr__tasks **out);
void tr__tasks_destroy(tr__tasks *t);
/* ns: the submitter's namespace ("" or NULL: the default). Pool workers are shared by
 * every job, so a task carries its own: the call's method is fn, 0x1f, ns (fn alone for
 * the default), and its worker's runtime makes and finds names in it while the task runs
 * (tr__tasks_split, tr__tasks_namespace). */
int tr__tasks_submit(tr__tasks *t, const char *ns, const char *fn, const void *args, size_t len,
                     const tr_ref *refs, size_t n_refs, const tr_task_options *opts,
                     size_t n_returns, tr_ref *out);
/* A pool worker: the function (*n bytes, set) and namespace (*ns_len bytes; NULL: the
 * default) of a call's method m of *n bytes. */
const char *tr__tasks_split(const char *m, size_t *n, size_t *ns_len);
/* A pool worker: the namespace of the task it runs now (or ran last) is ns (NULL or "":
 * the default); tr__tasks_namespace copies it into out (cap bytes) and returns 1, or
 * returns 0 in any other process. */
void tr__tasks_set_namespace(const char *ns, size_t n);
int tr__tasks_namespace(char *out, size_t cap);
/* This process is the pool worker `id` (worker.c says so at start): its own tasks never go
 * to itself, and its pools may grow further (a parent waiting for its children). */
void tr__tasks_note_self(const tr_actor_id *id);

#endif
