/* actor/control.c - requests to the node's actor directory. */
#include "actor/control.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/pgroup.h"
#include "actor/protocol.h"
#include "actor/tasks.h"
#include "core/abi.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/sched.h"
#include "core/status.h"

#define NODE_RPC_MS 10000
#define RESOLVE_SLICE_MS 50

static void enc_id(tr__buf *b, const char *key, const void *id) {
    tr__enc_str(b, key);
    tr__enc_bin(b, id, 16);
}

/* Whether s (1..63 bytes) can name a concurrency group or one of its methods. */
static int group_word(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < 64 && !strpbrk(s, ";=:,@");
}

/* opts' concurrency groups as the node keeps them: "name=max:m1,m2;name2=max:" ("" for
 * none), checked. 0 or TR_EINVAL. */
static int encode_groups(const tr_actor_options *opts, char *out, size_t cap) {
    size_t at = 0, n = opts->n_concurrency_groups;
    out[0] = '\0';
    if (n && !opts->concurrency_groups)
        return tr__err(TR_EINVAL, "tr_actor_create: n_concurrency_groups without groups");
    if (n > 64)
        return tr__err(TR_EINVAL, "tr_actor_create: %zu concurrency groups (at most 64)", n);
    for (size_t i = 0; i < n; i++) {
        const tr_concurrency_group *g = &opts->concurrency_groups[i];
        if (!group_word(g->name))
            return tr__err(TR_EINVAL,
                           "tr_actor_create: concurrency group %zu: a name of 1..63 "
                           "bytes without ';', '=', ':', ',' or '@' is needed",
                           i);
        for (size_t j = 0; j < i; j++)
            if (strcmp(opts->concurrency_groups[j].name, g->name) == 0)
                return tr__err(TR_EINVAL, "tr_actor_create: concurrency group '%s' twice", g->name);
        if (g->max_concurrency < 1 || g->max_concurrency > TR__MAX_CONCURRENCY)
            return tr__err(TR_EINVAL,
                           "tr_actor_create: concurrency group '%s': max_concurrency "
                           "%d: 1..%d",
                           g->name, g->max_concurrency, TR__MAX_CONCURRENCY);
        if (g->n_methods && !g->methods)
            return tr__err(TR_EINVAL,
                           "tr_actor_create: concurrency group '%s': n_methods "
                           "without methods",
                           g->name);
        int k = snprintf(out + at, cap - at, "%s%s=%d:", i ? ";" : "", g->name, g->max_concurrency);
        if (k < 0 || (size_t)k >= cap - at) goto long_;
        at += (size_t)k;
        for (size_t j = 0; j < g->n_methods; j++) {
            if (!group_word(g->methods[j]))
                return tr__err(TR_EINVAL,
                               "tr_actor_create: concurrency group '%s': method %zu: "
                               "a name of 1..63 bytes without ';', '=', ':', ',' "
                               "or '@' is needed",
                               g->name, j);
            k = snprintf(out + at, cap - at, "%s%s", j ? "," : "", g->methods[j]);
            if (k < 0 || (size_t)k >= cap - at) goto long_;
            at += (size_t)k;
        }
    }
    return 0;
long_:
    return tr__err(TR_EINVAL, "tr_actor_create: the concurrency groups take more than %zu bytes",
                   cap - 1);
}

int tr__actor_qualify(const char *ns, const char *name, char *out, size_t cap) {
    if (ns && strlen(ns) > 255) return tr__err(TR_EINVAL, "namespace over 255 bytes");
    if ((ns && strchr(ns, 0x1f)) || strchr(name, 0x1f))
        return tr__err(TR_EINVAL, "an actor's name or namespace holds the byte 0x1f");
    int n = ns && *ns ? snprintf(out, cap, "%s\x1f%s", ns, name) : snprintf(out, cap, "%s", name);
    if (n < 0 || (size_t)n >= cap)
        return tr__err(TR_EINVAL, "an actor's name of %zu bytes is too long", strlen(name));
    return 0;
}

