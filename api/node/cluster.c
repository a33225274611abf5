/* api/node/cluster.c - see cluster.h. Messages are msgpack maps with an "op": register
 * {id, address, sock, cpus, gpus, resources} -> {head}; heartbeat {id} -> {json: the
 * node table} (TR_ENOTFOUND: register again); nodes {} -> {json}; status {} -> {json:
 * this node's tr_node_status, as its own socket gives it} (any node; `troupe status
 * --address HOST:PORT`). */
#include "api/node/cluster.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/relay.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/status.h"

#define MAX_NODES 256
#define BEAT_MS 500
#define LOST_MS 3000
#define JOIN_MS 10000
#define FORGET_MS 60000 /* a node lost this long leaves the table */
/* Waits nest, each inside the one that waits on it: the node's own loop (SELF_MS, it
 * answers in microseconds) < the head's "create" on a node (PLACE_MS, on the head's RPC
 * thread, which also serves heartbeats: under LOST_MS) < a node's "place" at the head
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
    void *args;
    size_t args_len;
    char owner_key[64]; /* owner_gone jobs */
    char address[128];  /* ...and the node to tell */
    tr__buf reply;
    struct job *next;
} job;

typedef struct member {
    char id[17];
    char address[128]; /* its RPC server, "HOST:PORT" */
    char sock[160];
    double cpus;
    int gpus;
    char resources[256];
    int64_t last_ns;
    int alive;
    int placed;                             /* the head: actors it placed there, to spread them */
    int client;                             /* a driver's node: it runs no actors */
    uint32_t num;                           /* its number (in its objects' ids), the head's 1 */
    uint64_t actors, objects, object_bytes; /* as its last heartbeat said */
} member;

struct tr__cluster {
    int head;   /* this node is the head */
    int client; /* this node runs no actors (a driver that joined by the head's address) */
    char id[17];
    char address[128];
    char head_addr[128]; /* a member's head */
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
    member nodes[MAX_NODES]; /* the head's table (itself first) */
    int n;
    int head_alive; /* a member's view */
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
    uint32_t next_num;           /* the head's next for a new member */
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
    ckv *kv; /* the head's cluster KV store, under mu */
    size_t kv_keys, kv_bytes;
    uint64_t actors, objects, object_bytes; /* this node's, from its loop (under mu) */
    /* what this node runs as a worker for other nodes' drivers: its own command (argv
     * joined by TR__ARG_SEP), config worker_path, the generic worker's real path ("": none) */
    char *own_cmd, *worker_path;
    char troupe_worker[PATH_MAX];
};

static int64_t ms_since(int64_t ns) {
    return (tr__now_ns() - ns) / 1000000;
}

/* The table as JSON (caller holds mu). */
static void table_json(tr__cluster *cl, tr__buf *j) {
    tr__buf_append(j, "[", 1);
    for (int i = 0; i < cl->n; i++) {
        member *m = &cl->nodes[i];
        char e[1200];
        if (i == 0) { /* the head itself: its own counts */
            m->actors = cl->actors;
            m->objects = cl->objects;
            m->object_bytes = cl->object_bytes;
        }
        int k =
            snprintf(e, sizeof e,
                     "%s{\"id\":\"%s\",\"address\":\"%s\",\"num\":%u,\"head\":%s,"
                     "\"client\":%s,\"cpus\":%g,"
                     "\"gpus\":%d,\"resources\":\"%s\",\"alive\":%s,\"last_seen_ms\":%lld,"
                     "\"actors\":%llu,\"objects\":%llu,\"object_bytes\":%llu}",
                     i ? "," : "", m->id, m->address, m->num, i == 0 ? "true" : "false",
                     m->client ? "true" : "false", m->cpus, m->gpus, m->resources,
                     m->alive ? "true" : "false", (long long)(i == 0 ? 0 : ms_since(m->last_ns)),
                     (unsigned long long)m->actors, (unsigned long long)m->objects,
                     (unsigned long long)m->object_bytes);
        tr__buf_append(j, e, (size_t)(k < (int)sizeof e ? k : (int)sizeof e - 1));
    }
    tr__buf_append(j, "]", 1);
}

/* A string field copied into dst (cap bytes), JSON-safe: no quotes or backslashes or
 * control bytes (addresses, ids and resource lists never have them). */
static int get_field(const tr__obj *map, const char *key, char *dst, size_t cap) {
    const char *s;
    size_t n;
    int rc = tr__get_str(map, key, &s, &n);
    if (rc) return rc;
    if (n >= cap) return tr__err(TR_EPROTO, "cluster: '%s' of %zu bytes", key, n);
    for (size_t i = 0; i < n; i++)
        if (s[i] == '"' || s[i] == '\\' || (unsigned char)s[i] < 0x20)
            return tr__err(TR_EPROTO, "cluster: '%s' has a byte it may not", key);
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* A command field (argv joined by TR__ARG_SEP): no other control byte. */
static int get_command(const tr__obj *map, const char *key, char *dst, size_t cap) {
    const char *s;
    size_t n;
    int rc = tr__get_str(map, key, &s, &n);
    if (rc) return rc;
    if (n >= cap) return tr__err(TR_EPROTO, "cluster: '%s' of %zu bytes", key, n);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 && s[i] != TR__ARG_SEP)
            return tr__err(TR_EPROTO, "cluster: '%s' has a byte it may not", key);
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

static int self_call_locked(tr__cluster *cl, uint8_t type, const tr__buf *body, tr__reply *r) {
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!cl->self && ((rc = tr__nodeconn_open(cl->sock, cl->max_msg, &cl->self)) ||
                          (rc = tr__nodeconn_hello(cl->self, "cli", 0, SELF_MS)))) {
            tr__nodeconn_close(cl->self);
            cl->self = NULL;
            return rc;
        }
        rc = tr__nodeconn_call(cl->self, type, body, SELF_MS, r);
        if (rc != TR_ECONNECT && rc != TR_ETIMEDOUT && rc != TR_EPROTO) break;
        tr__nodeconn_close(cl->self);
        cl->self = NULL;
    }
    return rc;
}

/* A reply's "json" entry: the table (caller holds mu). */
static void enc_table(tr__cluster *cl, tr__buf *reply) {
    tr__buf j = TR__BUF_INIT;
    table_json(cl, &j);
    tr__enc_str(reply, "json");
    tr__enc_strn(reply, (const char *)j.data, j.len);
    tr__buf_free(&j);
}

/* One request to this node's own socket, on the connection the slow ops share (one at a
 * time; a broken one is opened again once). */
static int self_call(tr__cluster *cl, uint8_t type, const tr__buf *body, tr__reply *r) {
    pthread_mutex_lock(&cl->self_mu);
    int rc = self_call_locked(cl, type, body, r);
    pthread_mutex_unlock(&cl->self_mu);
    return rc;
}

/* This node's tr_node_status JSON, asked of its own socket. */
static int own_status(tr__cluster *cl, tr__buf *reply) {
    tr__reply r;
    int rc = self_call(cl, TR__MSG_STATUS, NULL, &r);
    if (rc) return rc;
    const char *j;
    size_t n;
    rc = tr__get_str(r.root, "json", &j, &n);
    if (!rc) {
        tr__enc_map(reply, 1);
        tr__enc_str(reply, "json");
        tr__enc_strn(reply, j, n);
    }
    tr__reply_free(&r);
    return rc;
}

/* ------------------------------------------------------------------ actors across nodes */

