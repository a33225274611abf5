/* api/node/cluster.c - see cluster.h. Messages are msgpack maps with an "op": register
 * {id, address, sock, cpus, gpus, resources} -> {head}; heartbeat {id} -> {json: the
 * node table} (TR_ENOTFOUND: register again); nodes {} -> {json}; status {} -> {json:
 * this node's tr_node_status, as its own socket gives it} (any node; `troupe status
 * --address HOST:PORT`). */
#include "api/node/cluster_int.h"

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
#include "core/http.h"
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/status.h"

/* The table as JSON (caller holds mu): the head's own row with its counts now. */
static void table_json(tr__cluster *cl, tr__buf *j) {
    tr__member *self = &cl->members.nodes[0];
    self->actors = cl->actors;
    self->objects = cl->objects;
    self->object_bytes = cl->object_bytes;
    tr__members_json(&cl->members, tr__now_ns(), j);
}

/* A string field copied into dst (cap bytes), refused if too long or if a byte fails
 * `ok`. */
static int get_checked(const tr__obj *map, const char *key, char *dst, size_t cap,
                       int (*ok)(unsigned char c)) {
    const char *s;
    size_t n;
    int rc = tr__get_str(map, key, &s, &n);
    if (rc) return rc;
    if (n >= cap) return tr__err(TR_EPROTO, "cluster: '%s' of %zu bytes", key, n);
    for (size_t i = 0; i < n; i++)
        if (!ok((unsigned char)s[i]))
            return tr__err(TR_EPROTO, "cluster: '%s' has a byte it may not", key);
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* JSON-safe: no quotes or backslashes or control bytes (addresses, ids and resource
 * lists never have them). */
static int json_safe(unsigned char c) {
    return c != '"' && c != '\\' && c >= 0x20;
}

int tr__cl_get_field(const tr__obj *map, const char *key, char *dst, size_t cap) {
    return get_checked(map, key, dst, cap, json_safe);
}

/* A command (argv joined by TR__ARG_SEP): no other control byte. */
static int command_byte(unsigned char c) {
    return c >= 0x20 || c == (unsigned char)TR__ARG_SEP;
}

int tr__cl_get_command(const tr__obj *map, const char *key, char *dst, size_t cap) {
    return get_checked(map, key, dst, cap, command_byte);
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
int tr__cl_self_call(tr__cluster *cl, uint8_t type, const tr__buf *body, tr__reply *r) {
    pthread_mutex_lock(&cl->self_mu);
    int rc = self_call_locked(cl, type, body, r);
    pthread_mutex_unlock(&cl->self_mu);
    return rc;
}

/* This node's tr_node_status JSON, asked of its own socket. */
static int own_status(tr__cluster *cl, tr__buf *reply) {
    tr__reply r;
    int rc = tr__cl_self_call(cl, TR__MSG_STATUS, NULL, &r);
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

/* Runs fn(arg) on a detached thread counted in *running (under mu: the thread takes
 * one off as it ends, and broadcasts jobs_cv), unless *refused is set or max are running
 * already. Returns 1 if it started, else 0 (and fn never runs). */
int tr__cl_spawn_counted(tr__cluster *cl, int *running, int max, const int *refused,
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
    if (cl->pg_conns) mine = tr__cl_add_head(cl, mine); /* its placement groups go too */
    pthread_mutex_unlock(&cl->mu);
    char key[64];
    snprintf(key, sizeof key, "%s/*", cl->id);
    tr__cl_tell_owner_gone(cl, mine, key);
    pthread_mutex_lock(&cl->mu);
    cl->closing = 1;
    while (cl->jobs > 0)
        pthread_cond_wait(&cl->jobs_cv, &cl->mu);
    pthread_mutex_unlock(&cl->mu);
    tr__cl_on_jobs_done(&cl->async);
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

/* "register" (the head): a node joins, or joins again. Under mu (ops[]). */
static int op_register(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    tr__member m;
    memset(&m, 0, sizeof m);
    int64_t gpus = 0;
    int rc;
    if ((rc = tr__cl_get_field(req, "id", m.id, sizeof m.id)) ||
        (rc = tr__cl_get_field(req, "address", m.address, sizeof m.address)) ||
        (rc = tr__cl_get_field(req, "sock", m.sock, sizeof m.sock)) ||
        (rc = tr__cl_get_field(req, "resources", m.resources, sizeof m.resources)) ||
        (rc = tr__get_double(req, "cpus", &m.cpus)) || (rc = tr__get_int(req, "gpus", &gpus)))
        return rc;
    if (!m.id[0] || strcmp(m.id, cl->id) == 0 || !isfinite(m.cpus) || m.cpus < 0 || m.cpus > 1e6 ||
        gpus < 0 || gpus > 65536)
        return tr__err(TR_EPROTO, "cluster: a registration with a bad id, CPUs or GPUs");
    m.gpus = (int)gpus;
    int64_t client = 0; /* (absent from an older node: not a client) */
    if (tr__obj_get(req, "client") && (rc = tr__get_int(req, "client", &client))) return rc;
    m.client = client != 0;
    int64_t want = 0; /* the number it had, if the head restarted since */
    if (tr__obj_get(req, "num")) tr__get_int(req, "num", &want);
    if ((rc = tr__members_join(&cl->members, &m, want, tr__now_ns())) < 0) return rc;
    cl->pg_kick = 1; /* a node more: pending placement groups may fit now */
    TR_LOG_INFO("CLUSTER-JOIN", "node %s at %s joined (%g CPUs, %d GPUs)", m.id, m.address, m.cpus,
                m.gpus);
    tr__enc_map(reply, 3);
    tr__enc_str(reply, "head");
    tr__enc_str(reply, cl->id);
    tr__enc_str(reply, "num");
    tr__enc_uint(reply, m.num);
    enc_table(cl, reply); /* so the node knows the table before a heartbeat */
    return 0;
}

/* "heartbeat" (the head): a node is alive, with its counts; the answer is the table and
 * the lost nodes' ids (the actors their drivers made elsewhere go). Under mu (ops[]). */
static int op_heartbeat(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char id[17];
    int rc = tr__cl_get_field(req, "id", id, sizeof id);
    if (rc) return rc;
    int back, i = tr__members_beat(&cl->members, id, tr__now_ns(), &back);
    if (i < 0) return i;
    tr__member *m = &cl->members.nodes[i];
    uint64_t v; /* its counts (absent from an older node: kept) */
    if (tr__obj_get(req, "actors") && !tr__get_uint(req, "actors", &v)) m->actors = v;
    if (tr__obj_get(req, "objects") && !tr__get_uint(req, "objects", &v)) m->objects = v;
    if (tr__obj_get(req, "object_bytes") && !tr__get_uint(req, "object_bytes", &v))
        m->object_bytes = v;
    char metrics[sizeof m->metrics]; /* (absent from an older node: kept) */
    if (tr__obj_get(req, "metrics") && !tr__cl_get_field(req, "metrics", metrics, sizeof metrics))
        memcpy(m->metrics, metrics, sizeof metrics);
    if (back) TR_LOG_WARN("CLUSTER-BACK", "node %s at %s is back", id, m->address);
    const tr__members *t = &cl->members;
    int lost = 0;
    for (int k = 1; k < t->n; k++)
        lost += !t->nodes[k].alive;
    tr__enc_map(reply, 2);
    enc_table(cl, reply);
    tr__enc_str(reply, "lost");
    tr__enc_array(reply, (uint32_t)lost);
    for (int k = 1; k < t->n; k++)
        if (!t->nodes[k].alive) tr__enc_str(reply, t->nodes[k].id);
    return 0;
}

static int op_nodes(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    (void)req;
    tr__enc_map(reply, 1);
    enc_table(cl, reply);
    return 0;
}

static int op_ping(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    (void)cl;
    (void)req;
    tr__enc_map(reply, 0);
    return 0;
}

static int op_status(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    (void)req;
    return own_status(cl, reply);
}

/* What the RPC server answers: each op, whether only the head answers it (HEAD), what it
 * runs under (MU: the dispatcher holds cl->mu around the handler, which takes no lock of
 * its own; otherwise the handler takes what it needs), and its handler. SLOW ops wait on
 * something else (another node, this node's own loop, a worker): they run on a thread of
 * their own and are answered from there, so that heartbeats and registrations - answered
 * on the RPC thread at once, under mu only - never wait behind them (a hung node must not
 * make healthy ones look lost). */
enum { OP_HEAD = 1, OP_SLOW = 2, OP_MU = 4 };
typedef int (*op_fn)(tr__cluster *cl, const tr__obj *req, tr__buf *reply);
static const struct {
    const char *name;
    int flags;
    op_fn fn;
} ops[] = {
    {"register", OP_HEAD | OP_MU, op_register},
    {"heartbeat", OP_HEAD | OP_MU, op_heartbeat},
    {"nodes", OP_HEAD | OP_MU, op_nodes},
    {"where", OP_HEAD | OP_MU, tr__cl_op_where},
    {"by_name", OP_HEAD | OP_MU, tr__cl_op_by_name},
    {"kv_put", OP_HEAD | OP_MU, tr__cl_op_kv_any},
    {"kv_get", OP_HEAD | OP_MU, tr__cl_op_kv_any},
    {"kv_del", OP_HEAD | OP_MU, tr__cl_op_kv_any},
    {"kv_del_prefix", OP_HEAD | OP_MU, tr__cl_op_kv_any},
    {"place", OP_HEAD | OP_SLOW, tr__cl_op_place},
    {"pg_create", OP_HEAD, tr__cl_op_pg_create},
    {"pg_info", OP_HEAD | OP_MU, tr__cl_op_pg_info},
    {"pg_by_name", OP_HEAD | OP_MU, tr__cl_op_pg_by_name},
    {"pg_remove", OP_HEAD | OP_SLOW, tr__cl_op_pg_remove},
    {"pg_reserve", OP_SLOW, tr__cl_op_pg_reserve},
    {"pg_release", OP_SLOW, tr__cl_op_pg_release},
    {"ping", 0, op_ping},
    {"owner_gone", OP_MU, tr__cl_op_owner_gone},
    {"status", OP_SLOW, op_status},
    {"create", OP_SLOW, tr__cl_op_create},
    {"resolve", OP_SLOW, tr__cl_op_resolve},
    {"kill", OP_SLOW, tr__cl_op_kill},
    {"info", OP_SLOW, tr__cl_op_info},
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
    if (tr__cl_spawn_counted(cl, &cl->slow, MAX_SLOW, &cl->stop, slow_main, o))
        return TR__RPC_LATER;
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
    rc = tr__cl_get_field(d.root, "op", op, sizeof op);
    size_t i = 0, n = sizeof ops / sizeof ops[0];
    while (!rc && i < n && strcmp(ops[i].name, op) != 0)
        i++;
    if (!rc && i == n)
        rc = tr__err(TR_EINVAL, "cluster: unknown op '%s'", op);
    else if (!rc && (ops[i].flags & OP_HEAD) && !cl->head)
        rc = tr__err(TR_EINVAL, "cluster: this node is not the head (it is %s)", cl->head_addr);
    else if (!rc && (ops[i].flags & OP_SLOW))
        rc = start_slow(cl, call, ops[i].fn, req, len);
    else if (!rc && (ops[i].flags & OP_MU)) {
        pthread_mutex_lock(&cl->mu);
        rc = ops[i].fn(cl, d.root, reply);
        pthread_mutex_unlock(&cl->mu);
    } else if (!rc) {
        rc = ops[i].fn(cl, d.root, reply);
    }
    tr__dec_free(&d);
    return rc;
}

/* One call to the head: {op, id (and the registration's fields)}. */
static int call_head(tr__cluster *cl, const char *op, int timeout_ms, tr__buf *reply) {
    tr__buf b = TR__BUF_INIT;
    int reg = strcmp(op, "register") == 0, hb = strcmp(op, "heartbeat") == 0;
    size_t m = tr__enc_map_open(&b);
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
        tr__enc_str(&b, "metrics");
        tr__enc_str(&b, cl->metrics);
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
    tr__enc_map_close(&b, m);
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
                tr__cl_drop_owners(cl, NULL, id);
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
    } else if (cl->head_alive && (tr__now_ns() - cl->head_ok_ns) / 1000000 >= TR__MEMBER_LOST_MS) {
        cl->head_alive = 0;
        TR_LOG_ERROR("CLUSTER-HEAD", "the head at %s is lost: %s", cl->head_addr, tr__last_error());
    }
    pthread_mutex_unlock(&cl->mu);
    tr__buf_free(&r);
}

/* A node the head counts lost: the actors its drivers made here go (under mu). */
static void drop_lost(void *arg, const tr__member *m) {
    tr__cl_drop_owners(arg, NULL, m->id);
    tr__cl_pg_node_lost(arg, m->id);
}

static void sweep(tr__cluster *cl) {
    pthread_mutex_lock(&cl->mu);
    tr__members_sweep(&cl->members, tr__now_ns(), drop_lost, cl);
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
        if (cl->head) {
            sweep(cl);
            tr__cl_pg_kick(cl); /* groups pending, or to undo */
        } else
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
    pthread_mutex_init(&cl->pg_mu, NULL);
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
        tr__member self;
        memset(&self, 0, sizeof self);
        snprintf(self.id, sizeof self.id, "%s", cl->id);
        snprintf(self.sock, sizeof self.sock, "%s", cl->sock);
        snprintf(self.resources, sizeof self.resources, "%s", cl->resources);
        self.cpus = cl->cpus;
        self.gpus = cl->gpus;
        tr__members_init(&cl->members, &self, tr__now_ns());
        cl->num = 1;
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
            snprintf(cl->members.nodes[0].address, sizeof cl->members.nodes[0].address, "%s",
                     cl->address);
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
        else if (rc)
            rc = tr__err_wrap(rc, "cannot join the head at %s", cl->head_addr);
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
    if (loop && uv_async_init(loop, &cl->async, tr__cl_on_jobs_done) == 0) {
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
    return cl && address && tr__cl_table_says(cl, address) == 0;
}

int tr__cluster_self_address(tr__cluster *cl, char *out, size_t cap) {
    if (!cl) return tr__err(TR_ENOTFOUND, "this node is in no cluster");
    snprintf(out, cap, "%s", cl->address); /* (set at start, never changed) */
    return 0;
}

int tr__cluster_node_address(tr__cluster *cl, uint32_t num, char *out, size_t cap) {
    if (!cl) return tr__err(TR_ENOTFOUND, "this node is in no cluster");
    int rc = TR_ENOTFOUND, alive = 0, head_alive = 1;
    pthread_mutex_lock(&cl->mu);
    if (cl->head) {
        for (int i = 0; i < cl->members.n; i++) {
            if (cl->members.nodes[i].num != num) continue;
            snprintf(out, cap, "%s", cl->members.nodes[i].address);
            alive = cl->members.nodes[i].alive;
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
            alive = al && strncmp(al + 8, "true", 4) == 0;
            head_alive = cl->head_alive;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    if (rc) return tr__err(TR_ENOTFOUND, "node %u is not in the cluster (yet, or any more)", num);
    if (!head_alive) /* no one to say whether it is */
        return tr__err(TR_EOBJECT_LOST, "node %u at %s is out of reach (the head is)", num, out);
    if (!alive) /* its processes, the objects' owners, went with it (Ray's OwnerDiedError) */
        return tr__err(TR_EOWNER_DIED,
                       "node %u at %s is lost, and the process that owned the "
                       "object with it",
                       num, out);
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
    if (cl->head) tr__cl_pg_status_json(cl, j); /* the groups across the nodes */
    tr__buf_append(j, "}", 1);
    pthread_mutex_unlock(&cl->mu);
}

void tr__cluster_set_metrics(tr__cluster *cl, const char *hostport) {
    if (!cl) return;
    pthread_mutex_lock(&cl->mu);
    snprintf(cl->metrics, sizeof cl->metrics, "%s", hostport);
    if (cl->head) memcpy(cl->members.nodes[0].metrics, cl->metrics, sizeof cl->metrics);
    pthread_mutex_unlock(&cl->mu);
}

/* The host of "HOST:PORT" ("[v6]:PORT" too) into out. */
static void host_of(const char *hostport, char *out, size_t cap) {
    const char *end = hostport[0] == '[' ? strchr(hostport, ']') : strrchr(hostport, ':');
    size_t n = end ? (size_t)(end - hostport) + (hostport[0] == '[') : strlen(hostport);
    snprintf(out, cap, "%.*s", (int)n, hostport);
}

int tr__cluster_write_sd(tr__cluster *cl, const char *path) {
    if (!cl || !cl->head) return 0;
    tr__buf j = TR__BUF_INIT;
    tr__buf_append(&j, "[", 1);
    pthread_mutex_lock(&cl->mu);
    char head_host[160];
    host_of(cl->address, head_host, sizeof head_host);
    int first = 1;
    for (int i = 0; i < cl->members.n; i++) {
        const tr__member *m = &cl->members.nodes[i];
        char host[160], node_host[160];
        if (!m->metrics[0] || !m->alive) continue;
        host_of(m->metrics, host, sizeof host);
        host_of(m->address, node_host, sizeof node_host);
        /* a node's loopback endpoint is reachable from its own machine only: listed when
         * that is the head's */
        if (tr__http_loopback_host(host) && strcmp(node_host, head_host) != 0) continue;
        char e[700];
        int k = snprintf(e, sizeof e,
                         "%s{\"targets\":[\"%s\"],\"labels\":{\"troupe_node\":\"%s\","
                         "\"troupe_role\":\"%s\",\"troupe_cluster\":\"%s\"}}",
                         first ? "" : ",", m->metrics, m->id,
                         i == 0      ? "head"
                         : m->client ? "driver"
                                     : "node",
                         cl->id);
        tr__buf_append(&j, e, (size_t)(k < (int)sizeof e ? k : (int)sizeof e - 1));
        first = 0;
    }
    pthread_mutex_unlock(&cl->mu);
    tr__buf_append(&j, "]\n", 2);
    int rc = j.oom ? tr__err(TR_ENOMEM, "file_sd") : 0;
    /* (rewritten only when it changes: Prometheus watches the file) */
    char old[16384];
    FILE *f = rc ? NULL : fopen(path, "r");
    size_t n = f ? fread(old, 1, sizeof old, f) : 0;
    if (f) fclose(f);
    if (!rc && (n != j.len || memcmp(old, j.data, n) != 0)) {
        char tmp[700];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        f = fopen(tmp, "w");
        if (!f || fwrite(j.data, 1, j.len, f) != j.len || fclose(f) != 0 || rename(tmp, path)) {
            rc = tr__err(TR_EIO, "writing %s", path);
            if (f) unlink(tmp);
        }
    }
    tr__buf_free(&j);
    return rc;
}

int tr__cluster_each_node(tr__cluster *cl, void (*fn)(void *ctx, const tr__member *m, int head),
                          void *ctx) {
    if (!cl || !cl->head) return 0;
    pthread_mutex_lock(&cl->mu);
    tr__member *self = &cl->members.nodes[0]; /* (its own counts, as table_json) */
    self->actors = cl->actors;
    self->objects = cl->objects;
    self->object_bytes = cl->object_bytes;
    int n = cl->members.n;
    for (int i = 0; i < n; i++)
        fn(ctx, &cl->members.nodes[i], i == 0);
    pthread_mutex_unlock(&cl->mu);
    return n;
}

int tr__cluster_node_counts(tr__cluster *cl, int *alive, int *lost) {
    *alive = *lost = 0;
    if (!cl || !cl->head) return 0;
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < cl->members.n; i++) {
        const tr__member *m = &cl->members.nodes[i];
        if (m->client) continue;
        if (m->alive)
            ++*alive;
        else
            ++*lost;
    }
    pthread_mutex_unlock(&cl->mu);
    return 1;
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
        tr__cl_owner_put(o);
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
        tr__cl_ckv_free(e);
    }
    tr__cl_pg_free_all(cl);
    for (pgconn *p = cl->pg_conns, *n; p; p = n) {
        n = p->next;
        free(p);
    }
    pthread_cond_destroy(&cl->jobs_cv);
    tr__rpc_tls_free(&cl->tls);
    free(cl->nodes_json);
    free(cl->own_cmd);
    free(cl->worker_path);
    pthread_mutex_destroy(&cl->mu);
    pthread_mutex_destroy(&cl->self_mu);
    pthread_mutex_destroy(&cl->create_mu);
    pthread_mutex_destroy(&cl->pg_mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
}
