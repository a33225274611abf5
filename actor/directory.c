/* actor/directory.c - the node's actor table, placement and worker lifecycle. */
#include "actor/directory.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actor/control.h"
#include "actor/pgroup.h"
#include "actor/protocol.h"
#include "actor/tasks.h"
#include "core/ids.h"
#include "core/events.h"
#include "core/idmap.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "troupe/troupe.h"

typedef struct waiter {
    struct waiter *next;
    struct actor *a;
    tr__conn *conn;
    uint64_t seq;
    uv_timer_t timer;
} waiter;

typedef struct actor {
    uint8_t id[16];
    char hex[33];
    char *name, *cls, *exe, *path, *reason;
    void *args;
    size_t args_len;
    tr__res req;
    tr__res *task_req; /* a task worker's: held while it runs a task (NULL: none) */
    int max_restarts, restarts;
    int task_retries; /* tr_actor_options.max_task_retries: its callers read it (resolve) */
    int state;
    uint64_t inc;
    uint64_t owner; /* connection id of the creator */
    tr__proc *proc;
    pid_t pid;
    int holds;                      /* resources taken */
    int cpus[64], n_cpus;           /* the cores it is bound to while it holds its resources */
    int gpus[TR__MAX_GPUS], n_gpus; /* the GPUs it was given, likewise */
    double gpu_req;                 /* how many it asked for (of the node's) */
    uint32_t pg_tag;                /* its placement group's tag (0: none), actor/pgroup.h */
    int pg_bundle;                  /* and bundle (-1: any) */
    double pg_gpu;                  /* the GPUs it asked for, out of the group's devices */
    int no_restart;
    int owner_gone;  /* freed once dead and reaped */
    int detached;    /* outlives its owner (lives until killed or the node ends) */
    int retiring;    /* a task worker ended to give what it holds to an actor or group waiting */
    int dormant;     /* ...and now PENDING, started again once a caller asks for it */
    int conc;        /* max_concurrency (its worker runs up to conc calls at once) */
    char *groups;    /* its concurrency groups, as control.c encodes them (NULL: none) */
    char label[201]; /* its class as a binding names it (tr_actor_options.class_label; "") */
    char *bdata;     /* tr_actor_options.binding_data, or NULL */
    char ns[256];    /* its creator's namespace ("": the default): its worker's, TROUPE_NAMESPACE */
    uv_timer_t start_timer;
    int timer_live;
    waiter *waiters;
    struct tr__directory *d;
    struct actor *next; /* all actors, in creation order */
} actor;

struct tr__directory {
    tr__directory_opts o;
    tr__res total, avail;
    tr__cores cores;
    tr__gpus gpus;
    tr__idmap by_id;
    actor *all;
    int shutting_down;
    tr__pgroups *pgs;
    tr__directory_totals totals;
};

static void notify(actor *a);
static void spawn(tr__directory *d, actor *a);
static void schedule_pending(tr__directory *d);
static void kill_actor(tr__directory *d, actor *a, const char *why);

static void pg_kill(void *ctx, uint32_t tag, const char *why) {
    tr__directory *d = ctx;
    for (actor *a = d->all; a; a = a->next)
        if (a->pg_tag == tag && a->state != TR__ACTOR_DEAD) kill_actor(d, a, why);
}

static void pg_changed(void *ctx) {
    schedule_pending(ctx);
}

