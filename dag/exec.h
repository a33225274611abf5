/* dag/exec.h - an actor's side of a compiled graph: the worker's attach builtin
 * (TR__DAG_ATTACH, dag/plan.h) checks the steps it is given against the actor's class and
 * starts the graph's loop on a thread of its own. The loop joins the graph's segment,
 * waits for the driver to lay out the channels, then for each execution in turn runs the
 * actor's steps: waits for their inputs, runs the method under the actor's method lock
 * (held only while the method runs), writes its result straight into the output slot's
 * channel, lets go of the inputs. An input that carries an error skips the method and
 * passes the error on. The loop ends when the graph stops (the driver's teardown) or the
 * driver dies, and leaves the segment; waits spin as the driver said, then sleep (an idle
 * graph costs no CPU). Thread safety: the builtin runs on the worker's loop.
 */
#ifndef TR_DAG_EXEC_H
#define TR_DAG_EXEC_H

#include "actor/worker.h"

/* {..., "check": true} only checks the steps (the methods exist) and replies. */
int tr__dag_attach(const tr__worker_env *env, tr_ctx *ctx, const void *args, size_t len);

#endif
