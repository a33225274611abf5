/* actor/tasks.c - remote functions (tasks) on the node's task pool (tasks.h). */
#include "actor/tasks.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "actor/control.h"
#include "core/abi.h"
#include "core/ids.h"
#include "core/status.h"

#define MAX_RES 16
#define NESTED_FACTOR 4 /* a pool worker's own tasks: up to 4x the pool (parents wait) */
/* Members at most, those waiting for results (blocked) too: a tree of tasks whose
 * parents wait for their children grows the pool by its waiting parents, as Ray starts
 * workers beside blocked ones; this bounds the processes one runaway tree makes. */
#define POOL_MAX 512

typedef struct pool {
    char key[200];         /* the shape: "c1/g0[/name=q...]" */
    double cpus, num_gpus; /* (cpus: held at the node while a member runs a task) */
    tr_pg_id pg; /* a placement group's bundle the pool's workers run in (all zero: none) */
    int bundle;
    tr_resource res[MAX_RES];
    char *res_names[MAX_RES];
    size_t n_res;
    size_t limit;          /* members at most (for this process) */
    tr_actor_id *members;  /* known so far, in name order */
    tr__seg_board **board; /* each member's entry on the node's board, once found (NULL) */
    size_t n, cap;
    int discovered; /* members that others started were looked up */
    struct pool *next;
} pool;

struct tr__tasks {
    tr__nodeconn *node;
    tr__actors *actors;
    tr__objects *objects;
    pthread_mutex_t mu;
    pool *pools;
};

static pthread_mutex_t self_mu = PTHREAD_MUTEX_INITIALIZER;
static tr_actor_id self_id;
static int self_known;
static char task_ns[256]; /* (self_mu) the namespace of the task this worker runs */

#define TASK_NS_SEP '\x1f' /* a task's method: function, TASK_NS_SEP, namespace */

const char *tr__tasks_split(const char *m, size_t *n, size_t *ns_len) {
    const char *sep = memchr(m, TASK_NS_SEP, *n);
    *ns_len = sep ? *n - (size_t)(sep - m) - 1 : 0;
    if (!sep) return NULL;
    *n = (size_t)(sep - m);
    return sep + 1;
}

void tr__tasks_set_namespace(const char *ns, size_t n) {
    if (n >= sizeof task_ns) n = sizeof task_ns - 1; /* (the submitter's checks: <= 255) */
    pthread_mutex_lock(&self_mu);
    if (ns) memcpy(task_ns, ns, n);
    task_ns[ns ? n : 0] = '\0';
    pthread_mutex_unlock(&self_mu);
}

int tr__tasks_namespace(char *out, size_t cap) {
    pthread_mutex_lock(&self_mu);
    int known = self_known;
    if (known && cap) snprintf(out, cap, "%s", task_ns);
    pthread_mutex_unlock(&self_mu);
    return known;
}

void tr__tasks_note_self(const tr_actor_id *id) {
    pthread_mutex_lock(&self_mu);
    self_id = *id;
    self_known = 1;
    pthread_mutex_unlock(&self_mu);
}

static int is_self(const tr_actor_id *id) {
    pthread_mutex_lock(&self_mu);
    int r = self_known && memcmp(self_id.b, id->b, 16) == 0;
    pthread_mutex_unlock(&self_mu);
    return r;
}