static int create(tr__nodeconn *node, const char *ns, const char *cls,
                  const tr_actor_options *given, const void *args, size_t len,
                  const tr__res *task_res, tr_actor_id *out) {
    tr_actor_options o = TR_ACTOR_OPTIONS_INIT, *opts = &o;
    int rc;
    if (given) {
        /* a binary from before 0.3 passes its sizeof: the first fields plus padding */
        uint32_t word;
        memcpy(&word, given, sizeof word);
        size_t v1 = word == TR__SIZE_WHEN(tr_actor_options, max_restarts)
                        ? word
                        : TR__SIZE_UPTO(tr_actor_options, max_restarts);
        if ((rc = tr__struct_in(&o, sizeof o, given, v1, "tr_actor_create: options"))) return rc;
    }
    char qualified[1024];
    if (o.name) { /* (in its namespace: the node keeps names as strings) */
        if ((rc = tr__actor_qualify(o.ns ? o.ns : ns, o.name, qualified, sizeof qualified)))
            return tr__err_wrap(rc, "tr_actor_create");
        o.name = qualified;
    }
    if (!cls || !*cls) return tr__err(TR_EINVAL, "tr_actor_create: no class name");
    if (!args && len) return tr__err(TR_EINVAL, "tr_actor_create: args is NULL");
    if (opts->n_resources && !opts->resources)
        return tr__err(TR_EINVAL, "tr_actor_create: n_resources without resources");
    if (opts->max_restarts < -1)
        return tr__err(TR_EINVAL, "tr_actor_create: max_restarts must be >= -1");
    if (opts->max_task_retries < -1)
        return tr__err(TR_EINVAL, "tr_actor_create: max_task_retries must be >= -1");
    if (opts->max_concurrency < 0 || opts->max_concurrency > TR__MAX_CONCURRENCY)
        return tr__err(TR_EINVAL, "tr_actor_create: max_concurrency %d: 1..%d (0: 1)",
                       opts->max_concurrency, TR__MAX_CONCURRENCY);
    char groups[4096];
    if ((rc = encode_groups(opts, groups, sizeof groups))) return rc;
    size_t bdata_len =
        opts->binding_data ? strnlen(opts->binding_data, TR_ACTOR_BINDING_DATA_MAX + 1) : 0;
    if (bdata_len > TR_ACTOR_BINDING_DATA_MAX)
        return tr__err(TR_EINVAL, "tr_actor_create: binding_data over %d bytes",
                       TR_ACTOR_BINDING_DATA_MAX);
    if (len + 8192 + bdata_len > node->max_msg)
        return tr__err(TR_EMSGSIZE,
                       "constructor arguments of %zu bytes exceed the message "
                       "limit of %zu",
                       len, node->max_msg);
    tr__res req = {0};
    if ((opts->num_cpus > 0 && (rc = tr__res_add(&req, "CPU", opts->num_cpus))) ||
        (opts->num_gpus > 0 && (rc = tr__res_add(&req, "GPU", opts->num_gpus))))
        return rc;
    if (opts->num_cpus < 0 || opts->num_gpus < 0)
        return tr__err(TR_EINVAL, "tr_actor_create: num_cpus and num_gpus must be >= 0");
    if (opts->num_gpus > 1 && (opts->num_gpus > 1e6 || opts->num_gpus != floor(opts->num_gpus)))
        return tr__err(TR_EINVAL,
                       "tr_actor_create: num_gpus %g: a share of one GPU (< 1) or whole GPUs",
                       opts->num_gpus);
    for (size_t i = 0; i < opts->n_resources; i++)
        if ((rc = tr__res_add(&req, opts->resources[i].name, opts->resources[i].quantity)))
            return rc;
    char res[1024];
    tr__res_format(&req, res, sizeof res);
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "class");
    tr__enc_str(&b, cls);
    tr__enc_str(&b, "args");
    tr__enc_bin(&b, args ? args : "", len);
    tr__enc_str(&b, "max_restarts");
    tr__enc_int(&b, opts->max_restarts);
    tr__enc_str(&b, "res");
    tr__enc_str(&b, res);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, opts->name);
    if (ns && *ns) { /* its creator's: what its worker's runtime makes and finds names in */
        tr__enc_str(&b, "ns");
        tr__enc_str(&b, ns);
    }
    if (opts->detached) {
        tr__enc_str(&b, "detached");
        tr__enc_int(&b, 1);
    }
    if (opts->max_concurrency > 1) { /* (absent: 1, as a node from before it reads it) */
        tr__enc_str(&b, "conc");
        tr__enc_int(&b, opts->max_concurrency);
    }
    if (opts->max_task_retries) { /* (absent: 0, as a node from before it reads it) */
        tr__enc_str(&b, "tretries");
        tr__enc_int(&b, opts->max_task_retries);
    }
    if (groups[0]) {
        tr__enc_str(&b, "groups");
        tr__enc_str(&b, groups);
    }
    if (opts->class_label && *opts->class_label) { /* (what status and metrics show) */
        tr__enc_str(&b, "label");
        tr__enc_strn(&b, opts->class_label, strnlen(opts->class_label, 200));
    }
    if (bdata_len) { /* (kept for whoever finds the actor: tr_actor_binding_data) */
        tr__enc_str(&b, "bdata");
        tr__enc_strn(&b, opts->binding_data, bdata_len);
    }
    if (task_res && task_res->n) { /* (a task worker's: held while it runs a task) */
        char tres[1024];
        tr__res_format(task_res, tres, sizeof tres);
        tr__enc_str(&b, "task_res");
        tr__enc_str(&b, tres);
    }
    static const tr_pg_id none;
    if (memcmp(opts->placement_group.b, none.b, 16) != 0) { /* the node renames req */
        enc_id(&b, "pg", opts->placement_group.b);
        tr__enc_str(&b, "bundle");
        tr__enc_int(&b, opts->bundle_index);
    }
    tr__enc_map_close(&b, m);
    tr__reply r;
    rc = tr__nodeconn_call(node, TR__MSG_ACTOR_CREATE, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    rc = tr__get_id(r.root, "id", out->b, 16);
    tr__reply_free(&r);
    return rc;
}