static tr__rpc_client *peer_client(tr__cluster *cl, const char *address) {
    pthread_mutex_lock(&cl->mu);
    peer *p = cl->peers;
    while (p && strcmp(p->address, address) != 0)
        p = p->next;
    if (!p && (p = calloc(1, sizeof *p))) {
        snprintf(p->address, sizeof p->address, "%s", address);
        if (tr__rpc_client_create_tls(address, cl->token, &cl->tls, cl->max_msg, &p->client)) {
            free(p);
            p = NULL;
        } else {
            p->next = cl->peers;
            cl->peers = p;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    return p ? p->client : NULL;
}

/* One request to the node at address (any thread but the RPC server's); retry: once more
 * if the connection broke (gRPC reconnects), for requests that may run twice. */
static int call_peer(tr__cluster *cl, const char *address, const tr__buf *req, int timeout_ms,
                     int retry, tr__buf *reply) {
    tr__rpc_client *c = peer_client(cl, address);
    if (!c) return tr__err(TR_ECONNECT, "cluster: no channel to %s", address);
    if (req->oom) return tr__err(TR_ENOMEM, "cluster");
    size_t keep = reply->len;
    int rc = tr__rpc_call(c, req->data, req->len, timeout_ms, reply);
    if (rc == TR_ECONNECT && retry) {
        reply->len = keep;
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        rc = tr__rpc_call(c, req->data, req->len, timeout_ms, reply);
    }
    return rc;
}

/* A flat map re-encoded, with the value of `key` (if present) replaced by `value`. */
static void reencode(const tr__obj *map, const char *key, const char *value, tr__buf *out) {
    size_t n = tr__obj_len(map);
    tr__enc_map(out, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const tr__obj *k = tr__obj_key_at(map, i), *v = tr__obj_val_at(map, i);
        const char *ks;
        size_t kn;
        if (tr__obj_str(k, "key", &ks, &kn)) {
            tr__enc_nil(out);
            tr__enc_nil(out);
            continue;
        }
        tr__enc_strn(out, ks, kn);
        const char *sp;
        const void *bp;
        size_t sn;
        int64_t iv;
        double dv;
        bool bv;
        if (kn == strlen(key) && memcmp(ks, key, kn) == 0)
            tr__enc_str(out, value);
        else if (tr__obj_type(v) == TR__T_STR && !tr__obj_str(v, "v", &sp, &sn))
            tr__enc_strn(out, sp, sn);
        else if (tr__obj_type(v) == TR__T_BIN && !tr__obj_bin(v, "v", &bp, &sn))
            tr__enc_bin(out, bp, sn);
        else if (tr__obj_type(v) == TR__T_INT && !tr__obj_int(v, "v", &iv))
            tr__enc_int(out, iv);
        else if (tr__obj_type(v) == TR__T_FLOAT && !tr__obj_double(v, "v", &dv))
            tr__enc_double(out, dv);
        else if (tr__obj_type(v) == TR__T_BOOL && !tr__obj_bool(v, "v", &bv))
            tr__enc_bool(out, bv);
        else
            tr__enc_nil(out);
    }
}

/* Lets go of a reference on o; the last one of an owner dropped closes its connection.
 * Caller holds mu. */
static void owner_put(owner *o) {
    if (--o->refs > 0) return;
    tr__nodeconn_close(o->nc);
    free(o);
}

/* The connection to our own socket for a creator on another node, with a reference the
 * caller gives back with owner_put (under create_mu: one adder at a time). Opened without
 * mu: the node's loop, which answers, takes mu too. */
static owner *owner_get(tr__cluster *cl, const char *key, const char *node, const char *exe) {
    pthread_mutex_lock(&cl->mu);
    owner *o = cl->owners;
    while (o && strcmp(o->key, key) != 0)
        o = o->next;
    if (o) o->refs++;
    pthread_mutex_unlock(&cl->mu);
    if (o) return o;
    if (!(o = calloc(1, sizeof *o))) {
        tr__err(TR_ENOMEM, "cluster: owner");
        return NULL;
    }
    snprintf(o->key, sizeof o->key, "%s", key);
    snprintf(o->node, sizeof o->node, "%s", node);
    if (tr__nodeconn_open(cl->sock, cl->max_msg, &o->nc) ||
        tr__nodeconn_hello_exe(o->nc, "driver", exe, SELF_MS)) {
        tr__nodeconn_close(o->nc);
        free(o);
        return NULL;
    }
    o->refs = 2; /* the list's and the caller's (create_mu: no other adder now) */
    pthread_mutex_lock(&cl->mu);
    o->next = cl->owners;
    cl->owners = o;
    pthread_mutex_unlock(&cl->mu);
    return o;
}

/* Drops the owner connections that match key, or node (either may be NULL): their
 * actors die ("its owner exited") once nothing uses the connection. Caller holds mu. */
static void drop_owners(tr__cluster *cl, const char *key, const char *node) {
    for (owner **pp = &cl->owners; *pp;) {
        owner *o = *pp;
        if ((key && strcmp(o->key, key) == 0) || (node && strcmp(o->node, node) == 0)) {
            *pp = o->next;
            TR_LOG_INFO("CLUSTER-OWNER", "the actors of %s here go: their owner is gone", o->key);
            owner_put(o);
        } else {
            pp = &o->next;
        }
    }
}

/* Whether real (a real path) is a worker_path entry or under one of its directories. */
static int in_worker_path(const char *list, const char *real) {
    for (const char *p = list ? list : ""; *p;) {
        size_t n = strcspn(p, ":");
        if (n && (p[n - 1] == '/' ? strncmp(real, p, n) == 0
                                  : strlen(real) == n && strncmp(real, p, n) == 0))
            return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

/* Whether this node runs `cmd` (argv joined by TR__ARG_SEP) as a worker for a driver of
 * another node: 0, or TR_EPERM saying which setting would allow it. A token makes a peer a
 * member, not someone who may run any file here: only this node's own command, programs
 * config worker_path lists (with any arguments: list no interpreter), and the generic
 * worker (troupe-worker) with a library worker_path lists or this node's own. */
static int worker_allowed(tr__cluster *cl, const char *cmd, char *run, size_t cap) {
    if (cl->own_cmd && strcmp(cmd, cl->own_cmd) == 0) {
        snprintf(run, cap, "%s", cmd);
        return 0;
    }
    char copy[4096 + PATH_MAX], *argv[TR__MAX_ARGS + 1], prog[PATH_MAX], lib[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", cmd);
    int argc = tr__command_split(copy, argv);
    if (argc == 0 || argv[0][0] != '/' || !realpath(argv[0], prog))
        return tr__err(TR_EPERM, "this node has no program %s to run for another node's driver",
                       argc ? argv[0] : "(none)");
    /* what is checked is what runs: the real paths (a link swapped later changes nothing) */
    const char *name = strrchr(prog, '/') + 1;
    if ((cl->troupe_worker[0] && strcmp(prog, cl->troupe_worker) == 0) ||
        strcmp(name, "troupe-worker") == 0) { /* it loads argv[1]: that must be allowed too */
        char own[4096 + PATH_MAX], *oargv[TR__MAX_ARGS + 1], olib[PATH_MAX];
        snprintf(own, sizeof own, "%s", cl->own_cmd ? cl->own_cmd : "");
        int oargc = tr__command_split(own, oargv);
        int prog_ok = (cl->troupe_worker[0] && strcmp(prog, cl->troupe_worker) == 0) ||
                      in_worker_path(cl->worker_path, prog);
        int lib_ok = argc == 2 && realpath(argv[1], lib) &&
                     (in_worker_path(cl->worker_path, lib) ||
                      (oargc == 2 && realpath(oargv[1], olib) && strcmp(lib, olib) == 0));
        if (prog_ok && lib_ok && (size_t)snprintf(run, cap, "%s%c%s", prog, TR__ARG_SEP, lib) < cap)
            return 0;
        return tr__err(TR_EPERM,
                       "this node does not run %s%s%s for another node's driver: the generic "
                       "worker loads only a library that config worker_path (troupe start "
                       "--worker-path) lists, or this node's own worker_library",
                       prog, argc > 1 ? " " : "", argc > 1 ? argv[1] : "");
    }
    if (!in_worker_path(cl->worker_path, prog))
        return tr__err(TR_EPERM,
                       "this node does not run %s for another node's driver: it is not this "
                       "node's own worker command; list it (or its directory) in config "
                       "worker_path, `troupe start --worker-path %s`",
                       prog, prog);
    size_t k = (size_t)snprintf(run, cap, "%s", prog);
    for (int i = 1; i < argc && k < cap; i++)
        k += (size_t)snprintf(run + k, cap - k, "%c%s", TR__ARG_SEP, argv[i]);
    return k < cap ? 0 : tr__err(TR_EPERM, "cluster: a worker command too long to run");
}

/* "create" (any node, asked by the head): the actor is made here, owned by the creator's
 * connection; a node:ADDRESS resource named it here and is not ours to count. The worker
 * program must be one this node allows (worker_allowed). */
static int op_create(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char key[64], node[17], asked[4096 + PATH_MAX], exe[4096 + PATH_MAX], res_in[512];
    int rc;
    if ((rc = get_field(req, "owner", key, sizeof key)) ||
        (rc = get_field(req, "node", node, sizeof node)) ||
        (rc = get_command(req, "exe", asked, sizeof asked)) ||
        (rc = get_field(req, "res", res_in, sizeof res_in)) ||
        (rc = worker_allowed(cl, asked, exe, sizeof exe)))
        return rc;
    tr__res want, keep;
    memset(&want, 0, sizeof want);
    memset(&keep, 0, sizeof keep);
    if ((rc = tr__res_parse(&want, res_in))) return rc;
    for (int i = 0; i < want.n; i++)
        if (strncmp(want.name[i], "node:", 5) != 0) tr__res_add(&keep, want.name[i], want.qty[i]);
    char res[512];
    tr__res_format(&keep, res, sizeof res);
    const char *cls, *name = NULL;
    const void *args;
    size_t cn, an, nn = 0;
    int64_t max_restarts;
    if ((rc = tr__get_str(req, "class", &cls, &cn)) ||
        (rc = tr__get_bin(req, "args", &args, &an)) ||
        (rc = tr__get_int(req, "max_restarts", &max_restarts)))
        return rc;
    int named = tr__obj_type(tr__obj_get(req, "name")) == TR__T_STR;
    if (named && (rc = tr__get_str(req, "name", &name, &nn))) return rc;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, named ? 5 : 4);
    tr__enc_str(&b, "class");
    tr__enc_strn(&b, cls, cn);
    tr__enc_str(&b, "args");
    tr__enc_bin(&b, args, an);
    tr__enc_str(&b, "max_restarts");
    tr__enc_int(&b, max_restarts);
    tr__enc_str(&b, "res");
    tr__enc_str(&b, res);
    if (named) {
        tr__enc_str(&b, "name");
        tr__enc_strn(&b, name, nn);
    }
    pthread_mutex_lock(&cl->create_mu);
    owner *o = b.oom ? NULL : owner_get(cl, key, node, exe);
    tr__reply r;
    rc = o ? tr__nodeconn_call(o->nc, TR__MSG_ACTOR_CREATE, &b, SELF_MS, &r)
           : (b.oom ? tr__err(TR_ENOMEM, "cluster") : TR_ECONNECT);
    if (o) {
        pthread_mutex_lock(&cl->mu);
        owner_put(o);
        pthread_mutex_unlock(&cl->mu);
    }
    pthread_mutex_unlock(&cl->create_mu);
    tr__buf_free(&b);
    if (rc) return rc;
    uint8_t id[16];
    rc = tr__get_id(r.root, "id", id, 16);
    tr__reply_free(&r);
    if (rc) return rc;
    tr__enc_map(reply, 1);
    tr__enc_str(reply, "id");
    tr__enc_bin(reply, id, 16);
    return 0;
}

/* "resolve", "kill", "info" (any node): our directory's answer, as it gives it. */
static int op_local(tr__cluster *cl, uint8_t type, const tr__obj *req, tr__buf *reply) {
    uint8_t id[16];
    int rc = tr__get_id(req, "id", id, 16);
    if (rc) return rc;
    int64_t no_restart = 1;
    if (type == TR__MSG_ACTOR_KILL && (rc = tr__get_int(req, "no_restart", &no_restart))) return rc;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, type == TR__MSG_ACTOR_INFO ? 1 : 2);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    if (type == TR__MSG_ACTOR_RESOLVE) {
        tr__enc_str(&b, "wait_ms");
        tr__enc_int(&b, 0);
    } else if (type == TR__MSG_ACTOR_KILL) {
        tr__enc_str(&b, "no_restart");
        tr__enc_int(&b, no_restart);
    }
    tr__reply r;
    rc = b.oom ? tr__err(TR_ENOMEM, "cluster") : self_call(cl, type, &b, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    tr__buf_append(reply, r.mem, r.mem_len);
    tr__reply_free(&r);
    return 0;
}

/* The head: a node for an actor that did not fit where it was asked for, by resources
 * (a node's own "node:<its IP>" among them), the one it placed fewest actors on. Then
 * "create" there (or here), and the actor goes in the head's directory. */
static int op_place(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char res_in[512];
    int rc = get_field(req, "res", res_in, sizeof res_in);
    if (rc) return rc;
    tr__res want;
    memset(&want, 0, sizeof want);
    if ((rc = tr__res_parse(&want, res_in))) return rc;
    char address[128] = "", node[17] = "";
    int best = -1;
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < cl->n; i++) {
        member *m = &cl->nodes[i];
        if (!m->alive || m->client) continue; /* a client runs no actors */
        tr__res has;
        memset(&has, 0, sizeof has);
        char tag[64];
        const char *colon = strrchr(m->address, ':');
        snprintf(tag, sizeof tag, "node:%.*s", colon ? (int)(colon - m->address) : 0, m->address);
        if (tr__res_parse(&has, m->resources) || tr__res_add(&has, tag, 1)) continue;
        if (!tr__res_fits(&want, &has)) continue;
        if (best < 0 || m->placed < cl->nodes[best].placed) best = i;
    }
    if (best >= 0) {
        cl->nodes[best].placed++;
        snprintf(address, sizeof address, "%s", cl->nodes[best].address);
        snprintf(node, sizeof node, "%s", cl->nodes[best].id);
    }
    pthread_mutex_unlock(&cl->mu);
    if (best < 0)
        return tr__err(TR_ERESOURCES,
                       "no node of the cluster has {%s} in all (nor is one named so)", res_in);
    tr__buf r = TR__BUF_INIT;
    if (best == 0) { /* here (the head is row 0) */
        rc = op_create(cl, req, &r);
    } else {
        tr__buf fwd = TR__BUF_INIT; /* the same request, as a "create" */
        reencode(req, "op", "create", &fwd);
        rc = call_peer(cl, address, &fwd, PLACE_MS, 0, &r);
        tr__buf_free(&fwd);
    }
    uint8_t id[16];
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, r.data, r.len))) {
        rc = tr__get_id(d.root, "id", id, 16);
        tr__dec_free(&d);
    }
    tr__buf_free(&r);
    if (rc) {
        char why[400];
        snprintf(why, sizeof why, "%s", tr__last_error());
        return tr__err(rc, "creating the actor on node %s: %s", address, why);
    }
    hactor *h = calloc(1, sizeof *h);
    if (h) {
        memcpy(h->id, id, 16);
        snprintf(h->node, sizeof h->node, "%s", node);
        snprintf(h->address, sizeof h->address, "%s", address);
        if (tr__obj_type(tr__obj_get(req, "name")) == TR__T_STR)
            tr__get_strdup(req, "name", &h->name);
        pthread_mutex_lock(&cl->mu);
        h->next = cl->placed;
        cl->placed = h;
        pthread_mutex_unlock(&cl->mu);
    }
    tr__enc_map(reply, 2);
    tr__enc_str(reply, "id");
    tr__enc_bin(reply, id, 16);
    tr__enc_str(reply, "address");
    tr__enc_str(reply, address);
    return 0;
}

