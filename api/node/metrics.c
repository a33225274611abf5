/* api/node/metrics.c - the node's Prometheus metrics (metrics.h). */
#include "api/node/metrics.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "actor/protocol.h"
#include "actor/tasks.h"
#include "core/clock.h"
#include "core/ids.h"
#include "core/idmap.h"
#include "core/status.h"
#include "core/trace.h"
#include "objectstore/segment.h"

/* Calls of one class: what its workers counted (live ones' at a scrape, exited ones'
 * kept). */
typedef struct calls {
    char *cls;
    tr__hist h;
} calls;

struct tr__metrics {
    tr__metrics_src src;
    calls *retired; /* by class: workers gone */
    size_t n_retired, cap_retired;
    tr__idmap cpu_seen; /* actor key -> (double *) its worker's CPU seconds at the last scrape */
    double retired_cpu; /* CPU seconds of workers gone (as last seen) */
    tr__coll_counters retired_coll; /* collective ops of workers gone */
    double start_time;              /* the node's, in seconds since the epoch */
    char trace_dir[700];
    tr__proc_counters retired_proc; /* what the trace files removed since counted */
};

int tr__metrics_create(const tr__metrics_src *src, tr__metrics **out) {
    tr__metrics *m = calloc(1, sizeof *m);
    if (!m) return tr__err(TR_ENOMEM, "metrics");
    m->src = *src;
    snprintf(m->trace_dir, sizeof m->trace_dir, "%s", src->trace_dir ? src->trace_dir : "");
    m->src.trace_dir = m->trace_dir;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->start_time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    *out = m;
    return 0;
}

void tr__metrics_destroy(tr__metrics *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_retired; i++)
        free(m->retired[i].cls);
    free(m->retired);
    size_t pos = 0;
    uint64_t key;
    void *v;
    while (tr__idmap_next(&m->cpu_seen, &pos, &key, &v))
        free(v);
    tr__idmap_free(&m->cpu_seen);
    free(m);
}

/* The entry of class cls in a list (made if missing; NULL: no memory). */
static calls *calls_of(calls **list, size_t *n, size_t *cap, const char *cls) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*list)[i].cls, cls) == 0) return &(*list)[i];
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 8;
        calls *v = realloc(*list, c * sizeof *v);
        if (!v) return NULL;
        *list = v;
        *cap = c;
    }
    calls *e = &(*list)[*n];
    memset(e, 0, sizeof *e);
    if (!(e->cls = strdup(cls))) return NULL;
    ++*n;
    return e;
}

void tr__metrics_worker_exited(void *ctx, const uint8_t id[16], const char *cls) {
    tr__metrics *m = ctx;
    uint64_t key = tr__id_key(id);
    double *seen = tr__idmap_del(&m->cpu_seen, key);
    if (seen) m->retired_cpu += *seen;
    free(seen);
    tr__seg_board *b = tr__store_board(m->src.store, key);
    if (!b) return;
    calls *c = calls_of(&m->retired, &m->n_retired, &m->cap_retired, cls);
    /* (its next worker, a restart, claims the entry and starts from zero; until then
     * nothing is counted twice: taken and cleared) */
    tr__hist dropped;
    memset(&dropped, 0, sizeof dropped);
    tr__hist_sum(c ? &c->h : &dropped, &b->call, 1);
    tr__cnt_coll_add(&m->retired_coll, &b->coll, 1);
}

/* ---- /proc ---------------------------------------------------------------------- */

/* A process's CPU seconds (user + system) and resident bytes: 0 where it cannot be read. */
static int proc_usage(pid_t pid, double *cpu, double *rss) {
    char path[64], buf[1024];
    *cpu = *rss = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* (the command may hold spaces and parentheses) */
    unsigned long long utime = 0, stime = 0;
    long long rss_pages = 0;
    /* after ')': state(3) ... utime(14) stime(15) ... rss(24) */
    if (!p || sscanf(p + 2,
                     "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
                     "%*d %*u %*u %lld",
                     &utime, &stime, &rss_pages) != 3)
        return 0;
    long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    *cpu = (double)(utime + stime) / (double)(tick > 0 ? tick : 100);
    *rss = (double)rss_pages * (double)(page > 0 ? page : 4096);
    return 1;
}

/* ---- the exposition --------------------------------------------------------------- */

#define emit tr__buf_printf