int tr__directory_create(const tr__directory_opts *o, tr__directory **out) {
    tr__directory *d = calloc(1, sizeof *d);
    if (!d) return tr__err(TR_ENOMEM, "directory");
    d->o = *o;
    d->total = d->avail = *o->total;
    if (o->cores) d->cores = *o->cores;
    d->o.cores = NULL; /* ours is d->cores */
    if (o->gpus) d->gpus = *o->gpus;
    d->o.gpus = NULL;
    tr__pg_host h = {&d->total, &d->avail,  &d->gpus, o->node_path, o->no_actors,
                     pg_kill,   pg_changed, d,        o->forward,   o->forward_ctx};
    int rc = tr__pgroups_create(&h, &d->pgs);
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

/* fwd: the message type to offer the cluster when the id is not ours (0: none). */
static actor *lookup(tr__directory *d, const tr__obj *body, tr__conn *c, uint64_t seq, int fwd) {
    uint8_t id[16];
    if (tr__get_id(body, "id", id, 16)) {
        tr__server_reply_status(c, seq, TR_EPROTO, tr__last_error());
        return NULL;
    }
    actor *a = tr__idmap_get(&d->by_id, tr__id_key(id));
    if (!a || memcmp(a->id, id, 16) != 0) {
        if (fwd && d->o.forward && d->o.forward(d->o.forward_ctx, fwd, c, seq, body)) return NULL;
        char hex[33];
        tr__hex(id, 16, hex);
        tr__server_reply_status(c, seq, TR_ENOTFOUND, "no such actor");
        TR_LOG_DEBUG("DIR-NOTFOUND", "actor %s", hex);
        return NULL;
    }
    return a;
}

static void set_reason(actor *a, const char *fmt, ...) TR__PRINTF(2, 3);
static void set_reason(actor *a, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    free(a->reason);
    a->reason = strdup(tmp);
}

static void reply_resolve(actor *a, tr__conn *c, uint64_t seq) {
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__reply_open(&b, 0, NULL);
    tr__enc_str(&b, "state");
    tr__enc_int(&b, a->state);
    tr__enc_str(&b, "inc");
    tr__enc_uint(&b, a->inc);
    tr__enc_str(&b, "path");
    tr__enc_str(&b, a->state == TR__ACTOR_ALIVE ? a->path : NULL);
    tr__enc_str(&b, "reason");
    tr__enc_str(&b, a->reason);
    if (a->bdata) {
        tr__enc_str(&b, "bdata");
        tr__enc_str(&b, a->bdata);
    }
    if (a->task_retries && a->max_restarts) { /* (its callers resend calls in flight when
                                                 it dies: only to a next incarnation) */
        tr__enc_str(&b, "tretries");
        tr__enc_int(&b, a->task_retries);
    }
    tr__enc_map_close(&b, m);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

static void on_waiter_closed(uv_handle_t *h) {
    waiter *w = h->data;
    tr__conn_unref(w->conn);
    free(w);
}

static void waiter_finish(waiter *w) {
    actor *a = w->a;
    for (waiter **pp = &a->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    reply_resolve(a, w->conn, w->seq);
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
}

static void on_waiter_timeout(uv_timer_t *t) {
    waiter_finish(t->data);
}

/* Answers every deferred RESOLVE once the actor is ALIVE or DEAD. */
static void notify(actor *a) {
    if (a->state != TR__ACTOR_ALIVE && a->state != TR__ACTOR_DEAD) return;
    while (a->waiters)
        waiter_finish(a->waiters);
}

/* Takes the actor's resources (they fit), and whole cores for whole CPUs where that many
 * are free: as mpirun binds ranks to cores, so that waits spin on a cache line that never
 * migrates; with more actors than cores, the rest float. */
static void hold(tr__directory *d, actor *a) {
    tr__res_take(&d->avail, &a->req);
    a->holds = 1;
    if (a->pg_tag) { /* in a placement group: its bundle's GPUs; it floats (no cores) */
        a->n_cpus = 0;
        a->gpu_req = 0;
        a->n_gpus =
            tr__pgroups_gpu_take(d->pgs, a->pg_tag, a->pg_bundle, a->pg_gpu, a->gpus, TR__MAX_GPUS);
        return;
    }
    double cpus = tr__res_get(&a->req, "CPU");
    int k = cpus >= 1 && cpus < 64 ? (int)cpus : 0;
    a->n_cpus = tr__cores_take(&d->cores, k, a->cpus);
    if (k && !a->n_cpus)
        TR_LOG_INFO("DIR-FLOAT", "actor %s: %d of the node's %d cores are not free; it floats",
                    a->hex, k, d->cores.n);
    a->gpu_req = tr__res_get(&a->req, "GPU");
    a->n_gpus = tr__gpus_take(&d->gpus, a->gpu_req, a->gpus, TR__MAX_GPUS);
}

/* Whether the actor's resources can be held now: the quantities, and GPUs it can have
 * whole (or a device with room for its share). */
static int fits_now(tr__directory *d, actor *a) {
    if (a->pg_tag)
        return tr__res_fits(&a->req, &d->avail) &&
               tr__pgroups_gpu_fit(d->pgs, a->pg_tag, a->pg_bundle, a->pg_gpu);
    return tr__res_fits(&a->req, &d->avail) && tr__gpus_fit(&d->gpus, tr__res_get(&a->req, "GPU"));
}

static int is_task_worker(const actor *a) {
    return !a->pg_tag && strcmp(a->cls, TR__TASKS_CLASS) == 0;
}

/* Whether it holds a quantity of anything but CPUs (custom resources, memory, GPUs). */
static int holds_any(const actor *a) {
    for (int i = 0; i < a->req.n; i++)
        if (a->req.qty[i] > 0 && strcmp(a->req.name[i], "CPU") != 0) return 1;
    return 0;
}

/* Whether task worker t holds something actor a asks for (GPUs, custom resources). */
static int holds_wanted(const actor *t, const actor *a) {
    if (tr__res_get(&a->req, "GPU") > 0 && t->n_gpus > 0) return 1;
    for (int i = 0; i < a->req.n; i++)
        if (a->req.qty[i] > 0 && strcmp(a->req.name[i], "CPU") != 0 &&
            strcmp(a->req.name[i], "GPU") != 0 && tr__res_get(&t->req, a->req.name[i]) > 0)
            return 1;
    return 0;
}

/* A task worker holds its GPUs and custom resources for its life (its devices are given at
 * its start; the reservations bound how many tasks run at once), but a task holds them
 * only while it runs. So while an actor (or another worker of a pool) waits for what a
 * task worker that runs no task now holds, or a placement group waits here, that worker
 * ends; it becomes PENDING and dormant, and is started again (by resources, as any actor)
 * once a caller resolves it: its next task. A task sent in the microseconds between the
 * board's look and the end is in flight when the worker dies: retried as after any
 * death. */
static void retire_idle_task_workers(tr__directory *d) {
    if (!d->o.task_running) return;
    int group_waits = -1; /* (asked once, if need be) */
    for (actor *t = d->all; t; t = t->next) {
        if (t->state != TR__ACTOR_ALIVE || !t->proc || t->retiring || !is_task_worker(t) ||
            (t->n_gpus == 0 && !holds_any(t)))
            continue;
        int want = 0;
        for (const actor *a = d->all; a && !want; a = a->next)
            want = a != t && a->state == TR__ACTOR_PENDING && !a->dormant && !a->pg_tag &&
                   holds_wanted(t, a);
        if (!want && group_waits < 0) group_waits = tr__pgroups_waiting(d->pgs);
        int blocked = 0;
        if ((!want && !group_waits) || d->o.task_running(d->o.task_ctx, t->id, &blocked)) continue;
        t->retiring = 1;
        TR_LOG_INFO("DIR-RETIRE", "task worker %s: what it holds goes to what waits for it",
                    t->hex);
        tr__proc_kill(t->proc, SIGKILL);
    }
}

static void schedule_pending(tr__directory *d) {
    if (d->shutting_down) return;
    tr__pgroups_schedule(d->pgs); /* groups first: their actors may then fit */
    for (actor *a = d->all; a; a = a->next) {
        if (a->state != TR__ACTOR_PENDING || a->dormant || !fits_now(d, a)) continue;
        hold(d, a);
        spawn(d, a);
    }
    retire_idle_task_workers(d);
}

static void release(tr__directory *d, actor *a) {
    if (!a->holds) return;
    tr__res_give(&d->avail, &a->req); /* (a removed group's names are gone: nothing) */
    tr__cores_give(&d->cores, a->cpus, a->n_cpus);
    a->n_cpus = 0;
    if (a->pg_tag)
        tr__pgroups_gpu_give(d->pgs, a->pg_tag, a->pg_gpu, a->gpus, a->n_gpus);
    else
        tr__gpus_give(&d->gpus, a->gpu_req, a->gpus, a->n_gpus);
    a->n_gpus = 0;
    a->holds = 0;
}

/* Resources come back when the process is reaped (on_worker_exit), not before. */
static void make_dead(tr__directory *d, actor *a) {
    if (a->state != TR__ACTOR_DEAD) {
        d->totals.died++;
        tr__evlog("actor_died", "id", a->hex, "reason", a->reason ? a->reason : "", NULL);
    }
    a->state = TR__ACTOR_DEAD;
    if (a->timer_live) uv_timer_stop(&a->start_timer);
    if (!a->proc) release(d, a);
    notify(a);
}

static void on_start_timeout(uv_timer_t *t) {
    actor *a = t->data;
    if (a->state != TR__ACTOR_STARTING && a->state != TR__ACTOR_RESTARTING) return;
    set_reason(a, "worker did not start within the start timeout (worker_start_timeout_ms)");
    a->no_restart = 1;
    TR_LOG_WARN("DIR-START-TIMEOUT", "actor %s (%s): %s", a->hex, a->cls, a->reason);
    tr__proc_kill(a->proc, SIGKILL);
}

static void on_worker_exit(void *ctx, tr__proc *p, int64_t status, int sig);
static void forget(tr__directory *d, actor *a);

static void spawn(tr__directory *d, actor *a) {
    a->state = a->inc == 0 ? TR__ACTOR_STARTING : TR__ACTOR_RESTARTING;
    if (a->inc)
        tr__evlog("actor_restarting", "id", a->hex, "reason", a->reason ? a->reason : "", NULL);
    a->inc++;
    char env_node[600], env_actor[64], env_cpus[400] = "TROUPE_CPUS=";
    char env_cuda[64 * 97 + 32] = "CUDA_VISIBLE_DEVICES=", env_gpus[64 * 97 + 32] = "TROUPE_GPUS=";
    snprintf(env_node, sizeof env_node, "TROUPE_NODE=%s", d->o.node_path);
    snprintf(env_actor, sizeof env_actor, "TROUPE_ACTOR=%s", a->hex);
    tr__cores_format(a->cpus, a->n_cpus, env_cpus + 12, sizeof env_cpus - 12);
    /* its GPUs, and none but those (as Ray: an actor that asked for none sees none) */
    tr__gpus_format(&d->gpus, a->gpus, a->n_gpus, env_gpus + 12, sizeof env_gpus - 12);
    memcpy(env_cuda + 21, env_gpus + 12, strlen(env_gpus + 12) + 1);
    /* the worker binds itself to its cores first thing, before it has any thread */
    char *env_cmd = malloc(strlen(a->exe) + 16);
    if (env_cmd) sprintf(env_cmd, "TROUPE_COMMAND=%s", a->exe); /* (its actors' command too) */
    char env_ns[sizeof "TROUPE_NAMESPACE=" + sizeof a->ns];
    snprintf(env_ns, sizeof env_ns, "TROUPE_NAMESPACE=%s", a->ns);
    const char *env[9] = {"TROUPE_ROLE=worker", env_node, env_actor}; /* 3 + 5 + NULL */
    int ne = 3;
    if (a->ns[0]) env[ne++] = env_ns;
    if (env_cmd) env[ne++] = env_cmd;
    if (a->n_cpus) env[ne++] = env_cpus;
    if (d->gpus.n) env[ne++] = env_cuda;
    if (a->n_gpus) env[ne++] = env_gpus;
    env[ne] = NULL;
    free(a->path);
    a->path = NULL;
    int rc = tr__proc_spawn(d->o.pool, a->exe, env, on_worker_exit, a, &a->proc);
    free(env_cmd);
    if (rc) {
        set_reason(a, "could not start a worker: %s", tr__last_error());
        TR_LOG_WARN("DIR-SPAWN", "actor %s: %s", a->hex, a->reason);
        a->proc = NULL;
        make_dead(d, a);
        schedule_pending(d);
        return;
    }
    a->pid = tr__proc_pid(a->proc);
    if (!a->timer_live) {
        uv_timer_init(d->o.loop, &a->start_timer);
        a->start_timer.data = a;
        a->timer_live = 1;
    }
    uv_timer_start(&a->start_timer, on_start_timeout, (uint64_t)d->o.start_timeout_ms, 0);
}

static void on_worker_exit(void *ctx, tr__proc *p, int64_t status, int sig) {
    actor *a = ctx;
    tr__directory *d = a->d;
    a->proc = NULL;
    a->pid = 0;
    if (a->path) unlink(a->path);
    if (a->timer_live) uv_timer_stop(&a->start_timer);
    release(d, a);
    if (d->o.on_worker_exit)
        d->o.on_worker_exit(d->o.exit_ctx, a->id, a->label[0] ? a->label : a->cls);
    if (a->state == TR__ACTOR_DEAD) { /* failed constructor, or already declared dead */
        schedule_pending(d);
        if (a->owner_gone && !a->waiters) forget(d, a); /* nobody can ask for it any more */
        return;
    }
    if (a->retiring && !a->no_restart && !d->shutting_down) { /* (retire_idle_task_workers) */
        a->retiring = 0;
        a->dormant = 1;
        a->state = TR__ACTOR_PENDING;
        set_reason(a, "what it held went to an actor or a group waiting for it; it starts "
                      "again with its next task");
        schedule_pending(d);
        return;
    }
    a->retiring = 0;
    int can_restart = !a->no_restart && !d->shutting_down &&
                      (a->max_restarts < 0 || a->restarts < a->max_restarts);
    if (a->no_restart && a->reason)
        ; /* keep the reason of the kill */
    else if (sig)
        set_reason(a, "worker process (pid %d) was killed by signal %d", (int)tr__proc_pid(p), sig);
    else
        set_reason(a, "worker process exited with status %lld", (long long)status);
    if (can_restart) {
        a->restarts++;
        d->totals.restarts++;
        if (!fits_now(d, a)) { /* cannot happen: we just gave them back */
            make_dead(d, a);
            return;
        }
        hold(d, a);
        TR_LOG_INFO("DIR-RESTART", "actor %s (%s): %s; restart %d", a->hex, a->cls, a->reason,
                    a->restarts);
        spawn(d, a);
        return;
    }
    make_dead(d, a);
    schedule_pending(d);
}

/* Frees an actor: one that died with its owner, or one on_create did not place
 * (forwarded, or failed). */
static void actor_free(actor *a) {
    free(a->name);
    free(a->groups);
    free(a->bdata);
    free(a->cls);
    free(a->exe);
    free(a->path);
    free(a->reason);
    free(a->args);
    free(a->task_req);
    free(a);
}

static void on_create(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    if (!c->exe) {
        tr__server_reply_status(c, seq, TR_ESTATE, "create: say HELLO with your executable first");
        return;
    }
    actor *a = calloc(1, sizeof *a);
    if (!a) {
        tr__server_reply_status(c, seq, TR_ENOMEM, "node: out of memory");
        return;
    }
    const void *args;
    size_t args_len;
    int64_t max_restarts = 0;
    char *res = NULL;
    int rc;
    if ((rc = tr__get_strdup(body, "class", &a->cls)) ||
        (rc = tr__get_bin(body, "args", &args, &args_len)) ||
        (rc = tr__get_int(body, "max_restarts", &max_restarts)) ||
        (rc = tr__get_strdup(body, "res", &res)))
        goto fail;
    if (tr__obj_type(tr__obj_get(body, "name")) == TR__T_STR &&
        (rc = tr__get_strdup(body, "name", &a->name)))
        goto fail;
    int64_t detached = 0;
    if (tr__obj_get(body, "detached") && (rc = tr__get_int(body, "detached", &detached))) goto fail;
    a->detached = detached != 0;
    int64_t conc = 1;
    if (tr__obj_get(body, "conc") && (rc = tr__get_int(body, "conc", &conc))) goto fail;
    a->conc = conc < 1 ? 1 : conc > TR__MAX_CONCURRENCY ? TR__MAX_CONCURRENCY : (int)conc;
    int64_t tretries = 0;
    if (tr__obj_get(body, "tretries") && (rc = tr__get_int(body, "tretries", &tretries))) goto fail;
    if (tretries < -1 || tretries > INT32_MAX) {
        rc = tr__err(TR_EINVAL, "create: max_task_retries %lld: -1 or more", (long long)tretries);
        goto fail;
    }
    a->task_retries = (int)tretries;
    if (tr__obj_type(tr__obj_get(body, "groups")) == TR__T_STR &&
        (rc = tr__get_strdup(body, "groups", &a->groups)))
        goto fail;
    const char *label;
    size_t label_len;
    if (tr__obj_type(tr__obj_get(body, "label")) == TR__T_STR &&
        tr__get_str(body, "label", &label, &label_len) == 0) { /* (shown, never trusted) */
        size_t n = label_len < sizeof a->label - 1 ? label_len : sizeof a->label - 1;
        for (size_t i = 0; i < n; i++)
            a->label[i] = (unsigned char)label[i] < 0x20 || label[i] == 0x7f ? '?' : label[i];
        a->label[n] = '\0';
    }
    const char *ns;
    size_t ns_len;
    if (tr__obj_type(tr__obj_get(body, "ns")) == TR__T_STR &&
        tr__get_str(body, "ns", &ns, &ns_len) == 0 && ns_len > 0) {
        if (ns_len >= sizeof a->ns || memchr(ns, '\0', ns_len)) {
            rc = tr__err(TR_EINVAL, "create: a namespace of up to 255 bytes, none of them 0");
            goto fail;
        }
        memcpy(a->ns, ns, ns_len);
        a->ns[ns_len] = '\0';
    }
    const char *bdata;
    size_t bdata_len;
    if (tr__obj_type(tr__obj_get(body, "bdata")) == TR__T_STR &&
        tr__get_str(body, "bdata", &bdata, &bdata_len) == 0 && bdata_len > 0) {
        if (bdata_len > TR_ACTOR_BINDING_DATA_MAX) {
            rc = tr__err(TR_EINVAL, "binding_data over %d bytes", TR_ACTOR_BINDING_DATA_MAX);
            goto fail;
        }
        if (!(a->bdata = malloc(bdata_len + 1))) {
            rc = tr__err(TR_ENOMEM, "actor create");
            goto fail;
        }
        memcpy(a->bdata, bdata, bdata_len);
        a->bdata[bdata_len] = '\0';
    }
    if (!*a->cls) {
        rc = tr__err(TR_EINVAL, "create: empty class name");
        goto fail;
    }
    if ((rc = tr__res_parse(&a->req, res))) goto fail;
    a->pg_bundle = -1;
    if (tr__obj_get(body, "pg")) { /* into a placement group: its names instead */
        uint8_t pg[16];
        int64_t bundle = -1;
        if ((rc = tr__get_id(body, "pg", pg, 16)) || (rc = tr__get_int(body, "bundle", &bundle)))
            goto fail;
        if (bundle < -1 || bundle > 1000000) bundle = bundle < 0 ? -2 : 1000000;
        a->pg_bundle = (int)bundle;
        if ((rc = tr__pgroups_actor_req(d->pgs, pg, a->pg_bundle, &a->req, &a->pg_tag,
                                        &a->pg_gpu))) {
            /* a group (or bundle) this node holds no part of: in a cluster, the head knows
             * which node holds it */
            if (rc == TR_ENOTFOUND && d->o.forward &&
                d->o.forward(d->o.forward_ctx, TR__MSG_ACTOR_CREATE, c, seq, body)) {
                free(res);
                actor_free(a);
                return;
            }
            rc = tr__err_wrap(rc, "tr_actor_create");
            goto fail;
        }
    }
    if (a->name) {
        for (actor *o = d->all; o; o = o->next) {
            if (o->name && o->state != TR__ACTOR_DEAD && strcmp(o->name, a->name) == 0) {
                rc = tr__err(TR_EEXIST, "an actor named '%s' already exists", a->name);
                goto fail;
            }
        }
    }
    const char *tres;
    size_t tres_len;
    if (tr__obj_type(tr__obj_get(body, "task_res")) == TR__T_STR &&
        tr__get_str(body, "task_res", &tres, &tres_len) == 0 && tres_len > 0 && !a->pg_tag &&
        strcmp(a->cls, TR__TASKS_CLASS) == 0) { /* (another class's: ignored) */
        char text[512];
        if (tres_len >= sizeof text || memchr(tres, '\0', tres_len)) {
            rc = tr__err(TR_EINVAL, "create: task_res of up to %zu bytes, none of them 0",
                         sizeof text - 1);
            goto fail;
        }
        memcpy(text, tres, tres_len);
        text[tres_len] = '\0';
        if (!(a->task_req = calloc(1, sizeof *a->task_req))) {
            rc = tr__err(TR_ENOMEM, "node: out of memory");
            goto fail;
        }
        if ((rc = tr__res_parse(a->task_req, text))) goto fail;
        if (a->task_req->n != 1 || strcmp(a->task_req->name[0], "CPU") != 0 ||
            !(a->task_req->qty[0] > 0)) {
            rc = tr__err(TR_EINVAL, "create: task_res holds CPU=k (k > 0) alone");
            goto fail;
        }
    }
    tr__res ever = a->req; /* what it needs at once, at its busiest */
    for (int i = 0; a->task_req && !rc && i < a->task_req->n; i++)
        rc = tr__res_add(&ever, a->task_req->name[i], a->task_req->qty[i]);
    if (rc) goto fail;
    double k = tr__res_get(&a->req, "GPU"); /* with every device free, would it fit? */
    int gpus_ever = k <= 0 || (k < 1 ? d->gpus.n > 0 : k <= d->gpus.n);
    if (!a->pg_tag && (!tr__res_fits(&ever, &d->total) || !gpus_ever || d->o.no_actors)) {
        if (d->o.forward && d->o.forward(d->o.forward_ctx, TR__MSG_ACTOR_CREATE, c, seq, body)) {
            free(res);
            actor_free(a);
            return;
        }
        char want[512], have[512];
        tr__res_format(&ever, want, sizeof want);
        tr__res_format(&d->total, have, sizeof have);
        rc = d->o.no_actors ? tr__err(TR_ERESOURCES, "this node runs no actors (a cluster's "
                                                     "client) and cannot reach the cluster now")
             : a->task_req  ? tr__err(TR_ERESOURCES,
                                      "a task that needs {%s} cannot run: this node has {%s} in all",
                                      want, have)
                            : tr__err(TR_ERESOURCES,
                                      "actor of class '%s' needs {%s} but this node has {%s} in all",
                                      a->cls, want, have);
        goto fail;
    }
    a->args = malloc(args_len ? args_len : 1);
    a->exe = strdup(c->exe);
    if (!a->args || !a->exe) {
        rc = tr__err(TR_ENOMEM, "node: out of memory");
        goto fail;
    }
    memcpy(a->args, args, args_len);
    a->args_len = args_len;
    a->max_restarts = (int)max_restarts;
    a->owner = c->id;
    a->d = d;
    do {
        if ((rc = tr__random_bytes(a->id, 16))) goto fail;
    } while (tr__id_key(a->id) == 0 || tr__idmap_get(&d->by_id, tr__id_key(a->id)));
    tr__hex(a->id, 16, a->hex);
    if ((rc = tr__idmap_put(&d->by_id, tr__id_key(a->id), a))) goto fail;
    actor **tail = &d->all;
    while (*tail)
        tail = &(*tail)->next;
    *tail = a;
    a->state = TR__ACTOR_PENDING;
    d->totals.created++;
    tr__evlog("actor_created", "id", a->hex, "class", a->label[0] ? a->label : a->cls, "name",
              a->name ? a->name : "", NULL); /* (the durable event log: core/events.h) */
    free(res);

    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, 0, NULL, 1);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, a->id, 16);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
    TR_LOG_DEBUG("DIR-CREATE", "actor %s class %s", a->hex, a->cls);
    schedule_pending(d);
    return;
fail:
    tr__server_reply_status(c, seq, rc, tr__last_error());
    free(res);
    actor_free(a);
}

static void on_resolve(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    actor *a = lookup(d, body, c, seq, TR__MSG_ACTOR_RESOLVE);
    if (!a) return;
    int64_t wait_ms = 0;
    if (tr__obj_get(body, "wait_ms")) tr__get_int(body, "wait_ms", &wait_ms);
    if (a->dormant && a->state == TR__ACTOR_PENDING) { /* a caller wants it again */
        a->dormant = 0;
        schedule_pending(d);
    }
    if (a->state == TR__ACTOR_ALIVE || a->state == TR__ACTOR_DEAD || wait_ms <= 0) {
        reply_resolve(a, c, seq);
        return;
    }
    waiter *w = calloc(1, sizeof *w);
    if (!w) {
        tr__server_reply_status(c, seq, TR_ENOMEM, "node: out of memory");
        return;
    }
    w->a = a;
    w->conn = c;
    w->seq = seq;
    tr__conn_ref(c);
    uv_timer_init(d->o.loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, on_waiter_timeout, (uint64_t)(wait_ms > 3600000 ? 3600000 : wait_ms),
                   0);
    w->next = a->waiters;
    a->waiters = w;
}

static void kill_actor(tr__directory *d, actor *a, const char *why) {
    if (a->state == TR__ACTOR_DEAD) return;
    a->no_restart = 1;
    if (!a->reason || a->state == TR__ACTOR_ALIVE) set_reason(a, "%s", why);
    if (a->state == TR__ACTOR_PENDING || !a->proc) {
        set_reason(a, "%s", why);
        make_dead(d, a);
        return;
    }
    tr__proc_kill(a->proc, SIGKILL);
    make_dead(d, a); /* dead from now on; resources return when the process is reaped */
}

static void on_kill(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    actor *a = lookup(d, body, c, seq, TR__MSG_ACTOR_KILL);
    if (!a) return;
    int64_t no_restart = 1;
    if (tr__obj_get(body, "no_restart")) tr__get_int(body, "no_restart", &no_restart);
    const char *why;
    size_t why_len;
    if (tr__obj_type(tr__obj_get(body, "ending")) == TR__T_STR &&
        tr__get_str(body, "ending", &why, &why_len) == 0) {
        /* (its worker ends by itself, orderly: never restarted; dead once it exits) */
        if (a->pid == 0 || c->pid != a->pid) {
            tr__server_reply_status(c, seq, TR_EPERM, "not this actor's worker process");
            return;
        }
        if (a->state != TR__ACTOR_DEAD) {
            a->no_restart = 1;
            set_reason(a, "%.*s", (int)(why_len > 400 ? 400 : why_len), why);
        }
    } else if (no_restart)
        kill_actor(d, a, "killed by tr_actor_kill");
    else if (a->proc)
        tr__proc_kill(a->proc, SIGKILL); /* restarts if it has restarts left */
    tr__server_reply_status(c, seq, 0, NULL);
}

static void on_by_name(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    const char *name;
    size_t n;
    if (tr__get_str(body, "name", &name, &n)) {
        tr__server_reply_status(c, seq, TR_EPROTO, tr__last_error());
        return;
    }
    for (actor *a = d->all; a; a = a->next) {
        if (a->name && a->state != TR__ACTOR_DEAD && strlen(a->name) == n &&
            memcmp(a->name, name, n) == 0) {
            tr__buf b = TR__BUF_INIT;
            tr__reply_begin(&b, 0, NULL, 1);
            tr__enc_str(&b, "id");
            tr__enc_bin(&b, a->id, 16);
            tr__server_reply(c, seq, &b);
            tr__buf_free(&b);
            return;
        }
    }
    if (d->o.forward && d->o.forward(d->o.forward_ctx, TR__MSG_ACTOR_BY_NAME, c, seq, body)) return;
    tr__server_reply_status(c, seq, TR_ENOTFOUND, "no live actor has that name");
}

static void on_info(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    actor *a = lookup(d, body, c, seq, TR__MSG_ACTOR_INFO);
    if (!a) return;
    tr__buf b = TR__BUF_INIT;
    char cpus[400];
    tr__cores_format(a->cpus, a->n_cpus, cpus, sizeof cpus);
    char gpus[64 * 97];
    tr__gpus_format(&d->gpus, a->gpus, a->n_gpus, gpus, sizeof gpus);
    size_t m = tr__reply_open(&b, 0, NULL);
    tr__enc_str(&b, "cpus");
    tr__enc_str(&b, cpus);
    tr__enc_str(&b, "gpus");
    tr__enc_str(&b, gpus);
    tr__enc_str(&b, "state");
    tr__enc_int(&b, a->state);
    tr__enc_str(&b, "pid");
    tr__enc_int(&b, a->pid);
    tr__enc_str(&b, "restarts");
    tr__enc_int(&b, a->restarts);
    tr__enc_str(&b, "max_restarts");
    tr__enc_int(&b, a->max_restarts);
    tr__enc_str(&b, "class");
    tr__enc_str(&b, a->cls);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, a->name);
    tr__enc_str(&b, "node");
    tr__enc_str(&b, d->o.node_path);
    tr__enc_str(&b, "reason");
    tr__enc_str(&b, a->reason);
    if (a->bdata) {
        tr__enc_str(&b, "bdata");
        tr__enc_str(&b, a->bdata);
    }
    tr__enc_map_close(&b, m);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

/* The worker asking what to run: only the process the node spawned for that actor. */
static actor *worker_actor(tr__directory *d, tr__conn *c, uint64_t seq, const tr__obj *body) {
    actor *a = lookup(d, body, c, seq, 0);
    if (!a) return NULL;
    if (a->pid == 0 || c->pid != a->pid) {
        tr__server_reply_status(c, seq, TR_EPERM, "not this actor's worker process");
        return NULL;
    }
    return a;
}

static void on_worker_start(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    actor *a = worker_actor(d, c, seq, body);
    if (!a) return;
    char path[600];
    snprintf(path, sizeof path, "%s/a-%.16s-%llu.sock", d->o.session_dir, a->hex,
             (unsigned long long)a->inc);
    free(a->path);
    a->path = strdup(path);
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__reply_open(&b, a->path ? 0 : TR_ENOMEM, NULL);
    tr__enc_str(&b, "max_msg");
    tr__enc_uint(&b, d->o.max_msg);
    tr__enc_str(&b, "spin_us");
    tr__enc_uint(&b, (uint64_t)d->o.spin_us);
    tr__enc_str(&b, "class");
    tr__enc_str(&b, a->cls);
    tr__enc_str(&b, "args");
    tr__enc_bin(&b, a->args, a->args_len);
    tr__enc_str(&b, "inc");
    tr__enc_uint(&b, a->inc);
    tr__enc_str(&b, "path");
    tr__enc_str(&b, a->path);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, a->name);
    tr__enc_str(&b, "label"); /* (what its timeline names it) */
    tr__enc_str(&b, a->label[0] ? a->label : a->cls);
    if (a->conc > 1) {
        tr__enc_str(&b, "conc");
        tr__enc_int(&b, a->conc);
    }
    if (a->groups) {
        tr__enc_str(&b, "groups");
        tr__enc_str(&b, a->groups);
    }
    tr__enc_map_close(&b, m);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

static void on_worker_ready(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    actor *a = worker_actor(d, c, seq, body);
    if (!a) return;
    if (a->state != TR__ACTOR_STARTING && a->state != TR__ACTOR_RESTARTING) {
        tr__server_reply_status(c, seq, TR_ESTATE, "actor is not starting");
        return;
    }
    a->state = TR__ACTOR_ALIVE;
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)a->pid);
    tr__evlog("actor_alive", "id", a->hex, "pid", pid, NULL);
    if (a->timer_live) uv_timer_stop(&a->start_timer);
    free(a->reason);
    a->reason = NULL;
    tr__server_reply_status(c, seq, 0, NULL);
    TR_LOG_DEBUG("DIR-ALIVE", "actor %s pid %d", a->hex, (int)a->pid);
    notify(a);
}

