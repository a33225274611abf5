/* core/config.h - the runtime configuration (public tr_config) and the process
 * environment, read in one place.
 *
 * tr_config is filled by tr__config_set/tr__config_add_class (the façade's tr_config_set,
 * tr_config_add_class) and copied by tr_init.
 * tr__env_read() is the only reader of TROUPE_* environment variables: the role a
 * process was started in (driver, node, worker) and what its parent passed down.
 * Not thread-safe (set-up time only).
 */
#ifndef TR_CORE_CONFIG_H
#define TR_CORE_CONFIG_H

#include <limits.h>
#include <stddef.h>

#include "core/buf.h"
#include "core/sched.h"
#include "troupe/troupe.h"

struct tr_config {
    char *address;     /* node socket path; NULL = embedded node */
    char *ns;          /* actor names' namespace; NULL: TROUPE_NAMESPACE's, else "" */
    double num_cpus;   /* < 0: the machine's CPU count */
    double num_gpus;   /* < 0: as many as the NVIDIA driver lists */
    double memory;     /* the "memory" resource, bytes (< 0: 70% of what the machine has
                          free at start, less the object store) */
    tr__res resources; /* custom resources */
    int log_level;     /* < 0: unset */
    size_t max_msg;
    int worker_start_timeout_ms;
    char *tmpdir;       /* NULL: /tmp */
    size_t store_bytes; /* object store capacity; 0: the default */
    char *spill_dir;    /* NULL: the node's session directory */
    int cpu_binding;    /* TR__BIND_CORES (the default) or TR__BIND_NONE */
    int call_spin_us;   /* how long a caller and a worker poll before they sleep (0: never) */
    int call_rings;     /* calls to actors of this node go on shared-memory rings (1) */
    /* the node's HTTP port for /metrics and its status page (-1: none; 0: any), and the
     * address it binds (NULL: 127.0.0.1; another needs the cluster's token) */
    int metrics_port;
    char *metrics_host;
    /* a cluster (api/cluster.c): the node's TCP port for other nodes (-1: none; 0: any),
     * the address it binds (NULL: loopback for a head, else the one facing the head), the
     * cluster's token, and the head to join ("HOST:PORT"; NULL: this node is the head) */
    int cluster_port;
    int cluster_client; /* this node runs no actors: the head places them (a remote driver's) */
    char *cluster_bind, *cluster_token, *cluster_head;
    /* TLS between nodes (PEM file paths; NULL: plain): this node's certificate and key,
     * and the CA that signed every node's (core/rpc.h: tr__rpc_tls) */
    char *cluster_tls_cert, *cluster_tls_key, *cluster_tls_ca;
    /* the command that runs workers and the embedded node (keys "worker_command",
     * "worker_library"): argv joined by TR__ARG_SEP, argv[0] absolute; NULL: this
     * executable */
    char *worker_command;
    /* what else this node may run as a worker for another node's driver (key
     * "worker_path"): real paths of programs and of directories (with a trailing '/'),
     * joined by ':'; NULL: none */
    char *worker_path;
    tr_actor_class *classes;
    size_t n_classes;
    /* remote functions (tasks): by name, and the binding's one for any other name */
    struct tr__function {
        char *name;
        tr_task_fn fn;
    } * functions;
    size_t n_functions;
    tr_task_fn function_dispatch;
};

/* troupe.h's tr_config_* and tr_actor_class_init, as the façade (api/config.c) calls them:
 * the same behaviour and messages. */
int tr__config_create(tr_config **out);
void tr__config_destroy(tr_config *cfg);
int tr__config_set(tr_config *cfg, const char *key, const char *value);
void tr__actor_class_init(tr_actor_class *cls);
int tr__config_add_class(tr_config *cfg, const tr_actor_class *cls);
int tr__config_add_function(tr_config *cfg, const char *name, tr_task_fn fn);
/* The function registered under name (n bytes), else the dispatch one, else NULL. */
tr_task_fn tr__config_find_function(const tr_config *cfg, const char *name, size_t n);

