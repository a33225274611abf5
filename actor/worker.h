/* actor/worker.h - the worker process's main loop: asks the node what to run, constructs
 * the actor, listens on its own socket, and executes calls on the thread that reads them
 * (no hand-off), in the order each connection sent them.
 *
 * One thread serves calls; a compiled graph's loop is another (dag/exec.c), and the
 * actor's method lock keeps their methods from running at once. Replies to a batch of
 * calls read together go out in one write.
 *
 * An actor created with max_concurrency N > 1 is served differently: the loop reads
 * calls and queues them; up to N threads of a pool (made as calls wait, each with its own
 * tr_ctx) run them without the method lock, and each writes its call's reply as soon as
 * it is done, so replies come out of call order (the caller matches them by seq). A
 * graph's steps still take the method lock, so they run one at a time among themselves
 * but beside the pool's calls.
 */
#ifndef TR_ACTOR_WORKER_H
#define TR_ACTOR_WORKER_H

#include <pthread.h>

#include "core/config.h"
#include "core/nodeconn.h"
#include "objectstore/client.h"
#include "troupe/troupe.h"

/* What other threads of the worker need to run the actor's methods (dag/exec.c: a
 * compiled graph's loop). `mu` is the actor's method lock: held while any method runs, so
 * methods never run at the same time, from whichever thread (max_concurrency 1; with
 * more, the pool's calls do not take it: see above). A graph's loop keeps it between
 * steps that run back to back (a lock and an unlock a step are two locked instructions,
 * each waiting for the step's output to reach the cache); whoever else takes it does so
 * with tr__method_lock, which says it waits in `mu_wanted`, and the loop lets it go. */
typedef struct tr__worker_env {
    tr_runtime *rt;
    tr_actor_id id;
    const tr_actor_class *cls;
    void *self;
    pthread_mutex_t *mu;
    int *mu_wanted; /* (atomic) threads waiting for mu in tr__method_lock */
    const char *node_path;
    size_t max_msg;
    tr__objects *objects;
} tr__worker_env;

/* Takes the method lock; a taker that must wait counts itself in *wanted meanwhile. */
static inline void tr__method_lock(pthread_mutex_t *mu, int *wanted) {
    if (pthread_mutex_trylock(mu) == 0) return;
    __atomic_add_fetch(wanted, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(mu);
    __atomic_sub_fetch(wanted, 1, __ATOMIC_RELAXED);
}

/* A method the worker itself serves, for any class (names must start with "__troupe_"). It
 * runs on the worker's loop without the method lock and replies through ctx. */
typedef struct tr__worker_builtin {
    const char *name;
    int (*fn)(const tr__worker_env *env, tr_ctx *ctx, const void *args, size_t len);
} tr__worker_builtin;

/* The class's method named m (n bytes), or NULL. */
const tr_method_def *tr__find_method(const tr_actor_class *cls, const char *m, size_t n);
/* The same, or, for a name the class's table lacks, its dispatch function (if it has one)
 * as *own, named by a copy of m in name (cap bytes). NULL: neither. */
const tr_method_def *tr__find_method_or_dispatch(const tr_actor_class *cls, const char *m, size_t n,
                                                 tr_method_def *own, char *name, size_t cap);

/* Runs the worker until its node goes away or it is told to stop. Returns the process
 * exit status. rt is the worker's own runtime (for calls made inside methods); builtins
 * (n of them) are served beside the class's methods. */
int tr__worker_run(tr_runtime *rt, tr__nodeconn *node, tr__objects *objects, const tr_config *cfg,
                   const char *node_path, const char *actor_hex, const tr__worker_builtin *builtins,
                   size_t n_builtins);

#endif
