/* api/node/placement.c - actors across nodes: the head places an actor on a node whose
 * resources fit ("place", fewest placed first), a node creates one for another node's
 * driver ("create": only what worker_allowed lets it run, on a connection of its own that
 * lives as long as the creator), the head's directory of what it placed ("where",
 * "by_name"), and this node's directory asked for another node ("resolve", "kill", "info"). */
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
#include "core/frame.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/rpc.h"
#include "core/status.h"

/* A flat map re-encoded, with the value of `key` (if present) replaced by `value`. */
void tr__cl_reencode(const tr__obj *map, const char *key, const char *value, tr__buf *out) {
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
void tr__cl_owner_put(owner *o) {
    if (--o->refs > 0) return;
    tr__nodeconn_close(o->nc);
    free(o);
}

/* The connection to our own socket for a creator on another node, with a reference the
 * caller gives back with tr__cl_owner_put (under create_mu: one adder at a time). Opened without
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
void tr__cl_drop_owners(tr__cluster *cl, const char *key, const char *node) {
    for (owner **pp = &cl->owners; *pp;) {
        owner *o = *pp;
        if ((key && strcmp(o->key, key) == 0) || (node && strcmp(o->node, node) == 0)) {
            *pp = o->next;
            TR_LOG_INFO("CLUSTER-OWNER", "the actors of %s here go: their owner is gone", o->key);
            tr__cl_owner_put(o);
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
int tr__cl_op_create(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char key[64], node[17], asked[4096 + PATH_MAX], exe[4096 + PATH_MAX], res_in[512];
    int rc;
    if ((rc = tr__cl_get_field(req, "owner", key, sizeof key)) ||
        (rc = tr__cl_get_field(req, "node", node, sizeof node)) ||
        (rc = tr__cl_get_command(req, "exe", asked, sizeof asked)) ||
        (rc = tr__cl_get_field(req, "res", res_in, sizeof res_in)) ||
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
    size_t m = tr__enc_map_open(&b);
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
    /* how the actor's worker runs calls (how many at once, in which groups), whether it
     * outlives its creator, what its callers resend when it dies (max_task_retries), its creator's
     * namespace */
    static const char *const passed[] = {"conc",  "groups",   "detached", "label",
                                         "bdata", "tretries", "ns"};
    for (size_t i = 0; i < sizeof passed / sizeof *passed; i++) {
        const tr__obj *v = tr__obj_get(req, passed[i]);
        int64_t k;
        const char *str;
        size_t sn;
        if (tr__obj_type(v) == TR__T_STR && tr__get_str(req, passed[i], &str, &sn) == 0) {
            tr__enc_str(&b, passed[i]);
            tr__enc_strn(&b, str, sn);
        } else if (v && tr__get_int(req, passed[i], &k) == 0) {
            tr__enc_str(&b, passed[i]);
            tr__enc_int(&b, k);
        }
    }
    if (tr__obj_type(tr__obj_get(req, "task_res")) == TR__T_STR) { /* a task worker's */
        tr__res task, task_keep;
        memset(&task, 0, sizeof task);
        memset(&task_keep, 0, sizeof task_keep);
        if ((rc = tr__cl_get_field(req, "task_res", res_in, sizeof res_in)) ||
            (rc = tr__res_parse(&task, res_in))) {
            tr__buf_free(&b);
            return rc;
        }
        for (int i = 0; i < task.n; i++) /* (as res: node:ADDRESS named this node) */
            if (strncmp(task.name[i], "node:", 5) != 0)
                tr__res_add(&task_keep, task.name[i], task.qty[i]);
        tr__res_format(&task_keep, res, sizeof res);
        tr__enc_str(&b, "task_res");
        tr__enc_str(&b, res);
    }
    if (tr__obj_get(req, "pg")) { /* into a placement group's bundle held here */
        uint8_t pg[16];
        int64_t bundle = -1;
        if ((rc = tr__get_id(req, "pg", pg, 16)) || (rc = tr__get_int(req, "bundle", &bundle))) {
            tr__buf_free(&b);
            return rc;
        }
        tr__enc_str(&b, "pg");
        tr__enc_bin(&b, pg, 16);
        tr__enc_str(&b, "bundle");
        tr__enc_int(&b, bundle);
    }
    tr__enc_map_close(&b, m);
    pthread_mutex_lock(&cl->create_mu);
    owner *o = b.oom ? NULL : owner_get(cl, key, node, exe);
    tr__reply r;
    rc = o ? tr__nodeconn_call(o->nc, TR__MSG_ACTOR_CREATE, &b, SELF_MS, &r)
           : (b.oom ? tr__err(TR_ENOMEM, "cluster") : TR_ECONNECT);
    if (o) {
        pthread_mutex_lock(&cl->mu);
        tr__cl_owner_put(o);
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
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    if (type == TR__MSG_ACTOR_RESOLVE) {
        tr__enc_str(&b, "wait_ms");
        tr__enc_int(&b, 0);
    } else if (type == TR__MSG_ACTOR_KILL) {
        tr__enc_str(&b, "no_restart");
        tr__enc_int(&b, no_restart);
    }
    tr__enc_map_close(&b, m);
    tr__reply r;
    rc = b.oom ? tr__err(TR_ENOMEM, "cluster") : tr__cl_self_call(cl, type, &b, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    tr__buf_append(reply, r.mem, r.mem_len);
    tr__reply_free(&r);
    return 0;
}

/* The head: a node for an actor that did not fit where it was asked for, by resources
 * (a node's own "node:<its IP>" among them), the one it placed fewest actors on. Then
 * "create" there (or here), and the actor goes in the head's directory. */
int tr__cl_op_place(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char res_in[512];
    int rc = tr__cl_get_field(req, "res", res_in, sizeof res_in);
    if (rc) return rc;
    tr__res want;
    memset(&want, 0, sizeof want);
    if ((rc = tr__res_parse(&want, res_in))) return rc;
    if (tr__obj_type(tr__obj_get(req, "task_res")) == TR__T_STR) { /* (a task worker's) */
        char task_in[512];
        if ((rc = tr__cl_get_field(req, "task_res", task_in, sizeof task_in)) ||
            (rc = tr__res_parse(&want, task_in)))
            return rc;
    }
    char address[128] = "", node[17] = "";
    int best = -1;
    if (tr__obj_get(req, "pg")) { /* the node holding its bundle, as the group's map says */
        uint8_t pg[16];
        int64_t bundle = -1;
        if ((rc = tr__get_id(req, "pg", pg, 16)) || (rc = tr__get_int(req, "bundle", &bundle)) ||
            (rc = tr__cl_pg_route(cl, pg, bundle, &want, address, sizeof address, node,
                                  sizeof node)))
            return rc;
        pthread_mutex_lock(&cl->mu);
        for (int i = 0; i < cl->members.n && best < 0; i++)
            if (strcmp(cl->members.nodes[i].id, node) == 0) best = i;
        if (best >= 0) cl->members.nodes[best].placed++;
        pthread_mutex_unlock(&cl->mu);
        if (best < 0) return tr__err(TR_ENOTFOUND, "the node of that bundle left the cluster");
        goto chosen;
    }
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < cl->members.n; i++) {
        tr__member *m = &cl->members.nodes[i];
        if (!m->alive || m->client) continue; /* a client runs no actors */
        tr__res has;
        memset(&has, 0, sizeof has);
        char tag[64];
        const char *colon = strrchr(m->address, ':');
        snprintf(tag, sizeof tag, "node:%.*s", colon ? (int)(colon - m->address) : 0, m->address);
        if (tr__res_parse(&has, m->resources) || tr__res_add(&has, tag, 1)) continue;
        if (!tr__res_fits(&want, &has)) continue;
        if (best < 0 || m->placed < cl->members.nodes[best].placed) best = i;
    }
    if (best >= 0) {
        cl->members.nodes[best].placed++;
        snprintf(address, sizeof address, "%s", cl->members.nodes[best].address);
        snprintf(node, sizeof node, "%s", cl->members.nodes[best].id);
    }
    pthread_mutex_unlock(&cl->mu);
    if (best < 0) {
        char all[1024]; /* (a task worker's task_res too) */
        tr__res_format(&want, all, sizeof all);
        return tr__err(TR_ERESOURCES,
                       "no node of the cluster has {%s} in all (nor is one named so)", all);
    }
chosen:;
    tr__buf r = TR__BUF_INIT;
    if (best == 0) { /* here (the head is row 0) */
        rc = tr__cl_op_create(cl, req, &r);
    } else {
        tr__buf fwd = TR__BUF_INIT; /* the same request, as a "create" */
        tr__cl_reencode(req, "op", "create", &fwd);
        rc = tr__cl_call_peer(cl, address, &fwd, PLACE_MS, 0, &r);
        tr__buf_free(&fwd);
    }
    uint8_t id[16];
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, r.data, r.len))) {
        rc = tr__get_id(d.root, "id", id, 16);
        tr__dec_free(&d);
    }
    tr__buf_free(&r);
    if (rc) return tr__err_wrap(rc, "creating the actor on node %s", address);
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