int tr__actor_create(tr__nodeconn *node, const char *ns, const char *cls,
                     const tr_actor_options *opts, const void *args, size_t len, tr_actor_id *out) {
    return create(node, ns, cls, opts, args, len, NULL, out);
}

int tr__actor_create_task_worker(tr__nodeconn *node, const tr_actor_options *opts,
                                 const tr__res *task_res, tr_actor_id *out) {
    return create(node, NULL, TR__TASKS_CLASS, opts, NULL, 0, task_res, out);
}

int tr__actor_resolve(tr__nodeconn *node, const tr_actor_id *id, int wait_ms,
                      tr__actor_where *out) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    enc_id(&b, "id", id->b);
    tr__enc_str(&b, "wait_ms");
    tr__enc_int(&b, wait_ms);
    tr__reply r;
    int timeout = wait_ms < 0 || wait_ms > RESOLVE_SLICE_MS ? NODE_RPC_MS : wait_ms + NODE_RPC_MS;
    int rc = tr__nodeconn_call(node, TR__MSG_ACTOR_RESOLVE, &b, timeout, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    int64_t state;
    const char *p;
    size_t n;
    memset(out, 0, sizeof *out);
    if ((rc = tr__get_int(r.root, "state", &state)) ||
        (rc = tr__get_uint(r.root, "inc", &out->inc)))
        goto done;
    out->state = (int)state;
    if (tr__get_str(r.root, "path", &p, &n) == 0 && n < sizeof out->path) memcpy(out->path, p, n);
    if (tr__get_str(r.root, "reason", &p, &n) == 0)
        snprintf(out->reason, sizeof out->reason, "%.*s", (int)n, p);
    if (tr__get_str(r.root, "remote", &p, &n) == 0 && n < sizeof out->remote)
        memcpy(out->remote, p, n);
    int64_t tretries = 0;
    if (tr__obj_get(r.root, "tretries") && tr__get_int(r.root, "tretries", &tretries) == 0 &&
        tretries >= -1 && tretries <= INT32_MAX)
        out->task_retries = (int)tretries;
    if (tr__get_str(r.root, "token", &p, &n) == 0 && n < sizeof out->token)
        memcpy(out->token, p, n);
    if (!rc) rc = tr__get_tls_files(r.root, &out->tls);
    if (out->state == TR__ACTOR_ALIVE && !out->path[0] && !out->remote[0])
        rc = tr__err(TR_EPROTO, "node said ALIVE without a path");
done:
    tr__reply_free(&r);
    return rc;
}

