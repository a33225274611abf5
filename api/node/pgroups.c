/* api/node/pgroups.c - placement groups across a cluster's nodes: the head keeps every
 * group (its bundles, strategy, creator, state and the node each bundle is on), plans where
 * the bundles go by each live node's available resources, and has each chosen node
 * reserve its subset ("pg_reserve": the node's own table, actor/pgroup.c, holds that part
 * under the group's id and the bundles' global indices); any refusal undoes the parts
 * reserved ("pg_release") and the group stays PENDING with the reason, tried again by a
 * scheduler thread (at most one) every second and after every change. The head routes
 * actors created into a group to the node holding their bundle (tr__cl_pg_route). A
 * group goes with its creator (owner_gone, or its node lost). A group that loses a node
 * is PENDING again and only the bundles it had there are placed again (as Ray's
 * RESCHEDULING): its parts on the other nodes stay, with their actors, and the lost
 * bundles go to nodes that hold none of its others (a node reserves a group's part once);
 * a PACK or SPREAD group whose lost bundles can never fit there is placed again whole,
 * and a STRICT_PACK group was on the lost node whole. */
#include "api/node/cluster_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "actor/pgroup.h"
#include "core/clock.h"
#include "core/codec.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/status.h"
#include "troupe/troupe.h"

#define PG_RETRY_MS 1000 /* a pending group is tried again this often */
#define PG_IDLE_MS 5000  /* ... or this often if none can ever fit (until a node joins) */
#define PG_ATTEMPTS 2    /* assignments tried per pass (each from fresh availability) */
#define PG_LOCK_MS 3000  /* a remove waits this long for a pass in progress */

struct hpg {
    uint8_t id[16];
    uint32_t tag;
    char hex[33];
    char owner[64]; /* the creator, "<node id>/<connection id>" */
    char *name, *bundles;
    int strategy, state, n;
    tr__res *res; /* each bundle's, as asked */
    int doomed;   /* its creator is gone: released, then forgotten */
    int release;  /* parts to undo (removed, doomed, or a node of it lost) */
    int pass;     /* the scheduler pass that last looked at it */
    int partial;  /* PENDING with some bundles still placed: only the others are placed */
    char reason[512];
    char (*node)[17];     /* each bundle's node id while placed ("": not) */
    char (*address)[128]; /* and its address */
    struct hpg *next;
};

/* A part on a node that was lost when it was to be undone: undone if that node answers
 * again (its link was cut, not its process killed). */
struct pgstale {
    uint8_t id[16];
    char address[128];
    struct pgstale *next;
};

static const char *const strategy_names[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
static const char *const state_names[] = {"PENDING", "CREATED", "REMOVED"};

static void set_reason(hpg *g, const char *fmt, ...) TR__PRINTF(2, 3);
static void set_reason(hpg *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->reason, sizeof g->reason, fmt, ap);
    va_end(ap);
}

static void hpg_free(hpg *g) {
    free(g->name);
    free(g->bundles);
    free(g->res);
    free(g->node);
    free(g->address);
    free(g);
}

void tr__cl_pg_free_all(tr__cluster *cl) {
    for (hpg *g = cl->pgs, *n; g; g = n) {
        n = g->next;
        hpg_free(g);
    }
    cl->pgs = NULL;
    for (pgstale *p = cl->pg_stale, *n; p; p = n) {
        n = p->next;
        free(p);
    }
    cl->pg_stale = NULL;
}

static hpg *by_id(tr__cluster *cl, const uint8_t id[16]) {
    for (hpg *g = cl->pgs; g; g = g->next)
        if (memcmp(g->id, id, 16) == 0 && !g->doomed) return g;
    return NULL;
}

static int placed_somewhere(const hpg *g) {
    for (int i = 0; i < g->n; i++)
        if (g->node[i][0]) return 1;
    return 0;
}

/* ------------------------------------------------------------------ ops (the head's) */

/* "pg_create" {owner, bundles, strategy, name?} -> {id}: the node checked the input; the
 * group is PENDING until the scheduler places it (at once, on its thread). */