/* The head: where an actor it placed lives ("where" by id, "by_name" by name). */
static int op_find(tr__cluster *cl, const tr__obj *req, int by_name, tr__buf *reply) {
    uint8_t id[16];
    const char *name = NULL;
    size_t nn = 0;
    int rc = by_name ? tr__get_str(req, "name", &name, &nn) : tr__get_id(req, "id", id, 16);
    if (rc) return rc;
    pthread_mutex_lock(&cl->mu);
    hactor *h = cl->placed;
    while (h && (by_name ? !h->name || strlen(h->name) != nn || memcmp(h->name, name, nn) != 0
                         : memcmp(h->id, id, 16) != 0))
        h = h->next;
    if (h) {
        tr__enc_map(reply, 2);
        tr__enc_str(reply, "id");
        tr__enc_bin(reply, h->id, 16);
        tr__enc_str(reply, "address");
        tr__enc_str(reply, h->address);
    }
    pthread_mutex_unlock(&cl->mu);
    return h ? 0 : tr__err(TR_ENOTFOUND, "no such actor in the cluster");
}

/* ------------------------------------------------------------------ the cluster KV store */

static void reply_status(job *j, int rc, const char *msg);

static void ckv_free(ckv *e) {
    free(e->key);
    free(e->val);
    free(e);
}

/* The head: kv_put {key, value} -> {}; kv_get {key} -> {value} (TR_ENOTFOUND); kv_del
 * {key} -> {}; kv_del_prefix {key: the prefix} -> {n}. Bounded: CKV_MAX_KEYS keys,
 * CKV_MAX_BYTES of values (TR_ERESOURCES past them). Takes mu. */
static int op_kv(tr__cluster *cl, const char *op, const tr__obj *req, tr__buf *reply) {
    const char *key;
    size_t kn;
    int rc = tr__get_str(req, "key", &key, &kn);
    if (rc) return rc;
    if (kn == 0 || kn > CKV_MAX_KEY || memchr(key, '\0', kn))
        return tr__err(TR_EINVAL, "cluster kv: a key of %zu bytes (want 1..%d, no NUL)", kn,
                       CKV_MAX_KEY);
    const void *val = NULL;
    size_t vn = 0;
    int put = strcmp(op, "kv_put") == 0, prefix = strcmp(op, "kv_del_prefix") == 0;
    if (put && (rc = tr__get_bin(req, "value", &val, &vn))) return rc;
    if (!put && !prefix && strcmp(op, "kv_get") != 0 && strcmp(op, "kv_del") != 0)
        return tr__err(TR_EINVAL, "cluster: unknown op '%s'", op);
    pthread_mutex_lock(&cl->mu);
    ckv **pp = &cl->kv;
    uint64_t n = 0;
    if (put) { /* full (counting what this put replaces): refused, the old value kept */
        size_t keys = cl->kv_keys, bytes = cl->kv_bytes;
        for (ckv *e = cl->kv; e; e = e->next)
            if (strlen(e->key) == kn && memcmp(e->key, key, kn) == 0) {
                keys--;
                bytes -= e->len;
                break;
            }
        if (keys >= CKV_MAX_KEYS || vn > CKV_MAX_BYTES - bytes) {
            pthread_mutex_unlock(&cl->mu);
            return tr__err(TR_ERESOURCES, "cluster kv: full (%zu keys, %zu bytes)", cl->kv_keys,
                           cl->kv_bytes);
        }
    }
    while (*pp) {
        ckv *e = *pp;
        int hit = prefix ? strncmp(e->key, key, kn) == 0
                         : strlen(e->key) == kn && memcmp(e->key, key, kn) == 0;
        if (!hit) {
            pp = &e->next;
            continue;
        }
        if (!put && !prefix && strcmp(op, "kv_get") == 0) break;
        *pp = e->next; /* put replaces it; del and del_prefix drop it */
        cl->kv_keys--;
        cl->kv_bytes -= e->len;
        ckv_free(e);
        n++;
        if (!prefix) break;
    }
    if (put) {
        ckv *e = NULL;
        if (!(e = calloc(1, sizeof *e)) || !(e->key = strndup(key, kn)) ||
            !(e->val = malloc(vn ? vn : 1))) {
            if (e) ckv_free(e);
            rc = tr__err(TR_ENOMEM, "cluster kv");
        } else {
            if (vn) memcpy(e->val, val, vn);
            e->len = vn;
            e->next = cl->kv;
            cl->kv = e;
            cl->kv_keys++;
            cl->kv_bytes += vn;
        }
        if (!rc) tr__enc_map(reply, 0);
    } else if (prefix) {
        tr__enc_map(reply, 1);
        tr__enc_str(reply, "n");
        tr__enc_uint(reply, n);
    } else if (strcmp(op, "kv_del") == 0) {
        tr__enc_map(reply, 0);
    } else if (*pp) {
        tr__enc_map(reply, 1);
        tr__enc_str(reply, "value");
        tr__enc_bin(reply, (*pp)->val, (*pp)->len);
    } else {
        rc = tr__err(TR_ENOTFOUND, "cluster kv: no key '%.*s'", (int)(kn > 200 ? 200 : kn), key);
    }
    pthread_mutex_unlock(&cl->mu);
    return rc;
}

/* A node's KV request for the cluster's store, asked of the head (a job). */
static void run_kv(tr__cluster *cl, job *j) {
    char op[32], head[128];
    snprintf(op, sizeof op, "kv_%s", j->cls);
    pthread_mutex_lock(&cl->mu);
    snprintf(head, sizeof head, "%s", cl->head ? cl->address : cl->head_addr);
    pthread_mutex_unlock(&cl->mu);
    tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
    int put = strcmp(j->cls, "put") == 0;
    tr__enc_map(&q, put ? 3 : 2);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, op);
    tr__enc_str(&q, "key");
    tr__enc_str(&q, j->name);
    if (put) {
        tr__enc_str(&q, "value");
        tr__enc_bin(&q, j->args, j->args_len);
    }
    int rc = call_peer(cl, head, &q, PEER_MS, 1, &a);
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, a.data, a.len))) {
        const void *v;
        size_t vn;
        if (strcmp(j->cls, "get") != 0) {
            tr__reply_begin(&j->reply, 0, NULL, 0);
        } else if (!(rc = tr__get_bin(d.root, "value", &v, &vn))) {
            tr__reply_begin(&j->reply, 0, NULL, 1);
            tr__enc_str(&j->reply, "value");
            tr__enc_bin(&j->reply, v, vn);
        }
        tr__dec_free(&d);
    }
    if (rc) {
        char why[600];
        if (rc == TR_ECONNECT || rc == TR_ETIMEDOUT)
            snprintf(why, sizeof why, "the head at %s cannot be reached: %s", head,
                     tr__last_error());
        else
            snprintf(why, sizeof why, "%s", tr__last_error());
        reply_status(j, rc, why);
    }
    tr__buf_free(&q);
    tr__buf_free(&a);
}

/* ------------------------------------------------------------------ forwarded requests */

static void job_free(job *j) {
    free(j->cls);
    free(j->name);
    free(j->res);
    free(j->exe);
    free(j->args);
    tr__buf_free(&j->reply);
    free(j);
}

static void reply_status(job *j, int rc, const char *msg) {
    tr__buf_reset(&j->reply);
    tr__reply_begin(&j->reply, rc, msg, 0);
}

static void remember(tr__cluster *cl, const uint8_t *id, const char *address, uint64_t owner) {
    pthread_mutex_lock(&cl->mu);
    ractor *r = cl->remote;
    while (r && memcmp(r->id, id, 16) != 0)
        r = r->next;
    if (!r && (r = calloc(1, sizeof *r))) {
        memcpy(r->id, id, 16);
        r->next = cl->remote;
        cl->remote = r;
    }
    if (r) {
        snprintf(r->address, sizeof r->address, "%s", address);
        if (owner) r->owner = owner;
    }
    pthread_mutex_unlock(&cl->mu);
}

/* The node an actor lives on: known here, or asked of the head. */
/* One request to the head about an actor, whose answer is {id, address}; a head out of
 * reach is named in the error. */
static int ask_head(tr__cluster *cl, const tr__buf *q, int timeout_ms, int retry, uint8_t id[16],
                    char *address, size_t cap) {
    char head[128];
    pthread_mutex_lock(&cl->mu);
    snprintf(head, sizeof head, "%s", cl->head ? cl->address : cl->head_addr);
    pthread_mutex_unlock(&cl->mu);
    tr__buf a = TR__BUF_INIT;
    int rc = call_peer(cl, head, q, timeout_ms, retry, &a);
    if (rc == TR_ECONNECT || rc == TR_ETIMEDOUT) {
        char why[400];
        snprintf(why, sizeof why, "%s", tr__last_error());
        rc = tr__err(rc, "the head at %s cannot be reached: %s", head, why);
    }
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, a.data, a.len))) {
        if (!(rc = tr__get_id(d.root, "id", id, 16)))
            rc = get_field(d.root, "address", address, cap);
        tr__dec_free(&d);
    }
    tr__buf_free(&a);
    return rc;
}