int tr__actor_wait_ready(tr__nodeconn *node, tr_actor_id id, int timeout_ms) {
    int64_t deadline = tr__deadline(timeout_ms);
    for (;;) {
        /* short slices: the node connection is shared, and held during each request */
        int left = tr__ms_left(deadline);
        tr__actor_where w;
        int rc = tr__actor_resolve(
            node, &id, left < 0 || left > RESOLVE_SLICE_MS ? RESOLVE_SLICE_MS : left, &w);
        if (rc) return rc;
        if (w.state == TR__ACTOR_ALIVE) return 0;
        if (w.state == TR__ACTOR_DEAD)
            return tr__err(TR_EACTOR_DIED, "actor died: %s", w.reason[0] ? w.reason : "unknown");
        if (tr__now_ns() >= deadline)
            return tr__err(TR_ETIMEDOUT, "actor is still %s", tr__actor_state_name(w.state));
    }
}

int tr__actor_by_name(tr__nodeconn *node, const char *ns, const char *given, tr_actor_id *out) {
    char name[1024];
    if (!given || !*given) return tr__err(TR_EINVAL, "tr_actor_get: no name");
    int q = tr__actor_qualify(ns, given, name, sizeof name);
    if (q) return tr__err_wrap(q, "tr_actor_get");
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, name);
    tr__reply r;
    int rc = tr__nodeconn_call(node, TR__MSG_ACTOR_BY_NAME, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc)
        return rc == TR_ENOTFOUND
                   ? tr__err(rc, "no live actor named '%s'%s%s%s", given,
                             ns && *ns ? " in namespace '" : "", ns ? ns : "", ns && *ns ? "'" : "")
                   : rc;
    rc = tr__get_id(r.root, "id", out->b, 16);
    tr__reply_free(&r);
    return rc;
}

int tr__actor_kill(tr__nodeconn *node, tr_actor_id id, int no_restart) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    enc_id(&b, "id", id.b);
    tr__enc_str(&b, "no_restart");
    tr__enc_int(&b, no_restart ? 1 : 0);
    int rc = tr__nodeconn_call(node, TR__MSG_ACTOR_KILL, &b, NODE_RPC_MS, NULL);
    tr__buf_free(&b);
    return rc;
}

int tr__actor_ending(tr__nodeconn *node, tr_actor_id id, const char *why) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 3);
    enc_id(&b, "id", id.b);
    tr__enc_str(&b, "no_restart");
    tr__enc_int(&b, 1);
    tr__enc_str(&b, "ending");
    tr__enc_str(&b, why);
    int rc = tr__nodeconn_call(node, TR__MSG_ACTOR_KILL, &b, NODE_RPC_MS, NULL);
    tr__buf_free(&b);
    return rc;
}

/* Copies an optional string field of the reply into a fixed buffer ("" if nil). */
static int copy_str(const tr__obj *map, const char *key, char *dst, size_t cap) {
    const tr__obj *v = tr__obj_get(map, key);
    dst[0] = '\0';
    if (!v || tr__obj_type(v) == TR__T_NIL) return 0;
    const char *p;
    size_t n;
    int rc = tr__get_str(map, key, &p, &n);
    if (!rc) snprintf(dst, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return rc;
}

/* The same, of a name kept in its namespace (namespace, 0x1f, name): the name alone. */
static int copy_name(const tr__obj *map, const char *key, char *dst, size_t cap) {
    const tr__obj *v = tr__obj_get(map, key);
    dst[0] = '\0';
    if (!v || tr__obj_type(v) == TR__T_NIL) return 0;
    const char *p, *sep;
    size_t n;
    int rc = tr__get_str(map, key, &p, &n);
    if (rc) return rc;
    while ((sep = memchr(p, 0x1f, n))) {
        n -= (size_t)(sep + 1 - p);
        p = sep + 1;
    }
    snprintf(dst, cap, "%.*s", (int)(n < cap ? n : cap - 1), p);
    return 0;
}

/* The node's ACTOR_INFO reply on the actor (what: the caller, as errors name it). */
static int ask_info(tr__nodeconn *node, tr_actor_id id, const char *what, tr__reply *r) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    enc_id(&b, "id", id.b);
    int rc = tr__nodeconn_call(node, TR__MSG_ACTOR_INFO, &b, NODE_RPC_MS, r);
    tr__buf_free(&b);
    return rc == TR_ENOTFOUND ? tr__err(rc, "%s: no such actor", what) : rc;
}

