/* api/runtime.c - tr_init/tr_shutdown and the public entry points that forward to the
 * layers: the driver side, the role dispatch (node, worker), the embedded node's start. */
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actor/calls.h"
#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/worker.h"
#include "api/node/node.h"
#include "api/rt.h"
#include "core/abi.h"
#include "core/affinity.h"
#include "dag/exec.h"
#include "dag/plan.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/config.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/kv.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/sched.h"
#include "core/status.h"
#include "core/trace.h"
#include "objectstore/allreduce.h"
#include "objectstore/client.h"

#define NODE_START_TIMEOUT_MS 10000
#define NODE_STOP_TIMEOUT_MS 8000
#define RPC_MS 10000
#define REMOTE_HOLD_MS 10000 /* a node's answer to a remote hold (tr_ref_borrow), at most */

/* The embedded node: this executable, spawned as the node role (api/node.c). */
static int start_embedded_node(const tr_config *cfg, pid_t *pid, char **address) {
    /* a node that joins a cluster's head may take the join's 10 s first */
    return tr__node_spawn(cfg, NULL, cfg && cfg->cluster_head ? 25000 : NODE_START_TIMEOUT_MS, pid,
                          address);
}

static tr_runtime *runtime_new(void) {
    tr_runtime *rt = calloc(1, sizeof *rt);
    if (rt) {
        pthread_mutex_init(&rt->hooks_mu, NULL);
        pthread_mutex_init(&rt->tasks_mu, NULL);
    }
    return rt;
}

int tr__runtime_on_shutdown(tr_runtime *rt, tr__shutdown_fn fn, void *arg) {
    tr__shutdown_hook *h = malloc(sizeof *h);
    if (!h) return tr__err(TR_ENOMEM, "tr_shutdown hook");
    h->fn = fn;
    h->arg = arg;
    pthread_mutex_lock(&rt->hooks_mu);
    h->next = rt->hooks;
    rt->hooks = h;
    pthread_mutex_unlock(&rt->hooks_mu);
    return 0;
}

void tr__runtime_off_shutdown(tr_runtime *rt, tr__shutdown_fn fn, void *arg) {
    tr__shutdown_hook *gone = NULL;
    pthread_mutex_lock(&rt->hooks_mu);
    for (tr__shutdown_hook **pp = &rt->hooks; *pp; pp = &(*pp)->next)
        if ((*pp)->fn == fn && (*pp)->arg == arg) {
            gone = *pp;
            *pp = gone->next;
            break;
        }
    pthread_mutex_unlock(&rt->hooks_mu);
    free(gone);
}

/* Runs the shutdown hooks, newest first, each taken off the list before it runs (so that
 * what it tears down may call tr__runtime_off_shutdown). */
static void run_shutdown_hooks(tr_runtime *rt) {
    for (;;) {
        pthread_mutex_lock(&rt->hooks_mu);
        tr__shutdown_hook *h = rt->hooks;
        if (h) rt->hooks = h->next;
        pthread_mutex_unlock(&rt->hooks_mu);
        if (!h) return;
        h->fn(h->arg);
        free(h);
    }
}

static void runtime_free(tr_runtime *rt) {
    tr__handles_destroy(rt->handles);
    tr__tasks_destroy(rt->tasks);
    tr__actors_destroy(rt->actors);
    tr__objects_detach(rt->objects);
    tr__nodeconn_close(rt->node);
    tr_config_destroy(rt->cfg);
    free(rt->address);
    pthread_mutex_destroy(&rt->hooks_mu);
    pthread_mutex_destroy(&rt->tasks_mu);
    free(rt);
}

static int connect_runtime(tr_runtime *rt, const char *address, const char *role, int owner) {
    int rc = tr__nodeconn_open(address, rt->cfg->max_msg, &rt->node);
    if (rc) return rc;
    if ((rc = tr__nodeconn_hello(rt->node, role, owner, RPC_MS))) return rc;
    rt->cfg->max_msg = rt->node->max_msg; /* one message limit per node */
    if ((rc = tr__objects_attach(rt->node, &rt->objects))) return rc;
    rc = tr__actors_create(rt->node, rt->objects, rt->cfg->max_msg, &rt->actors);
    if (!rc) rc = tr__handles_create(rt->actors, rt->objects, &rt->handles);
    if (!rc) tr__actors_set_spin(rt->actors, rt->cfg->call_spin_us);
    if (!rc) {
        const char *e = getenv("TROUPE_CALL_RINGS");
        tr__actors_set_rings(rt->actors, e && *e ? strcmp(e, "0") != 0 : rt->cfg->call_rings);
    }
    return rc;
}

/* A worker the node bound to cores (TROUPE_CPUS) pins itself there before it starts any
 * thread, so that every thread it ever has inherits the mask. Best-effort: a failure
 * (cores taken away by a cpuset since) is logged and the worker floats. */