int tr__tasks_create(tr__nodeconn *node, tr__actors *actors, tr__objects *objects,
                     tr__tasks **out) {
    tr__tasks *t = calloc(1, sizeof *t);
    if (!t) return tr__err(TR_ENOMEM, "task pool");
    t->node = node;
    t->actors = actors;
    t->objects = objects;
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

void tr__tasks_destroy(tr__tasks *t) {
    if (!t) return;
    for (pool *p = t->pools, *n; p; p = n) {
        n = p->next;
        for (size_t i = 0; i < p->n_res; i++)
            free(p->res_names[i]);
        free(p->members);
        free(p->board);
        free(p);
    }
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static int res_cmp(const void *a, const void *b) {
    return strcmp(((const tr_resource *)a)->name, ((const tr_resource *)b)->name);
}

/* The pool of a shape, made if need be. Called with t->mu held. */
static int find_pool(tr__tasks *t, const tr_task_options *o, pool **out) {
    if (o->n_resources > MAX_RES)
        return tr__err(TR_EINVAL, "tr_task_submit: more than %d resources", MAX_RES);
    tr_resource res[MAX_RES];
    for (size_t i = 0; i < o->n_resources; i++) {
        res[i] = o->resources[i];
        if (!res[i].name || !*res[i].name || strlen(res[i].name) > 64 ||
            strpbrk(res[i].name, "/=") || !(res[i].quantity > 0))
            return tr__err(TR_EINVAL,
                           "tr_task_submit: resource %zu needs a name (no '/' or "
                           "'=', up to 64 bytes) and a quantity > 0",
                           i);
    }
    qsort(res, o->n_resources, sizeof *res, res_cmp);
    char key[400];
    int k = snprintf(key, sizeof key, "c%g/g%g", o->num_cpus, o->num_gpus);
    for (size_t i = 0; i < o->n_resources && k > 0 && (size_t)k < sizeof key; i++)
        k += snprintf(key + k, sizeof key - (size_t)k, "/%s=%g", res[i].name, res[i].quantity);
    static const tr_pg_id none;
    if (memcmp(o->placement_group.b, none.b, 16) != 0 && k > 0 && (size_t)k < sizeof key) {
        char hex[33];
        tr__hex(o->placement_group.b, 16, hex);
        k += snprintf(key + k, sizeof key - (size_t)k, "/pg%s.%d", hex, o->bundle_index);
    }
    if (k <= 0 || (size_t)k >= 200) return tr__err(TR_EINVAL, "tr_task_submit: shape too long");
    for (pool *p = t->pools; p; p = p->next)
        if (strcmp(p->key, key) == 0) {
            *out = p;
            return 0;
        }
    pool *p = calloc(1, sizeof *p);
    if (!p) return tr__err(TR_ENOMEM, "task pool");
    memcpy(p->key, key, (size_t)k + 1); /* (k < 200) */
    p->cpus = o->num_cpus;
    p->num_gpus = o->num_gpus;
    p->pg = o->placement_group;
    p->bundle = o->bundle_index;
    for (size_t i = 0; i < o->n_resources; i++) {
        if (!(p->res_names[i] = strdup(res[i].name))) {
            for (size_t j = 0; j < i; j++)
                free(p->res_names[j]);
            free(p);
            return tr__err(TR_ENOMEM, "task pool");
        }
        p->res[i].name = p->res_names[i];
        p->res[i].quantity = res[i].quantity;
    }
    p->n_res = o->n_resources;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    double per = o->num_cpus >= 1 ? o->num_cpus : 1;
    size_t base = (size_t)((ncpu > 0 ? (double)ncpu : 1.0) / per);
    p->limit = base ? base : 1;
    pthread_mutex_lock(&self_mu);
    if (self_known) p->limit = p->limit * NESTED_FACTOR + 1; /* (+1: never ourselves) */
    pthread_mutex_unlock(&self_mu);
    p->next = t->pools;
    t->pools = p;
    *out = p;
    return 0;
}

static void member_name(const pool *p, size_t k, char *out, size_t cap) {
    snprintf(out, cap, "__troupe_pool/%s/%zu", p->key, k);
}

static int add_member(pool *p, const tr_actor_id *id) {
    if (p->n == p->cap) {
        size_t c = p->cap ? p->cap * 2 : 8;
        tr_actor_id *v = realloc(p->members, c * sizeof *v);
        if (!v) return tr__err(TR_ENOMEM, "task pool");
        p->members = v;
        tr__seg_board **b = realloc(p->board, c * sizeof *b);
        if (!b) return tr__err(TR_ENOMEM, "task pool");
        p->board = b;
        p->cap = c;
    }
    p->board[p->n] = NULL;
    p->members[p->n++] = *id;
    return 0;
}

/* Starts member k (or finds it, if another process started it). Called with t->mu held. */
static int start_member(tr__tasks *t, pool *p) {
    char name[300];
    member_name(p, p->n, name, sizeof name);
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT;
    o.num_cpus = 0;           /* CPUs are not reserved: the pool's size is their count */
    o.num_gpus = p->num_gpus; /* (its devices: given at its start, for its life) */
    /* its custom resources are reserved for its life too (they bound how many members,
     * and so tasks, the node runs at once), and its CPUs count as in use at the node while
     * it runs a task (Ray's available_resources() inside a task); an actor or a group
     * waiting for what idle members hold has them end (actor/directory.c) */
    o.resources = p->n_res ? p->res : NULL;
    o.n_resources = p->n_res;
    static const tr_pg_id none;
    int in_pg = memcmp(p->pg.b, none.b, 16) != 0;
    tr__res task_res = {0};
    int rc = p->cpus > 0 && !in_pg ? tr__res_add(&task_res, "CPU", p->cpus) : 0;
    if (rc) return tr__err_wrap(rc, "starting a task worker (%s)", name);
    o.name = name;
    o.max_restarts = -1; /* a worker a task crashed comes back for the next tasks */
    o.detached = 1;      /* shared by every process: none of them owns it */
    o.placement_group = p->pg;
    o.bundle_index = p->bundle;
    tr_actor_id id;
    rc = tr__actor_create_task_worker(t->node, &o, &task_res, &id);
    if (rc == TR_EEXIST) rc = tr__actor_by_name(t->node, NULL, name, &id);
    if (rc) return tr__err_wrap(rc, "starting a task worker (%s)", name);
    return add_member(p, &id);
}

/* The members other processes started before us. Called with t->mu held. */
static void discover(tr__tasks *t, pool *p) {
    p->discovered = 1;
    while (p->n < p->limit) {
        char name[300];
        member_name(p, p->n, name, sizeof name);
        tr_actor_id id;
        if (tr__actor_by_name(t->node, NULL, name, &id) || add_member(p, &id)) break;
    }
}

/* Whether member i runs a task now, and whether that task waits for results (its threads
 * blocked in tr_get or tr_wait), as the node's notice board says (0 if it is not on this
 * node's board). Its entry is looked up (under the store's lock) only until found, and
 * again if it has changed hands (its worker died): a read of it is a load. */
static int running(tr__tasks *t, pool *p, size_t i, int *blocked) {
    uint64_t key = tr__id_key(p->members[i].b);
    tr__seg_board *e = p->board[i];
    if ((!e || __atomic_load_n(&e->key, __ATOMIC_RELAXED) != key) && t->objects)
        e = p->board[i] = tr__objects_board(t->objects, key, 0);
    *blocked = e && __atomic_load_n(&e->blocked, __ATOMIC_RELAXED) > 0;
    return e && __atomic_load_n(&e->busy, __ATOMIC_RELAXED) != 0;
}

/* The member a task goes to: one with nothing pending from us and no task running (the
 * node's board: a parent waiting for its children runs one), never this process itself;
 * else a new one while the members not waiting for results are fewer than the pool's
 * size (a task queued behind a parent that waits might be the child it waits for);
 * else the one with the fewest calls pending from us, one that does not wait if any. */
static int pick(tr__tasks *t, pool *p, tr_actor_id *out) {
    if (!p->discovered) discover(t, p);
    for (;;) {
        size_t best = SIZE_MAX, best_pending = SIZE_MAX, n_blocked = 0;
        int best_blocked = 1;
        for (size_t i = 0; i < p->n; i++) {
            if (is_self(&p->members[i])) continue;
            int blocked;
            size_t pending = tr__actors_pending(t->actors, p->members[i]);
            int run = running(t, p, i, &blocked);
            if (pending == 0 && run) pending = 1; /* (another's) */
            blocked = blocked && run;
            n_blocked += (size_t)blocked;
            if (best == SIZE_MAX || (best_blocked && !blocked) ||
                (blocked == best_blocked && pending < best_pending)) {
                best = i;
                best_pending = pending;
                best_blocked = blocked;
            }
            if (pending == 0) break;
        }
        if (best_pending == 0 || p->n - n_blocked >= p->limit || p->n >= POOL_MAX) {
            if (best == SIZE_MAX) return tr__err(TR_ERESOURCES, "tr_task_submit: no task worker");
            *out = p->members[best];
            return 0;
        }
        /* all busy: the next member (started now, or found: another process started it,
         * and if it is busy too, the loop goes on to the one after) */
        int rc = start_member(t, p);
        if (rc && best == SIZE_MAX) return rc;
        if (rc) {
            *out = p->members[best];
            return 0;
        }
    }
}

int tr__tasks_submit(tr__tasks *t, const char *ns, const char *fn, const void *args, size_t len,
                     const tr_ref *refs, size_t n_refs, const tr_task_options *opts,
                     size_t n_returns, tr_ref *out) {
    if (!fn || !*fn || strlen(fn) > 255 || !out || (!args && len) || (!refs && n_refs))
        return tr__err(TR_EINVAL, "tr_task_submit: a function name of 1..255 bytes, out, and "
                                  "args/refs when their lengths are not 0");
    if (strncmp(fn, "__troupe_", 9) == 0 || strchr(fn, TASK_NS_SEP))
        return tr__err(TR_EINVAL, "tr_task_submit: names starting __troupe_ are troupe's, "
                                  "and a name holds no byte 0x1f");
    char method[2 * 256 + 2];
    if (ns && *ns) {
        if (strlen(ns) > 255 || strchr(ns, TASK_NS_SEP))
            return tr__err(TR_EINVAL, "tr_task_submit: a namespace of up to 255 bytes, no 0x1f");
        snprintf(method, sizeof method, "%s%c%s", fn, TASK_NS_SEP, ns);
        fn = method;
    }
    tr_task_options o = TR_TASK_OPTIONS_INIT;
    if (opts) {
        int rc = tr__struct_in(&o, sizeof o, opts, TR__SIZE_UPTO(tr_task_options, n_contained),
                               "tr_task_submit");
        if (rc) return rc;
    }
    if (!(o.num_cpus >= 0 && o.num_cpus <= 1e6) || !(o.num_gpus >= 0 && o.num_gpus <= 1e6) ||
        (!o.resources && o.n_resources) || (!o.contained && o.n_contained) || o.max_retries < -1)
        return tr__err(TR_EINVAL, "tr_task_submit: bad options (num_cpus, num_gpus >= 0; "
                                  "max_retries >= -1)");
    pthread_mutex_lock(&t->mu);
    pool *p = NULL;
    tr_actor_id member;
    int rc = find_pool(t, &o, &p);
    if (!rc) rc = pick(t, p, &member);
    pthread_mutex_unlock(&t->mu);
    if (rc) return rc;
    return tr__actors_submit(t->actors, member, fn, args, len, refs, n_refs, o.contained,
                             o.n_contained, 1, o.max_retries, n_returns, out);
}