int tr__cl_op_pg_create(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    hpg *g = calloc(1, sizeof *g);
    int64_t strategy = -1;
    int rc;
    if (!g) return tr__err(TR_ENOMEM, "cluster");
    if ((rc = tr__cl_get_field(req, "owner", g->owner, sizeof g->owner)) ||
        (rc = tr__get_strdup(req, "bundles", &g->bundles)) ||
        (rc = tr__get_int(req, "strategy", &strategy)))
        goto fail;
    if (strategy < TR_PG_PACK || strategy > TR_PG_STRICT_SPREAD) {
        rc = tr__err(TR_EINVAL, "tr_placement_group_create: unknown strategy %lld",
                     (long long)strategy);
        goto fail;
    }
    g->strategy = (int)strategy;
    if (tr__obj_type(tr__obj_get(req, "name")) == TR__T_STR &&
        (rc = tr__get_strdup(req, "name", &g->name)))
        goto fail;
    if (g->name && !*g->name) {
        free(g->name);
        g->name = NULL;
    }
    g->n = 1;
    for (const char *s = g->bundles; *s; s++)
        g->n += *s == ';';
    if (!*g->bundles || g->n > TR__PG_MAX_BUNDLES) {
        rc = tr__err(TR_EINVAL, "tr_placement_group_create: 1..%d bundles", TR__PG_MAX_BUNDLES);
        goto fail;
    }
    g->res = calloc((size_t)g->n, sizeof *g->res);
    g->node = calloc((size_t)g->n, sizeof *g->node);
    g->address = calloc((size_t)g->n, sizeof *g->address);
    if (!g->res || !g->node || !g->address) {
        rc = tr__err(TR_ENOMEM, "cluster");
        goto fail;
    }
    const char *s = g->bundles;
    for (int i = 0; i < g->n; i++) {
        const char *end = strchr(s, ';');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[2048];
        if (len >= sizeof item) {
            rc = tr__err(TR_EINVAL, "tr_placement_group_create: bundle %d: too long", i);
            goto fail;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        if ((rc = tr__res_parse(&g->res[i], item))) goto fail;
        s = end ? end + 1 : s + len;
    }
    pthread_mutex_lock(&cl->mu);
    if (g->name)
        for (hpg *o = cl->pgs; o; o = o->next)
            if (o->name && !o->doomed && o->state != TR_PG_REMOVED &&
                strcmp(o->name, g->name) == 0) {
                pthread_mutex_unlock(&cl->mu);
                rc = tr__err(TR_EEXIST,
                             "tr_placement_group_create: a placement group named '%s' already "
                             "exists in the cluster",
                             g->name);
                goto fail;
            }
    for (;;) { /* an id whose tag no group of the cluster has (the nodes' names carry it) */
        if ((rc = tr__random_bytes(g->id, 16))) {
            pthread_mutex_unlock(&cl->mu);
            goto fail;
        }
        g->tag = (uint32_t)g->id[0] << 24 | (uint32_t)g->id[1] << 16 | (uint32_t)g->id[2] << 8 |
                 g->id[3];
        int taken = g->tag == 0;
        for (hpg *o = cl->pgs; o && !taken; o = o->next)
            taken = o->tag == g->tag;
        if (!taken) break;
    }
    tr__hex(g->id, 16, g->hex);
    g->state = TR_PG_PENDING;
    set_reason(g, "not placed yet");
    hpg **tail = &cl->pgs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = g;
    cl->pg_kick = 1;
    pthread_mutex_unlock(&cl->mu);
    TR_LOG_DEBUG("CLUSTER-PG", "group %s of %d bundles (%s) by %s", g->hex, g->n,
                 strategy_names[g->strategy], g->owner);
    tr__cl_pg_kick(cl);
    tr__enc_map(reply, 1);
    tr__enc_str(reply, "id");
    tr__enc_bin(reply, g->id, 16);
    return 0;
fail:
    hpg_free(g);
    return rc;
}

/* The addresses of its bundles: one if they share a node, else each bundle's, ';'
 * between ("" while pending). */
static void format_nodes(const hpg *g, char *out, size_t cap) {
    size_t off = 0;
    int one = 1;
    out[0] = '\0';
    for (int i = 1; i < g->n; i++)
        one = one && strcmp(g->address[i], g->address[0]) == 0;
    if (g->state != TR_PG_CREATED) return;
    for (int i = 0; i < (one ? 1 : g->n) && off + 1 < cap; i++) {
        int k = snprintf(out + off, cap - off, "%s%s", i ? ";" : "", g->address[i]);
        if (k < 0) break;
        off += (size_t)k;
    }
    if (off >= cap) out[cap - 1] = '\0';
}

/* "pg_info" {id} -> {state, strategy, n, name, reason, bundles, node}. Under mu. */
int tr__cl_op_pg_info(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    uint8_t id[16];
    int rc = tr__get_id(req, "id", id, 16);
    if (rc) return rc;
    hpg *g = by_id(cl, id);
    if (!g)
        return tr__err(TR_ENOTFOUND, "no placement group of that id in the cluster (never "
                                     "made, or its creator exited)");
    char nodes[4096];
    format_nodes(g, nodes, sizeof nodes);
    tr__enc_map(reply, 7);
    tr__enc_str(reply, "state");
    tr__enc_int(reply, g->state);
    tr__enc_str(reply, "strategy");
    tr__enc_int(reply, g->strategy);
    tr__enc_str(reply, "n");
    tr__enc_int(reply, g->n);
    tr__enc_str(reply, "name");
    tr__enc_str(reply, g->name ? g->name : "");
    tr__enc_str(reply, "reason");
    tr__enc_str(reply, g->reason);
    tr__enc_str(reply, "bundles");
    tr__enc_str(reply, g->bundles);
    tr__enc_str(reply, "node");
    tr__enc_str(reply, nodes);
    return 0;
}

/* "pg_by_name" {name} -> {id}. Under mu. */
int tr__cl_op_pg_by_name(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    const char *name;
    size_t n;
    int rc = tr__get_str(req, "name", &name, &n);
    if (rc) return rc;
    for (hpg *g = cl->pgs; g; g = g->next)
        if (g->name && !g->doomed && g->state != TR_PG_REMOVED && strlen(g->name) == n &&
            memcmp(g->name, name, n) == 0) {
            tr__enc_map(reply, 1);
            tr__enc_str(reply, "id");
            tr__enc_bin(reply, g->id, 16);
            return 0;
        }
    return tr__err(TR_ENOTFOUND, "no live placement group has that name");
}

/* ------------------------------------------------------------------ the nodes' parts */

/* One request {op, id, ...} to the node at address (the head's own included, over its
 * port as any node's). */
static int node_call(tr__cluster *cl, const char *address, const tr__buf *q, tr__buf *a) {
    return tr__cl_call_peer(cl, address, q, PLACE_MS, 0, a);
}

/* Undoes g's part on the node at address (g's fields read by the caller under pg_mu). A
 * node that cannot be reached keeps nothing for long: it is lost, or its part goes when
 * its head says so again (every pass retries a release that failed). */
static int release_on(tr__cluster *cl, const uint8_t id[16], const char *address) {
    tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
    tr__enc_map(&q, 2);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, "pg_release");
    tr__enc_str(&q, "id");
    tr__enc_bin(&q, id, 16);
    int rc = node_call(cl, address, &q, &a);
    tr__buf_free(&q);
    tr__buf_free(&a);
    if (rc && rc != TR_ENOTFOUND)
        TR_LOG_WARN("CLUSTER-PG", "undoing a placement group's part on %s: %s", address,
                    tr__last_error());
    return rc == TR_ENOTFOUND ? 0 : rc;
}