/* Separates the arguments of a command as it travels (hello's "exe", TROUPE_COMMAND). */
#define TR__ARG_SEP '\x1f'
#define TR__MAX_ARGS 64

/* "call_spin_us"'s default: a small call's reply comes within ~5-10 us of work, and on a
 * host whose vCPUs sit far apart a sleep and a wake-up cost ~15-20 us each way. */
#define TR__CALL_SPIN_US 30

enum { TR__ROLE_DRIVER = 0, TR__ROLE_NODE = 1, TR__ROLE_WORKER = 2 };
/* How the node binds actors to CPUs (config key "cpu_binding"). */
enum { TR__BIND_CORES = 0, TR__BIND_NONE = 1 };

typedef struct tr__env {
    int role;
    const char *node_path;     /* TROUPE_NODE: the node's socket (workers) */
    const char *actor_hex;     /* TROUPE_ACTOR: the actor a worker runs */
    const char *node_config;   /* TROUPE_NODE_CONFIG: hex msgpack of the node's config */
    int ready_fd;              /* TROUPE_READY_FD: the node writes its address here; -1 */
    int standalone;            /* TROUPE_STANDALONE=1: a `troupe start` node */
    const char *cpus;          /* TROUPE_CPUS: the CPUs a worker is bound to ("0,1"), or NULL */
    int log_level;             /* TROUPE_LOG_LEVEL, -1 if unset */
    const char *command;       /* TROUPE_COMMAND: the command the node ran (workers) */
    const char *cluster_token; /* TROUPE_CLUSTER_TOKEN: a cluster's token (drivers, CLI) */
    int owner_pid;             /* TROUPE_OWNER: an embedded node's spawner (0: none) */
} tr__env;

void tr__env_read(tr__env *e);
/* cfg's cluster token from the environment (TROUPE_CLUSTER_TOKEN) if cfg has none: 0, or
 * TR_EINVAL for a malformed one. */
int tr__config_env_token(tr_config *cfg, const tr__env *env);

/* Deep copy (classes' method tables stay borrowed). Returns 0 or TR_ENOMEM. */
int tr__config_copy(const tr_config *src, tr_config **out);
/* The node-relevant part as msgpack (for the embedded node's environment), and back. */
int tr__config_encode_node(const tr_config *cfg, tr__buf *out);
int tr__config_decode_node(const void *data, size_t len, tr_config *cfg);
const tr_actor_class *tr__config_find_class(const tr_config *cfg, const char *name);
/* Effective log level: config, else environment, else warn. */
int tr__config_log_level(const tr_config *cfg, const tr__env *env);
/* Effective object store capacity: configured, else 30% of RAM capped at 1 GiB. */
size_t tr__config_store_bytes(const tr_config *cfg);

/* The generic worker, troupe-worker: next to this library (DIR/ or DIR/../bin/), else on
 * PATH; its real path into out. Returns 0 or TR_ENOTFOUND. */
int tr__config_find_worker(char out[PATH_MAX]);

/* This process's command for troupe's roles (argv joined by TR__ARG_SEP): the one the
 * runtime noted (tr__command_note: a driver's worker_command), else a worker's
 * TROUPE_COMMAND, else this executable. Returns 0, TR_EINVAL (too long), TR_EIO. */
int tr__command_self(char *out, size_t cap);
/* The command this process runs as (its own argv, joined by TR__ARG_SEP): a node's, for
 * what it may run for other nodes. Returns 0, TR_EINVAL (too long), TR_EIO. */
int tr__command_running(char *out, size_t cap);
/* Notes cfg's worker_command (NULL or none: forgets it) for tr__command_self. */
void tr__command_note(const tr_config *cfg);
/* Splits a command (modified in place) into argv (at most TR__MAX_ARGS, then NULL).
 * Returns the number of arguments (0: none). */
int tr__command_split(char *cmd, char **argv);

#endif