/* A forwarded request's answer: the actor's id. */
static void reply_id(job *j, const uint8_t id[16]) {
    tr__reply_begin(&j->reply, 0, NULL, 1);
    tr__enc_str(&j->reply, "id");
    tr__enc_bin(&j->reply, id, 16);
}

static int locate(tr__cluster *cl, const uint8_t *id, char *address, size_t cap) {
    pthread_mutex_lock(&cl->mu);
    ractor *r = cl->remote;
    while (r && memcmp(r->id, id, 16) != 0)
        r = r->next;
    if (r) snprintf(address, cap, "%s", r->address);
    pthread_mutex_unlock(&cl->mu);
    if (r) return 0;
    tr__buf q = TR__BUF_INIT;
    tr__enc_map(&q, 2);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, "where");
    tr__enc_str(&q, "id");
    tr__enc_bin(&q, id, 16);
    uint8_t same[16];
    int rc = ask_head(cl, &q, PEER_MS, 1, same, address, cap);
    tr__buf_free(&q);
    if (!rc) remember(cl, id, address, 0);
    return rc;
}

/* The head's word on the node at address: 1 alive, 0 lost, -1 none (not in the table, or
 * the head itself out of reach). */
static int table_says(tr__cluster *cl, const char *address) {
    int says = -1;
    pthread_mutex_lock(&cl->mu);
    if (cl->head) {
        for (int i = 0; i < cl->n; i++)
            if (strcmp(cl->nodes[i].address, address) == 0) says = cl->nodes[i].alive != 0;
    } else if (cl->head_alive && cl->nodes_json) {
        char pat[200];
        snprintf(pat, sizeof pat, "\"address\":\"%s\"", address);
        const char *at = strstr(cl->nodes_json, pat);
        const char *alive = at ? strstr(at, "\"alive\":") : NULL;
        if (alive) says = strncmp(alive + 8, "true", 4) == 0;
    }
    pthread_mutex_unlock(&cl->mu);
    return says;
}

/* Whether the head counts the node at address lost (or forgotten, or the head itself is
 * out of reach): an actor there that cannot be reached is dead, not just late. */
static int node_lost(tr__cluster *cl, const char *address) {
    return table_says(cl, address) != 1;
}

static int closing(tr__cluster *cl) {
    pthread_mutex_lock(&cl->mu);
    int c = cl->closing;
    pthread_mutex_unlock(&cl->mu);
    return c;
}

static void run_create(tr__cluster *cl, job *j) {
    tr__buf q = TR__BUF_INIT;
    char key[64];
    snprintf(key, sizeof key, "%s/%llu", cl->id, (unsigned long long)j->conn_id);
    tr__enc_map(&q, j->name ? 9 : 8);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, "place");
    tr__enc_str(&q, "owner");
    tr__enc_str(&q, key);
    tr__enc_str(&q, "node");
    tr__enc_str(&q, cl->id);
    tr__enc_str(&q, "exe");
    tr__enc_str(&q, j->exe);
    tr__enc_str(&q, "class");
    tr__enc_str(&q, j->cls);
    tr__enc_str(&q, "args");
    tr__enc_bin(&q, j->args, j->args_len);
    tr__enc_str(&q, "max_restarts");
    tr__enc_int(&q, j->max_restarts);
    tr__enc_str(&q, "res");
    tr__enc_str(&q, j->res);
    if (j->name) {
        tr__enc_str(&q, "name");
        tr__enc_str(&q, j->name);
    }
    uint8_t id[16];
    char address[128];
    int rc = ask_head(cl, &q, PLACE_WAIT_MS, 0, id, address, sizeof address);
    if (rc) {
        char why[600];
        snprintf(why, sizeof why, "placing the actor on another node: %s", tr__last_error());
        reply_status(j, rc, why);
    } else {
        remember(cl, id, address, j->conn_id);
        reply_id(j, id);
    }
    tr__buf_free(&q);
}

/* resolve, kill, info: asked of the actor's node. */
static void run_on_node(tr__cluster *cl, job *j) {
    char address[128];
    int rc = locate(cl, j->id, address, sizeof address);
    if (rc) {
        char why[400];
        snprintf(why, sizeof why, "%s", tr__last_error());
        reply_status(j, rc == TR_ENOTFOUND ? rc : TR_ECONNECT,
                     rc == TR_ENOTFOUND ? "no such actor" : why);
        return;
    }
    const char *op = j->type == TR__MSG_ACTOR_RESOLVE ? "resolve"
                     : j->type == TR__MSG_ACTOR_KILL  ? "kill"
                                                      : "info";
    int64_t deadline = tr__deadline((int)(j->wait_ms > 1000 ? 1000 : j->wait_ms));
    for (;;) {
        tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
        tr__enc_map(&q, j->type == TR__MSG_ACTOR_KILL ? 3 : 2);
        tr__enc_str(&q, "op");
        tr__enc_str(&q, op);
        tr__enc_str(&q, "id");
        tr__enc_bin(&q, j->id, 16);
        if (j->type == TR__MSG_ACTOR_KILL) {
            tr__enc_str(&q, "no_restart");
            tr__enc_int(&q, j->no_restart);
        }
        rc = call_peer(cl, address, &q, PEER_MS, 1, &a);
        tr__buf_free(&q);
        tr__dec d;
        int decoded = !rc && tr__dec_init(&d, a.data, a.len) == 0;
        if (!rc && !decoded) rc = TR_EPROTO;
        char why[600];
        snprintf(why, sizeof why, "%s", rc ? tr__last_error() : "");
        if (j->type != TR__MSG_ACTOR_RESOLVE || (rc && rc != TR_ECONNECT && rc != TR_ETIMEDOUT)) {
            if (rc) {
                reply_status(j, rc, why);
            } else {
                tr__buf_reset(&j->reply);
                reencode(d.root, "node", address, &j->reply);
            }
            if (decoded) tr__dec_free(&d);
            tr__buf_free(&a);
            return;
        }
        int64_t state = TR__ACTOR_DEAD;
        uint64_t inc = 0;
        const char *reason = NULL;
        size_t rn = 0;
        char unreachable[800];
        if (rc && !node_lost(cl, address)) { /* late, maybe: asked again, unless time is up */
            state = TR__ACTOR_RESTARTING;
        } else if (rc) {
            snprintf(unreachable, sizeof unreachable,
                     "its node at %s cannot be reached and the cluster counts it lost: %s", address,
                     why);
            reason = unreachable;
            rn = strlen(unreachable);
        } else if (tr__get_int(d.root, "state", &state) || tr__get_uint(d.root, "inc", &inc)) {
            state = TR__ACTOR_DEAD;
            reason = "its node answered without a state";
            rn = strlen(reason);
        } else if (tr__get_str(d.root, "reason", &reason, &rn)) {
            reason = NULL;
        }
        int final = state == TR__ACTOR_ALIVE || state == TR__ACTOR_DEAD ||
                    tr__now_ns() >= deadline || closing(cl);
        if (final) {
            tr__buf_reset(&j->reply);
            tr__reply_begin(&j->reply, 0, NULL, 9);
            tr__enc_str(&j->reply, "state");
            tr__enc_int(&j->reply, state);
            tr__enc_str(&j->reply, "inc");
            tr__enc_uint(&j->reply, inc);
            tr__enc_str(&j->reply, "path");
            tr__enc_nil(&j->reply);
            tr__enc_str(&j->reply, "reason");
            if (reason)
                tr__enc_strn(&j->reply, reason, rn);
            else
                tr__enc_nil(&j->reply);
            tr__enc_str(&j->reply, "remote");
            tr__enc_str(&j->reply, address);
            tr__enc_str(&j->reply, "token");
            tr__enc_str(&j->reply, cl->token);
            tr__enc_tls_files(&j->reply, &cl->tls_files);
        }
        if (decoded) tr__dec_free(&d); /* (it points into a) */
        tr__buf_free(&a);
        if (final) return;
        struct timespec ts = {0, POLL_NS};
        nanosleep(&ts, NULL);
    }
}

static void run_by_name(tr__cluster *cl, job *j) {
    tr__buf q = TR__BUF_INIT;
    tr__enc_map(&q, 2);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, "by_name");
    tr__enc_str(&q, "name");
    tr__enc_str(&q, j->name);
    uint8_t id[16];
    char address[128];
    int rc = ask_head(cl, &q, PEER_MS, 1, id, address, sizeof address);
    if (rc) {
        reply_status(j, rc, rc == TR_ENOTFOUND ? "no live actor has that name" : tr__last_error());
    } else {
        remember(cl, id, address, 0);
        reply_id(j, id);
    }
    tr__buf_free(&q);
}

