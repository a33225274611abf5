/* api/cluster.c - see cluster.h. Messages are msgpack maps with an "op": register
 * {id, address, sock, cpus, gpus, resources} -> {head}; heartbeat {id} -> {json: the
 * node table} (TR_ENOTFOUND: register again); nodes {} -> {json}; status {} -> {json:
 * this node's tr_node_status, as its own socket gives it} (any node; `troupe status
 * --address HOST:PORT`). */
#include "api/cluster.h"

#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

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

typedef struct member {
    char id[17];
    char address[128]; /* its RPC server, "HOST:PORT" */
    char sock[160];
    double cpus;
    int gpus;
    char resources[256];
    int64_t last_ns;
    int alive;
} member;

struct tr__cluster {
    int head; /* this node is the head */
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
    member nodes[MAX_NODES]; /* the head's table (itself first) */
    int n;
    int head_alive; /* a member's view */
    int64_t head_ok_ns;
    char *nodes_json;   /* a member's copy of the head's table */
    tr__nodeconn *self; /* the RPC thread's connection to this node's own socket (status) */
    pthread_t thread;
    int stop;
};

static int64_t ms_since(int64_t ns) {
    return (tr__now_ns() - ns) / 1000000;
}

/* The table as JSON (caller holds mu). */
static void table_json(tr__cluster *cl, tr__buf *j) {
    tr__buf_append(j, "[", 1);
    for (int i = 0; i < cl->n; i++) {
        member *m = &cl->nodes[i];
        char e[1024];
        int k = snprintf(e, sizeof e,
                         "%s{\"id\":\"%s\",\"address\":\"%s\",\"head\":%s,\"cpus\":%g,\"gpus\":%d,"
                         "\"resources\":\"%s\",\"alive\":%s,\"last_seen_ms\":%lld}",
                         i ? "," : "", m->id, m->address, i == 0 ? "true" : "false", m->cpus,
                         m->gpus, m->resources, m->alive ? "true" : "false",
                         (long long)(i == 0 ? 0 : ms_since(m->last_ns)));
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

static void reply_json(tr__cluster *cl, tr__buf *reply) {
    tr__buf j = TR__BUF_INIT;
    table_json(cl, &j);
    tr__enc_map(reply, 1);
    tr__enc_str(reply, "json");
    tr__enc_strn(reply, (const char *)j.data, j.len);
    tr__buf_free(&j);
}

/* This node's tr_node_status JSON, asked of its own socket (on the RPC thread, which
 * keeps the connection; a broken one is opened again once). */
static int own_status(tr__cluster *cl, tr__buf *reply) {
    int rc = 0;
    tr__reply r;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!cl->self && ((rc = tr__nodeconn_open(cl->sock, cl->max_msg, &cl->self)) ||
                          (rc = tr__nodeconn_hello(cl->self, "cli", 0, 5000)))) {
            tr__nodeconn_close(cl->self);
            cl->self = NULL;
            return rc;
        }
        rc = tr__nodeconn_call(cl->self, TR__MSG_STATUS, NULL, 5000, &r);
        if (!rc) break;
        tr__nodeconn_close(cl->self);
        cl->self = NULL;
    }
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

/* The RPC server's thread: the head answers members; a member answers pings. */
static int handle(void *ctx, const void *req, size_t len, tr__buf *reply) {
    tr__cluster *cl = ctx;
    tr__dec d;
    int rc = tr__dec_init(&d, req, len);
    if (rc) return rc;
    char op[32], id[17];
    rc = get_field(d.root, "op", op, sizeof op);
    if (!rc && strcmp(op, "status") == 0) { /* this node's status, from its own socket */
        tr__dec_free(&d);
        return own_status(cl, reply);
    }
    if (!rc && !cl->head && strcmp(op, "ping") != 0)
        rc = tr__err(TR_EINVAL, "cluster: this node is not the head (it is %s)", cl->head_addr);
    if (rc) {
        tr__dec_free(&d);
        return rc;
    }
    pthread_mutex_lock(&cl->mu);
    if (strcmp(op, "register") == 0) {
        member m;
        memset(&m, 0, sizeof m);
        int64_t gpus = 0;
        if ((rc = get_field(d.root, "id", m.id, sizeof m.id)) ||
            (rc = get_field(d.root, "address", m.address, sizeof m.address)) ||
            (rc = get_field(d.root, "sock", m.sock, sizeof m.sock)) ||
            (rc = get_field(d.root, "resources", m.resources, sizeof m.resources)) ||
            (rc = tr__get_double(d.root, "cpus", &m.cpus)) ||
            (rc = tr__get_int(d.root, "gpus", &gpus)))
            goto out;
        if (!m.id[0] || strcmp(m.id, cl->id) == 0 || !isfinite(m.cpus) || m.cpus < 0 ||
            m.cpus > 1e6 || gpus < 0 || gpus > 65536) {
            rc = tr__err(TR_EPROTO, "cluster: a registration with a bad id, CPUs or GPUs");
            goto out;
        }
        m.gpus = (int)gpus;
        m.last_ns = tr__now_ns();
        m.alive = 1;
        int i = 1;
        while (i < cl->n && strcmp(cl->nodes[i].id, m.id) != 0)
            i++;
        if (i == cl->n && cl->n == MAX_NODES) {
            rc = tr__err(TR_ERESOURCES, "cluster: %d nodes already", MAX_NODES);
            goto out;
        }
        if (i == cl->n) cl->n++;
        cl->nodes[i] = m;
        TR_LOG_INFO("CLUSTER-JOIN", "node %s at %s joined (%g CPUs, %d GPUs)", m.id, m.address,
                    m.cpus, m.gpus);
        tr__enc_map(reply, 1);
        tr__enc_str(reply, "head");
        tr__enc_str(reply, cl->id);
    } else if (strcmp(op, "heartbeat") == 0) {
        if ((rc = get_field(d.root, "id", id, sizeof id))) goto out;
        int i = 1;
        while (i < cl->n && strcmp(cl->nodes[i].id, id) != 0)
            i++;
        if (i >= cl->n) {
            rc = tr__err(TR_ENOTFOUND, "cluster: node %s is not known here: register again", id);
            goto out;
        }
        cl->nodes[i].last_ns = tr__now_ns();
        if (!cl->nodes[i].alive)
            TR_LOG_WARN("CLUSTER-BACK", "node %s at %s is back", id, cl->nodes[i].address);
        cl->nodes[i].alive = 1;
        reply_json(cl, reply);
    } else if (strcmp(op, "nodes") == 0) {
        reply_json(cl, reply);
    } else if (strcmp(op, "ping") == 0) {
        tr__enc_map(reply, 0);
    } else {
        rc = tr__err(TR_EINVAL, "cluster: unknown op '%s'", op);
    }
out:
    pthread_mutex_unlock(&cl->mu);
    tr__dec_free(&d);
    return rc;
}

/* One call to the head: {op, id (and the registration's fields)}. */
static int call_head(tr__cluster *cl, const char *op, int timeout_ms, tr__buf *reply) {
    tr__buf b = TR__BUF_INIT;
    int reg = strcmp(op, "register") == 0;
    tr__enc_map(&b, reg ? 7 : 2);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, op);
    tr__enc_str(&b, "id");
    tr__enc_str(&b, cl->id);
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
    }
    int rc = b.oom ? tr__err(TR_ENOMEM, "cluster")
                   : tr__rpc_call(cl->to_head, b.data, b.len, timeout_ms, reply);
    tr__buf_free(&b);
    return rc;
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
        if (!rc)
            TR_LOG_WARN("CLUSTER-REJOIN", "registered again with the head at %s", cl->head_addr);
    } else if (!rc) {
        keep_table(cl, &r);
    }
    pthread_mutex_lock(&cl->mu);
    if (!rc) {
        if (!cl->head_alive)
            TR_LOG_WARN("CLUSTER-HEAD", "the head at %s answers again", cl->head_addr);
        cl->head_alive = 1;
        cl->head_ok_ns = tr__now_ns();
    } else if (cl->head_alive && ms_since(cl->head_ok_ns) >= LOST_MS) {
        cl->head_alive = 0;
        TR_LOG_ERROR("CLUSTER-HEAD", "the head at %s is lost: %s", cl->head_addr, tr_last_error());
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
    char host[128];
    const char *colon = strrchr(target, ':');
    if (!colon || colon == target || (size_t)(colon - target) >= sizeof host)
        return tr__err(TR_EINVAL, "cluster: '%s' is not HOST:PORT", target);
    memcpy(host, target, (size_t)(colon - target));
    host[colon - target] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    int e = getaddrinfo(host, colon + 1, &hints, &res);
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
                      tr__cluster **out) {
    *out = NULL;
    if (cfg->cluster_port < 0 && !cfg->cluster_head) return 0;
    tr__cluster *cl = calloc(1, sizeof *cl);
    if (!cl) return tr__err(TR_ENOMEM, "cluster");
    pthread_mutex_init(&cl->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* heartbeats ignore wall-clock steps */
    pthread_cond_init(&cl->cv, &ca);
    pthread_condattr_destroy(&ca);
    cl->head = !cfg->cluster_head;
    cl->max_msg = cfg->max_msg;
    uint8_t rnd[8];
    tr__random_bytes(rnd, sizeof rnd);
    for (int i = 0; i < 8; i++)
        snprintf(cl->id + 2 * i, 3, "%02x", rnd[i]);
    snprintf(cl->sock, sizeof cl->sock, "%s", sock);
    for (int i = 0; i < total->n; i++) {
        if (strcmp(total->name[i], "CPU") == 0) cl->cpus = total->qty[i];
    }
    cl->gpus = gpus;
    tr__res_format(total, cl->resources, sizeof cl->resources);
    for (char *p = cl->resources; *p; p++)
        if (*p == '"' || *p == '\\') *p = '_';
    const char *token = cfg->cluster_token ? cfg->cluster_token : "";
    char ip[64] = "127.0.0.1", bind[160];
    int rc = 0;
    const char *b = cfg->cluster_bind;
    if (b && (strchr(b, ':') || strcmp(b, "0.0.0.0") == 0 || !*b))
        rc = tr__err(TR_EINVAL,
                     "cluster_bind '%s': an IPv4 address of this machine, without a port "
                     "(other nodes reach this node at it; a wildcard cannot be reached)",
                     b);
    if (!rc && !cl->head) {
        snprintf(cl->head_addr, sizeof cl->head_addr, "%s", cfg->cluster_head);
        if (!cfg->cluster_bind) rc = facing(cl->head_addr, ip, sizeof ip);
    }
    if (!rc && cl->head) { /* the head heads its own table (its address once it listens) */
        member *m = &cl->nodes[cl->n++];
        snprintf(m->id, sizeof m->id, "%s", cl->id);
        snprintf(m->sock, sizeof m->sock, "%s", cl->sock);
        snprintf(m->resources, sizeof m->resources, "%s", cl->resources);
        m->cpus = cl->cpus;
        m->gpus = cl->gpus;
        m->alive = 1;
        m->last_ns = tr__now_ns();
    }
    if (!rc) {
        snprintf(bind, sizeof bind, "%s:%d", cfg->cluster_bind ? cfg->cluster_bind : ip,
                 cfg->cluster_port < 0 ? 0 : cfg->cluster_port);
        int port = 0;
        rc = tr__rpc_server_create(bind, token, cfg->max_msg, handle, cl, &cl->srv, &port);
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
    if (!rc && !cl->head) { /* join: the head must take us within JOIN_MS */
        rc = tr__rpc_client_create(cl->head_addr, token, cfg->max_msg, &cl->to_head);
        int64_t until = tr__deadline(JOIN_MS);
        while (!rc) {
            tr__buf r = TR__BUF_INIT;
            rc = call_head(cl, "register", 2000, &r);
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
            snprintf(why, sizeof why, "%s", tr_last_error());
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
    *out = cl;
    return 0;
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
    if (cl->thread) {
        pthread_mutex_lock(&cl->mu);
        cl->stop = 1;
        pthread_cond_signal(&cl->cv);
        pthread_mutex_unlock(&cl->mu);
        pthread_join(cl->thread, NULL);
    }
    tr__rpc_server_destroy(cl->srv);
    tr__rpc_client_destroy(cl->to_head);
    tr__nodeconn_close(cl->self);
    free(cl->nodes_json);
    pthread_mutex_destroy(&cl->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
}
