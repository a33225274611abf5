/* actor/directory.h - the node's actor directory: the actor table, placement against the
 * node's resources, worker processes (spawn, start timeout, restart, reap) and the
 * ACTOR_* / WORKER_* request handlers.
 *
 * Placement: an actor waits (PENDING) until its resources are free; one that asks for
 * whole CPUs is also bound to that many free cores, best-effort (it floats when too few
 * are free: more actors than cores).
 *
 * Lifecycle of an actor: PENDING (its resources are busy) -> STARTING (worker spawned)
 * -> ALIVE (constructor ran, worker listening) -> on exit RESTARTING (restarts left) or
 * DEAD (with a reason). An actor dies with its owner's connection (the driver or worker
 * that created it). Runs on the node's loop thread (not thread-safe).
 */
#ifndef TR_ACTOR_DIRECTORY_H
#define TR_ACTOR_DIRECTORY_H

#include <uv.h>

#include "core/buf.h"
#include "core/sched.h"
#include "core/server.h"
#include "core/workerpool.h"

typedef struct tr__directory tr__directory;

typedef struct tr__directory_opts {
    uv_loop_t *loop;
    tr__pool *pool;
    const tr__res *total;    /* node capacity */
    const char *node_path;   /* workers connect here */
    const char *session_dir; /* worker sockets go here */
    int start_timeout_ms;
    size_t max_msg; /* the node's message limit, which its workers adopt */
    int spin_us;    /* "call_spin_us": its workers poll this long before they sleep */
    /* CPUs to bind actors to: one that asks for k >= 1 whole CPUs gets k free ones (its
     * worker is pinned there), or floats if fewer are free; n == 0: no binding. Copied. */
    const tr__cores *cores;
    /* GPUs to give actors (whole, or a share of one for k < 1): the worker is started with
     * CUDA_VISIBLE_DEVICES set to them (to none if it asked for none). Copied. */
    const tr__gpus *gpus;
    /* In a cluster (may be NULL): a request this node cannot answer itself - an actor that
     * can never fit here (ACTOR_CREATE), an id or a name it does not know (ACTOR_RESOLVE,
     * _KILL, _INFO, _BY_NAME) - is offered here first; returning non-zero means the hook
     * took it and replies itself (later, from the loop); 0: the node answers as alone. */
    int (*forward)(void *ctx, int type, tr__conn *c, uint64_t seq, const tr__obj *body);
    void *forward_ctx;
    /* A cluster's client node (a driver that joined by the head's address): it runs no
     * actors; every ACTOR_CREATE goes to the cluster (the forward hook). */
    int no_actors;
    /* Called when an actor's worker process has exited and been reaped (before a restart
     * spawns the next): the node's metrics keep what it counted (may be NULL). */
    void (*on_worker_exit)(void *ctx, const uint8_t id[16], const char *cls); /* (label) */
    void *exit_ctx;
    /* Whether a task worker runs a task now, and whether that task waits for results (its
     * *blocked): the node's notice board (may be NULL: no task counted as running). */
    int (*task_running)(void *ctx, const uint8_t id[16], int *blocked);
    void *task_ctx;
} tr__directory_opts;

/* One actor, as tr__directory_each shows it. */
typedef struct tr__actor_view {
    const uint8_t *id;      /* 16 bytes */
    const char *cls, *name; /* cls: its class_label if it has one; name: NULL if none */
    int state;              /* TR__ACTOR_* */
    int restarts;
    pid_t pid;           /* its worker's, 0 if none now */
    const char *reason;  /* why it died or last restarted; NULL if none */
    const char *class_c; /* the class registered (cls: its label, if it has one) */
} tr__actor_view;

/* Totals since the node started. */
typedef struct tr__directory_totals {
    uint64_t created, restarts, died;
} tr__directory_totals;

int tr__directory_create(const tr__directory_opts *o, tr__directory **out);
void tr__directory_mount(tr__directory *d, tr__server *s);
/* Kills every worker (SIGKILL) and stops restarts; workers are reaped by the loop. */
void tr__directory_kill_all(tr__directory *d);
/* Appends JSON: "resources_total":{...},"resources_available":{...},
 * "resources_in_tasks":{...},"actors":[...] */
void tr__directory_status_json(const tr__directory *d, tr__buf *out);
/* Actors that are not dead (pending, starting, alive, restarting). */
size_t tr__directory_live(const tr__directory *d);
/* Calls fn for each actor the node knows (dead ones it still remembers too), in creation
 * order. */
void tr__directory_each(const tr__directory *d, void (*fn)(void *ctx, const tr__actor_view *a),
                        void *ctx);
void tr__directory_totals_get(const tr__directory *d, tr__directory_totals *out);
/* Releases every actor and deferred reply; libuv handles close on the next loop run.
 * Call after the workers are reaped, then run the loop, then destroy. */
void tr__directory_close(tr__directory *d);
void tr__directory_destroy(tr__directory *d);

#endif