static void *job_main(void *arg) {
    job *j = arg;
    tr__cluster *cl = j->cl;
    if (j->type == TR__MSG_ACTOR_CREATE) {
        run_create(cl, j);
    } else if (j->type == TR__MSG_ACTOR_BY_NAME) {
        run_by_name(cl, j);
    } else if (j->type == TR__MSG_CLUSTER_KV) {
        run_kv(cl, j);
    } else if (j->type == 0) { /* a creator here is gone: its actors there go too */
        tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
        tr__enc_map(&q, 2);
        tr__enc_str(&q, "op");
        tr__enc_str(&q, "owner_gone");
        tr__enc_str(&q, "owner");
        tr__enc_str(&q, j->owner_key);
        if (call_peer(cl, j->address, &q, PEER_MS, 1, &a))
            TR_LOG_WARN("CLUSTER-OWNER", "telling %s that %s is gone: %s", j->address, j->owner_key,
                        tr__last_error());
        tr__buf_free(&q);
        tr__buf_free(&a);
    } else {
        run_on_node(cl, j);
    }
    if (j->reply.oom) reply_status(j, TR_ENOMEM, "cluster: out of memory");
    pthread_mutex_lock(&cl->mu);
    j->next = cl->done;
    cl->done = j;
    if (cl->async_live) uv_async_send(&cl->async);
    cl->jobs--;
    pthread_cond_broadcast(&cl->jobs_cv);
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

/* Runs fn(arg) on a detached thread counted in *running (under mu: the thread takes
 * one off as it ends, and broadcasts jobs_cv), unless *refused is set or max are running
 * already. Returns 1 if it started, else 0 (and fn never runs). */
static int spawn_counted(tr__cluster *cl, int *running, int max, const int *refused,
                         void *(*fn)(void *), void *arg) {
    pthread_mutex_lock(&cl->mu);
    int ok = !*refused && *running < max;
    if (ok) (*running)++;
    pthread_mutex_unlock(&cl->mu);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (ok && pthread_create(&t, &at, fn, arg) != 0) {
        pthread_mutex_lock(&cl->mu);
        (*running)--;
        pthread_cond_broadcast(&cl->jobs_cv); /* (a stop may be waiting) */
        pthread_mutex_unlock(&cl->mu);
        ok = 0;
    }
    pthread_attr_destroy(&at);
    return ok;
}

/* Starts a job (loop thread). Returns 0 if it could not (too many, closing). */
static int start_job(tr__cluster *cl, job *j) {
    return spawn_counted(cl, &cl->jobs, MAX_JOBS, &cl->closing, job_main, j);
}

static void on_jobs_done(uv_async_t *h) {
    tr__cluster *cl = h->data;
    pthread_mutex_lock(&cl->mu);
    job *j = cl->done;
    cl->done = NULL;
    pthread_mutex_unlock(&cl->mu);
    while (j) {
        job *n = j->next;
        if (j->c) {
            if (j->reply.len) tr__server_reply(j->c, j->seq, &j->reply);
            /* its creator left while the actor was being made: it goes too */
            if (j->type == TR__MSG_ACTOR_CREATE && j->c->closed) tr__cluster_conn_closed(cl, j->c);
            tr__conn_unref(j->c);
        }
        job_free(j);
        j = n;
    }
}

int tr__cluster_forward(tr__cluster *cl, int type, tr__conn *c, uint64_t seq, const tr__obj *body) {
    /* the node's own connections (the RPC thread's, the relay's, creators' from other
     * nodes) ask about this node only: forwarding them could come back here */
    if (!cl || c->pid == getpid()) return 0;
    job *j = calloc(1, sizeof *j);
    if (!j) return 0;
    j->cl = cl;
    j->type = type;
    j->seq = seq;
    j->conn_id = c->id;
    int rc = 0;
    if (type == TR__MSG_ACTOR_CREATE) {
        const void *args;
        if ((rc = tr__get_strdup(body, "class", &j->cls)) ||
            (rc = tr__get_bin(body, "args", &args, &j->args_len)) ||
            (rc = tr__get_int(body, "max_restarts", &j->max_restarts)) ||
            (rc = tr__get_strdup(body, "res", &j->res)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "name")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "name", &j->name)))
            goto fail;
        j->args = malloc(j->args_len ? j->args_len : 1);
        j->exe = c->exe ? strdup(c->exe) : NULL;
        if (!j->args || !j->exe) goto fail;
        memcpy(j->args, args, j->args_len);
    } else if (type == TR__MSG_ACTOR_BY_NAME) {
        if ((rc = tr__get_strdup(body, "name", &j->name))) goto fail;
    } else if (type == TR__MSG_CLUSTER_KV) { /* (the node checked the op) */
        const void *v = NULL;
        if ((rc = tr__get_strdup(body, "op", &j->cls)) ||
            (rc = tr__get_strdup(body, "key", &j->name)))
            goto fail;
        if (strcmp(j->cls, "put") == 0 && (rc = tr__get_bin(body, "value", &v, &j->args_len)))
            goto fail;
        if (!(j->args = malloc(j->args_len ? j->args_len : 1))) goto fail;
        if (j->args_len) memcpy(j->args, v, j->args_len);
    } else {
        if ((rc = tr__get_id(body, "id", j->id, 16))) goto fail;
        if (tr__obj_get(body, "wait_ms")) tr__get_int(body, "wait_ms", &j->wait_ms);
        j->no_restart = 1;
        if (tr__obj_get(body, "no_restart")) tr__get_int(body, "no_restart", &j->no_restart);
    }
    j->c = c;
    tr__conn_ref(c);
    if (start_job(cl, j)) return 1;
    tr__conn_unref(c);
fail:
    job_free(j);
    return 0;
}

void tr__cluster_conn_closed(tr__cluster *cl, tr__conn *c) {
    if (!cl) return;
    /* its actors' records leave the list; each node that has some is told once */
    ractor *mine = NULL;
    pthread_mutex_lock(&cl->mu);
    for (ractor **pp = &cl->remote; *pp;) {
        ractor *r = *pp;
        if (r->owner != c->id) {
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        ractor *seen = mine;
        while (seen && strcmp(seen->address, r->address) != 0)
            seen = seen->next;
        if (seen) {
            free(r);
        } else {
            r->next = mine;
            mine = r;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    while (mine) {
        ractor *r = mine;
        mine = r->next;
        job *j = calloc(1, sizeof *j);
        if (j) {
            j->cl = cl;
            snprintf(j->owner_key, sizeof j->owner_key, "%s/%llu", cl->id,
                     (unsigned long long)c->id);
            snprintf(j->address, sizeof j->address, "%s", r->address);
            if (!start_job(cl, j)) { /* closing: the head's sweep will say this node is lost */
                TR_LOG_WARN("CLUSTER-OWNER", "cannot tell %s that %s is gone", r->address,
                            j->owner_key);
                job_free(j);
            }
        }
        free(r);
    }
}

void tr__cluster_close(tr__cluster *cl) {
    if (!cl) return;
    /* the actors this node's creators have elsewhere go with it: each node that has some
     * is told (the head would count this node lost in a few seconds anyway) */
    pthread_mutex_lock(&cl->mu);
    ractor *mine = NULL;
    for (ractor **pp = &cl->remote; *pp;) {
        ractor *r = *pp, *seen = mine;
        while (seen && strcmp(seen->address, r->address) != 0)
            seen = seen->next;
        *pp = r->next;
        if (r->owner && !seen) {
            r->next = mine;
            mine = r;
        } else {
            free(r);
        }
    }
    pthread_mutex_unlock(&cl->mu);
    while (mine) {
        ractor *r = mine;
        mine = r->next;
        job *j = calloc(1, sizeof *j);
        if (j) {
            j->cl = cl;
            snprintf(j->owner_key, sizeof j->owner_key, "%s/*", cl->id);
            snprintf(j->address, sizeof j->address, "%s", r->address);
            if (!start_job(cl, j)) job_free(j);
        }
        free(r);
    }
    pthread_mutex_lock(&cl->mu);
    cl->closing = 1;
    while (cl->jobs > 0)
        pthread_cond_wait(&cl->jobs_cv, &cl->mu);
    pthread_mutex_unlock(&cl->mu);
    on_jobs_done(&cl->async);
    if (cl->async_live) {
        cl->async_live = 0;
        uv_close((uv_handle_t *)&cl->async, NULL);
    }
}

/* ------------------------------------------------------------------ the token */

/* The first line of dir/name, if it is a regular file of ours. 0, or -1. */
static int read_line(const char *dir, const char *name, char *out, size_t cap) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    ssize_t n = -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == getuid())
        n = read(fd, out, cap - 1);
    if (fd >= 0) close(fd);
    if (n <= 0) return -1;
    out[n] = '\0';
    out[strcspn(out, "\r\n")] = '\0';
    return out[0] ? 0 : -1;
}

/* Whether "HOST:PORT" a names the node whose address is b ("IP:PORT"): the same port, and
 * a host that is b's IP, or both loopback (a token found here never goes to another host). */
static int same_node(const char *a, const char *b) {
    char host[256], ip[64];
    int pa, pb;
    if (tr__split_host_port(a, host, sizeof host, &pa) ||
        tr__split_host_port(b, ip, sizeof ip, &pb) || pa != pb)
        return 0;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    struct in_addr mine;
    if (inet_pton(AF_INET, ip, &mine) != 1 || getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
    int same = 0;
    for (struct addrinfo *r = res; r && !same; r = r->ai_next) {
        struct in_addr it = ((struct sockaddr_in *)r->ai_addr)->sin_addr;
        same = it.s_addr == mine.s_addr ||
               ((ntohl(it.s_addr) >> 24) == 127 && (ntohl(mine.s_addr) >> 24) == 127);
    }
    freeaddrinfo(res);
    return same;
}

int tr__cluster_local_token(const char *base, const char *address, char *out, size_t cap) {
    char host[256];
    int port;
    if (tr__split_host_port(address, host, sizeof host, &port) || port == 0)
        return tr__err(TR_EINVAL, "cluster: '%s' is not HOST:PORT", address);
    DIR *d = opendir(base);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d))) {
        char dir[1100], addr[160], tok[300];
        if (e->d_name[0] != 'n') continue; /* the sessions: "n<pid>-<random>" */
        snprintf(dir, sizeof dir, "%s/%s", base, e->d_name);
        if (read_line(dir, TR__CLUSTER_ADDRESS_FILE, addr, sizeof addr) == 0 &&
            same_node(address, addr) &&
            read_line(dir, TR__CLUSTER_TOKEN_FILE, tok, sizeof tok) == 0 && strlen(tok) < cap) {
            snprintf(out, cap, "%s", tok);
            found = 1;
        }
    }
    if (d) closedir(d);
    return found ? 0
                 : tr__err(TR_ENOTFOUND, "no node of this machine's user listens at %s (in %s)",
                           address, base);
}