static void family(tr__buf *b, const char *name, const char *type, const char *help) {
    emit(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value, escaped as the text format wants (\\, \", \n). */
static void label_value(tr__buf *b, const char *v) {
    for (const char *p = v ? v : ""; *p; p++) {
        if (*p == '\\' || *p == '"')
            tr__buf_append(b, "\\", 1), tr__buf_append(b, p, 1);
        else if (*p == '\n')
            tr__buf_append(b, "\\n", 2);
        else
            tr__buf_append(b, p, 1);
    }
}

/* name{class="cls"} value (no class: name value). */
static void sample_u64(tr__buf *b, const char *name, const char *cls, uint64_t v) {
    tr__buf_append(b, name, strlen(name));
    if (cls) {
        tr__buf_append(b, "{class=\"", 8);
        label_value(b, cls);
        tr__buf_append(b, "\"}", 2);
    }
    emit(b, " %llu\n", (unsigned long long)v);
}

/* A histogram's samples: name_bucket{LKEY="LVAL",le=...}, _sum, _count (no LKEY: none). */
static void histogram(tr__buf *b, const char *name, const char *lkey, const char *lval,
                      const tr__hist *h) {
    uint64_t cum = 0;
    for (int i = 0; i < TR__HIST_BUCKETS; i++) {
        cum += h->bucket[i];
        emit(b, "%s_bucket{", name);
        if (lkey) {
            emit(b, "%s=\"", lkey);
            label_value(b, lval);
            tr__buf_append(b, "\",", 2);
        }
        if (i < TR__HIST_BUCKETS - 1)
            emit(b, "le=\"%g\"} %llu\n", (double)tr__hist_bound_ns[i] / 1e9,
                 (unsigned long long)cum);
        else
            emit(b, "le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    for (int k = 0; k < 2; k++) {
        emit(b, "%s_%s", name, k ? "count" : "sum");
        if (lkey) {
            emit(b, "{%s=\"", lkey);
            label_value(b, lval);
            tr__buf_append(b, "\"}", 2);
        }
        if (k)
            emit(b, " %llu\n", (unsigned long long)cum);
        else
            emit(b, " %.9f\n", (double)h->ns / 1e9);
    }
}

/* The board entry of an actor's worker alive now (NULL: none, or another process's). */
static tr__seg_board *live_board(const tr__metrics *m, const tr__actor_view *a) {
    if (!a->pid) return NULL;
    tr__seg_board *b = tr__store_board(m->src.store, tr__id_key(a->id));
    return b && (pid_t)__atomic_load_n(&b->pid, __ATOMIC_RELAXED) == a->pid ? b : NULL;
}

/* A scrape's walk over the directory: actors by state, calls by class, workers' usage. */
typedef struct walk {
    tr__metrics *m;
    uint64_t by_state[TR__ACTOR_DEAD + 1];
    calls *live; /* by class: retired + live workers' boards */
    size_t n_live, cap_live;
    double workers_cpu, workers_rss;
    int workers;
    tr__coll_counters coll; /* retired + live workers' */
} walk;

static void on_actor(void *ctx, const tr__actor_view *a) {
    walk *w = ctx;
    if (a->state >= 0 && a->state <= TR__ACTOR_DEAD) w->by_state[a->state]++;
    if (!a->pid) return; /* (no worker now: what it counted is retired, or nothing) */
    uint64_t key = tr__id_key(a->id);
    tr__seg_board *b = live_board(w->m, a);
    if (b) {
        calls *c = calls_of(&w->live, &w->n_live, &w->cap_live, a->cls);
        if (c) tr__hist_sum(&c->h, &b->call, 0);
        tr__cnt_coll_add(&w->coll, &b->coll, 0);
    }
    double cpu, rss;
    if (!proc_usage(a->pid, &cpu, &rss)) return;
    w->workers++;
    w->workers_cpu += cpu;
    w->workers_rss += rss;
    double *seen = tr__idmap_get(&w->m->cpu_seen, key);
    if (!seen && (seen = malloc(sizeof *seen)) && tr__idmap_put(&w->m->cpu_seen, key, seen)) {
        free(seen);
        seen = NULL;
    }
    if (seen) *seen = cpu;
}

static void calls_families(tr__buf *b, const walk *w, int tasks) {
    const char *total = tasks ? "troupe_tasks_total" : "troupe_calls_total";
    const char *errors = tasks ? "troupe_task_errors_total" : "troupe_call_errors_total";
    const char *dur = tasks ? "troupe_task_duration_seconds" : "troupe_call_duration_seconds";
    family(b, total, "counter",
           tasks ? "Remote functions (tasks) run on this node's workers."
                 : "Actor method calls run on this node's workers, by actor class.");
    for (size_t i = 0; i < w->n_live; i++)
        if ((strcmp(w->live[i].cls, TR__TASKS_CLASS) == 0) == tasks)
            sample_u64(b, total, tasks ? NULL : w->live[i].cls, w->live[i].h.n);
    family(b, errors, "counter",
           tasks ? "Tasks that failed (raised, or returned an error)."
                 : "Calls that failed (the method raised or returned an error), by class.");
    for (size_t i = 0; i < w->n_live; i++)
        if ((strcmp(w->live[i].cls, TR__TASKS_CLASS) == 0) == tasks)
            sample_u64(b, errors, tasks ? NULL : w->live[i].cls, w->live[i].h.errors);
    family(b, dur, "histogram",
           tasks ? "How long tasks ran in their workers."
                 : "How long calls ran in their actors' workers, by class.");
    for (size_t i = 0; i < w->n_live; i++)
        if ((strcmp(w->live[i].cls, TR__TASKS_CLASS) == 0) == tasks)
            histogram(b, dur, tasks ? NULL : "class", w->live[i].cls, &w->live[i].h);
}

static const char *const backend_names[TR__CNT_BACKENDS] = {"shm", "gloo", "nccl", "other"};

/* Collective ops by backend and kind (the kinds a backend ran), and failures by backend. */
static void collective_families(tr__buf *b, const tr__coll_counters *c) {
    static const struct {
        const char *name, *help;
        size_t off;
        double scale;
    } per_op[] = {
        {"troupe_collective_ops_total",
         "Collective ops this node's workers ran, by backend and op.",
         offsetof(tr__coll_counters, ops), 1},
        {"troupe_collective_bytes_total",
         "Bytes each rank gave its collective ops (count times "
         "the dtype's size), by backend and op.",
         offsetof(tr__coll_counters, bytes), 1},
        {"troupe_collective_seconds_total",
         "Time collective ops took on their ranks, by backend "
         "and op (over ops_total: the mean latency).",
         offsetof(tr__coll_counters, ns), 1e-9},
    };
    for (size_t f = 0; f < sizeof per_op / sizeof *per_op; f++) {
        family(b, per_op[f].name, "counter", per_op[f].help);
        const uint64_t(*v)[TR__CNT_OPS] =
            (const uint64_t(*)[TR__CNT_OPS])((const char *)c + per_op[f].off);
        for (int be = 0; be < TR__CNT_BACKENDS; be++)
            for (int k = 1; k < TR__CNT_OPS; k++) {
                if (!c->ops[be][k]) continue; /* (the kinds each backend ran) */
                if (per_op[f].scale == 1)
                    emit(b, "%s{backend=\"%s\",op=\"%s\"} %llu\n", per_op[f].name,
                         backend_names[be], tr__coll_op_name((unsigned)k),
                         (unsigned long long)v[be][k]);
                else
                    emit(b, "%s{backend=\"%s\",op=\"%s\"} %.9f\n", per_op[f].name,
                         backend_names[be], tr__coll_op_name((unsigned)k),
                         (double)v[be][k] * per_op[f].scale);
            }
    }
    static const struct {
        const char *name, *help;
        size_t off;
    } per_backend[] = {
        {"troupe_collective_errors_total", "Collective ops that failed, by backend.",
         offsetof(tr__coll_counters, errors)},
        {"troupe_collective_timeouts_total", "Collective ops that timed out, by backend.",
         offsetof(tr__coll_counters, timeouts)},
        {"troupe_collective_peer_deaths_total",
         "Collective ops that ended because a peer rank died, by backend.",
         offsetof(tr__coll_counters, peer_deaths)},
    };
    for (size_t f = 0; f < sizeof per_backend / sizeof *per_backend; f++) {
        family(b, per_backend[f].name, "counter", per_backend[f].help);
        const uint64_t *v = (const uint64_t *)((const char *)c + per_backend[f].off);
        for (int be = 0; be < TR__CNT_BACKENDS; be++)
            emit(b, "%s{backend=\"%s\"} %llu\n", per_backend[f].name, backend_names[be],
                 (unsigned long long)v[be]);
    }
}

typedef struct totals {
    tr__metrics *m;
    uint64_t calls, coll, alive;
} totals;

static void total_actor(void *ctx, const tr__actor_view *a) {
    totals *t = ctx;
    t->alive += a->state == TR__ACTOR_ALIVE;
    tr__seg_board *b = live_board(t->m, a);
    if (!b) return;
    t->calls += __atomic_load_n(&b->call.n, __ATOMIC_RELAXED);
    for (int be = 0; be < TR__CNT_BACKENDS; be++)
        for (int k = 0; k < TR__CNT_OPS; k++)
            t->coll += __atomic_load_n(&b->coll.ops[be][k], __ATOMIC_RELAXED);
}

void tr__metrics_totals(tr__metrics *m, uint64_t *calls, uint64_t *coll_ops, uint64_t *alive) {
    totals t = {m, 0, 0, 0};
    for (size_t i = 0; i < m->n_retired; i++)
        t.calls += m->retired[i].h.n;
    for (int be = 0; be < TR__CNT_BACKENDS; be++)
        for (int k = 0; k < TR__CNT_OPS; k++)
            t.coll += m->retired_coll.ops[be][k];
    tr__directory_each(*m->src.dir, total_actor, &t);
    *calls = t.calls;
    *coll_ops = t.coll;
    *alive = t.alive;
}

void tr__metrics_prune(tr__metrics *m) {
    if (m->trace_dir[0]) tr__trace_prune(m->trace_dir, &m->retired_proc);
}

/* What every process of the node counted in its trace file (core/trace.h): pending calls,
 * pulls, RPC errors, compiled graphs, collective ops' durations. */
static void process_families(tr__buf *b, const tr__metrics *m) {
    tr__proc_counters p = m->retired_proc;
    int64_t pending = 0;
    if (m->trace_dir[0]) tr__trace_counters(m->trace_dir, &p, &pending);
    family(b, "troupe_calls_pending", "gauge",
           "Calls to actors that this node's processes made and that have not completed "
           "(held for their arguments, queued or running).");
    emit(b, "troupe_calls_pending %lld\n", (long long)pending);
    static const struct {
        const char *name, *help;
        size_t off;
    } u[] = {
        {"troupe_object_pulls_total", "Objects pulled from other nodes by this node's processes.",
         offsetof(tr__proc_counters, pulls)},
        {"troupe_object_pulled_bytes_total", "Bytes pulled from other nodes.",
         offsetof(tr__proc_counters, pull_bytes)},
        {"troupe_object_pull_errors_total", "Pulls that failed.",
         offsetof(tr__proc_counters, pull_errors)},
        {"troupe_rpc_errors_total",
         "gRPC calls and streams between nodes that failed, as this node's processes saw them.",
         offsetof(tr__proc_counters, rpc_errors)},
        {"troupe_graph_executions_total",
         "Compiled graphs' executions begun by this node's drivers.",
         offsetof(tr__proc_counters, graph_execs)},
    };
    for (size_t i = 0; i < sizeof u / sizeof *u; i++) {
        family(b, u[i].name, "counter", u[i].help);
        sample_u64(b, u[i].name, NULL, *(const uint64_t *)((const char *)&p + u[i].off));
    }
    family(b, "troupe_graph_step_seconds", "histogram",
           "How long compiled graphs' steps ran in this node's workers (their inputs' waits "
           "not counted).");
    histogram(b, "troupe_graph_step_seconds", NULL, NULL, &p.steps);
    family(b, "troupe_collective_op_seconds", "histogram",
           "How long collective ops took on each rank of this node, by backend.");
    for (int be = 0; be < TR__CNT_BACKENDS; be++)
        if (p.coll[be].n)
            histogram(b, "troupe_collective_op_seconds", "backend", backend_names[be], &p.coll[be]);
}

void tr__metrics_render(tr__metrics *m, tr__buf *b) {
    walk w = {.m = m};
    w.coll = m->retired_coll;
    for (size_t i = 0; i < m->n_retired; i++) { /* what workers gone counted */
        calls *c = calls_of(&w.live, &w.n_live, &w.cap_live, m->retired[i].cls);
        if (!c) continue;
        tr__hist_sum(&c->h, &m->retired[i].h, 0);
    }
    tr__directory_each(*m->src.dir, on_actor, &w);
    int has_tasks = 0;
    for (size_t i = 0; i < w.n_live; i++)
        has_tasks |= strcmp(w.live[i].cls, TR__TASKS_CLASS) == 0;

    family(b, "troupe_actors", "gauge", "Actors this node runs or remembers, by state.");
    for (int s = 0; s <= TR__ACTOR_DEAD; s++) {
        if (s == TR__ACTOR_DEAD && !w.by_state[s]) continue;
        emit(b, "troupe_actors{state=\"%s\"} %llu\n", tr__actor_state_name(s),
             (unsigned long long)w.by_state[s]);
    }
    tr__directory_totals t;
    tr__directory_totals_get(*m->src.dir, &t);
    family(b, "troupe_actors_created_total", "counter", "Actors created on this node.");
    sample_u64(b, "troupe_actors_created_total", NULL, t.created);
    family(b, "troupe_actor_restarts_total", "counter",
           "Actor restarts on this node (a worker died and max_restarts allowed another).");
    sample_u64(b, "troupe_actor_restarts_total", NULL, t.restarts);
    family(b, "troupe_actors_died_total", "counter", "Actors that died for good on this node.");
    sample_u64(b, "troupe_actors_died_total", NULL, t.died);
    calls_families(b, &w, 0);
    if (has_tasks) calls_families(b, &w, 1);

    tr__store_metrics s;
    tr__store_metrics_get(m->src.store, &s);
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } store[] = {
        {"troupe_object_store_capacity_bytes", "gauge", "The object store's capacity.",
         offsetof(tr__store_metrics, capacity)},
        {"troupe_object_store_used_bytes", "gauge",
         "Bytes of the store's blocks in use (objects, their headers and padding).",
         offsetof(tr__store_metrics, bytes_used)},
        {"troupe_object_store_object_bytes", "gauge", "Bytes of the objects in the store.",
         offsetof(tr__store_metrics, bytes_objects)},
        {"troupe_object_store_objects", "gauge", "Objects in the store (spilled ones too).",
         offsetof(tr__store_metrics, objects)},
        {"troupe_object_store_spilled_bytes", "gauge", "Bytes of objects spilled to disk now.",
         offsetof(tr__store_metrics, bytes_spilled)},
        {"troupe_object_store_pinned_bytes", "gauge",
         "Bytes of objects a process is reading now (views: they cannot be spilled).",
         offsetof(tr__store_metrics, bytes_pinned)},
        {"troupe_object_store_spills_total", "counter", "Objects spilled to disk.",
         offsetof(tr__store_metrics, spills)},
        {"troupe_object_store_restores_total", "counter", "Spilled objects read back.",
         offsetof(tr__store_metrics, restores)},
    };
    for (size_t i = 0; i < sizeof store / sizeof *store; i++) {
        family(b, store[i].name, store[i].type, store[i].help);
        sample_u64(b, store[i].name, NULL, *(const uint64_t *)((const char *)&s + store[i].off));
    }

    family(b, "troupe_collective_groups", "gauge", "Collective groups declared on this node.");
    sample_u64(b, "troupe_collective_groups", NULL, tr__groups_count(m->src.groups));
    collective_families(b, &w.coll);
    process_families(b, m);
    int alive, lost;
    if (tr__cluster_node_counts(*m->src.cluster, &alive, &lost)) {
        family(b, "troupe_cluster_nodes", "gauge",
               "The cluster's nodes, by state (the head's table; drivers' nodes not counted).");
        emit(b,
             "troupe_cluster_nodes{state=\"alive\"} %d\ntroupe_cluster_nodes{state=\"lost\"} %d\n",
             alive, lost);
    }

    double cpu, rss;
    proc_usage(getpid(), &cpu, &rss);
    family(b, "process_cpu_seconds_total", "counter",
           "The node process's CPU time (user + system).");
    emit(b, "process_cpu_seconds_total %.2f\n", cpu);
    family(b, "process_resident_memory_bytes", "gauge", "The node process's resident memory.");
    emit(b, "process_resident_memory_bytes %.0f\n", rss);
    family(b, "process_start_time_seconds", "gauge", "When the node started (Unix time).");
    emit(b, "process_start_time_seconds %.3f\n", m->start_time);
    family(b, "troupe_workers", "gauge", "Worker processes of this node alive now.");
    sample_u64(b, "troupe_workers", NULL, (uint64_t)m->src.pool->live);
    family(b, "troupe_workers_cpu_seconds_total", "counter",
           "CPU time of this node's worker processes, those gone included (as last seen).");
    emit(b, "troupe_workers_cpu_seconds_total %.2f\n", w.workers_cpu + m->retired_cpu);
    family(b, "troupe_workers_resident_memory_bytes", "gauge",
           "Resident memory of this node's worker processes alive now, summed.");
    emit(b, "troupe_workers_resident_memory_bytes %.0f\n", w.workers_rss);

    for (size_t i = 0; i < w.n_live; i++)
        free(w.live[i].cls);
    free(w.live);
}