int tr__actor_info(tr__nodeconn *node, tr_actor_id id, tr_actor_details *out) {
    tr_actor_details d = TR_ACTOR_DETAILS_INIT;
    tr__reply r;
    int rc = ask_info(node, id, "tr_actor_info", &r);
    if (rc) return rc;
    int64_t state, pid, restarts, max_restarts;
    if (!(rc = tr__get_int(r.root, "state", &state)) && !(rc = tr__get_int(r.root, "pid", &pid)) &&
        !(rc = tr__get_int(r.root, "restarts", &restarts)) &&
        !(rc = tr__get_int(r.root, "max_restarts", &max_restarts)) &&
        !(rc = copy_str(r.root, "class", d.class_name, sizeof d.class_name)) &&
        !(rc = copy_name(r.root, "name", d.name, sizeof d.name)) &&
        !(rc = copy_str(r.root, "node", d.node, sizeof d.node)) &&
        !(rc = copy_str(r.root, "reason", d.reason, sizeof d.reason)) &&
        !(rc = copy_str(r.root, "cpus", d.cpus, sizeof d.cpus)) &&
        !(rc = copy_str(r.root, "gpus", d.gpus, sizeof d.gpus))) {
        d.state = (int32_t)state;
        d.pid = (int32_t)pid;
        d.restarts = (int32_t)restarts;
        d.max_restarts = (int32_t)max_restarts;
    }
    tr__reply_free(&r);
    if (rc) return rc;
    return tr__struct_out(out, &d, sizeof d, TR__SIZE_UPTO(tr_actor_details, cpus),
                          "tr_actor_info");
}

int tr__actor_binding_data(tr__nodeconn *node, tr_actor_id id, char **out) {
    *out = NULL;
    tr__reply r;
    int rc = ask_info(node, id, "tr_actor_binding_data", &r);
    if (rc) return rc;
    const char *p;
    size_t n;
    if (tr__obj_type(tr__obj_get(r.root, "bdata")) == TR__T_STR &&
        tr__get_str(r.root, "bdata", &p, &n) == 0 && n <= TR_ACTOR_BINDING_DATA_MAX) {
        *out = malloc(n + 1);
        if (!*out) {
            rc = tr__err(TR_ENOMEM, "tr_actor_binding_data");
        } else {
            memcpy(*out, p, n);
            (*out)[n] = '\0';
        }
    }
    tr__reply_free(&r);
    return rc;
}

int tr__node_cluster_address(tr__nodeconn *node, char *out, size_t cap, int *tls) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "num");
    tr__enc_int(&b, 0);
    tr__reply r;
    int rc = tr__nodeconn_call(node, TR__MSG_NODE_WHERE, &b, 5000, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    const char *a;
    size_t an;
    rc = tr__get_str(r.root, "address", &a, &an);
    if (!rc && (an == 0 || an >= cap || !memchr(a, ':', an)))
        rc = tr__err(TR_EPROTO, "the node's cluster address is not IP:port");
    if (!rc) {
        memcpy(out, a, an);
        out[an] = '\0';
    }
    const char *ca;
    size_t can;
    if (!rc && tls) *tls = tr__get_str(r.root, "tls_ca", &ca, &can) == 0 && can > 0;
    tr__reply_free(&r);
    return rc;
}

/* ------------------------------------------------------------------ placement groups */

/* A resource name that travels in "name=qty,...;..." text unharmed. */
static int bad_res_name(const char *name) {
    return !name || !*name || strlen(name) > TR__PG_MAX_RES_NAME || strpbrk(name, ",;= ");
}