static void on_worker_failed(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__directory *d = ctx;
    actor *a = worker_actor(d, c, seq, body);
    if (!a) return;
    const char *m = "";
    size_t n = 0;
    tr__get_str(body, "msg", &m, &n);
    set_reason(a, "%.*s", (int)(n > 400 ? 400 : n), m);
    a->no_restart = 1;
    tr__server_reply_status(c, seq, 0, NULL);
    TR_LOG_INFO("DIR-CTOR-FAILED", "actor %s (%s): %s", a->hex, a->cls, a->reason);
    make_dead(d, a); /* the worker exits by itself; resources come back when it is reaped */
}

static void on_timer_closed(uv_handle_t *h) {
    actor_free(h->data);
}

/* Frees an actor once libuv has let go of its timer. */
static void actor_discard(actor *a) {
    if (a->timer_live) {
        a->timer_live = 0;
        uv_close((uv_handle_t *)&a->start_timer, on_timer_closed);
    } else {
        actor_free(a);
    }
}

/* Unlinks and frees an actor (its timer closes first). */
static void forget(tr__directory *d, actor *a) {
    for (actor **pp = &d->all; *pp; pp = &(*pp)->next) {
        if (*pp == a) {
            *pp = a->next;
            break;
        }
    }
    tr__idmap_del(&d->by_id, tr__id_key(a->id));
    actor_discard(a);
}