/* The head: where an actor it placed lives ("where" by id, "by_name" by name). Under mu
 * (ops[]). */
static int op_find(tr__cluster *cl, const tr__obj *req, int by_name, tr__buf *reply) {
    uint8_t id[16];
    const char *name = NULL;
    size_t nn = 0;
    int rc = by_name ? tr__get_str(req, "name", &name, &nn) : tr__get_id(req, "id", id, 16);
    if (rc) return rc;
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
    return h ? 0 : tr__err(TR_ENOTFOUND, "no such actor in the cluster");
}

/* "owner_gone": the creator "<node>/<connection>" (or "<node>/" "*": every creator of that
 * node) is gone: the actors it made here go too. */
int tr__cl_op_owner_gone(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    char key[64];
    int rc = tr__cl_get_field(req, "owner", key, sizeof key);
    if (rc) return rc;
    size_t kn = strlen(key);
    int all = kn > 2 && strcmp(key + kn - 2, "/*") == 0;
    if (all) key[kn - 2] = '\0';
    tr__cl_drop_owners(cl, all ? NULL : key, all ? key : NULL);
    if (cl->head) tr__cl_pg_owner_gone(cl, all ? NULL : key, all ? key : NULL); /* its groups */
    tr__enc_map(reply, 0);
    return 0;
}

int tr__cl_op_resolve(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_local(cl, TR__MSG_ACTOR_RESOLVE, req, reply);
}

int tr__cl_op_kill(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_local(cl, TR__MSG_ACTOR_KILL, req, reply);
}

int tr__cl_op_info(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_local(cl, TR__MSG_ACTOR_INFO, req, reply);
}

int tr__cl_op_where(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_find(cl, req, 0, reply);
}

int tr__cl_op_by_name(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    return op_find(cl, req, 1, reply);
}