int tr__pg_create(tr__nodeconn *node, const char *ns, const tr_bundle *bundles, size_t n,
                  int strategy, const char *name, tr_pg_id *out) {
    if (!out) return tr__err(TR_EINVAL, "tr_placement_group_create: out is NULL");
    memset(out, 0, sizeof *out);
    if (!bundles || n == 0 || n > TR__PG_MAX_BUNDLES)
        return tr__err(TR_EINVAL, "tr_placement_group_create: 1..%d bundles, not %zu",
                       TR__PG_MAX_BUNDLES, bundles ? n : 0);
    if (strategy < TR_PG_PACK || strategy > TR_PG_STRICT_SPREAD)
        return tr__err(TR_EINVAL,
                       "tr_placement_group_create: unknown strategy %d (TR_PG_PACK, "
                       "TR_PG_SPREAD, TR_PG_STRICT_PACK, TR_PG_STRICT_SPREAD)",
                       strategy);
    if (name && strlen(name) > 255)
        return tr__err(TR_EINVAL, "tr_placement_group_create: a name of up to 255 bytes");
    char qualified[600];
    if (name && *name) {
        int q = tr__actor_qualify(ns, name, qualified, sizeof qualified);
        if (q) return tr__err_wrap(q, "tr_placement_group_create");
        name = qualified;
    }
    /* each element's struct_size is its stride (a caller's older, smaller tr_bundle) */
    uint32_t word;
    memcpy(&word, bundles, sizeof word);
    size_t stride = tr__struct_size(word, TR__SIZE_UPTO(tr_bundle, n_resources), sizeof(tr_bundle),
                                    "tr_placement_group_create: bundle 0");
    if (!stride) return TR_EINVAL;
    tr__buf text = TR__BUF_INIT;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        tr_bundle bd = TR_BUNDLE_INIT;
        const void *src = (const char *)bundles + i * stride;
        if ((rc = tr__struct_in(&bd, sizeof bd, src, TR__SIZE_UPTO(tr_bundle, n_resources),
                                "tr_placement_group_create: bundle")))
            break;
        int nonzero = bd.num_cpus > 0 || bd.num_gpus > 0;
        if (!(bd.num_cpus >= 0 && bd.num_cpus <= 1e9) ||
            !(bd.num_gpus >= 0 && bd.num_gpus <= 1e6) || (bd.n_resources && !bd.resources) ||
            bd.n_resources > 32) {
            rc = tr__err(TR_EINVAL,
                         "tr_placement_group_create: bundle %zu: num_cpus and num_gpus must be "
                         "finite and >= 0, resources given when n_resources (up to 32) is not 0",
                         i);
            break;
        }
        if (bd.num_gpus > 1 && bd.num_gpus != floor(bd.num_gpus)) {
            rc = tr__err(TR_EINVAL,
                         "tr_placement_group_create: bundle %zu: num_gpus %g: a share of one GPU "
                         "(< 1) or whole GPUs",
                         i, bd.num_gpus);
            break;
        }
        char item[128];
        int first = 1;
        if (i) tr__buf_append(&text, ";", 1);
        if (bd.num_cpus > 0) {
            int k = snprintf(item, sizeof item, "CPU=%.17g", bd.num_cpus);
            tr__buf_append(&text, item, (size_t)k);
            first = 0;
        }
        if (bd.num_gpus > 0) {
            int k = snprintf(item, sizeof item, "%sGPU=%.17g", first ? "" : ",", bd.num_gpus);
            tr__buf_append(&text, item, (size_t)k);
            first = 0;
        }
        for (size_t j = 0; j < bd.n_resources; j++) {
            const tr_resource *r = &bd.resources[j];
            if (bad_res_name(r->name) || !(r->quantity >= 0 && r->quantity <= 1e12)) {
                rc = tr__err(TR_EINVAL,
                             "tr_placement_group_create: bundle %zu: resource %zu needs a name of "
                             "1..%d bytes (no ',', ';', '=' or space) and a finite quantity >= 0",
                             i, j, TR__PG_MAX_RES_NAME);
                break;
            }
            nonzero |= r->quantity > 0;
            int k =
                snprintf(item, sizeof item, "%s%s=%.17g", first ? "" : ",", r->name, r->quantity);
            tr__buf_append(&text, item, (size_t)k);
            first = 0;
        }
        if (!rc && !nonzero)
            rc = tr__err(TR_EINVAL,
                         "tr_placement_group_create: bundle %zu asks for nothing (every bundle "
                         "needs a quantity > 0, as Ray's)",
                         i);
    }
    tr__buf_append(&text, "", 1); /* NUL */
    if (rc) {
        tr__buf_free(&text);
        return rc;
    }
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "bundles");
    tr__enc_str(&b, (const char *)text.data);
    tr__enc_str(&b, "strategy");
    tr__enc_int(&b, strategy);
    if (name && *name) {
        tr__enc_str(&b, "name");
        tr__enc_str(&b, name);
    }
    tr__enc_map_close(&b, m);
    tr__buf_free(&text);
    tr__reply r;
    rc = tr__nodeconn_call(node, TR__MSG_PG_CREATE, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    rc = tr__get_id(r.root, "id", out->b, 16);
    tr__reply_free(&r);
    return rc;
}