/* "pg_reserve" (any node, asked by the head): this node's part of a group. */
int tr__cl_op_pg_reserve(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    uint8_t id[16];
    int64_t strategy;
    const char *bundles;
    size_t bn;
    int rc;
    if ((rc = tr__get_id(req, "id", id, 16)) || (rc = tr__get_str(req, "bundles", &bundles, &bn)) ||
        (rc = tr__get_int(req, "strategy", &strategy)))
        return rc;
    if (cl->client) return tr__err(TR_ESTATE, "this node is a client: it runs no actors");
    const tr__obj *here = tr__obj_get(req, "here");
    size_t k = tr__obj_len(here);
    if (k == 0 || k > TR__PG_MAX_BUNDLES) return tr__err(TR_EPROTO, "pg_reserve: bad 'here'");
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 4);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    tr__enc_str(&b, "bundles");
    tr__enc_strn(&b, bundles, bn);
    tr__enc_str(&b, "strategy");
    tr__enc_int(&b, strategy);
    tr__enc_str(&b, "here");
    tr__enc_array(&b, (uint32_t)k);
    for (size_t i = 0; i < k; i++) {
        int64_t v;
        if (tr__obj_int(tr__obj_at(here, i), "here", &v)) {
            tr__buf_free(&b);
            return tr__err(TR_EPROTO, "pg_reserve: bad 'here'");
        }
        tr__enc_int(&b, v);
    }
    tr__reply r;
    rc = b.oom ? tr__err(TR_ENOMEM, "cluster") : tr__cl_self_call(cl, TR__MSG_PG_RESERVE, &b, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    tr__reply_free(&r);
    tr__enc_map(reply, 0);
    return 0;
}

/* "pg_release" (any node): this node's part goes (its actors are killed). */
int tr__cl_op_pg_release(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    uint8_t id[16];
    int rc = tr__get_id(req, "id", id, 16);
    if (rc) return rc;
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, id, 16);
    tr__enc_str(&b, "forget");
    tr__enc_int(&b, 1);
    tr__reply r;
    rc = b.oom ? tr__err(TR_ENOMEM, "cluster") : tr__cl_self_call(cl, TR__MSG_PG_REMOVE, &b, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    tr__reply_free(&r);
    tr__enc_map(reply, 0);
    return 0;
}

/* ------------------------------------------------------------------ planning */

typedef struct cand {
    char id[17], address[128];
    tr__res avail, total;
} cand;

/* Reads "<key>":{"A":1,"B":2} of a node's status JSON into r. 0, or -1. */
static int json_res(const char *json, const char *key, tr__res *r) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":{", key);
    const char *p = strstr(json, pat);
    if (!p) return -1;
    p += strlen(pat);
    memset(r, 0, sizeof *r);
    while (*p == '"') {
        const char *q = strchr(p + 1, '"');
        if (!q || q[1] != ':' || (size_t)(q - p - 1) >= TR__RES_NAME) return -1;
        char name[TR__RES_NAME];
        memcpy(name, p + 1, (size_t)(q - p - 1));
        name[q - p - 1] = '\0';
        char *end;
        double v = strtod(q + 2, &end);
        if (end == q + 2) return -1;
        tr__res_add(r, name, v);
        p = end;
        if (*p == ',') p++;
    }
    return *p == '}' ? 0 : -1;
}

/* What the node at address has now and in all (its status, asked over its port). */
static int fetch(tr__cluster *cl, cand *c) {
    tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
    tr__enc_map(&q, 1);
    tr__enc_str(&q, "op");
    tr__enc_str(&q, "status");
    int rc = tr__cl_call_peer(cl, c->address, &q, PEER_MS, 0, &a);
    tr__buf_free(&q);
    tr__dec d;
    if (!rc && !(rc = tr__dec_init(&d, a.data, a.len))) {
        char *json = NULL;
        rc = tr__get_strdup(d.root, "json", &json);
        if (!rc && (json_res(json, "resources_available", &c->avail) ||
                    json_res(json, "resources_total", &c->total)))
            rc = tr__err(TR_EPROTO, "cluster: a node's status without its resources");
        free(json);
        tr__dec_free(&d);
    }
    tr__buf_free(&a);
    return rc;
}

/* The CPUs free on a node (a tie-break: the emptiest node first). */
static double room(const tr__res *r) {
    return tr__res_get(r, "CPU");
}

/* Whether bundle b fits what node j has left in cap[j] (taken if `take`). */
static int fit(tr__res *cap, int j, const tr__res *b, int take) {
    if (!tr__res_fits(b, &cap[j])) return 0;
    if (take) tr__res_take(&cap[j], b);
    return 1;
}

/* STRICT_SPREAD's matching: bundle i to a node of its own (augmenting paths). */
static int match(const hpg *g, const tr__res *cap, int k, int i, int *seen, int *owner_of) {
    for (int j = 0; j < k; j++) {
        if (seen[j] || !tr__res_fits(&g->res[i], &cap[j])) continue;
        seen[j] = 1;
        if (owner_of[j] < 0 || match(g, cap, k, owner_of[j], seen, owner_of)) {
            owner_of[j] = i;
            return 1;
        }
    }
    return 0;
}