static void bind_cpus(const char *list) {
    if (!list || !*list) return;
    tr__affinity_note_unbound(); /* for helper threads that must not share our core */
    int ids[TR__MAX_CORES];
    int n = tr__cores_parse(list, ids, TR__MAX_CORES);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++)
        CPU_SET(ids[i], &set);
    if (n <= 0 || sched_setaffinity(0, sizeof set, &set) != 0)
        TR_LOG_WARN("WORKER-BIND", "cannot bind to CPUs %s: %s", list,
                    n <= 0 ? "malformed list" : strerror(errno));
}

/* Worker and node processes: run the role and exit. */
static void run_role(const tr_config *cfg, const tr__env *env) {
    tr__log_set_level(tr__config_log_level(cfg, env));
    if (env->role == TR__ROLE_NODE) {
        tr_config *nc;
        if (tr__config_copy(cfg, &nc)) _exit(1);
        if (env->node_config) {
            size_t hl = strlen(env->node_config);
            char *raw = malloc(hl / 2 + 1);
            if (!raw || tr__unhex(env->node_config, hl, raw, hl / 2) ||
                tr__config_decode_node(raw, hl / 2, nc)) {
                TR_LOG_ERROR("NODE-CONFIG", "bad TROUPE_NODE_CONFIG: %s", tr_last_error());
                _exit(1);
            }
            free(raw);
        }
        tr__log_set_level(tr__config_log_level(nc, env));
        /* An embedded node belongs to the driver that spawned it (it said its pid: if our
         * parent is another process now, it is gone already); a standalone one to nobody
         * (its spawner, the troupe command, exits at once). */
        pid_t owner = env->standalone ? 0 : env->owner_pid > 0 ? env->owner_pid : getppid();
        int status = tr__node_main(nc, env->ready_fd, owner);
        tr_config_destroy(nc);
        exit(status);
    }
    /* worker */
    tr__log_set_role("worker");
    bind_cpus(env->cpus);
    tr_runtime *rt = runtime_new();
    if (!rt || tr__config_copy(cfg, &rt->cfg)) _exit(2);
    rt->address = env->node_path ? strdup(env->node_path) : NULL; /* groups connect to it */
    int rc = rt->address ? connect_runtime(rt, rt->address, "worker", 0) : TR_EINVAL;
    if (rc) {
        TR_LOG_ERROR("WORKER-CONNECT", "cannot reach the node: %s", tr_last_error());
        _exit(2);
    }
    if (env->actor_hex &&
        tr__unhex(env->actor_hex, strlen(env->actor_hex), rt->self.b, sizeof rt->self.b) == 0)
        rt->is_actor = 1;
    static const tr__worker_builtin builtins[] = {{TR__DAG_ATTACH, tr__dag_attach}};
    int status = tr__worker_run(rt, rt->node, rt->objects, rt->cfg, rt->address, env->actor_hex,
                                builtins, sizeof builtins / sizeof builtins[0]);
    runtime_free(rt);
    exit(status);
}

TR_API int tr_worker_main(const tr_config *cfg) {
    tr__env env;
    tr__env_read(&env);
    if (env.role == TR__ROLE_DRIVER)
        return tr__err(TR_ESTATE, "tr_worker_main: this process is not a troupe worker");
    tr_config *empty = NULL;
    if (!cfg && tr_config_create(&empty) == 0) cfg = empty;
    if (!cfg) _exit(2);
    run_role(cfg, &env);
    return TR_EINTERNAL; /* not reached */
}

/* The runtime whose node holds this process's trace file (core/trace.h). */
static tr_runtime *trace_owner;

