/* api/rt.h - the runtime handle's insides, for the façade's files in api/ only: what
 * each public entry point hands the layers below (its node connection, actor client,
 * object store, address, message limit). */
#ifndef TR_API_RT_H
#define TR_API_RT_H

#include <pthread.h>
#include <sys/types.h>

#include "actor/calls.h"
#include "actor/handles.h"
#include "actor/tasks.h"
#include "core/config.h"
#include "core/nodeconn.h"
#include "objectstore/client.h"
#include "troupe/troupe.h"

/* What runs as the runtime shuts down, before anything of it goes (newest first): the
 * façade registers a layer's teardown here (a compiled graph's), so that no layer below
 * calls up into the runtime. */
typedef void (*tr__shutdown_fn)(void *arg);
typedef struct tr__shutdown_hook {
    tr__shutdown_fn fn;
    void *arg;
    struct tr__shutdown_hook *next;
} tr__shutdown_hook;

struct tr_runtime {
    tr_config *cfg;
    tr__nodeconn *node;
    tr__actors *actors;
    tr__handles *handles; /* the handles of actors this process made (tr_actor_options.handle) */
    tr__tasks *tasks;     /* made at the first tr_task_submit */
    pthread_mutex_t tasks_mu;
    tr__objects *objects;
    char *address;
    pid_t node_pid; /* embedded node, 0 otherwise */
    int is_actor;   /* a worker's runtime: self is its actor */
    tr_actor_id self;
    pthread_mutex_t hooks_mu;
    tr__shutdown_hook *hooks;
};

/* Registers fn(arg) to run at tr_shutdown. Returns 0 or TR_ENOMEM. Thread safety: any. */
int tr__runtime_on_shutdown(tr_runtime *rt, tr__shutdown_fn fn, void *arg);
/* Takes fn(arg) off again (it ran, or what it tears down went first); no-op if absent. */
void tr__runtime_off_shutdown(tr_runtime *rt, tr__shutdown_fn fn, void *arg);

#endif