static void on_conn_close(void *ctx, tr__conn *c) {
    tr__directory *d = ctx;
    for (actor *a = d->all; a; a = a->next)
        if (a->owner == c->id && a->state != TR__ACTOR_DEAD && !a->detached)
            kill_actor(d, a, "its owner exited");
    /* Forget dead actors whose owner is gone; those still being reaped go in
     * on_worker_exit. */
    for (actor *a = d->all, *n; a; a = n) {
        n = a->next;
        if (a->owner != c->id) continue;
        a->owner_gone = 1;
        if (a->state == TR__ACTOR_DEAD && !a->proc && !a->waiters) forget(d, a);
    }
    tr__pgroups_conn_closed(d->pgs, c->id);
}

void tr__directory_mount(tr__directory *d, tr__server *s) {
    tr__server_on(s, TR__MSG_ACTOR_CREATE, on_create, d);
    tr__server_on(s, TR__MSG_ACTOR_RESOLVE, on_resolve, d);
    tr__server_on(s, TR__MSG_ACTOR_KILL, on_kill, d);
    tr__server_on(s, TR__MSG_ACTOR_BY_NAME, on_by_name, d);
    tr__server_on(s, TR__MSG_ACTOR_INFO, on_info, d);
    tr__server_on(s, TR__MSG_WORKER_START, on_worker_start, d);
    tr__server_on(s, TR__MSG_WORKER_READY, on_worker_ready, d);
    tr__server_on(s, TR__MSG_WORKER_FAILED, on_worker_failed, d);
    tr__server_on_close(s, on_conn_close, d);
    tr__pgroups_mount(d->pgs, s);
}