TR_API int tr_init_abi(const tr_config *cfg, tr_runtime **out, unsigned abi) {
    if (!out) return tr__err(TR_EINVAL, "tr_init: out is NULL");
    *out = NULL;
    if (abi != TR_ABI_VERSION)
        return tr__err(TR_EVERSION,
                       "the troupe header has ABI %u, the library %u: rebuild "
                       "against one version",
                       abi, TR_ABI_VERSION);
    tr__env env;
    tr__env_read(&env);
    if (env.role != TR__ROLE_DRIVER) tr_worker_main(cfg);
    tr__log_set_level(tr__config_log_level(cfg, &env));
    signal(SIGPIPE, SIG_IGN);
    tr_runtime *rt = runtime_new();
    if (!rt) return tr__err(TR_ENOMEM, "tr_init");
    int rc = tr__config_copy(cfg, &rt->cfg);
    if (rc) {
        free(rt);
        return rc;
    }
    tr__command_note(rt->cfg); /* workers and the embedded node run its worker_command */
    tr_config *c = rt->cfg;
    if ((rc = tr__config_env_token(c, &env))) {
        runtime_free(rt);
        return rc;
    }
    const char *env_addr = getenv("TROUPE_ADDRESS"); /* (troupe slurm's: its head) */
    if (!c->address && env_addr && env_addr[0] && !(c->address = strdup(env_addr))) {
        runtime_free(rt);
        return tr__err(TR_ENOMEM, "tr_init");
    }
    if (c->address && c->address[0] != '/' && strchr(c->address, ':')) {
        /* "HOST:PORT": a cluster's head. This driver's embedded node joins it, with no CPUs
         * or GPUs of its own unless configured, so that the head places its actors on the
         * cluster's nodes (as a Ray client's); it goes with the driver. */
        free(c->cluster_head);
        c->cluster_head = c->address;
        c->address = NULL;
        if (c->num_cpus < 0) c->num_cpus = 0;
        if (c->num_gpus < 0) c->num_gpus = 0;
        c->cluster_client = 1;
    }
    if (rt->cfg->address) {
        rt->address = strdup(rt->cfg->address);
        rc = rt->address ? 0 : tr__err(TR_ENOMEM, "tr_init");
    } else {
        rc = start_embedded_node(rt->cfg, &rt->node_pid, &rt->address);
    }
    if (!rc) rc = connect_runtime(rt, rt->address, "driver", rt->node_pid != 0);
    if (rc) {
        if (rc != TR_ENOMEM && rc != TR_EINVAL && rc != TR_ECONNECT)
            rc = tr__err_wrap(TR_ECONNECT, "node at %s", rt->address ? rt->address : "?");
        pid_t pid = rt->node_pid;
        runtime_free(rt);
        if (pid) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
        }
        return rc;
    }
    /* (the timeline: this driver's events; the latest runtime's node has them) */
    if (tr__trace_open(rt->address, "driver", program_invocation_short_name, NULL) == 0)
        __atomic_store_n(&trace_owner, rt, __ATOMIC_RELEASE);
    *out = rt;
    tr__err_clear();
    return 0;
}

