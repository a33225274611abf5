/* api/node/cluster_int.h - what the cluster's files share (cluster.c: the RPC ops' table,
 * membership over RPC, start and stop; placement.c: actors the head places and what a node
 * runs for other nodes; kv.c: the head's cluster KV store; forward.c: directory requests
 * forwarded to other nodes, on threads of their own). Internal to api/node/.
 */
#ifndef TR_API_NODE_CLUSTER_INT_H
#define TR_API_NODE_CLUSTER_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "actor/relay.h"
#include "api/node/cluster.h"
#include "api/node/membership.h"
#include "core/codec.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/server.h"

#define BEAT_MS 500
#define JOIN_MS 10000
/* Waits nest, each inside the one that waits on it: the node's own loop (SELF_MS, it
 * answers in microseconds) < the head's "create" on a node (PLACE_MS, on the head's RPC
 * thread, which also serves heartbeats: under TR__MEMBER_LOST_MS) < a node's "place" at the head
 * (PLACE_WAIT_MS) < the client's wait for its node (10 s). */
#define SELF_MS 1000
#define PLACE_MS 2500
#define PLACE_WAIT_MS 6000
#define PEER_MS 2500 /* any other request to another node */
#define MAX_JOBS 64  /* forwarded requests in flight */
#define MAX_SLOW 32  /* the RPC server's slow ops in flight (each on a thread) */
#define POLL_NS 10000000

/* An actor this node knows lives on another node. */
typedef struct ractor {
    uint8_t id[16];
    char address[128]; /* its node's RPC server */
    uint64_t owner;    /* the connection here that created it (0: learned from the head) */
    struct ractor *next;
} ractor;

/* The head's directory of the actors it placed. */
typedef struct hactor {
    uint8_t id[16];
    char node[17];
    char address[128];
    char *name;
    struct hactor *next;
} hactor;

/* A connection to this node's own socket on behalf of a creator on another node ("<node
 * id>/<connection id>"): the actors made on it live as long as it does. */
typedef struct owner {
    char key[64];
    char node[17];
    tr__nodeconn *nc;
    int refs; /* the list's (until dropped), and a create's in progress */
    struct owner *next;
} owner;

/* A key of the head's cluster-wide key-value store (collective groups that span nodes keep
 * their declarations and rendezvous keys there). */
typedef struct ckv {
    char *key;
    void *val;
    size_t len;
    struct ckv *next;
} ckv;
#define CKV_MAX_KEYS 16384
#define CKV_MAX_BYTES (64u << 20)
#define CKV_MAX_KEY 1024

/* A placement group across the nodes, the head's (pgroups.c). */
typedef struct hpg hpg;
typedef struct pgstale pgstale;

/* A connection of this node that created placement groups (the head is told when it
 * closes). */
typedef struct pgconn {
    uint64_t conn;
    struct pgconn *next;
} pgconn;

typedef struct peer {
    char address[128];
    tr__rpc_client *client;
    struct peer *next;
} peer;

/* A request of the node's directory forwarded to the cluster, run on a thread of its own
 * (they wait on other nodes), replied to from the loop. */
typedef struct job {
    struct tr__cluster *cl;
    int type;
    tr__conn *c;
    uint64_t seq;
    uint64_t conn_id;
    uint8_t id[16];
    int64_t wait_ms, no_restart, max_restarts;
    char *cls, *name, *res, *exe;
    char *groups;     /* an actor's concurrency groups (control.c's encoding), or NULL */
    int64_t conc;     /* ...and its max_concurrency */
    int64_t detached; /* ...and whether it outlives its creator (lifetime="detached") */
    char *label;      /* ...and its class as a binding names it, or NULL */
    char *bdata;      /* ...and its binding_data, or NULL */
    char *task_res;   /* ...and, a task worker's, what it holds while it runs a task (NULL) */
    char *ns;         /* ...and its creator's namespace, or NULL */
    int64_t tretries; /* ...and its max_task_retries */
    void *args;
    size_t args_len;
    char owner_key[64]; /* owner_gone jobs */
    int has_pg;         /* an actor into a placement group: its id, and bundle */
    uint8_t pg[16];
    int64_t bundle;
    char address[128]; /* ...and the node to tell */
    tr__buf reply;
    struct job *next;
} job;