void tr__directory_kill_all(tr__directory *d) {
    d->shutting_down = 1;
    for (actor *a = d->all; a; a = a->next)
        kill_actor(d, a, "the node is shutting down");
}

static void json_res(tr__buf *out, const tr__res *r) {
    char tmp[128];
    tr__buf_append(out, "{", 1);
    for (int i = 0; i < r->n; i++) {
        if (i) tr__buf_append(out, ",", 1);
        tr__buf_json_str(out, r->name[i]); /* (names a client gave: escaped) */
        int n = snprintf(tmp, sizeof tmp, ":%.17g", r->qty[i]);
        tr__buf_append(out, tmp, (size_t)n);
    }
    tr__buf_append(out, "}", 1);
}

static void json_str(tr__buf *out, const char *s) {
    if (s)
        tr__buf_json_str(out, s);
    else
        tr__buf_append(out, "null", 4);
}

/* ,"name":...,"namespace":... of a name the node keeps (its namespace, 0x1f, the name):
 * the name alone and its namespace ("": the default); null and null if none. */
static void json_name(tr__buf *out, const char *kept) {
    size_t ns_len = 0;
    const char *bare = kept ? tr__actor_unqualify(kept, &ns_len) : NULL;
    tr__buf_append(out, ",\"name\":", 8);
    json_str(out, bare);
    tr__buf_append(out, ",\"namespace\":", 13);
    if (!kept) {
        tr__buf_append(out, "null", 4);
        return;
    }
    char ns[256];
    snprintf(ns, sizeof ns, "%.*s", (int)ns_len, kept);
    json_str(out, ns);
}