/* Assigns each bundle of g a node of k (as[i]), by strategy, within cap (changed). 1 if
 * every bundle has one. */
static int plan(const hpg *g, tr__res *cap, int k, int *as) {
    int order[TR__MEMBERS_MAX], used[TR__MEMBERS_MAX];
    for (int j = 0; j < k; j++) {
        order[j] = j;
        used[j] = 0;
    }
    for (int a = 1; a < k; a++) /* the emptiest first */
        for (int b = a; b > 0 && room(&cap[order[b]]) > room(&cap[order[b - 1]]); b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    if (g->strategy == TR_PG_STRICT_PACK || g->strategy == TR_PG_PACK) {
        /* one node for all, if one has room */
        tr__res *sum = calloc(1, sizeof *sum);
        if (!sum) return 0;
        for (int i = 0; i < g->n; i++)
            for (int r = 0; r < g->res[i].n; r++)
                tr__res_add(sum, g->res[i].name[r], g->res[i].qty[r]);
        int one = -1;
        for (int o = 0; o < k && one < 0; o++)
            if (tr__res_fits(sum, &cap[order[o]])) one = order[o];
        free(sum);
        if (one >= 0) {
            for (int i = 0; i < g->n; i++) {
                as[i] = one;
                tr__res_take(&cap[one], &g->res[i]);
            }
            return 1;
        }
        if (g->strategy == TR_PG_STRICT_PACK) return 0;
        for (int i = 0; i < g->n; i++) { /* PACK: the nodes used so far first */
            as[i] = -1;
            for (int o = 0; o < k && as[i] < 0; o++)
                if (used[order[o]] && fit(cap, order[o], &g->res[i], 1)) as[i] = order[o];
            for (int o = 0; o < k && as[i] < 0; o++)
                if (fit(cap, order[o], &g->res[i], 1)) as[i] = order[o];
            if (as[i] < 0) return 0;
            used[as[i]] = 1;
        }
        return 1;
    }
    if (g->strategy == TR_PG_SPREAD) { /* a node not used yet, else the least used */
        for (int i = 0; i < g->n; i++) {
            int best = -1;
            for (int o = 0; o < k; o++) {
                int j = order[o];
                if (tr__res_fits(&g->res[i], &cap[j]) && (best < 0 || used[j] < used[best]))
                    best = j;
            }
            if (best < 0) return 0;
            tr__res_take(&cap[best], &g->res[i]);
            used[best]++;
            as[i] = best;
        }
        return 1;
    }
    /* STRICT_SPREAD */
    if (g->n > k) return 0;
    int owner_of[TR__MEMBERS_MAX], seen[TR__MEMBERS_MAX];
    for (int j = 0; j < k; j++)
        owner_of[j] = -1;
    for (int i = 0; i < g->n; i++) {
        memset(seen, 0, sizeof seen);
        if (!match(g, cap, k, i, seen, owner_of)) return 0;
    }
    for (int j = 0; j < k; j++)
        if (owner_of[j] >= 0) as[owner_of[j]] = j;
    return 1;
}

/* The live nodes that run actors, with what they have (those that answer). */
static int candidates(tr__cluster *cl, cand **out) {
    pthread_mutex_lock(&cl->mu);
    int n = 0;
    cand *c = calloc((size_t)cl->members.n + 1, sizeof *c);
    for (int i = 0; c && i < cl->members.n; i++) {
        tr__member *m = &cl->members.nodes[i];
        if (!m->alive || m->client || !m->address[0]) continue;
        snprintf(c[n].id, sizeof c[n].id, "%s", m->id);
        snprintf(c[n].address, sizeof c[n].address, "%s", m->address);
        n++;
    }
    pthread_mutex_unlock(&cl->mu);
    if (!c) return -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (fetch(cl, &c[i])) {
            TR_LOG_INFO("CLUSTER-PG", "node %s does not say what it has: %s", c[i].address,
                        tr__last_error());
            continue;
        }
        if (k != i) c[k] = c[i];
        k++;
    }
    *out = c;
    return k;
}

