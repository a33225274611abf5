/* api/node/forward.c - requests of this node's directory that another node must answer
 * (an actor placed elsewhere, a call's actor on another node, a creator gone), each run
 * as a job on a thread of its own - they wait on other nodes - and replied to from the
 * node's loop; the connections to other nodes (peers) and what this node learned of
 * where actors live. */
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
#include "actor/pgroup.h"
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
int tr__cl_call_peer(tr__cluster *cl, const char *address, const tr__buf *req, int timeout_ms,
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

void tr__cl_job_free(job *j) {
    free(j->cls);
    free(j->groups);
    free(j->label);
    free(j->bdata);
    free(j->task_res);
    free(j->ns);
    free(j->name);
    free(j->res);
    free(j->exe);
    free(j->args);
    tr__buf_free(&j->reply);
    free(j);
}

void tr__cl_reply_status(job *j, int rc, const char *msg) {
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
    int rc = tr__cl_call_peer(cl, head, q, timeout_ms, retry, &a);
    if (rc == TR_ECONNECT || rc == TR_ETIMEDOUT)
        rc = tr__err_wrap(rc, "the head at %s cannot be reached", head);
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, a.data, a.len))) {
        if (!(rc = tr__get_id(d.root, "id", id, 16)))
            rc = tr__cl_get_field(d.root, "address", address, cap);
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
int tr__cl_table_says(tr__cluster *cl, const char *address) {
    int says = -1;
    pthread_mutex_lock(&cl->mu);
    if (cl->head) {
        says = tr__members_says(&cl->members, address);
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
    return tr__cl_table_says(cl, address) != 1;
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
    size_t m = tr__enc_map_open(&q);
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
    if (j->has_pg) { /* the head sends it to the node of its bundle */
        tr__enc_str(&q, "pg");
        tr__enc_bin(&q, j->pg, 16);
        tr__enc_str(&q, "bundle");
        tr__enc_int(&q, j->bundle);
    }
    if (j->conc > 1) { /* (how its worker runs calls: as the node it was asked of would) */
        tr__enc_str(&q, "conc");
        tr__enc_int(&q, j->conc);
    }
    if (j->groups) {
        tr__enc_str(&q, "groups");
        tr__enc_str(&q, j->groups);
    }
    if (j->detached) { /* (its node keeps it when our creator goes) */
        tr__enc_str(&q, "detached");
        tr__enc_int(&q, 1);
    }
    if (j->label) {
        tr__enc_str(&q, "label");
        tr__enc_str(&q, j->label);
    }
    if (j->bdata) {
        tr__enc_str(&q, "bdata");
        tr__enc_str(&q, j->bdata);
    }
    if (j->task_res) { /* (a task worker: the node chosen needs room for a task too) */
        tr__enc_str(&q, "task_res");
        tr__enc_str(&q, j->task_res);
    }
    if (j->tretries) {
        tr__enc_str(&q, "tretries");
        tr__enc_int(&q, j->tretries);
    }
    if (j->ns) {
        tr__enc_str(&q, "ns");
        tr__enc_str(&q, j->ns);
    }
    tr__enc_map_close(&q, m);
    uint8_t id[16];
    char address[128];
    int rc = ask_head(cl, &q, PLACE_WAIT_MS, 0, id, address, sizeof address);
    if (rc) {
        char why[600];
        snprintf(why, sizeof why, "placing the actor on another node: %s", tr__last_error());
        tr__cl_reply_status(j, rc, why);
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
        tr__cl_reply_status(j, rc == TR_ENOTFOUND ? rc : TR_ECONNECT,
                            rc == TR_ENOTFOUND ? "no such actor" : why);
        return;
    }
    const char *op = j->type == TR__MSG_ACTOR_RESOLVE ? "resolve"
                     : j->type == TR__MSG_ACTOR_KILL  ? "kill"
                                                      : "info";
    int64_t deadline = tr__deadline((int)(j->wait_ms > 1000 ? 1000 : j->wait_ms));
    for (;;) {
        tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
        size_t m = tr__enc_map_open(&q);
        tr__enc_str(&q, "op");
        tr__enc_str(&q, op);
        tr__enc_str(&q, "id");
        tr__enc_bin(&q, j->id, 16);
        if (j->type == TR__MSG_ACTOR_KILL) {
            tr__enc_str(&q, "no_restart");
            tr__enc_int(&q, j->no_restart);
        }
        tr__enc_map_close(&q, m);
        rc = tr__cl_call_peer(cl, address, &q, PEER_MS, 1, &a);
        tr__buf_free(&q);
        tr__dec d;
        int decoded = !rc && tr__dec_init(&d, a.data, a.len) == 0;
        if (!rc && !decoded) rc = TR_EPROTO;
        char why[600];
        snprintf(why, sizeof why, "%s", rc ? tr__last_error() : "");
        if (j->type != TR__MSG_ACTOR_RESOLVE || (rc && rc != TR_ECONNECT && rc != TR_ETIMEDOUT)) {
            if (rc) {
                tr__cl_reply_status(j, rc, why);
            } else {
                tr__buf_reset(&j->reply);
                tr__cl_reencode(d.root, "node", address, &j->reply);
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
        int64_t tretries = 0; /* (how the caller treats calls in flight when it dies) */
        if (!rc && decoded && tr__obj_get(d.root, "tretries") &&
            tr__get_int(d.root, "tretries", &tretries))
            tretries = 0;
        int final = state == TR__ACTOR_ALIVE || state == TR__ACTOR_DEAD ||
                    tr__now_ns() >= deadline || closing(cl);
        if (final) {
            tr__buf_reset(&j->reply);
            tr__reply_begin(&j->reply, 0, NULL, 10);
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
            tr__enc_str(&j->reply, "tretries");
            tr__enc_int(&j->reply, tretries);
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
        tr__cl_reply_status(j, rc,
                            rc == TR_ENOTFOUND ? "no live actor has that name" : tr__last_error());
    } else {
        remember(cl, id, address, 0);
        reply_id(j, id);
    }
    tr__buf_free(&q);
}

/* A placement group request of a driver here, asked of the head (which has them all). */
static void run_pg(tr__cluster *cl, job *j) {
    static const char *const ops[] = {"pg_create", "pg_info", "pg_remove", "pg_by_name"};
    const char *op = ops[j->type - TR__MSG_PG_CREATE];
    char head[128], key[64];
    pthread_mutex_lock(&cl->mu);
    snprintf(head, sizeof head, "%s", cl->head ? cl->address : cl->head_addr);
    pthread_mutex_unlock(&cl->mu);
    snprintf(key, sizeof key, "%s/%llu", cl->id, (unsigned long long)j->conn_id);
    tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&q);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, op);
    if (j->type == TR__MSG_PG_CREATE) {
        tr__enc_str(&q, "owner");
        tr__enc_str(&q, key);
        tr__enc_str(&q, "bundles");
        tr__enc_str(&q, j->res);
        tr__enc_str(&q, "strategy");
        tr__enc_int(&q, j->max_restarts);
    }
    if (j->name) {
        tr__enc_str(&q, "name");
        tr__enc_str(&q, j->name);
    }
    if (j->type == TR__MSG_PG_INFO || j->type == TR__MSG_PG_REMOVE) {
        tr__enc_str(&q, "id");
        tr__enc_bin(&q, j->id, 16);
    }
    tr__enc_map_close(&q, m);
    /* (a remove may wait for a placement in progress: PG_LOCK_MS and the parts' undoing) */
    int rc = tr__cl_call_peer(cl, head, &q, j->type == TR__MSG_PG_REMOVE ? 8000 : PEER_MS,
                              j->type != TR__MSG_PG_CREATE, &a);
    tr__buf_free(&q);
    if (rc == TR_ECONNECT || rc == TR_ETIMEDOUT)
        rc = tr__err_wrap(rc, "placement groups: the cluster's head at %s cannot be reached", head);
    tr__dec d;
    int decoded = !rc && tr__dec_init(&d, a.data, a.len) == 0;
    if (!rc && !decoded) rc = tr__err(TR_EPROTO, "placement groups: the head's answer");
    if (rc) {
        char why[600];
        snprintf(why, sizeof why, "%s", tr__last_error());
        tr__cl_reply_status(j, rc, why);
    } else if (j->type == TR__MSG_PG_REMOVE) {
        tr__cl_reply_status(j, 0, NULL);
    } else { /* its fields, after rc and msg */
        size_t n = tr__obj_len(d.root);
        tr__buf_reset(&j->reply);
        tr__reply_begin(&j->reply, 0, NULL, (uint32_t)n);
        tr__buf body = TR__BUF_INIT;
        tr__cl_reencode(d.root, "", "", &body); /* a map header, then its pairs */
        size_t hdr = n < 16 ? 1 : n < 65536 ? 3 : 5;
        if (body.len > hdr) tr__buf_append(&j->reply, body.data + hdr, body.len - hdr);
        tr__buf_free(&body);
        if (j->type == TR__MSG_PG_CREATE) { /* its groups go when it does: the head is told */
            pgconn *p = calloc(1, sizeof *p);
            pthread_mutex_lock(&cl->mu);
            pgconn *o = cl->pg_conns;
            while (o && o->conn != j->conn_id)
                o = o->next;
            if (!o && p) {
                p->conn = j->conn_id;
                p->next = cl->pg_conns;
                cl->pg_conns = p;
                p = NULL;
            }
            pthread_mutex_unlock(&cl->mu);
            free(p);
        }
    }
    if (decoded) tr__dec_free(&d);
    tr__buf_free(&a);
}

static void *job_main(void *arg) {
    job *j = arg;
    tr__cluster *cl = j->cl;
    if (j->type == TR__MSG_ACTOR_CREATE) {
        run_create(cl, j);
    } else if (j->type == TR__MSG_ACTOR_BY_NAME) {
        run_by_name(cl, j);
    } else if (j->type == TR__MSG_CLUSTER_KV) {
        tr__cl_run_kv(cl, j);
    } else if (j->type >= TR__MSG_PG_CREATE && j->type <= TR__MSG_PG_BY_NAME) {
        run_pg(cl, j);
    } else if (j->type == 0) { /* a creator here is gone: its actors there go too */
        tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
        tr__enc_map(&q, 2);
        tr__enc_str(&q, "op");
        tr__enc_str(&q, "owner_gone");
        tr__enc_str(&q, "owner");
        tr__enc_str(&q, j->owner_key);
        if (tr__cl_call_peer(cl, j->address, &q, PEER_MS, 1, &a))
            TR_LOG_WARN("CLUSTER-OWNER", "telling %s that %s is gone: %s", j->address, j->owner_key,
                        tr__last_error());
        tr__buf_free(&q);
        tr__buf_free(&a);
    } else {
        run_on_node(cl, j);
    }
    if (j->reply.oom) tr__cl_reply_status(j, TR_ENOMEM, "cluster: out of memory");
    pthread_mutex_lock(&cl->mu);
    j->next = cl->done;
    cl->done = j;
    if (cl->async_live) uv_async_send(&cl->async);
    cl->jobs--;
    pthread_cond_broadcast(&cl->jobs_cv);
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

/* Starts a job (loop thread). Returns 0 if it could not (too many, closing). */
int tr__cl_start_job(tr__cluster *cl, job *j) {
    return tr__cl_spawn_counted(cl, &cl->jobs, MAX_JOBS, &cl->closing, job_main, j);
}

void tr__cl_on_jobs_done(uv_async_t *h) {
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
            if ((j->type == TR__MSG_ACTOR_CREATE || j->type == TR__MSG_PG_CREATE) && j->c->closed)
                tr__cluster_conn_closed(cl, j->c);
            tr__conn_unref(j->c);
        }
        tr__cl_job_free(j);
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
        j->conc = 1;
        if (tr__obj_get(body, "conc") && (rc = tr__get_int(body, "conc", &j->conc))) goto fail;
        if (tr__obj_get(body, "detached") && (rc = tr__get_int(body, "detached", &j->detached)))
            goto fail;
        if (tr__obj_get(body, "tretries") && (rc = tr__get_int(body, "tretries", &j->tretries)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "groups")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "groups", &j->groups)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "label")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "label", &j->label)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "bdata")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "bdata", &j->bdata)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "task_res")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "task_res", &j->task_res)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "ns")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "ns", &j->ns)))
            goto fail;
        j->args = malloc(j->args_len ? j->args_len : 1);
        j->exe = c->exe ? strdup(c->exe) : NULL;
        if (!j->args || !j->exe) goto fail;
        memcpy(j->args, args, j->args_len);
        if (tr__obj_get(body, "pg")) {
            if ((rc = tr__get_id(body, "pg", j->pg, 16)) ||
                (rc = tr__get_int(body, "bundle", &j->bundle)))
                goto fail;
            j->has_pg = 1;
        }
    } else if (type == TR__MSG_PG_CREATE) { /* (the node checked it) */
        if ((rc = tr__get_strdup(body, "bundles", &j->res)) ||
            (rc = tr__get_int(body, "strategy", &j->max_restarts)))
            goto fail;
        if (tr__obj_type(tr__obj_get(body, "name")) == TR__T_STR &&
            (rc = tr__get_strdup(body, "name", &j->name)))
            goto fail;
    } else if (type == TR__MSG_PG_BY_NAME) {
        if ((rc = tr__get_strdup(body, "name", &j->name))) goto fail;
    } else if (type == TR__MSG_PG_INFO || type == TR__MSG_PG_REMOVE) {
        if ((rc = tr__get_id(body, "id", j->id, 16))) goto fail;
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
    if (tr__cl_start_job(cl, j)) return 1;
    tr__conn_unref(c);
fail:
    tr__cl_job_free(j);
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
    int groups = 0; /* it made placement groups: the head is told too */
    for (pgconn **pp = &cl->pg_conns; *pp; pp = &(*pp)->next)
        if ((*pp)->conn == c->id) {
            pgconn *p = *pp;
            *pp = p->next;
            free(p);
            groups = 1;
            break;
        }
    if (groups) mine = tr__cl_add_head(cl, mine);
    pthread_mutex_unlock(&cl->mu);
    char key[64];
    snprintf(key, sizeof key, "%s/%llu", cl->id, (unsigned long long)c->id);
    tr__cl_tell_owner_gone(cl, mine, key);
}

ractor *tr__cl_add_head(tr__cluster *cl, ractor *list) {
    const char *head = cl->head ? cl->address : cl->head_addr;
    for (ractor *r = list; r; r = r->next)
        if (strcmp(r->address, head) == 0) return list;
    ractor *r = calloc(1, sizeof *r);
    if (!r) return list;
    snprintf(r->address, sizeof r->address, "%s", head);
    r->next = list;
    return r;
}

void tr__cl_tell_owner_gone(tr__cluster *cl, ractor *nodes, const char *key) {
    while (nodes) {
        ractor *r = nodes;
        nodes = r->next;
        job *j = calloc(1, sizeof *j);
        if (j) {
            j->cl = cl;
            snprintf(j->owner_key, sizeof j->owner_key, "%s", key);
            snprintf(j->address, sizeof j->address, "%s", r->address);
            if (!tr__cl_start_job(cl, j)) { /* closing: the head's sweep will say this node
                                               is lost */
                TR_LOG_WARN("CLUSTER-OWNER", "cannot tell %s that %s is gone", r->address, key);
                tr__cl_job_free(j);
            }
        }
        free(r);
    }
}