size_t tr__directory_live(const tr__directory *d) {
    size_t n = 0;
    for (const actor *a = d->all; a; a = a->next)
        n += a->state != TR__ACTOR_DEAD;
    return n;
}

void tr__directory_status_json(const tr__directory *d, tr__buf *out) {
    char tmp[256];
    tr__buf_append(out, "\"resources_total\":", 18);
    json_res(out, &d->total);
    tr__buf_append(out, ",\"resources_available\":", 23);
    json_res(out, &d->avail);
    /* what task workers running a task hold now (a task waiting for results lends its
     * CPUs, as Ray's does): not taken from resources_available, which placement reads */
    tr__res in_tasks, idle;
    in_tasks.n = idle.n = 0;
    for (const actor *a = d->all; a && d->o.task_running; a = a->next) {
        int blocked = 0;
        if (a->state != TR__ACTOR_ALIVE || !is_task_worker(a)) continue;
        if (!d->o.task_running(d->o.task_ctx, a->id, &blocked)) {
            for (int i = 0; i < a->req.n; i++) /* (retire_idle_task_workers) */
                if (a->req.qty[i] > 0 && strcmp(a->req.name[i], "CPU") != 0)
                    tr__res_add(&idle, a->req.name[i], a->req.qty[i]);
            continue;
        }
        for (int i = 0; a->task_req && i < a->task_req->n; i++)
            if (!blocked || strcmp(a->task_req->name[i], "CPU") != 0)
                tr__res_add(&in_tasks, a->task_req->name[i], a->task_req->qty[i]);
    }
    tr__buf_append(out, ",\"resources_in_tasks\":", 22);
    json_res(out, &in_tasks);
    /* what task workers running no task hold (GPUs, custom resources): theirs until an
     * actor or a group waits for it (then it goes: retire_idle_task_workers) */
    tr__buf_append(out, ",\"resources_idle_in_tasks\":", 27);
    json_res(out, &idle);
    tr__buf_append(out, ",\"actors\":[", 11);
    int first = 1;
    for (const actor *a = d->all; a; a = a->next) {
        int n = snprintf(tmp, sizeof tmp,
                         "%s{\"id\":\"%s\",\"state\":\"%s\",\"pid\":%d,\"restarts\":%d,\"class\":",
                         first ? "" : ",", a->hex, tr__actor_state_name(a->state), (int)a->pid,
                         a->restarts);
        tr__buf_append(out, tmp, (size_t)n);
        json_str(out, a->cls);
        tr__buf_append(out, ",\"class_name\":", 14);
        json_str(out, a->label[0] ? a->label : a->cls);
        json_name(out, a->name);
        tr__buf_append(out, ",\"reason\":", 10);
        json_str(out, a->reason);
        char cpus[400];
        tr__cores_format(a->cpus, a->n_cpus, cpus, sizeof cpus);
        tr__buf_append(out, ",\"cpus\":", 8);
        json_str(out, cpus);
        static char gpus[64 * 97]; /* the loop thread's alone */
        tr__gpus_format(&d->gpus, a->gpus, a->n_gpus, gpus, sizeof gpus);
        tr__buf_append(out, ",\"gpus\":", 8);
        json_str(out, gpus);
        tr__buf_append(out, "}", 1);
        first = 0;
    }
    tr__buf_append(out, "]", 1);
    tr__pgroups_status_json(d->pgs, out);
}

void tr__directory_each(const tr__directory *d, void (*fn)(void *ctx, const tr__actor_view *a),
                        void *ctx) {
    for (const actor *a = d->all; a; a = a->next) {
        tr__actor_view v = {a->id,       a->label[0] ? a->label : a->cls,
                            a->name,     a->state,
                            a->restarts, a->pid,
                            a->reason,   a->cls};
        fn(ctx, &v);
    }
}

void tr__directory_totals_get(const tr__directory *d, tr__directory_totals *out) {
    *out = d->totals;
}

void tr__directory_close(tr__directory *d) {
    for (actor *a = d->all, *n; a; a = n) {
        n = a->next;
        while (a->waiters) {
            waiter *w = a->waiters;
            a->waiters = w->next;
            uv_timer_stop(&w->timer);
            uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
        }
        tr__proc_detach(a->proc); /* a worker that outlived the reap timeout */
        actor_discard(a);
    }
    d->all = NULL;
    tr__idmap_free(&d->by_id);
}

void tr__directory_destroy(tr__directory *d) {
    if (!d) return;
    tr__idmap_free(&d->by_id);
    tr__pgroups_destroy(d->pgs);
    free(d);
}