/* Writes "<line>\n" to a new file name, 0600, in the directory of the node's socket. */
static int write_session_file(const char *sock, const char *name, const char *line) {
    char p[1200];
    const char *slash = strrchr(sock, '/');
    if (!slash) return tr__err(TR_EINVAL, "cluster: the node's socket %s has no directory", sock);
    snprintf(p, sizeof p, "%.*s/%s", (int)(slash - sock), sock, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return tr__err_errno(errno, "cluster: cannot create %s", p);
    size_t n = strlen(line);
    int ok = write(fd, line, n) == (ssize_t)n && write(fd, "\n", 1) == 1;
    int e = errno;
    close(fd);
    if (!ok) {
        unlink(p);
        return tr__err_errno(e, "cluster: cannot write %s", p);
    }
    return 0;
}

/* The cluster's token into cl->token: the configured one, else (a head) a new one from
 * getrandom, else (a node joining) that of the head of this machine it joins. *made: 1 if
 * it was generated here. */
static int find_token(tr__cluster *cl, const tr_config *cfg, int *made) {
    *made = 0;
    if (cfg->cluster_token && cfg->cluster_token[0]) {
        snprintf(cl->token, sizeof cl->token, "%s", cfg->cluster_token);
        return 0;
    }
    if (cl->head) {
        uint8_t rnd[32];
        int rc = tr__random_bytes(rnd, sizeof rnd);
        if (rc) return rc;
        tr__hex(rnd, sizeof rnd, cl->token);
        *made = 1;
        return 0;
    }
    char base[600];
    const char *s1 = strrchr(cl->sock, '/');
    int n = s1 ? (int)(s1 - cl->sock) : 0;
    const char *s2 = n ? memrchr(cl->sock, '/', (size_t)n) : NULL;
    if (s2) snprintf(base, sizeof base, "%.*s", (int)(s2 - cl->sock), cl->sock);
    if (s2 && tr__cluster_local_token(base, cl->head_addr, cl->token, sizeof cl->token) == 0)
        return 0;
    return tr__err(TR_EPERM,
                   "joining the head at %s needs the cluster's token: give it with "
                   "--token-file FILE (config cluster_token_file) or TROUPE_CLUSTER_TOKEN; a "
                   "head writes it to cluster-token in its session directory (troupe start "
                   "prints where)",
                   cl->head_addr);
}

/* ------------------------------------------------------------------ the RPC server's ops */

/* "register" (the head): a node joins, or joins again. Takes mu. */
static int op_register(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    member m;
    memset(&m, 0, sizeof m);
    int64_t gpus = 0;
    int rc;
    if ((rc = get_field(req, "id", m.id, sizeof m.id)) ||
        (rc = get_field(req, "address", m.address, sizeof m.address)) ||
        (rc = get_field(req, "sock", m.sock, sizeof m.sock)) ||
        (rc = get_field(req, "resources", m.resources, sizeof m.resources)) ||
        (rc = tr__get_double(req, "cpus", &m.cpus)) || (rc = tr__get_int(req, "gpus", &gpus)))
        return rc;
    if (!m.id[0] || strcmp(m.id, cl->id) == 0 || !isfinite(m.cpus) || m.cpus < 0 || m.cpus > 1e6 ||
        gpus < 0 || gpus > 65536)
        return tr__err(TR_EPROTO, "cluster: a registration with a bad id, CPUs or GPUs");
    m.gpus = (int)gpus;
    m.last_ns = tr__now_ns();
    m.alive = 1;
    int64_t client = 0; /* (absent from an older node: not a client) */
    if (tr__obj_get(req, "client") && (rc = tr__get_int(req, "client", &client))) return rc;
    m.client = client != 0;
    pthread_mutex_lock(&cl->mu);
    int i = 1;
    while (i < cl->n && strcmp(cl->nodes[i].id, m.id) != 0)
        i++;
    if (i == cl->n && cl->n == MAX_NODES) {
        pthread_mutex_unlock(&cl->mu);
        return tr__err(TR_ERESOURCES, "cluster: %d nodes already", MAX_NODES);
    }
    /* its number: the one it had (here, or - the head restarted - as it says, if no other
     * node has it), else a new one */
    int64_t want = 0;
    if (tr__obj_get(req, "num")) tr__get_int(req, "num", &want);
    if (i < cl->n) want = cl->nodes[i].num;
    for (int k = 0; k < cl->n && want > 0; k++)
        if (k != i && cl->nodes[k].num == (uint32_t)want) want = 0;
    if (want <= 1 || want > 0xffffff) {
        for (;;) {
            want = cl->next_num++;
            if (cl->next_num > 0xffffff) cl->next_num = 2;
            int used = 0;
            for (int k = 0; k < cl->n; k++)
                used |= cl->nodes[k].num == (uint32_t)want;
            if (!used) break;
        }
    }
    m.num = (uint32_t)want;
    if (i == cl->n) cl->n++;
    cl->nodes[i] = m;
    TR_LOG_INFO("CLUSTER-JOIN", "node %s at %s joined (%g CPUs, %d GPUs)", m.id, m.address, m.cpus,
                m.gpus);
    tr__enc_map(reply, 3);
    tr__enc_str(reply, "head");
    tr__enc_str(reply, cl->id);
    tr__enc_str(reply, "num");
    tr__enc_uint(reply, m.num);
    enc_table(cl, reply); /* so the node knows the table before a heartbeat */
    pthread_mutex_unlock(&cl->mu);
    return 0;
}

/* "heartbeat" (the head): a node is alive, with its counts; the answer is the table and
 * the lost nodes' ids (the actors their drivers made elsewhere go). Takes mu. */
static int op_heartbeat(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char id[17];
    int rc = get_field(req, "id", id, sizeof id);
    if (rc) return rc;
    pthread_mutex_lock(&cl->mu);
    int i = 1;
    while (i < cl->n && strcmp(cl->nodes[i].id, id) != 0)
        i++;
    if (i >= cl->n) {
        pthread_mutex_unlock(&cl->mu);
        return tr__err(TR_ENOTFOUND, "cluster: node %s is not known here: register again", id);
    }
    cl->nodes[i].last_ns = tr__now_ns();
    uint64_t v; /* its counts (absent from an older node: kept) */
    if (tr__obj_get(req, "actors") && !tr__get_uint(req, "actors", &v)) cl->nodes[i].actors = v;
    if (tr__obj_get(req, "objects") && !tr__get_uint(req, "objects", &v)) cl->nodes[i].objects = v;
    if (tr__obj_get(req, "object_bytes") && !tr__get_uint(req, "object_bytes", &v))
        cl->nodes[i].object_bytes = v;
    if (!cl->nodes[i].alive)
        TR_LOG_WARN("CLUSTER-BACK", "node %s at %s is back", id, cl->nodes[i].address);
    cl->nodes[i].alive = 1;
    int lost = 0;
    for (int k = 1; k < cl->n; k++)
        lost += !cl->nodes[k].alive;
    tr__enc_map(reply, 2);
    enc_table(cl, reply);
    tr__enc_str(reply, "lost");
    tr__enc_array(reply, (uint32_t)lost);
    for (int k = 1; k < cl->n; k++)
        if (!cl->nodes[k].alive) tr__enc_str(reply, cl->nodes[k].id);
    pthread_mutex_unlock(&cl->mu);
    return 0;
}

static int op_nodes(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    (void)req;
    pthread_mutex_lock(&cl->mu);
    tr__enc_map(reply, 1);
    enc_table(cl, reply);
    pthread_mutex_unlock(&cl->mu);
    return 0;
}

static int op_ping(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    (void)cl;
    (void)req;
    tr__enc_map(reply, 0);
    return 0;
}

/* "owner_gone": the creator "<node>/<connection>" (or "<node>/" "*": every creator of that
 * node) is gone: the actors it made here go too. */
static int op_owner_gone(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char key[64];
    int rc = get_field(req, "owner", key, sizeof key);
    if (rc) return rc;
    size_t kn = strlen(key);
    int all = kn > 2 && strcmp(key + kn - 2, "/*") == 0;
    if (all) key[kn - 2] = '\0';
    pthread_mutex_lock(&cl->mu);
    drop_owners(cl, all ? NULL : key, all ? key : NULL);
    pthread_mutex_unlock(&cl->mu);
    tr__enc_map(reply, 0);
    return 0;
}

static int op_status(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    (void)req;
    return own_status(cl, reply);
}

static int op_resolve(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_local(cl, TR__MSG_ACTOR_RESOLVE, req, reply);
}

static int op_kill(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_local(cl, TR__MSG_ACTOR_KILL, req, reply);
}

static int op_info(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_local(cl, TR__MSG_ACTOR_INFO, req, reply);
}

static int op_where(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_find(cl, req, 0, reply);
}

static int op_by_name(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_find(cl, req, 1, reply);
}

static int op_kv_any(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char op[32];
    int rc = get_field(req, "op", op, sizeof op);
    return rc ? rc : op_kv(cl, op, req, reply);
}

/* What the RPC server answers. SLOW ops wait on something else (another node, this
 * node's own loop, a worker): they run on a thread of their own and are answered from
 * there, so that heartbeats and registrations - answered on the RPC thread at once, under
 * mu only - never wait behind them (a hung node must not make healthy ones look lost). */
enum { OP_HEAD = 1, OP_SLOW = 2 };
typedef int (*op_fn)(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
static const struct {
    const char *name;
    int flags;
    op_fn fn;
} ops[] = {
    {"register", OP_HEAD, op_register},
    {"heartbeat", OP_HEAD, op_heartbeat},
    {"nodes", OP_HEAD, op_nodes},
    {"where", OP_HEAD, op_where},
    {"by_name", OP_HEAD, op_by_name},
    {"kv_put", OP_HEAD, op_kv_any},
    {"kv_get", OP_HEAD, op_kv_any},
    {"kv_del", OP_HEAD, op_kv_any},
    {"kv_del_prefix", OP_HEAD, op_kv_any},
    {"place", OP_HEAD | OP_SLOW, op_place},
    {"ping", 0, op_ping},
    {"owner_gone", 0, op_owner_gone},
    {"status", OP_SLOW, op_status},
    {"create", OP_SLOW, op_create},
    {"resolve", OP_SLOW, op_resolve},
    {"kill", OP_SLOW, op_kill},
    {"info", OP_SLOW, op_info},
};

/* A SLOW op, on a thread of its own: its request (a copy), and the call to answer. */
typedef struct slow_op {
    tr__cluster *cl;
    tr__rpc_req *call;
    op_fn fn;
    size_t len;
    unsigned char req[];
} slow_op;

static void *slow_main(void *arg) {
    slow_op *o = arg;
    tr__cluster *cl = o->cl;
    tr__buf reply = TR__BUF_INIT;
    tr__dec d;
    int rc = tr__dec_init(&d, o->req, o->len);
    if (!rc) {
        rc = o->fn(cl, d.root, &reply);
        tr__dec_free(&d);
    }
    if (!rc && reply.oom) rc = tr__err(TR_ENOMEM, "cluster: no room for the reply");
    tr__rpc_answer(o->call, rc, rc ? NULL : &reply);
    tr__buf_free(&reply);
    free(o);
    pthread_mutex_lock(&cl->mu); /* last: tr__cluster_stop waits for this */
    cl->slow--;
    pthread_cond_broadcast(&cl->jobs_cv);
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

/* Takes a SLOW op's call to a thread of its own: TR__RPC_LATER, or a code (too many in
 * flight, stopping: answered at once). */
static int start_slow(tr__cluster *cl, tr__rpc_req *call, op_fn fn, const void *req, size_t len) {
    slow_op *o = malloc(sizeof *o + len);
    if (!o) return tr__err(TR_ENOMEM, "cluster");
    o->cl = cl;
    o->call = call;
    o->fn = fn;
    o->len = len;
    memcpy(o->req, req, len);
    if (spawn_counted(cl, &cl->slow, MAX_SLOW, &cl->stop, slow_main, o)) return TR__RPC_LATER;
    free(o);
    return tr__err(TR_ERESOURCES, "cluster: this node is busy (%d requests in flight) or stopping",
                   MAX_SLOW);
}

/* The RPC server's thread: a request, by its op (ops[]). */
static int handle(void *ctx, tr__rpc_req *call, const void *req, size_t len, tr__buf *reply) {
    tr__cluster *cl = ctx;
    tr__dec d;
    int rc = tr__dec_init(&d, req, len);
    if (rc) return rc;
    char op[32];
    rc = get_field(d.root, "op", op, sizeof op);
    size_t i = 0, n = sizeof ops / sizeof ops[0];
    while (!rc && i < n && strcmp(ops[i].name, op) != 0)
        i++;
    if (!rc && i == n)
        rc = tr__err(TR_EINVAL, "cluster: unknown op '%s'", op);
    else if (!rc && (ops[i].flags & OP_HEAD) && !cl->head)
        rc = tr__err(TR_EINVAL, "cluster: this node is not the head (it is %s)", cl->head_addr);
    else if (!rc && (ops[i].flags & OP_SLOW))
        rc = start_slow(cl, call, ops[i].fn, req, len);
    else if (!rc)
        rc = ops[i].fn(cl, d.root, reply);
    tr__dec_free(&d);
    return rc;
}

/* One call to the head: {op, id (and the registration's fields)}. */
static int call_head(tr__cluster *cl, const char *op, int timeout_ms, tr__buf *reply) {
    tr__buf b = TR__BUF_INIT;
    int reg = strcmp(op, "register") == 0, hb = strcmp(op, "heartbeat") == 0;
    tr__enc_map(&b, reg ? 9 : hb ? 5 : 2);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, op);
    tr__enc_str(&b, "id");
    tr__enc_str(&b, cl->id);
    if (hb) { /* what the head's table shows of this node */
        pthread_mutex_lock(&cl->mu);
        tr__enc_str(&b, "actors");
        tr__enc_uint(&b, cl->actors);
        tr__enc_str(&b, "objects");
        tr__enc_uint(&b, cl->objects);
        tr__enc_str(&b, "object_bytes");
        tr__enc_uint(&b, cl->object_bytes);
        pthread_mutex_unlock(&cl->mu);
    }
    if (reg) {
        tr__enc_str(&b, "address");
        tr__enc_str(&b, cl->address);
        tr__enc_str(&b, "sock");
        tr__enc_str(&b, cl->sock);
        tr__enc_str(&b, "cpus");
        tr__enc_double(&b, cl->cpus);
        tr__enc_str(&b, "gpus");
        tr__enc_int(&b, cl->gpus);
        tr__enc_str(&b, "resources");
        tr__enc_str(&b, cl->resources);
        tr__enc_str(&b, "num");
        tr__enc_uint(&b, cl->num);
        tr__enc_str(&b, "client");
        tr__enc_int(&b, cl->client);
    }
    int rc = b.oom ? tr__err(TR_ENOMEM, "cluster")
                   : tr__rpc_call(cl->to_head, b.data, b.len, timeout_ms, reply);
    tr__buf_free(&b);
    return rc;
}

/* A registration's reply: the number the head gave us. */
static void take_num(tr__cluster *cl, const tr__buf *reply) {
    tr__dec d;
    if (tr__dec_init(&d, reply->data, reply->len)) return;
    uint64_t num = 0;
    if (tr__get_uint(d.root, "num", &num) == 0 && num > 1 && num <= 0xffffff) {
        pthread_mutex_lock(&cl->mu);
        if (cl->num && cl->num != num)
            TR_LOG_WARN("CLUSTER-NUM",
                        "the head numbers this node %llu now (was %u): objects "
                        "made before cannot be found elsewhere",
                        (unsigned long long)num, cl->num);
        cl->num = (uint32_t)num;
        if (cl->store) tr__store_set_node_num(cl->store, cl->num);
        pthread_mutex_unlock(&cl->mu);
    }
    tr__dec_free(&d);
}

/* A heartbeat's reply: the head's table, kept for status. */
static void keep_table(tr__cluster *cl, const tr__buf *reply) {
    tr__dec d;
    if (tr__dec_init(&d, reply->data, reply->len)) return;
    const char *s;
    size_t n;
    int sound =
        tr__get_str(d.root, "json", &s, &n) == 0 && n >= 2 && s[0] == '[' && s[n - 1] == ']';
    for (size_t i = 0; sound && i < n; i++) /* printable ASCII, as the head writes it */
        sound = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\';
    if (sound) {
        char *copy = malloc(n + 1);
        if (copy) {
            memcpy(copy, s, n);
            copy[n] = '\0';
            pthread_mutex_lock(&cl->mu);
            free(cl->nodes_json);
            cl->nodes_json = copy;
            pthread_mutex_unlock(&cl->mu);
        }
    }
    tr__dec_free(&d);
}

static void beat(tr__cluster *cl) {
    tr__buf r = TR__BUF_INIT;
    int rc = call_head(cl, "heartbeat", BEAT_MS * 2, &r);
    if (rc == TR_ENOTFOUND) { /* the head restarted: join again */
        tr__buf_reset(&r);
        rc = call_head(cl, "register", BEAT_MS * 2, &r);
        if (!rc) take_num(cl, &r);
        if (!rc)
            TR_LOG_WARN("CLUSTER-REJOIN", "registered again with the head at %s", cl->head_addr);
    } else if (!rc) {
        keep_table(cl, &r);
        tr__dec d;
        if (tr__dec_init(&d, r.data, r.len) == 0) {
            const tr__obj *lost = tr__obj_get(d.root, "lost");
            pthread_mutex_lock(&cl->mu);
            for (size_t i = 0; i < tr__obj_len(lost); i++) {
                const char *s;
                size_t n;
                char id[17];
                if (tr__obj_str(tr__obj_at(lost, i), "lost", &s, &n) || n >= sizeof id) continue;
                memcpy(id, s, n);
                id[n] = '\0';
                drop_owners(cl, NULL, id);
            }
            pthread_mutex_unlock(&cl->mu);
            tr__dec_free(&d);
        }
    }
    pthread_mutex_lock(&cl->mu);
    if (!rc) {
        if (!cl->head_alive)
            TR_LOG_WARN("CLUSTER-HEAD", "the head at %s answers again", cl->head_addr);
        cl->head_alive = 1;
        cl->head_ok_ns = tr__now_ns();
    } else if (cl->head_alive && ms_since(cl->head_ok_ns) >= LOST_MS) {
        cl->head_alive = 0;
        TR_LOG_ERROR("CLUSTER-HEAD", "the head at %s is lost: %s", cl->head_addr, tr__last_error());
    }
    pthread_mutex_unlock(&cl->mu);
    tr__buf_free(&r);
}

static void sweep(tr__cluster *cl) {
    pthread_mutex_lock(&cl->mu);
    for (int i = 1; i < cl->n; i++) {
        member *m = &cl->nodes[i];
        if (m->alive && ms_since(m->last_ns) >= LOST_MS) {
            m->alive = 0;
            TR_LOG_ERROR("CLUSTER-LOST", "node %s at %s is lost: no heartbeat for %lld ms", m->id,
                         m->address, (long long)ms_since(m->last_ns));
            drop_owners(cl, NULL, m->id); /* the actors its drivers made here go */
        }
        if (!m->alive && ms_since(m->last_ns) >= FORGET_MS) { /* gone for good: forgotten */
            TR_LOG_INFO("CLUSTER-FORGET", "node %s at %s leaves the table", m->id, m->address);
            cl->nodes[i--] = cl->nodes[--cl->n];
        }
    }
    pthread_mutex_unlock(&cl->mu);
}

static void *tick(void *arg) {
    tr__cluster *cl = arg;
    pthread_mutex_lock(&cl->mu);
    while (!cl->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += BEAT_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&cl->cv, &cl->mu, &ts);
        if (cl->stop) break;
        pthread_mutex_unlock(&cl->mu);
        if (cl->head)
            sweep(cl);
        else
            beat(cl);
        pthread_mutex_lock(&cl->mu);
    }
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

/* The local IP address a connection to "HOST:PORT" would leave from. */
static int facing(const char *target, char *ip, size_t cap) {
    char host[128], service[8];
    int port;
    if (tr__split_host_port(target, host, sizeof host, &port))
        return tr__err(TR_EINVAL, "cluster: '%s' is not HOST:PORT", target);
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    int e = getaddrinfo(host, service, &hints, &res);
    if (e) return tr__err(TR_EINVAL, "cluster: head %s: %s", target, gai_strerror(e));
    int rc = 0, fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in me;
    socklen_t ml = sizeof me;
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0 ||
        getsockname(fd, (struct sockaddr *)&me, &ml) != 0 ||
        !inet_ntop(AF_INET, &me.sin_addr, ip, (socklen_t)cap))
        rc = tr__err(TR_ECONNECT, "cluster: no route to the head at %s", target);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return rc;
}

int tr__cluster_start(const tr_config *cfg, const char *sock, const tr__res *total, int gpus,
                      uv_loop_t *loop, tr__cluster **out) {
    *out = NULL;
    if (cfg->cluster_port < 0 && !cfg->cluster_head) return 0;
    tr__cluster *cl = calloc(1, sizeof *cl);
    if (!cl) return tr__err(TR_ENOMEM, "cluster");
    pthread_mutex_init(&cl->mu, NULL);
    pthread_mutex_init(&cl->self_mu, NULL);
    pthread_mutex_init(&cl->create_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* heartbeats ignore wall-clock steps */
    pthread_cond_init(&cl->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&cl->jobs_cv, NULL);
    cl->head = !cfg->cluster_head;
    cl->client = cfg->cluster_client && cfg->cluster_head;
    cl->loop = loop;
    cl->max_msg = cfg->max_msg;
    uint8_t rnd[8];
    int rc = tr__random_bytes(rnd, sizeof rnd);
    tr__hex(rnd, sizeof rnd, cl->id);
    snprintf(cl->sock, sizeof cl->sock, "%s", sock);
    if (!cl->head) snprintf(cl->head_addr, sizeof cl->head_addr, "%s", cfg->cluster_head);
    int made_token = 0;
    if (!rc) rc = find_token(cl, cfg, &made_token);
    for (int i = 0; i < total->n; i++) {
        if (strcmp(total->name[i], "CPU") == 0) cl->cpus = total->qty[i];
    }
    cl->gpus = gpus;
    char own[4096 + PATH_MAX];
    if (!rc && (rc = tr__command_running(own, sizeof own)) == 0 && !(cl->own_cmd = strdup(own)))
        rc = tr__err(TR_ENOMEM, "cluster");
    if (!rc && cfg->worker_path && !(cl->worker_path = strdup(cfg->worker_path)))
        rc = tr__err(TR_ENOMEM, "cluster");
    if (!rc && tr__config_find_worker(cl->troupe_worker) != 0) cl->troupe_worker[0] = '\0';
    tr__res_format(total, cl->resources, sizeof cl->resources);
    for (char *p = cl->resources; *p; p++)
        if (*p == '"' || *p == '\\') *p = '_';
    const char *token = cl->token;
    int tls_parts = !!cfg->cluster_tls_cert + !!cfg->cluster_tls_key + !!cfg->cluster_tls_ca;
    if (!rc)
        rc = tls_parts && tls_parts != 3
                 ? tr__err(TR_EINVAL, "cluster TLS needs all of cluster_tls_cert, cluster_tls_key "
                                      "and cluster_tls_ca (--tls-cert, --tls-key, --tls-ca)")
             : tls_parts ? tr__rpc_tls_load(cfg->cluster_tls_cert, cfg->cluster_tls_key,
                                            cfg->cluster_tls_ca, &cl->tls)
                         : 0;
    if (!rc && tls_parts) {
        snprintf(cl->tls_files.ca, sizeof cl->tls_files.ca, "%s", cfg->cluster_tls_ca);
        snprintf(cl->tls_files.cert, sizeof cl->tls_files.cert, "%s", cfg->cluster_tls_cert);
        snprintf(cl->tls_files.key, sizeof cl->tls_files.key, "%s", cfg->cluster_tls_key);
    }
    char ip[64] = "127.0.0.1", bind[160];
    const char *b = cfg->cluster_bind;
    if (b && (strchr(b, ':') || strcmp(b, "0.0.0.0") == 0 || !*b))
        rc = tr__err(TR_EINVAL,
                     "cluster_bind '%s': an IPv4 address of this machine, without a port "
                     "(other nodes reach this node at it; a wildcard cannot be reached)",
                     b);
    if (!rc && !cl->head && !cfg->cluster_bind) rc = facing(cl->head_addr, ip, sizeof ip);
    if (!rc && cl->head) { /* the head heads its own table (its address once it listens) */
        member *m = &cl->nodes[cl->n++];
        snprintf(m->id, sizeof m->id, "%s", cl->id);
        snprintf(m->sock, sizeof m->sock, "%s", cl->sock);
        snprintf(m->resources, sizeof m->resources, "%s", cl->resources);
        m->cpus = cl->cpus;
        m->gpus = cl->gpus;
        m->alive = 1;
        m->last_ns = tr__now_ns();
        m->num = cl->num = 1;
        cl->next_num = 2;
    }
    if (!rc) {
        snprintf(bind, sizeof bind, "%s:%d", cfg->cluster_bind ? cfg->cluster_bind : ip,
                 cfg->cluster_port < 0 ? 0 : cfg->cluster_port);
        int port = 0;
        rc = tr__relay_create(sock, cfg->max_msg,
                              tls_parts           ? NULL
                              : cfg->cluster_bind ? cfg->cluster_bind
                                                  : ip,
                              &cl->relay);
        if (!rc)
            rc = tr__rpc_server_create_tls(bind, token, &cl->tls, cfg->max_msg, handle, cl,
                                           &cl->srv, &port);
        if (!rc) tr__rpc_server_on_stream(cl->srv, tr__relay_handlers(cl->relay));
        pthread_mutex_lock(&cl->mu);
        if (!rc)
            snprintf(cl->address, sizeof cl->address, "%s:%d",
                     cfg->cluster_bind ? cfg->cluster_bind : ip, port);
        if (!rc && cl->head)
            snprintf(cl->nodes[0].address, sizeof cl->nodes[0].address, "%s", cl->address);
        pthread_mutex_unlock(&cl->mu);
        if (!rc && cl->head)
            TR_LOG_INFO("CLUSTER-HEAD", "head %s listening at %s", cl->id, cl->address);
    }
    if (!rc) { /* for this machine's drivers, nodes and `troupe status` (a token made here
                  is known nowhere else: then the file must be there) */
        int w = write_session_file(sock, TR__CLUSTER_TOKEN_FILE, cl->token);
        if (!w) w = write_session_file(sock, TR__CLUSTER_ADDRESS_FILE, cl->address);
        if (w && made_token)
            rc = w;
        else if (w)
            TR_LOG_WARN("CLUSTER-TOKEN", "%s: this machine's drivers must be given the token",
                        tr__last_error());
    }
    if (!rc && !cl->head) { /* join: the head must take us within JOIN_MS */
        rc = tr__rpc_client_create_tls(cl->head_addr, token, &cl->tls, cfg->max_msg, &cl->to_head);
        int64_t until = tr__deadline(JOIN_MS);
        while (!rc) {
            tr__buf r = TR__BUF_INIT;
            rc = call_head(cl, "register", 2000, &r);
            if (!rc) take_num(cl, &r);
            if (!rc) keep_table(cl, &r);
            tr__buf_free(&r);
            if (!rc || rc == TR_EPERM || rc == TR_EPROTO || tr__now_ns() >= until) break;
            rc = 0;
            usleep(200000);
        }
        if (rc == TR_EPERM)
            rc = tr__err(TR_EPERM, "the head at %s refused this node: wrong or missing token",
                         cl->head_addr);
        else if (rc) {
            char why[400];
            snprintf(why, sizeof why, "%s", tr__last_error());
            rc = tr__err(rc, "cannot join the head at %s: %s", cl->head_addr, why);
        }
        cl->head_alive = !rc;
        cl->head_ok_ns = tr__now_ns();
        if (!rc)
            TR_LOG_INFO("CLUSTER-JOIN", "node %s at %s joined the head at %s", cl->id, cl->address,
                        cl->head_addr);
    }
    if (!rc && pthread_create(&cl->thread, NULL, tick, cl) != 0)
        rc = tr__err(TR_ENOMEM, "cluster: no thread");
    if (rc) {
        cl->thread = 0;
        tr__cluster_stop(cl);
        return rc;
    }
    /* last: nothing fails after it (a handle of a loop that outlives cl must be closed
     * by tr__cluster_close, from the loop) */
    if (loop && uv_async_init(loop, &cl->async, on_jobs_done) == 0) {
        cl->async.data = cl;
        cl->async_live = 1;
    }
    *out = cl;
    return 0;
}

void tr__cluster_set_store(tr__cluster *cl, tr__store *store) {
    if (!cl) return;
    pthread_mutex_lock(&cl->mu);
    cl->store = store;
    tr__store_set_node_num(store, cl->num);
    pthread_mutex_unlock(&cl->mu);
}

uint32_t tr__cluster_node_num(tr__cluster *cl) {
    if (!cl) return 0;
    pthread_mutex_lock(&cl->mu);
    uint32_t n = cl->num;
    pthread_mutex_unlock(&cl->mu);
    return n;
}

const char *tr__cluster_token(tr__cluster *cl) {
    return cl ? cl->token : "";
}

const tr__rpc_tls_files *tr__cluster_tls_files(tr__cluster *cl) {
    return cl ? &cl->tls_files : NULL;
}

int tr__cluster_counts_lost(tr__cluster *cl, const char *address) {
    return cl && address && table_says(cl, address) == 0;
}

int tr__cluster_self_address(tr__cluster *cl, char *out, size_t cap) {
    if (!cl) return tr__err(TR_ENOTFOUND, "this node is in no cluster");
    snprintf(out, cap, "%s", cl->address); /* (set at start, never changed) */
    return 0;
}

int tr__cluster_node_address(tr__cluster *cl, uint32_t num, char *out, size_t cap) {
    if (!cl) return tr__err(TR_ENOTFOUND, "this node is in no cluster");
    int rc = TR_ENOTFOUND, alive = 0;
    pthread_mutex_lock(&cl->mu);
    if (cl->head) {
        for (int i = 0; i < cl->n; i++) {
            if (cl->nodes[i].num != num) continue;
            snprintf(out, cap, "%s", cl->nodes[i].address);
            alive = cl->nodes[i].alive;
            rc = 0;
        }
    } else if (cl->nodes_json) { /* the head's table as the last heartbeat gave it */
        char pat[64];
        snprintf(pat, sizeof pat, "\",\"num\":%u,", num);
        const char *at = strstr(cl->nodes_json, pat);
        const char *start = at;
        while (start && start > cl->nodes_json && *(start - 1) != '"')
            start--;
        if (at && start > cl->nodes_json && (size_t)(at - start) < cap) {
            memcpy(out, start, (size_t)(at - start));
            out[at - start] = '\0';
            const char *al = strstr(at, "\"alive\":");
            alive = al && strncmp(al + 8, "true", 4) == 0 && cl->head_alive;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    if (rc) return tr__err(TR_ENOTFOUND, "node %u is not in the cluster (yet, or any more)", num);
    if (!alive) return tr__err(TR_EOBJECT_LOST, "node %u at %s is lost", num, out);
    return 0;
}

void tr__cluster_set_counts(tr__cluster *cl, uint64_t actors, uint64_t objects, uint64_t bytes) {
    if (!cl) return;
    pthread_mutex_lock(&cl->mu);
    cl->actors = actors;
    cl->objects = objects;
    cl->object_bytes = bytes;
    pthread_mutex_unlock(&cl->mu);
}

void tr__cluster_status_json(tr__cluster *cl, tr__buf *j) {
    if (!cl) return;
    char head[600];
    pthread_mutex_lock(&cl->mu);
    int k = snprintf(head, sizeof head,
                     ",\"cluster\":{\"role\":\"%s\",\"id\":\"%s\",\"address\":\"%s\"",
                     cl->head ? "head" : "node", cl->id, cl->address);
    tr__buf_append(j, head, (size_t)k);
    if (!cl->head) {
        k = snprintf(head, sizeof head, ",\"head\":\"%s\",\"head_alive\":%s", cl->head_addr,
                     cl->head_alive ? "true" : "false");
        tr__buf_append(j, head, (size_t)k);
    }
    tr__buf_append(j, ",\"nodes\":", 9);
    if (cl->head)
        table_json(cl, j);
    else if (cl->nodes_json && cl->head_alive)
        tr__buf_append(j, cl->nodes_json, strlen(cl->nodes_json));
    else
        tr__buf_append(j, "[]", 2);
    tr__buf_append(j, "}", 1);
    pthread_mutex_unlock(&cl->mu);
}

void tr__cluster_stop(tr__cluster *cl) {
    if (!cl) return;
    pthread_mutex_lock(&cl->mu);
    cl->stop = 1; /* no slow op starts from now on */
    pthread_cond_signal(&cl->cv);
    while (cl->slow > 0) /* (each ends within its own deadlines) */
        pthread_cond_wait(&cl->jobs_cv, &cl->mu);
    pthread_mutex_unlock(&cl->mu);
    if (cl->thread) pthread_join(cl->thread, NULL);
    tr__rpc_server_destroy(cl->srv);
    tr__relay_destroy(cl->relay);
    tr__rpc_client_destroy(cl->to_head);
    tr__nodeconn_close(cl->self);
    while (cl->owners) {
        owner *o = cl->owners;
        cl->owners = o->next;
        owner_put(o);
    }
    for (ractor *r = cl->remote, *n; r; r = n) {
        n = r->next;
        free(r);
    }
    for (hactor *h = cl->placed, *n; h; h = n) {
        n = h->next;
        free(h->name);
        free(h);
    }
    for (peer *p = cl->peers, *n; p; p = n) {
        n = p->next;
        tr__rpc_client_destroy(p->client);
        free(p);
    }
    for (ckv *e = cl->kv, *n; e; e = n) {
        n = e->next;
        ckv_free(e);
    }
    pthread_cond_destroy(&cl->jobs_cv);
    tr__rpc_tls_free(&cl->tls);
    free(cl->nodes_json);
    free(cl->own_cmd);
    free(cl->worker_path);
    pthread_mutex_destroy(&cl->mu);
    pthread_mutex_destroy(&cl->self_mu);
    pthread_mutex_destroy(&cl->create_mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
}