int tr__pg_info(tr__nodeconn *node, tr_pg_id pg, tr_pg_info *out) {
    tr_pg_info d = TR_PG_INFO_INIT;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    enc_id(&b, "id", pg.b);
    tr__reply r;
    int rc = tr__nodeconn_call(node, TR__MSG_PG_INFO, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    int64_t state, strategy, n;
    if (!(rc = tr__get_int(r.root, "state", &state)) &&
        !(rc = tr__get_int(r.root, "strategy", &strategy)) &&
        !(rc = tr__get_int(r.root, "n", &n)) &&
        !(rc = copy_name(r.root, "name", d.name, sizeof d.name)) &&
        !(rc = copy_str(r.root, "reason", d.reason, sizeof d.reason)) &&
        !(rc = copy_str(r.root, "bundles", d.bundles, sizeof d.bundles)) &&
        !(rc = copy_str(r.root, "node", d.node, sizeof d.node))) {
        d.state = (int32_t)state;
        d.strategy = (int32_t)strategy;
        d.n_bundles = (int32_t)n;
    }
    tr__reply_free(&r);
    if (rc) return rc;
    return tr__struct_out(out, &d, sizeof d, TR__SIZE_UPTO(tr_pg_info, node),
                          "tr_placement_group_info");
}

int tr__pg_wait(tr__nodeconn *node, tr_pg_id pg, int timeout_ms) {
    int64_t deadline = tr__deadline(timeout_ms);
    long nap_us = 1000; /* a control path: poll, backing off to 20 ms */
    for (;;) {
        tr_pg_info i = TR_PG_INFO_INIT;
        int rc = tr__pg_info(node, pg, &i);
        if (rc) return rc;
        if (i.state == TR_PG_CREATED) return 0;
        if (i.state == TR_PG_REMOVED)
            return tr__err(TR_ESTATE, "tr_placement_group_wait: the group was removed (%s)",
                           i.reason);
        int left = tr__ms_left(deadline);
        if (left == 0)
            return tr__err(TR_ETIMEDOUT, "tr_placement_group_wait: still pending: %s", i.reason);
        long us = nap_us;
        if (left > 0 && (long)left * 1000 < us) us = (long)left * 1000;
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        if (nap_us < 20000) nap_us *= 2;
    }
}

int tr__pg_remove(tr__nodeconn *node, tr_pg_id pg) {
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    enc_id(&b, "id", pg.b);
    int rc = tr__nodeconn_call(node, TR__MSG_PG_REMOVE, &b, NODE_RPC_MS, NULL);
    tr__buf_free(&b);
    return rc;
}

int tr__pg_by_name(tr__nodeconn *node, const char *ns, const char *name, tr_pg_id *out) {
    if (!name || !*name || !out)
        return tr__err(TR_EINVAL, "tr_placement_group_get: a name and out");
    char qualified[600];
    int q = tr__actor_qualify(ns, name, qualified, sizeof qualified);
    if (q) return tr__err_wrap(q, "tr_placement_group_get");
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, qualified);
    tr__reply r;
    int rc = tr__nodeconn_call(node, TR__MSG_PG_BY_NAME, &b, NODE_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc)
        return rc == TR_ENOTFOUND ? tr__err(rc,
                                            "tr_placement_group_get: no live placement group "
                                            "named '%s'",
                                            name)
                                  : rc;
    rc = tr__get_id(r.root, "id", out->b, 16);
    tr__reply_free(&r);
    return rc;
}