TR_API void tr_shutdown(tr_runtime *rt) {
    if (!rt) return;
    tr_runtime *own = rt;
    if (__atomic_compare_exchange_n(&trace_owner, &own, NULL, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        tr__trace_close();
    run_shutdown_hooks(rt); /* its compiled graphs first: their actors' loops end */
    pid_t pid = rt->node_pid;
    if (pid && rt->node) tr__nodeconn_call(rt->node, TR__MSG_SHUTDOWN, NULL, 2000, NULL);
    char *addr = rt->address;
    rt->address = NULL;
    runtime_free(rt); /* closing the owner connection also stops an embedded node */
    if (pid) {
        int64_t deadline = tr__deadline(NODE_STOP_TIMEOUT_MS);
        for (;;) {
            pid_t r = waitpid(pid, NULL, WNOHANG);
            if (r == pid || (r < 0 && errno != EINTR)) break;
            if (tr__now_ns() >= deadline) {
                TR_LOG_WARN("SHUTDOWN-KILL", "embedded node %d did not stop; killing it", (int)pid);
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                break;
            }
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
    }
    free(addr);
    tr__log_flush_limits();
}

TR_API const char *tr_runtime_address(const tr_runtime *rt) {
    return rt ? rt->address : NULL;
}

#define CHECK_RT(rt, fn)                                                                           \
    do {                                                                                           \
        if (!(rt)) return tr__err(TR_EINVAL, fn ": runtime is NULL");                              \
    } while (0)

TR_API int tr_timeline_dump(tr_runtime *rt, const char *path) {
    CHECK_RT(rt, "tr_timeline_dump");
    if (!path) return tr__err(TR_EINVAL, "tr_timeline_dump: path is NULL");
    const char *slash = rt->address ? strrchr(rt->address, '/') : NULL;
    if (!slash) return tr__err(TR_EINVAL, "tr_timeline_dump: no node on this machine");
    char dir[700];
    snprintf(dir, sizeof dir, "%.*s/%s", (int)(slash - rt->address), rt->address, TR__TRACE_DIR);
    tr__buf b = TR__BUF_INIT;
    int rc = tr__trace_timeline(dir, &b);
    FILE *f = rc ? NULL : fopen(path, "we");
    if (!rc && !f) rc = tr__err(TR_EIO, "tr_timeline_dump: %s: %s", path, strerror(errno));
    if (f) {
        int bad = fwrite(b.data, 1, b.len, f) != b.len;
        if ((fclose(f) != 0 || bad) && !rc)
            rc = tr__err(TR_EIO, "tr_timeline_dump: writing %s: %s", path, strerror(errno));
    }
    tr__buf_free(&b);
    return rc;
}

TR_API int tr_node_status(tr_runtime *rt, char **json_out) {
    CHECK_RT(rt, "tr_node_status");
    if (!json_out) return tr__err(TR_EINVAL, "tr_node_status: json_out is NULL");
    *json_out = NULL;
    tr__reply r;
    int rc = tr__nodeconn_call(rt->node, TR__MSG_STATUS, NULL, RPC_MS, &r);
    if (rc) return rc;
    const char *p;
    size_t n;
    rc = tr__get_str(r.root, "json", &p, &n);
    if (!rc) {
        *json_out = malloc(n + 1);
        if (!*json_out) {
            rc = tr__err(TR_ENOMEM, "status");
        } else {
            memcpy(*json_out, p, n);
            (*json_out)[n] = '\0';
        }
    }
    tr__reply_free(&r);
    return rc;
}

TR_API int tr_kv_put(tr_runtime *rt, const char *key, const void *value, size_t len) {
    CHECK_RT(rt, "tr_kv_put");
    return tr__kv_client_put(rt->node, key, value, len);
}

TR_API int tr_kv_get(tr_runtime *rt, const char *key, void **value, size_t *len) {
    CHECK_RT(rt, "tr_kv_get");
    return tr__kv_client_get(rt->node, key, value, len);
}

TR_API int tr_kv_del(tr_runtime *rt, const char *key) {
    CHECK_RT(rt, "tr_kv_del");
    return tr__kv_client_del(rt->node, key);
}

TR_API void tr_actor_options_init(tr_actor_options *opts) {
    if (!opts) return;
    tr_actor_options def = TR_ACTOR_OPTIONS_INIT;
    *opts = def;
}

TR_API char *tr_actor_id_str(tr_actor_id id, char *buf) {
    if (buf) tr__hex(id.b, 16, buf);
    return buf;
}

/* The namespace of the names this runtime makes and finds, into out: in a worker of the
 * task pool, the namespace of the task it runs (its submitter's: pool workers are shared by
 * every job); in an actor's worker, its creator's (the TROUPE_NAMESPACE its node set, else
 * the default); in a driver, its config's "namespace", else the environment's
 * TROUPE_NAMESPACE, else "" (the default). */
static int rt_namespace(const tr_runtime *rt, char out[256]) {
    if (tr__tasks_namespace(out, 256)) return 0;
    const char *e = getenv("TROUPE_NAMESPACE"), *what = "TROUPE_NAMESPACE";
    if (!rt->is_actor && rt->cfg && rt->cfg->ns) e = rt->cfg->ns, what = "its \"namespace\"";
    if (e && strlen(e) > 255)
        return tr__err(TR_EINVAL, "the runtime's namespace (%s) is over 255 bytes", what);
    snprintf(out, 256, "%s", e ? e : "");
    return 0;
}

TR_API int tr_runtime_namespace(tr_runtime *rt, char *buf, size_t cap) {
    CHECK_RT(rt, "tr_runtime_namespace");
    char ns[256];
    int rc = rt_namespace(rt, ns);
    if (rc) return rc;
    if (!buf || cap <= strlen(ns))
        return tr__err(TR_EINVAL, "tr_runtime_namespace: a buffer of %zu bytes or more",
                       strlen(ns) + 1);
    memcpy(buf, ns, strlen(ns) + 1);
    return 0;
}

TR_API int tr_actor_create(tr_runtime *rt, const char *class_name, const tr_actor_options *opts,
                           const void *args, size_t len, tr_actor_id *out) {
    CHECK_RT(rt, "tr_actor_create");
    if (!out) return tr__err(TR_EINVAL, "tr_actor_create: out is NULL");
    char ns[256];
    int nrc = rt_namespace(rt, ns);
    if (nrc) return nrc;
    return tr__actor_create(rt->node, ns, class_name, opts, args, len, out);
}

TR_API int tr_actor_handle(tr_runtime *rt, tr_actor_id actor, tr_ref *out) {
    CHECK_RT(rt, "tr_actor_handle");
    if (!out) return tr__err(TR_EINVAL, "tr_actor_handle: out is NULL");
    return tr__handles_make(rt->handles, actor, out);
}

TR_API int tr_actor_from_handle(tr_runtime *rt, tr_ref handle, tr_actor_id *out) {
    CHECK_RT(rt, "tr_actor_from_handle");
    if (!out) return tr__err(TR_EINVAL, "tr_actor_from_handle: out is NULL");
    if (!tr__ref_is_object(&handle))
        return tr__err(TR_EINVAL, "tr_actor_from_handle: not an actor handle (a call's ref)");
    const void *data;
    size_t len;
    int rc = tr_get(rt, handle, 10000, &data, &len);
    return rc ? rc : tr__handle_parse(data, len, out);
}

TR_API int tr_actor_binding_data(tr_runtime *rt, tr_actor_id actor, char **out) {
    CHECK_RT(rt, "tr_actor_binding_data");
    if (!out) return tr__err(TR_EINVAL, "tr_actor_binding_data: out is NULL");
    return tr__actor_binding_data(rt->node, actor, out);
}

TR_API int tr_actor_wait_ready(tr_runtime *rt, tr_actor_id actor, int timeout_ms) {
    CHECK_RT(rt, "tr_actor_wait_ready");
    return tr__actor_wait_ready(rt->node, actor, timeout_ms);
}

TR_API int tr_actor_get(tr_runtime *rt, const char *name, tr_actor_id *out) {
    return tr_actor_get_in(rt, NULL, name, out);
}

TR_API int tr_actor_get_in(tr_runtime *rt, const char *ns, const char *name, tr_actor_id *out) {
    CHECK_RT(rt, "tr_actor_get");
    if (!out) return tr__err(TR_EINVAL, "tr_actor_get: out is NULL");
    char own[256];
    int nrc = ns ? 0 : rt_namespace(rt, own);
    if (nrc) return nrc;
    return tr__actor_by_name(rt->node, ns ? ns : own, name, out);
}

TR_API int tr_actor_kill(tr_runtime *rt, tr_actor_id actor, int no_restart) {
    CHECK_RT(rt, "tr_actor_kill");
    return tr__actor_kill(rt->node, actor, no_restart);
}

TR_API void tr_actor_details_init(tr_actor_details *out) {
    if (!out) return;
    tr_actor_details def = TR_ACTOR_DETAILS_INIT;
    *out = def;
}

TR_API int tr_actor_info(tr_runtime *rt, tr_actor_id actor, tr_actor_details *out) {
    CHECK_RT(rt, "tr_actor_info");
    if (!out) return tr__err(TR_EINVAL, "tr_actor_info: out is NULL");
    return tr__actor_info(rt->node, actor, out);
}

TR_API const char *tr_actor_state_name(int state) {
    return tr__actor_state_name(state);
}

TR_API int tr_call(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                   size_t len, tr_ref *out) {
    CHECK_RT(rt, "tr_call");
    return tr__actors_call(rt->actors, actor, method, args, len, NULL, 0, out);
}

TR_API int tr_call_nowait(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                          size_t len, tr_ref *out) {
    CHECK_RT(rt, "tr_call_nowait");
    return tr__actors_call_nowait(rt->actors, actor, method, args, len, out);
}

TR_API int tr_call_refs(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                        size_t len, const tr_ref *refs, size_t n_refs, tr_ref *out) {
    CHECK_RT(rt, "tr_call_refs");
    return tr__actors_call(rt->actors, actor, method, args, len, refs, n_refs, out);
}

/* Where a ref resolves: an object, or another process's call result (its twin), in the
 * store; a call result of ours in the actor client. */
static int in_store(const tr_runtime *rt, const tr_ref *ref) {
    return tr__ref_is_object(ref) || (tr__ref_is_call(ref) && !tr__actors_owns(rt->actors, *ref));
}

/* A call ref of ours that we released, but that came back to us in a value: once shared,
 * its twin may live in the store (held by others); off the hot path (after TR_ESTALE). */
static int released_own(tr_runtime *rt, const tr_ref *ref) {
    return tr__ref_is_call(ref) && tr__actors_owns(rt->actors, *ref) &&
           !tr__actors_live(rt->actors, *ref);
}

/* in_store, and released_own: where a ref resolves when one of ours turned out stale. */
static int store_side(tr_runtime *rt, const tr_ref *ref) {
    return in_store(rt, ref) || released_own(rt, ref);
}

TR_API int tr_call_contains(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                            size_t len, const tr_ref *refs, size_t n_refs, const tr_ref *contained,
                            size_t n_contained, tr_ref *out) {
    CHECK_RT(rt, "tr_call_contains");
    return tr__actors_call_contains(rt->actors, actor, method, args, len, refs, n_refs, contained,
                                    n_contained, out);
}

TR_API void tr_call_options_init(tr_call_options *opts) {
    if (!opts) return;
    tr_call_options def = TR_CALL_OPTIONS_INIT;
    *opts = def;
}

TR_API int tr_call_opts(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                        size_t len, const tr_ref *refs, size_t n_refs, const tr_call_options *opts,
                        tr_ref *outs) {
    CHECK_RT(rt, "tr_call_opts");
    tr_call_options o = TR_CALL_OPTIONS_INIT;
    if (opts) {
        int rc = tr__struct_in(&o, sizeof o, opts, TR__SIZE_UPTO(tr_call_options, max_task_retries),
                               "tr_call_opts");
        if (rc) return rc;
    }
    if (!outs) return tr__err(TR_EINVAL, "tr_call_opts: outs is NULL");
    if ((!o.contained && o.n_contained) || o.max_task_retries < TR_RETRIES_ACTOR)
        return tr__err(TR_EINVAL, "tr_call_opts: bad options (contained NULL with n_contained, "
                                  "or max_task_retries below -2)");
    return tr__actors_submit(rt->actors, actor, method, args, len, refs, n_refs, o.contained,
                             o.n_contained, 0, o.max_task_retries, o.num_returns, outs);
}

TR_API void tr_bundle_init(tr_bundle *b) {
    if (!b) return;
    tr_bundle def = TR_BUNDLE_INIT;
    *b = def;
}

TR_API void tr_pg_info_init(tr_pg_info *out) {
    if (!out) return;
    tr_pg_info def = TR_PG_INFO_INIT;
    *out = def;
}

TR_API char *tr_pg_id_str(tr_pg_id id, char *buf) {
    if (buf) tr__hex(id.b, 16, buf);
    return buf;
}

TR_API int tr_placement_group_create(tr_runtime *rt, const tr_bundle *bundles, size_t n,
                                     int strategy, const char *name, tr_pg_id *out) {
    CHECK_RT(rt, "tr_placement_group_create");
    char ns[256];
    int nrc = rt_namespace(rt, ns);
    if (nrc) return nrc;
    return tr__pg_create(rt->node, ns, bundles, n, strategy, name, out);
}

TR_API int tr_placement_group_wait(tr_runtime *rt, tr_pg_id pg, int timeout_ms) {
    CHECK_RT(rt, "tr_placement_group_wait");
    return tr__pg_wait(rt->node, pg, timeout_ms);
}

TR_API int tr_placement_group_info(tr_runtime *rt, tr_pg_id pg, tr_pg_info *out) {
    CHECK_RT(rt, "tr_placement_group_info");
    if (!out) return tr__err(TR_EINVAL, "tr_placement_group_info: out is NULL");
    return tr__pg_info(rt->node, pg, out);
}

TR_API int tr_placement_group_remove(tr_runtime *rt, tr_pg_id pg) {
    CHECK_RT(rt, "tr_placement_group_remove");
    return tr__pg_remove(rt->node, pg);
}

TR_API int tr_placement_group_get(tr_runtime *rt, const char *name, tr_pg_id *out) {
    CHECK_RT(rt, "tr_placement_group_get");
    char ns[256];
    int nrc = rt_namespace(rt, ns);
    if (nrc) return nrc;
    return tr__pg_by_name(rt->node, ns, name, out);
}

TR_API void tr_task_options_init(tr_task_options *opts) {
    if (!opts) return;
    tr_task_options def = TR_TASK_OPTIONS_INIT;
    *opts = def;
}

TR_API int tr_task_submit(tr_runtime *rt, const char *fn, const void *args, size_t len,
                          const tr_ref *refs, size_t n_refs, const tr_task_options *opts,
                          tr_ref *out) {
    return tr_task_submit_multi(rt, fn, args, len, refs, n_refs, opts, 1, out);
}

TR_API int tr_task_submit_multi(tr_runtime *rt, const char *fn, const void *args, size_t len,
                                const tr_ref *refs, size_t n_refs, const tr_task_options *opts,
                                size_t num_returns, tr_ref *outs) {
    CHECK_RT(rt, "tr_task_submit_multi");
    if (!outs) return tr__err(TR_EINVAL, "tr_task_submit_multi: outs is NULL");
    pthread_mutex_lock(&rt->tasks_mu);
    int rc = rt->tasks ? 0 : tr__tasks_create(rt->node, rt->actors, rt->objects, &rt->tasks);
    pthread_mutex_unlock(&rt->tasks_mu);
    if (rc) return rc;
    char ns[256];
    int nrc = rt_namespace(rt, ns);
    if (nrc) return nrc;
    return tr__tasks_submit(rt->tasks, ns, fn, args, len, refs, n_refs, opts, num_returns, outs);
}

TR_API int tr_call_multi(tr_runtime *rt, tr_actor_id actor, const char *method, const void *args,
                         size_t len, const tr_ref *refs, size_t n_refs, size_t num_returns,
                         tr_ref *outs) {
    CHECK_RT(rt, "tr_call_multi");
    if (!outs) return tr__err(TR_EINVAL, "tr_call_multi: outs is NULL");
    return tr__actors_submit(rt->actors, actor, method, args, len, refs, n_refs, NULL, 0, 0,
                             TR_RETRIES_ACTOR, num_returns, outs);
}

TR_API int tr_stream_next(tr_runtime *rt, tr_ref stream, int timeout_ms, tr_ref *item) {
    CHECK_RT(rt, "tr_stream_next");
    return tr__actors_stream_next(rt->actors, stream, timeout_ms, item);
}

TR_API int tr_cancel(tr_runtime *rt, tr_ref ref, int force) {
    CHECK_RT(rt, "tr_cancel");
    tr_actor_id worker;
    int rc = tr__actors_cancel(rt->actors, ref, force, &worker);
    if (rc == 1) /* a task running on its pool worker: the worker goes (and restarts) */
        rc = tr__actor_kill(rt->node, worker, 0);
    return rc;
}

TR_API int tr_ref_borrow(tr_runtime *rt, tr_ref ref) {
    CHECK_RT(rt, "tr_ref_borrow");
    if (tr__ref_is_call(&ref) && tr__actors_owns(rt->actors, ref) &&
        tr__actors_live(rt->actors, ref))
        return 0;                              /* ours, held */
    if (tr__actors_is_remote(rt->actors, ref)) /* held at its node (docs/OWNERSHIP.md) */
        return tr__actors_remote_hold(rt->actors, ref, 1, REMOTE_HOLD_MS);
    int rc = tr__objects_borrow(rt->objects, ref);
    if (!rc && tr__ref_is_object(&ref)) tr__handles_retake(rt->handles, ref); /* (came back) */
    return rc;
}

TR_API int tr_get(tr_runtime *rt, tr_ref ref, int timeout_ms, const void **data, size_t *len) {
    CHECK_RT(rt, "tr_get");
    size_t n = 0;
    int rc;
    int64_t t0 = 0;
    if (tr__ref_is_object(&ref)) {
        t0 = tr__now_ns();
        rc = tr__objects_get(rt->objects, ref, timeout_ms, data, &n);
    } else { /* (another's: its twin) */
        rc = tr__actors_get(rt->actors, ref, timeout_ms, data, &n, &t0);
    }
    if (len) *len = n;
    /* (on the timeline: an object's get, and a call's that waited or failed; a call's whose
     * value was in reads no clock) */
    if (t0 || rc) {
        int64_t t1 = tr__now_ns();
        tr__trace_ev_add(TR__EV_GET, t0 ? t0 : t1, t1, "get", 3, 0, rc ? 0 : n, rc != 0);
    }
    return rc;
}

/* Waits on a mix of object and call refs: objects are checked in the store, calls through
 * the actor client, in slices short enough that neither starves the other. */
static int wait_mixed(tr_runtime *rt, const tr_ref *refs, size_t n, size_t num_ready,
                      int timeout_ms, uint8_t *ready, size_t *n_ready) {
    tr_ref *calls = malloc(n * sizeof *calls);
    size_t *where = malloc(n * sizeof *where);
    uint8_t *cready = malloc(n ? n : 1);
    int rc = 0;
    if (!calls || !where || !cready) {
        rc = tr__err(TR_ENOMEM, "tr_wait");
        goto out;
    }
    size_t nc = 0;
    for (size_t i = 0; i < n; i++)
        if (!store_side(rt, &refs[i])) {
            where[nc] = i;
            calls[nc++] = refs[i];
        }
    int64_t deadline = tr__deadline(timeout_ms);
    for (int pass = 0;; pass++) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++) {
            if (!store_side(rt, &refs[i])) continue;
            int r = tr__objects_ready(rt->objects, refs[i]);
            if (r < 0) { /* a result's twin whose owner died, or freed */
                rc = tr__err_wrap(r, "tr_wait: ref %zu", i);
                goto out;
            }
            if (ready) ready[i] = (uint8_t)(r == 1);
            count += r == 1;
        }
        int objects_pending = count < n - nc;
        if (nc) {
            size_t want = num_ready > count ? num_ready - count : 0;
            if (want > nc) want = nc;
            int64_t slice = objects_pending ? tr__deadline(1) : deadline;
            if (slice > deadline) slice = deadline;
            size_t got = 0;
            int left = tr__ms_left(slice);
            rc = tr__actors_wait(rt->actors, calls, nc, want, left, cready, &got);
            if (rc) goto out;
            for (size_t k = 0; k < nc; k++)
                if (ready) ready[where[k]] = cready[k];
            count += got;
        }
        if (n_ready) *n_ready = count;
        if (count >= num_ready || (pass > 0 && tr__now_ns() >= deadline)) break;
        if (!nc) {
            int64_t slice = tr__deadline(50);
            tr__objects_wait_change(rt->objects, slice < deadline ? slice : deadline);
        }
    }
out:
    free(calls);
    free(where);
    free(cready);
    return rc;
}

TR_API int tr_wait(tr_runtime *rt, const tr_ref *refs, size_t n, size_t num_ready, int timeout_ms,
                   uint8_t *ready, size_t *n_ready) {
    CHECK_RT(rt, "tr_wait");
    if ((!refs && n) || num_ready > n)
        return tr__err(TR_EINVAL, "tr_wait: refs is NULL or num_ready > n");
    for (size_t i = 0; i < n; i++)
        if (in_store(rt, &refs[i]))
            return wait_mixed(rt, refs, n, num_ready, timeout_ms, ready, n_ready);
    int rc = tr__actors_wait(rt->actors, refs, n, num_ready, timeout_ms, ready, n_ready);
    for (size_t i = 0; rc == TR_ESTALE && i < n; i++)
        if (released_own(rt, &refs[i])) /* shared, and back to us: through the store */
            return wait_mixed(rt, refs, n, num_ready, timeout_ms, ready, n_ready);
    return rc;
}

TR_API int tr_ref_release(tr_runtime *rt, tr_ref ref) {
    CHECK_RT(rt, "tr_ref_release");
    if (tr__ref_is_object(&ref)) { /* (a handle of ours: its actor may end) */
        int h = tr__handles_release(rt->handles, ref);
        if (h) return h < 0 ? h : 0;
    }
    if (tr__actors_is_remote(rt->actors, ref)) {
        /* another node's: our copy here (if we got it) and our hold there (if we
         * borrowed it) */
        int rc = tr__ref_is_object(&ref) ? tr__objects_release(rt->objects, ref)
                                         : tr__actors_release(rt->actors, ref);
        int src = tr__actors_remote_release(rt->actors, ref, 1);
        return src == 0 ? 0 : rc;
    }
    if (tr__ref_is_object(&ref)) return tr__objects_release(rt->objects, ref);
    return tr__actors_release(rt->actors, ref); /* (a borrow of another's: the store's) */
}

TR_API int tr_put(tr_runtime *rt, const void *data, size_t len, tr_ref *out) {
    CHECK_RT(rt, "tr_put");
    int64_t t0 = tr__now_ns();
    int rc = tr__objects_put(rt->objects, data, len, out);
    tr__trace_ev_add(TR__EV_PUT, t0, tr__now_ns(), "put", 3, 0, len, rc != 0);
    return rc;
}

TR_API int tr_object_create(tr_runtime *rt, size_t len, tr_ref *out, void **buf) {
    CHECK_RT(rt, "tr_object_create");
    return tr__objects_create(rt->objects, len, out, buf);
}

TR_API int tr_object_seal(tr_runtime *rt, tr_ref ref) {
    CHECK_RT(rt, "tr_object_seal");
    return tr__objects_seal(rt->objects, ref);
}

TR_API void tr_store_stats_init(tr_store_stats *stats) {
    if (!stats) return;
    tr_store_stats def = TR_STORE_STATS_INIT;
    *stats = def;
}

TR_API int tr_object_stats(tr_runtime *rt, tr_store_stats *out) {
    CHECK_RT(rt, "tr_object_stats");
    return tr__objects_stats(rt->objects, out);
}

TR_API int tr_object_allreduce(tr_runtime *rt, const char *name, int rank, int world,
                               uint64_t round, void *buf, size_t count, tr_dtype dtype, tr_redop op,
                               int timeout_ms) {
    CHECK_RT(rt, "tr_object_allreduce");
    return tr__object_allreduce(rt->node, rt->objects, name, rank, world, round, buf, count, dtype,
                                op, timeout_ms);
}

TR_API int tr_put_refs(tr_runtime *rt, const void *data, size_t len, const tr_ref *refs,
                       size_t n_refs, tr_ref *out) {
    CHECK_RT(rt, "tr_put_refs");
    if (refs && n_refs) { /* results of our own calls go to the store first (their twins) */
        int rc = tr__actors_share(rt->actors, refs, n_refs);
        if (rc) return tr__err_wrap(rc, "tr_put_refs");
    }
    return tr__actors_put_refs(rt->actors, data, len, refs, n_refs, out);
}

TR_API int tr_object_map_private(tr_runtime *rt, tr_ref ref, int timeout_ms, void **data,
                                 size_t *len) {
    CHECK_RT(rt, "tr_object_map_private");
    return tr__objects_map_private(rt->objects, ref, timeout_ms, data, len);
}

TR_API int tr_object_unmap_private(tr_runtime *rt, tr_ref ref, void *data, size_t len) {
    CHECK_RT(rt, "tr_object_unmap_private");
    return tr__objects_unmap_private(rt->objects, ref, data, len);
}

TR_API int tr_object_refs(tr_runtime *rt, tr_ref ref, tr_ref *out, size_t cap, size_t *n) {
    CHECK_RT(rt, "tr_object_refs");
    return tr__objects_refs(rt->objects, ref, out, cap, n);
}

TR_API int tr_object_holders(tr_runtime *rt, tr_ref ref, size_t *others) {
    CHECK_RT(rt, "tr_object_holders");
    return tr__objects_holders(rt->objects, ref, others);
}