/* Forgets a stale part of group id at address (it is gone there). Under mu. */
static void unstale(tr__cluster *cl, const uint8_t id[16], const char *address) {
    for (pgstale **pp = &cl->pg_stale; *pp;) {
        pgstale *p = *pp;
        if (memcmp(p->id, id, 16) == 0 && strcmp(p->address, address) == 0) {
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

/* Whether the node of id is a live member. Under mu. */
static int member_alive(tr__cluster *cl, const char *id) {
    for (int j = 0; j < cl->members.n; j++)
        if (strcmp(cl->members.nodes[j].id, id) == 0) return cl->members.nodes[j].alive;
    return 0;
}

/* A partial group's plan (had: each bundle's node, "" for those to place): its placed
 * bundles stay (as[i]: their node's index in c, -1 if it does not answer now); the others
 * go by its strategy (plan, over a group of only them) to the nodes of c that hold none of
 * its bundles. 1 if each has a node. */
static int plan_rest(const hpg *g, char (*had)[17], const cand *c, tr__res *cap, int k, int *as) {
    int held[TR__MEMBERS_MAX] = {0}, idx[TR__MEMBERS_MAX], miss[TR__PG_MAX_BUNDLES];
    int m = 0, kk = 0, sas[TR__PG_MAX_BUNDLES];
    for (int i = 0; i < g->n; i++) {
        as[i] = -1;
        if (!had[i][0]) {
            miss[m++] = i;
            continue;
        }
        for (int j = 0; j < k; j++)
            if (strcmp(c[j].id, had[i]) == 0) {
                held[j] = 1;
                as[i] = j;
            }
    }
    tr__res *sub_cap = calloc((size_t)k + 1, sizeof *sub_cap);
    tr__res *sub_res = calloc((size_t)m + 1, sizeof *sub_res);
    int ok = 0;
    if (sub_cap && sub_res) {
        for (int j = 0; j < k; j++)
            if (!held[j]) {
                idx[kk] = j;
                sub_cap[kk++] = cap[j];
            }
        for (int t = 0; t < m; t++)
            sub_res[t] = g->res[miss[t]];
        hpg sub = *g; /* (plan reads n, res and strategy) */
        sub.n = m;
        sub.res = sub_res;
        ok = m == 0 || (kk > 0 && plan(&sub, sub_cap, kk, sas));
        if (ok) {
            for (int t = 0; t < m; t++)
                as[miss[t]] = idx[sas[t]];
            for (int q = 0; q < kk; q++)
                cap[idx[q]] = sub_cap[q];
        }
    }
    free(sub_cap);
    free(sub_res);
    return ok;
}

/* One try at placing g (or, partial, the bundles it lost): plan, reserve each node's
 * part, all or none. 1 placed, 0 not (g->reason says why, under mu). Caller holds pg_mu
 * (g stays). */
static int place(tr__cluster *cl, hpg *g) {
    cand *c = NULL;
    int k = candidates(cl, &c);
    int *as = calloc((size_t)g->n, sizeof *as);
    char(*had)[17] = calloc((size_t)g->n, sizeof *had);
    tr__res *cap = k > 0 ? calloc((size_t)k, sizeof *cap) : NULL;
    char why[512] = "";
    int placed = 0, partial = 0;
    if (had) { /* (a node lost meanwhile changes them: checked again before they count) */
        pthread_mutex_lock(&cl->mu);
        partial = g->partial;
        for (int i = 0; partial && i < g->n; i++)
            memcpy(had[i], g->node[i], sizeof had[i]);
        pthread_mutex_unlock(&cl->mu);
    }
    if (k <= 0 || !as || !had || !cap) {
        snprintf(why, sizeof why, "no node of the cluster that runs actors answers");
        goto done;
    }
    char what[300];
    int n_lost = 0;
    for (int i = 0; partial && i < g->n; i++)
        n_lost += !had[i][0];
    int k_free = k; /* (a partial group's nodes to use: those that hold none of it) */
    for (int j = 0; partial && j < k; j++) {
        int holds = 0;
        for (int i = 0; i < g->n && !holds; i++)
            holds = strcmp(had[i], c[j].id) == 0;
        k_free -= holds;
    }
    if (partial)
        snprintf(what, sizeof what, "the %d bundle%s it lost (of %d: {%s})", n_lost,
                 n_lost == 1 ? "" : "s", g->n, g->bundles);
    else
        snprintf(what, sizeof what, "its %d bundles {%s}", g->n, g->bundles);
    for (int j = 0; j < k; j++)
        cap[j] = c[j].total;
    if (!(partial ? plan_rest(g, had, c, cap, k, as) : plan(g, cap, k, as))) {
        if (partial && g->strategy != TR_PG_STRICT_SPREAD) {
            /* its lost bundles can never fit beside its others: placed again, whole */
            pthread_mutex_lock(&cl->mu);
            if (g->partial && g->state == TR_PG_PENDING && !g->doomed) {
                g->partial = 0;
                g->release = 1;
                set_reason(g, "its lost bundles do not fit on the nodes that hold none of its "
                              "others: the group is placed again, whole, when it fits");
                cl->pg_kick = 1;
            }
            pthread_mutex_unlock(&cl->mu);
            goto done;
        }
        snprintf(why, sizeof why,
                 "infeasible: no %s assignment of %s to the %d live node%s%s fits even with "
                 "every resource free; it stays pending",
                 strategy_names[g->strategy], what, k_free, k_free == 1 ? "" : "s",
                 partial ? " that hold none of its others" : "");
        goto done;
    }
    for (int j = 0; j < k; j++)
        cap[j] = c[j].avail;
    if (!(partial ? plan_rest(g, had, c, cap, k, as) : plan(g, cap, k, as))) {
        snprintf(why, sizeof why,
                 "waiting for resources: no %s assignment of %s to the %d live node%s%s fits "
                 "what they have free now",
                 strategy_names[g->strategy], what, k_free, k_free == 1 ? "" : "s",
                 partial ? " that hold none of its others" : "");
        goto done;
    }
    int ok_to = -1; /* nodes reserved so far: c[0..ok_to] in the order tried */
    int rc = 0;
    /* (a partial group's placed bundles are reserved already: only the others go) */
#define NEW_HERE(i, j) (as[i] == (j) && !(partial && had[i][0]))
    for (int j = 0; j < k && !rc; j++) {
        int cnt = 0;
        for (int i = 0; i < g->n; i++)
            cnt += NEW_HERE(i, j);
        if (!cnt) continue;
        tr__buf q = TR__BUF_INIT, a = TR__BUF_INIT;
        size_t m = tr__enc_map_open(&q);
        tr__enc_str(&q, "op");
        tr__enc_str(&q, "pg_reserve");
        tr__enc_str(&q, "id");
        tr__enc_bin(&q, g->id, 16);
        tr__enc_str(&q, "bundles");
        tr__enc_str(&q, g->bundles);
        tr__enc_str(&q, "strategy");
        tr__enc_int(&q, g->strategy);
        tr__enc_str(&q, "here");
        tr__enc_array(&q, (uint32_t)cnt);
        for (int i = 0; i < g->n; i++)
            if (NEW_HERE(i, j)) tr__enc_int(&q, i);
        tr__enc_map_close(&q, m);
        rc = node_call(cl, c[j].address, &q, &a);
        if (rc)
            snprintf(why, sizeof why, "node %s refused its part (%s); tried again later",
                     c[j].address, tr__last_error());
        else
            ok_to = j;
        tr__buf_free(&q);
        tr__buf_free(&a);
    }
    if (rc) { /* all or none: the parts reserved go */
        for (int j = 0; j <= ok_to; j++) {
            int had_one = 0;
            for (int i = 0; i < g->n; i++)
                had_one |= NEW_HERE(i, j);
            if (had_one) release_on(cl, g->id, c[j].address);
        }
        goto done;
    }
    pthread_mutex_lock(&cl->mu);
    int keep = g->state == TR_PG_PENDING && !g->doomed && !g->release && g->partial == partial;
    for (int i = 0; keep && partial && i < g->n; i++) /* (its placed ones as planned) */
        keep = strcmp(g->node[i], had[i]) == 0;
    for (int i = 0; keep && i < g->n; i++) /* (and its new nodes not lost meanwhile) */
        keep = !NEW_HERE(i, as[i]) || member_alive(cl, c[as[i]].id);
    if (keep) {
        for (int i = 0; i < g->n; i++) {
            if (!NEW_HERE(i, as[i])) continue;
            snprintf(g->node[i], sizeof g->node[i], "%s", c[as[i]].id);
            snprintf(g->address[i], sizeof g->address[i], "%s", c[as[i]].address);
            /* (a part of it left there from before, which the node would have refused
             * this one for, is gone: not to be undone when the node answers) */
            unstale(cl, g->id, c[as[i]].address);
        }
        g->state = TR_PG_CREATED;
        g->partial = 0;
        g->reason[0] = '\0';
    }
    pthread_mutex_unlock(&cl->mu);
    if (!keep) /* removed meanwhile (or a node of it lost) */
        for (int j = 0; j < k; j++) {
            int had_one = 0;
            for (int i = 0; i < g->n; i++)
                had_one |= NEW_HERE(i, j);
            if (had_one) release_on(cl, g->id, c[j].address);
        }
#undef NEW_HERE
    placed = keep;
    if (keep)
        TR_LOG_INFO("CLUSTER-PG", "placement group %s placed (%d bundles%s)", g->hex, g->n,
                    partial ? ", the lost ones again" : "");
done:
    if (!placed && why[0]) {
        pthread_mutex_lock(&cl->mu);
        if (g->state == TR_PG_PENDING) set_reason(g, "%s", why);
        pthread_mutex_unlock(&cl->mu);
    }
    free(c);
    free(as);
    free(had);
    free(cap);
    return placed;
}

/* Undoes g's parts on every node it has one (caller holds pg_mu). 0 if all went. */
static int release_all(tr__cluster *cl, hpg *g) {
    char addr[TR__PG_MAX_BUNDLES][128];
    uint8_t id[16];
    int n = 0;
    pthread_mutex_lock(&cl->mu);
    memcpy(id, g->id, 16);
    for (int i = 0; i < g->n; i++) {
        int seen = !g->address[i][0];
        for (int j = 0; j < n && !seen; j++)
            seen = strcmp(addr[j], g->address[i]) == 0;
        if (!seen) snprintf(addr[n++], sizeof addr[0], "%s", g->address[i]);
    }
    pthread_mutex_unlock(&cl->mu);
    int failed = 0;
    for (int j = 0; j < n; j++) {
        if (tr__cl_table_says(cl, addr[j]) != 1) { /* lost: undone if it comes back */
            pgstale *p = calloc(1, sizeof *p);
            if (!p) continue;
            memcpy(p->id, id, 16);
            memcpy(p->address, addr[j], sizeof p->address); /* (both 128 bytes) */
            pthread_mutex_lock(&cl->mu);
            p->next = cl->pg_stale;
            cl->pg_stale = p;
            pthread_mutex_unlock(&cl->mu);
            continue;
        }
        failed |= release_on(cl, id, addr[j]) != 0;
    }
    if (failed) return -1;
    pthread_mutex_lock(&cl->mu);
    for (int i = 0; i < g->n; i++)
        g->node[i][0] = g->address[i][0] = '\0';
    g->release = 0;
    pthread_mutex_unlock(&cl->mu);
    return 0;
}

/* One pass over the groups (caller holds pg_mu): parts undone where due, the doomed
 * forgotten, the pending tried. */
static void pass(tr__cluster *cl) {
    pthread_mutex_lock(&cl->mu);
    int cur = ++cl->pg_pass;
    cl->pg_kick = 0;
    pgstale *stale = cl->pg_stale, *keep = NULL;
    cl->pg_stale = NULL;
    pthread_mutex_unlock(&cl->mu);
    while (stale) { /* parts left on nodes that were lost, now back */
        pgstale *p = stale;
        stale = p->next;
        if (tr__cl_table_says(cl, p->address) == 1 && release_on(cl, p->id, p->address) == 0) {
            free(p);
        } else {
            p->next = keep;
            keep = p;
        }
    }
    pthread_mutex_lock(&cl->mu);
    while (keep) {
        pgstale *p = keep;
        keep = p->next;
        p->next = cl->pg_stale;
        cl->pg_stale = p;
    }
    pthread_mutex_unlock(&cl->mu);
    for (;;) {
        pthread_mutex_lock(&cl->mu);
        hpg *g = cl->pgs;
        while (g && g->pass == cur)
            g = g->next;
        if (g) g->pass = cur;
        int rel = g && (g->release || (g->doomed && placed_somewhere(g)));
        int want = g && !g->doomed && !g->release && g->state == TR_PG_PENDING && !cl->stop;
        pthread_mutex_unlock(&cl->mu);
        if (!g) break;
        if (rel) release_all(cl, g);
        if (want) {
            for (int t = 0; t < PG_ATTEMPTS && !place(cl, g); t++) {
                pthread_mutex_lock(&cl->mu);
                int again = strncmp(g->reason, "node ", 5) == 0; /* refused: fresh numbers */
                pthread_mutex_unlock(&cl->mu);
                if (!again) break;
            }
        }
        pthread_mutex_lock(&cl->mu);
        if (g->doomed && !g->release && !placed_somewhere(g)) {
            for (hpg **pp = &cl->pgs; *pp; pp = &(*pp)->next)
                if (*pp == g) {
                    *pp = g->next;
                    break;
                }
            hpg_free(g);
        }
        pthread_mutex_unlock(&cl->mu);
    }
}

static void *sched_main(void *arg) {
    tr__cluster *cl = arg;
    pthread_mutex_lock(&cl->pg_mu);
    pass(cl);
    pthread_mutex_unlock(&cl->pg_mu);
    pthread_mutex_lock(&cl->mu);
    cl->pg_running = 0;
    int waiting = 0; /* groups that may fit once resources free up, not only on new nodes */
    for (hpg *g = cl->pgs; g; g = g->next)
        waiting |= g->state == TR_PG_PENDING && strncmp(g->reason, "infeasible", 10) != 0;
    cl->pg_next_ns = tr__now_ns() + (int64_t)(waiting ? PG_RETRY_MS : PG_IDLE_MS) * 1000000;
    cl->slow--; /* last: tr__cluster_stop waits for this */
    pthread_cond_broadcast(&cl->jobs_cv);
    pthread_mutex_unlock(&cl->mu);
    return NULL;
}

void tr__cl_pg_kick(tr__cluster *cl) {
    if (!cl->head) return;
    pthread_mutex_lock(&cl->mu);
    int due = cl->pg_stale && tr__now_ns() >= cl->pg_next_ns;
    for (hpg *g = cl->pgs; g && !due; g = g->next)
        due = g->release || (g->doomed) ||
              (g->state == TR_PG_PENDING && (cl->pg_kick || tr__now_ns() >= cl->pg_next_ns));
    int start = due && !cl->pg_running && !cl->stop;
    if (start) cl->pg_running = 1;
    pthread_mutex_unlock(&cl->mu);
    if (start && !tr__cl_spawn_counted(cl, &cl->slow, MAX_SLOW, &cl->stop, sched_main, cl)) {
        pthread_mutex_lock(&cl->mu);
        cl->pg_running = 0;
        pthread_mutex_unlock(&cl->mu);
    }
}

/* "pg_remove" {id} -> {} (the head; a SLOW op): the group is REMOVED at once (no actor is
 * placed into it any more), its parts undone on every node before the answer unless a
 * pass holds the groups longer than PG_LOCK_MS (then by the scheduler, next). Removing
 * it again: 0. */
int tr__cl_op_pg_remove(tr__cluster *cl, const tr__obj *req, tr__buf *reply) {
    uint8_t id[16];
    int rc = tr__get_id(req, "id", id, 16);
    if (rc) return rc;
    pthread_mutex_lock(&cl->mu);
    hpg *g = by_id(cl, id);
    if (g && g->state != TR_PG_REMOVED) {
        g->state = TR_PG_REMOVED;
        g->release = 1;
        set_reason(g, "removed by tr_placement_group_remove");
        cl->pg_kick = 1; /* its resources come back: others may fit */
    }
    pthread_mutex_unlock(&cl->mu);
    if (!g)
        return tr__err(TR_ENOTFOUND, "no placement group of that id in the cluster (never "
                                     "made, or its creator exited)");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += PG_LOCK_MS / 1000;
    if (pthread_mutex_timedlock(&cl->pg_mu, &ts) == 0) {
        pthread_mutex_lock(&cl->mu); /* found again: only holders of pg_mu free groups */
        g = cl->pgs;
        while (g && memcmp(g->id, id, 16) != 0)
            g = g->next;
        int rel = g && g->release;
        pthread_mutex_unlock(&cl->mu);
        if (rel) release_all(cl, g);
        pthread_mutex_unlock(&cl->pg_mu);
    }
    tr__cl_pg_kick(cl);
    tr__enc_map(reply, 0);
    return 0;
}

/* ------------------------------------------------------------------ under mu */

void tr__cl_pg_owner_gone(tr__cluster *cl, const char *key, const char *node) {
    size_t nn = node ? strlen(node) : 0;
    for (hpg *g = cl->pgs; g; g = g->next) {
        if (g->doomed) continue;
        if ((key && strcmp(g->owner, key) == 0) ||
            (node && strncmp(g->owner, node, nn) == 0 && g->owner[nn] == '/')) {
            g->doomed = 1;
            g->release = placed_somewhere(g);
            cl->pg_kick = 1;
        }
    }
}

/* A part of g's on a lost node, to undo if that node answers again (its link was cut, not
 * its process killed). Under mu. */
static void stale_part(tr__cluster *cl, const hpg *g, const char *address) {
    for (pgstale *p = cl->pg_stale; p; p = p->next)
        if (memcmp(p->id, g->id, 16) == 0 && strcmp(p->address, address) == 0) return;
    pgstale *p = calloc(1, sizeof *p);
    if (!p) return; /* (a node that comes back with it keeps it until the group goes) */
    memcpy(p->id, g->id, 16);
    snprintf(p->address, sizeof p->address, "%s", address);
    p->next = cl->pg_stale;
    cl->pg_stale = p;
}

void tr__cl_pg_node_lost(tr__cluster *cl, const char *node) {
    tr__cl_pg_owner_gone(cl, NULL, node);
    for (hpg *g = cl->pgs; g; g = g->next) {
        int hit = -1, left = 0;
        char lost[128] = "";
        for (int i = 0; i < g->n; i++) {
            if (strcmp(g->node[i], node) != 0) {
                left += g->node[i][0] != '\0';
                continue;
            }
            if (hit < 0) hit = i;
            size_t at = strlen(lost);
            snprintf(lost + at, sizeof lost - at, "%s%d", at ? "," : "", i);
        }
        if (hit < 0 || g->doomed || g->release) continue;
        if (g->state != TR_PG_CREATED && !g->partial) continue;
        char address[128];
        snprintf(address, sizeof address, "%s", g->address[hit]);
        if (!left || g->strategy == TR_PG_STRICT_PACK) {
            /* nothing of it is left elsewhere: placed again, whole */
            g->state = TR_PG_PENDING;
            g->partial = 0;
            g->release = 1;
            set_reason(g,
                       "node %s at %s, holding bundle %s, was lost: the group is placed "
                       "again, whole, when it fits",
                       node, address, lost);
        } else {
            /* its bundles there go, its others stay placed (and their actors run on) */
            for (int i = 0; i < g->n; i++)
                if (strcmp(g->node[i], node) == 0) g->node[i][0] = g->address[i][0] = '\0';
            stale_part(cl, g, address);
            g->state = TR_PG_PENDING;
            g->partial = 1;
            set_reason(g,
                       "node %s at %s, holding bundle %s, was lost: those bundles are "
                       "placed again when they fit; the others stay where they are",
                       node, address, lost);
        }
        TR_LOG_WARN("CLUSTER-PG", "placement group %s: %s", g->hex, g->reason);
        cl->pg_kick = 1;
    }
}

int tr__cl_pg_route(tr__cluster *cl, const uint8_t id[16], int64_t bundle, const tr__res *want,
                    char *address, size_t cap, char *node, size_t ncap) {
    char hex[33];
    tr__hex(id, 16, hex);
    pthread_mutex_lock(&cl->mu);
    hpg *g = by_id(cl, id);
    int rc = 0;
    if (!g)
        rc = tr__err(TR_ENOTFOUND,
                     "placement group %s: no such group in the cluster (never "
                     "made, or its creator exited)",
                     hex);
    else if (g->state == TR_PG_REMOVED)
        rc = tr__err(TR_ESTATE, "placement group %s was removed (%s)", hex, g->reason);
    else if (bundle < -1 || bundle >= g->n)
        rc = tr__err(TR_EINVAL,
                     "bundle_index %lld is out of range: placement group %s has %d bundle%s "
                     "(0..%d, or -1 for any)",
                     (long long)bundle, hex, g->n, g->n == 1 ? "" : "s", g->n - 1);
    else if (g->state != TR_PG_CREATED)
        rc = tr__err(TR_ESTATE,
                     "placement group %s is not placed yet (%s): across a cluster an actor goes "
                     "into a group once tr_placement_group_wait says it is placed",
                     hex, g->reason);
    if (!rc) { /* its bundle's node; for -1 the group's node that has had fewest placed */
        int best = -1, best_placed = 0;
        for (int i = bundle < 0 ? 0 : (int)bundle; i < (bundle < 0 ? g->n : bundle + 1); i++) {
            if (bundle < 0 && !tr__res_fits(want, &g->res[i])) continue; /* (its node says) */
            int placed = 0;
            for (int j = 0; j < cl->members.n; j++)
                if (strcmp(cl->members.nodes[j].id, g->node[i]) == 0)
                    placed = cl->members.nodes[j].placed;
            if (best < 0 || placed < best_placed) {
                best = i;
                best_placed = placed;
            }
        }
        if (best < 0) best = 0; /* none fits: its node refuses, saying why */
        snprintf(address, cap, "%s", g->address[best]);
        snprintf(node, ncap, "%s", g->node[best]);
    }
    pthread_mutex_unlock(&cl->mu);
    return rc;
}

void tr__cl_pg_status_json(tr__cluster *cl, tr__buf *j) {
    char tmp[256];
    tr__buf_append(j, ",\"placement_groups\":[", 21);
    int first = 1;
    for (hpg *g = cl->pgs; g; g = g->next) {
        if (g->doomed) continue;
        int n =
            snprintf(tmp, sizeof tmp, "%s{\"id\":\"%s\",\"state\":\"%s\",\"strategy\":\"%s\"",
                     first ? "" : ",", g->hex, state_names[g->state], strategy_names[g->strategy]);
        tr__buf_append(j, tmp, (size_t)n);
        tr__buf_append(j, ",\"name\":", 8);
        tr__buf_json_str(j, g->name ? g->name : "");
        tr__buf_append(j, ",\"reason\":", 10);
        tr__buf_json_str(j, g->reason);
        tr__buf_append(j, ",\"bundles\":", 11);
        tr__buf_json_str(j, g->bundles);
        tr__buf_append(j, ",\"nodes\":[", 10);
        for (int i = 0; i < g->n; i++) {
            if (i) tr__buf_append(j, ",", 1);
            tr__buf_json_str(j, g->state == TR_PG_CREATED ? g->address[i] : "");
        }
        tr__buf_append(j, "]}", 2);
        first = 0;
    }
    tr__buf_append(j, "]", 1);
}