struct tr__cluster {
    int head;   /* this node is the head */
    int client; /* this node runs no actors (a driver that joined by the head's address) */
    char id[17];
    char address[128];
    char head_addr[128]; /* a member's head */
    char metrics[160];   /* this node's /metrics "HOST:PORT" ("": none), under mu */
    char sock[160];
    double cpus;
    int gpus;
    char resources[256];
    size_t max_msg;
    tr__rpc_server *srv;
    tr__rpc_client *to_head;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_cond_t jobs_cv;
    tr__members members; /* the head's table (itself first) */
    int head_alive;      /* a member's view */
    int64_t head_ok_ns;
    char *nodes_json;   /* a member's copy of the head's table */
    tr__nodeconn *self; /* a connection to this node's own socket (status), under self_mu */
    pthread_mutex_t self_mu;
    pthread_mutex_t create_mu; /* one "create" at a time (owner_get adds owners) */
    int slow;                  /* slow ops running (under mu) */
    pthread_t thread;
    int stop;
    char token[256];
    tr__rpc_tls tls; /* between the nodes, if configured: this node's cert and key, the CA */
    tr__rpc_tls_files tls_files; /* the same as files, for this node's drivers and workers */
    uint32_t num;                /* ours: the head's 1, a member's as the head gave it */
    tr__store *store;            /* the node's, to number its objects */
    uv_loop_t *loop;
    uv_async_t async; /* done jobs, to reply from the loop */
    int async_live;
    tr__relay *relay; /* callers on other nodes reach our actors through it */
    int jobs;         /* threads running */
    int closing;
    job *done;
    ractor *remote;
    hactor *placed; /* the head's */
    owner *owners;  /* RPC thread's and sweeps', under mu */
    peer *peers;
    ckv *kv;               /* the head's cluster KV store, under mu */
    hpg *pgs;              /* the head's placement groups, under mu (pgroups.c) */
    pthread_mutex_t pg_mu; /* held by whoever reserves or undoes parts; only it frees groups */
    int pg_running, pg_kick, pg_pass; /* the scheduler thread (at most one); under mu */
    int64_t pg_next_ns;               /* when pending groups are tried again */
    pgconn *pg_conns;                 /* this node's creators of groups, under mu */
    pgstale *pg_stale; /* parts to undo on nodes lost meanwhile (the head's), under mu */
    size_t kv_keys, kv_bytes;
    uint64_t actors, objects, object_bytes; /* this node's, from its loop (under mu) */
    /* what this node runs as a worker for other nodes' drivers: its own command (argv
     * joined by TR__ARG_SEP), config worker_path, the generic worker's real path ("": none) */
    char *own_cmd, *worker_path;
    char troupe_worker[PATH_MAX];
};

/* Shared by the cluster's files (each defined in the file named before it). */
/* forward.c */ int tr__cl_call_peer(tr__cluster *cl, const char *address, const tr__buf *req,
                                     int timeout_ms, int retry, tr__buf *reply);
/* kv.c */ void tr__cl_ckv_free(ckv *e);
/* placement.c */ void tr__cl_drop_owners(tr__cluster *cl, const char *key, const char *node);
/* cluster.c */ int tr__cl_get_command(const tr__obj *map, const char *key, char *dst, size_t cap);
/* cluster.c */ int tr__cl_get_field(const tr__obj *map, const char *key, char *dst, size_t cap);
/* forward.c */ void tr__cl_on_jobs_done(uv_async_t *h);
/* placement.c */ int tr__cl_op_by_name(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_create(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_info(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_kill(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* kv.c */ int tr__cl_op_kv_any(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_owner_gone(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_place(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_resolve(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ int tr__cl_op_where(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* placement.c */ void tr__cl_owner_put(owner *o);
/* pgroups.c */ int tr__cl_op_pg_create(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* pgroups.c */ int tr__cl_op_pg_info(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* pgroups.c */ int tr__cl_op_pg_by_name(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* pgroups.c */ int tr__cl_op_pg_remove(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* pgroups.c */ int tr__cl_op_pg_reserve(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* pgroups.c */ int tr__cl_op_pg_release(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
/* pgroups.c */ /* Starts the head's scheduler thread if a group needs it (no lock held). */
void tr__cl_pg_kick(tr__cluster *cl);
/* pgroups.c */ /* Under mu: the groups of creator key ("<node>/<conn>"), or of every
                 * creator of node, go. */
void tr__cl_pg_owner_gone(tr__cluster *cl, const char *key, const char *node);
/* pgroups.c */ /* Under mu: node is lost: its creators' groups go, and the groups with
                 * bundles there are placed again. */
void tr__cl_pg_node_lost(tr__cluster *cl, const char *node);
/* pgroups.c */ /* The node (address, id) holding bundle (-1: any, one whose bundle fits want) of
                 * group id, placed: 0, or TR_ENOTFOUND, TR_ESTATE (pending, removed), TR_EINVAL.
                 * Takes mu. */
int tr__cl_pg_route(tr__cluster *cl, const uint8_t id[16], int64_t bundle, const tr__res *want,
                    char *address, size_t cap, char *node, size_t ncap);
/* pgroups.c */ void tr__cl_pg_status_json(tr__cluster *cl, tr__buf *j); /* under mu */
/* pgroups.c */ void tr__cl_pg_free_all(tr__cluster *cl);
/* placement.c */ void tr__cl_reencode(const tr__obj *map, const char *key, const char *value,
                                       tr__buf *out);
/* forward.c */ void tr__cl_reply_status(job *j, int rc, const char *msg);
/* kv.c */ void tr__cl_run_kv(tr__cluster *cl, job *j);
/* cluster.c */ int tr__cl_self_call(tr__cluster *cl, uint8_t type, const tr__buf *body,
                                     tr__reply *r);
/* cluster.c */ int tr__cl_spawn_counted(tr__cluster *cl, int *running, int max, const int *refused,
                                         void *(*fn)(void *), void *arg);
/* forward.c */ int tr__cl_table_says(tr__cluster *cl, const char *address);
/* forward.c */ void tr__cl_job_free(job *j);
/* forward.c */ int tr__cl_start_job(tr__cluster *cl, job *j);
/* forward.c */ /* Tells each node of `nodes` (a list it frees) that the creator `key`
                 * ("<node>/<connection>", or "<node>/" "*") is gone, each by a job of its own. */
void tr__cl_tell_owner_gone(tr__cluster *cl, ractor *nodes, const char *key);
/* forward.c */ /* list with the head's address added (if not in it). Under mu. */
ractor *tr__cl_add_head(tr__cluster *cl, ractor *list);

#endif
