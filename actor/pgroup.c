/* actor/pgroup.c - the node's placement groups: table, reservation, handlers (pgroup.h). */
#include "actor/pgroup.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/control.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/nodeconn.h"
#include "core/status.h"
#include "troupe/troupe.h"

#define EPS 1e-9
#define MARK_QTY 1000.0 /* a bundle's marker; an actor takes MARK_REQ of it */
#define MARK_REQ 0.001

typedef struct bundle {
    tr__res res; /* as asked: quantities > 0 only */
    double gpu;
    int dev[TR__MAX_GPUS], n_dev; /* the node's devices it holds while placed */
    int here; /* reserved on this node (a cluster's part holds some bundles only) */
} bundle;

typedef struct pg {
    uint8_t id[16];
    uint32_t tag;
    char hex[33];
    char *name;
    int strategy, state;
    char reason[512];
    uint64_t owner; /* connection id of the creator (0 for a part) */
    int part;       /* a part of a cluster's group, reserved for the head (PG_RESERVE) */
    int n;
    bundle *b;
    /* the devices of its bundles while placed, which its actors get theirs from */
    int n_g;
    int g_dev[TR__MAX_GPUS], g_bundle[TR__MAX_GPUS];
    double g_cap[TR__MAX_GPUS], g_used[TR__MAX_GPUS];
    struct pg *next; /* in creation order */
} pg;

struct tr__pgroups {
    tr__pg_host h;
    pg *all;
};

static const char *const strategy_names[] = {"PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"};
static const char *const state_names[] = {"PENDING", "CREATED", "REMOVED"};

int tr__pgroups_create(const tr__pg_host *h, tr__pgroups **out) {
    tr__pgroups *p = calloc(1, sizeof *p);
    if (!p) return tr__err(TR_ENOMEM, "placement groups");
    p->h = *h;
    *out = p;
    return 0;
}

static void pg_free(pg *g) {
    free(g->name);
    free(g->b);
    free(g);
}

void tr__pgroups_destroy(tr__pgroups *p) {
    if (!p) return;
    for (pg *g = p->all, *n; g; g = n) {
        n = g->next;
        pg_free(g);
    }
    free(p);
}

static void set_reason(pg *g, const char *fmt, ...) TR__PRINTF(2, 3);
static void set_reason(pg *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->reason, sizeof g->reason, fmt, ap);
    va_end(ap);
}

static pg *by_id(tr__pgroups *p, const uint8_t id[16]) {
    for (pg *g = p->all; g; g = g->next)
        if (memcmp(g->id, id, 16) == 0) return g;
    return NULL;
}

static pg *by_tag(tr__pgroups *p, uint32_t tag) {
    for (pg *g = p->all; g; g = g->next)
        if (g->tag == tag && g->state == TR_PG_CREATED) return g;
    return NULL;
}

/* "R_g<tag>_<i>" (i >= 0) or "R_g<tag>" (i < 0). */
static void renamed(char *out, size_t cap, const char *r, uint32_t tag, int i) {
    if (i >= 0)
        snprintf(out, cap, "%s_g%08x_%d", r, tag, i);
    else
        snprintf(out, cap, "%s_g%08x", r, tag);
}

/* Adds bundle i's renamed resources and markers to r (total or available). */
static int add_renamed(tr__res *r, const pg *g, int i) {
    const bundle *b = &g->b[i];
    char nm[64];
    int rc = 0;
    for (int j = 0; j < b->res.n && !rc; j++) {
        renamed(nm, sizeof nm, b->res.name[j], g->tag, i);
        rc = tr__res_add(r, nm, b->res.qty[j]);
        renamed(nm, sizeof nm, b->res.name[j], g->tag, -1);
        if (!rc) rc = tr__res_add(r, nm, b->res.qty[j]);
    }
    renamed(nm, sizeof nm, "bundle", g->tag, i);
    if (!rc) rc = tr__res_add(r, nm, MARK_QTY);
    renamed(nm, sizeof nm, "bundle", g->tag, -1);
    if (!rc) rc = tr__res_add(r, nm, MARK_QTY);
    return rc;
}

static void drop_renamed(tr__res *r, const pg *g) {
    char nm[64];
    for (int i = 0; i < g->n; i++) {
        const bundle *b = &g->b[i];
        if (!b->here) continue;
        for (int j = 0; j < b->res.n; j++) {
            renamed(nm, sizeof nm, b->res.name[j], g->tag, i);
            tr__res_drop(r, nm);
            renamed(nm, sizeof nm, b->res.name[j], g->tag, -1);
            tr__res_drop(r, nm);
        }
        renamed(nm, sizeof nm, "bundle", g->tag, i);
        tr__res_drop(r, nm);
    }
    renamed(nm, sizeof nm, "bundle", g->tag, -1);
    tr__res_drop(r, nm);
}

/* Places every bundle of g on this node, or none (then g->reason says why). Scratch
 * copies of the node's vectors take the changes; they replace the node's only if every
 * bundle fit. */
static int try_place(tr__pgroups *p, pg *g) {
    char want[512], have[512];
    if (g->strategy == TR_PG_STRICT_SPREAD && g->n > 1 && !g->part) {
        set_reason(g,
                   "STRICT_SPREAD: each of its %d bundles needs a node of its own, and this "
                   "node is in no cluster (across a cluster's nodes the head places groups)",
                   g->n);
        return 0;
    }
    tr__res *sum = calloc(1, sizeof *sum), *total = malloc(sizeof *total),
            *avail = malloc(sizeof *avail);
    tr__gpus *gpus = malloc(sizeof *gpus);
    int placed = 0;
    if (!sum || !total || !avail || !gpus) {
        set_reason(g, "the node is out of memory");
        goto done;
    }
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->b[i].res.n && g->b[i].here; j++)
            tr__res_add(sum, g->b[i].res.name[j], g->b[i].res.qty[j]); /* (names as bundles') */
    /* could it ever be placed here, with everything free? */
    *gpus = *p->h.gpus;
    for (int k = 0; k < gpus->n; k++)
        gpus->used[k] = 0;
    int gpus_ever = 1;
    for (int i = 0; i < g->n && gpus_ever; i++) {
        int ids[TR__MAX_GPUS];
        if (!g->b[i].here) continue;
        if (!tr__gpus_fit(gpus, g->b[i].gpu))
            gpus_ever = 0;
        else
            tr__gpus_take(gpus, g->b[i].gpu, ids, TR__MAX_GPUS);
    }
    if (!tr__res_fits(sum, p->h.total) || !gpus_ever) {
        tr__res_format(sum, want, sizeof want);
        tr__res_format(p->h.total, have, sizeof have);
        set_reason(g,
                   "infeasible: its bundles need {%s} in all, more than this node has "
                   "({%s}); it stays pending",
                   want, have);
        goto done;
    }
    *avail = *p->h.avail;
    *gpus = *p->h.gpus;
    for (int i = 0; i < g->n; i++) {
        bundle *b = &g->b[i];
        if (!b->here) continue;
        if (!tr__res_fits(&b->res, avail) || !tr__gpus_fit(gpus, b->gpu)) {
            tr__res_format(&b->res, want, sizeof want);
            tr__res_format(p->h.avail, have, sizeof have);
            set_reason(g, "waiting for resources: bundle %d needs {%s}, the node has {%s} free", i,
                       want, have);
            goto done;
        }
        tr__res_take(avail, &b->res);
        b->n_dev = tr__gpus_take(gpus, b->gpu, b->dev, TR__MAX_GPUS);
    }
    *total = *p->h.total;
    for (int i = 0; i < g->n; i++) {
        if (g->b[i].here && (add_renamed(total, g, i) || add_renamed(avail, g, i))) {
            set_reason(g, "the node's table of resource names is full (%d names)", TR__MAX_RES);
            goto done;
        }
    }
    *p->h.total = *total;
    *p->h.avail = *avail;
    *p->h.gpus = *gpus;
    g->n_g = 0;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->b[i].n_dev && g->n_g < TR__MAX_GPUS; k++) {
            g->g_dev[g->n_g] = g->b[i].dev[k];
            g->g_bundle[g->n_g] = i;
            g->g_cap[g->n_g] = g->b[i].gpu < 1 ? g->b[i].gpu : 1;
            g->g_used[g->n_g] = 0;
            g->n_g++;
        }
    g->state = TR_PG_CREATED;
    g->reason[0] = '\0';
    placed = 1;
    TR_LOG_DEBUG("PG-PLACED", "placement group %s (%d bundles)", g->hex, g->n);
done:
    free(sum);
    free(total);
    free(avail);
    free(gpus);
    return placed;
}

/* Gives back what try_place took and drops the renamed resources. */
static void unplace(tr__pgroups *p, pg *g) {
    if (g->state != TR_PG_CREATED) return;
    for (int i = 0; i < g->n; i++) {
        bundle *b = &g->b[i];
        if (!b->here) continue;
        tr__res_give(p->h.avail, &b->res);
        tr__gpus_give(p->h.gpus, b->gpu, b->dev, b->n_dev);
        b->n_dev = 0;
    }
    drop_renamed(p->h.total, g);
    drop_renamed(p->h.avail, g);
    g->n_g = 0;
}

/* Kills its actors, gives its resources back: nothing of it stays but its entry. */
static void remove_group(tr__pgroups *p, pg *g, const char *why) {
    if (g->state == TR_PG_REMOVED) return;
    p->h.kill_group(p->h.ctx, g->tag, why);
    unplace(p, g);
    g->state = TR_PG_REMOVED;
    set_reason(g, "%s", why);
    p->h.changed(p->h.ctx);
}

void tr__pgroups_schedule(tr__pgroups *p) {
    for (pg *g = p->all; g; g = g->next)
        if (g->state == TR_PG_PENDING) try_place(p, g);
}

void tr__pgroups_conn_closed(tr__pgroups *p, uint64_t conn_id) {
    for (pg **pp = &p->all; *pp;) {
        pg *g = *pp;
        if (g->owner != conn_id || g->part) { /* (a part goes when the head says) */
            pp = &g->next;
            continue;
        }
        remove_group(p, g, "its creator exited");
        *pp = g->next;
        pg_free(g);
    }
}

/* Parses "CPU=1,GPU=1;CPU=2" into n bundles. Returns 0 or TR_EINVAL (error set). */
static int parse_bundles(const char *text, pg *g) {
    int n = 1;
    for (const char *s = text; *s; s++)
        n += *s == ';';
    if (!*text || n > TR__PG_MAX_BUNDLES)
        return tr__err(TR_EINVAL, "tr_placement_group_create: 1..%d bundles, not %d",
                       TR__PG_MAX_BUNDLES, *text ? n : 0);
    g->b = calloc((size_t)n, sizeof *g->b);
    if (!g->b) return tr__err(TR_ENOMEM, "placement group");
    g->n = n;
    const char *s = text;
    for (int i = 0; i < n; i++) {
        const char *end = strchr(s, ';');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[2048];
        if (len >= sizeof item) return tr__err(TR_EINVAL, "bundle %d: too long", i);
        memcpy(item, s, len);
        item[len] = '\0';
        tr__res all = {0};
        int rc = tr__res_parse(&all, item);
        if (rc) return tr__err_wrap(rc, "tr_placement_group_create: bundle %d", i);
        for (int j = 0; j < all.n; j++) {
            if (all.qty[j] <= 0) continue;
            if (strlen(all.name[j]) > TR__PG_MAX_RES_NAME)
                return tr__err(TR_EINVAL,
                               "tr_placement_group_create: bundle %d: resource name '%s' is "
                               "longer than %d bytes (its reserved copies must fit)",
                               i, all.name[j], TR__PG_MAX_RES_NAME);
            tr__res_add(&g->b[i].res, all.name[j], all.qty[j]);
        }
        if (g->b[i].res.n == 0)
            return tr__err(TR_EINVAL,
                           "tr_placement_group_create: bundle %d asks for nothing (every "
                           "bundle needs a quantity > 0)",
                           i);
        double k = tr__res_get(&g->b[i].res, "GPU");
        if (k > 1 && k != floor(k))
            return tr__err(TR_EINVAL,
                           "tr_placement_group_create: bundle %d: num_gpus %g: a share of one "
                           "GPU (< 1) or whole GPUs",
                           i, k);
        g->b[i].gpu = k;
        g->b[i].here = 1;
        s = end ? end + 1 : s + len;
    }
    return 0;
}

/* A create's or reserve's {bundles, strategy, name?} into g (text: the bundles, the
 * caller frees it). 0, or a code with the error set. */
static int parse_group(const tr__obj *body, pg *g, char **text) {
    int64_t strategy = -1;
    int rc;
    if ((rc = tr__get_strdup(body, "bundles", text)) ||
        (rc = tr__get_int(body, "strategy", &strategy)))
        return rc;
    if (strategy < TR_PG_PACK || strategy > TR_PG_STRICT_SPREAD)
        return tr__err(TR_EINVAL,
                       "tr_placement_group_create: unknown strategy %lld (TR_PG_PACK, "
                       "TR_PG_SPREAD, TR_PG_STRICT_PACK, TR_PG_STRICT_SPREAD)",
                       (long long)strategy);
    g->strategy = (int)strategy;
    if (tr__obj_type(tr__obj_get(body, "name")) == TR__T_STR &&
        (rc = tr__get_strdup(body, "name", &g->name)))
        return rc;
    if (g->name && !*g->name) {
        free(g->name);
        g->name = NULL;
    }
    return parse_bundles(*text, g);
}

static uint32_t tag_of(const uint8_t id[16]) {
    return (uint32_t)id[0] << 24 | (uint32_t)id[1] << 16 | (uint32_t)id[2] << 8 | id[3];
}

static void append(tr__pgroups *p, pg *g) {
    pg **tail = &p->all;
    while (*tail)
        tail = &(*tail)->next;
    *tail = g;
}

static void on_create(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__pgroups *p = ctx;
    pg *g = calloc(1, sizeof *g);
    char *text = NULL;
    int rc;
    if (!g) {
        tr__server_reply_status(c, seq, TR_ENOMEM, "node: out of memory");
        return;
    }
    if ((rc = parse_group(body, g, &text))) goto fail;
    /* in a cluster the head places every group, across its nodes (checked here first, so
     * that bad input is refused as on one node) */
    if (p->h.forward && p->h.forward(p->h.forward_ctx, TR__MSG_PG_CREATE, c, seq, body)) {
        free(text);
        pg_free(g);
        return;
    }
    if (p->h.no_actors) {
        rc = tr__err(TR_ESTATE, "tr_placement_group_create: this node is a cluster's client "
                                "(it runs no actors) and cannot reach the cluster now");
        goto fail;
    }
    if (g->name)
        for (pg *o = p->all; o; o = o->next)
            if (o->name && o->state != TR_PG_REMOVED && strcmp(o->name, g->name) == 0) {
                rc = tr__err(TR_EEXIST,
                             "tr_placement_group_create: a placement group named '%s' "
                             "already exists",
                             g->name);
                goto fail;
            }
    for (;;) { /* an id whose tag no group of ours has */
        if ((rc = tr__random_bytes(g->id, 16))) goto fail;
        g->tag = tag_of(g->id);
        int taken = g->tag == 0;
        for (pg *o = p->all; o && !taken; o = o->next)
            taken = o->tag == g->tag;
        if (!taken) break;
    }
    tr__hex(g->id, 16, g->hex);
    g->owner = c->id;
    g->state = TR_PG_PENDING;
    append(p, g);
    free(text);
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, 0, NULL, 1);
    tr__enc_str(&b, "id");
    tr__enc_bin(&b, g->id, 16);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
    p->h.changed(p->h.ctx); /* groups first, then actors */
    return;
fail:
    tr__server_reply_status(c, seq, rc, tr__last_error());
    free(text);
    pg_free(g);
}

static pg *lookup(tr__pgroups *p, const tr__obj *body, tr__conn *c, uint64_t seq) {
    uint8_t id[16];
    if (tr__get_id(body, "id", id, 16)) {
        tr__server_reply_status(c, seq, TR_EPROTO, tr__last_error());
        return NULL;
    }
    pg *g = by_id(p, id);
    if (!g) {
        char hex[33];
        tr__hex(id, 16, hex);
        char msg[160];
        snprintf(msg, sizeof msg,
                 "no placement group %s on this node (never made, or its creator exited)", hex);
        tr__server_reply_status(c, seq, TR_ENOTFOUND, msg);
    }
    return g;
}

static void format_bundles(const pg *g, char *out, size_t cap) {
    size_t off = 0;
    out[0] = '\0';
    for (int i = 0; i < g->n && off + 1 < cap; i++) {
        if (i) out[off++] = ';';
        out[off] = '\0';
        tr__res_format(&g->b[i].res, out + off, cap - off);
        off += strlen(out + off);
    }
}

/* In a cluster a driver's request goes to the head, which knows the whole group (this
 * node holds a part at most); the node's own connections (the cluster's) are answered
 * here. */
static int forwarded(tr__pgroups *p, int type, tr__conn *c, uint64_t seq, const tr__obj *body) {
    return p->h.forward && p->h.forward(p->h.forward_ctx, type, c, seq, body);
}

static void on_info(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__pgroups *p = ctx;
    if (forwarded(p, TR__MSG_PG_INFO, c, seq, body)) return;
    pg *g = lookup(p, body, c, seq);
    if (!g) return;
    char bundles[4096];
    format_bundles(g, bundles, sizeof bundles);
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__reply_open(&b, 0, NULL);
    tr__enc_str(&b, "state");
    tr__enc_int(&b, g->state);
    tr__enc_str(&b, "strategy");
    tr__enc_int(&b, g->strategy);
    tr__enc_str(&b, "n");
    tr__enc_int(&b, g->n);
    tr__enc_str(&b, "name");
    tr__enc_str(&b, g->name ? g->name : "");
    tr__enc_str(&b, "reason");
    tr__enc_str(&b, g->reason);
    tr__enc_str(&b, "bundles");
    tr__enc_str(&b, bundles);
    tr__enc_str(&b, "node");
    tr__enc_str(&b, g->state == TR_PG_CREATED ? p->h.node_path : "");
    tr__enc_map_close(&b, m);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

static void on_remove(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__pgroups *p = ctx;
    if (forwarded(p, TR__MSG_PG_REMOVE, c, seq, body)) return;
    pg *g = lookup(p, body, c, seq);
    if (!g) return;
    int64_t forget = 0;
    if (tr__obj_get(body, "forget")) tr__get_int(body, "forget", &forget);
    remove_group(p, g,
                 forget ? "removed by the cluster's head" : "removed by tr_placement_group_remove");
    if (forget && g->part) { /* the head's part: nothing of it stays here */
        for (pg **pp = &p->all; *pp; pp = &(*pp)->next)
            if (*pp == g) {
                *pp = g->next;
                break;
            }
        pg_free(g);
    }
    tr__server_reply_status(c, seq, 0, NULL);
}

/* PG_RESERVE {id, bundles, strategy, name?, here: [indices]}: the head's part of a group
 * across nodes, now or never: the bundles `here` names are reserved at once, under the
 * group's id (so its tag, and the renamed resources, are the same on every node) and
 * their global indices, or the request is refused with the reason (the head undoes the
 * other nodes' parts and tries again later). */
static void on_reserve(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__pgroups *p = ctx;
    pg *g = calloc(1, sizeof *g);
    char *text = NULL;
    int rc;
    if (!g) {
        tr__server_reply_status(c, seq, TR_ENOMEM, "node: out of memory");
        return;
    }
    if ((rc = tr__get_id(body, "id", g->id, 16)) || (rc = parse_group(body, g, &text))) goto fail;
    const tr__obj *here = tr__obj_get(body, "here");
    size_t k = tr__obj_len(here);
    for (int i = 0; i < g->n; i++)
        g->b[i].here = 0;
    for (size_t i = 0; i < k; i++) {
        int64_t v = -1;
        if (tr__obj_int(tr__obj_at(here, i), "here", &v) || v < 0 || v >= g->n) {
            rc = tr__err(TR_EPROTO, "pg_reserve: a bundle index out of range");
            goto fail;
        }
        g->b[v].here = 1;
    }
    if (k == 0) {
        rc = tr__err(TR_EPROTO, "pg_reserve: no bundle to reserve");
        goto fail;
    }
    g->tag = tag_of(g->id);
    tr__hex(g->id, 16, g->hex);
    for (pg **pp = &p->all; *pp;) { /* a removed leftover of the same group goes */
        pg *o = *pp;
        if (memcmp(o->id, g->id, 16) == 0 && o->state == TR_PG_REMOVED) {
            *pp = o->next;
            pg_free(o);
            continue;
        }
        if (memcmp(o->id, g->id, 16) == 0 || (o->tag == g->tag && o->state != TR_PG_REMOVED)) {
            rc = tr__err(TR_EEXIST,
                         "placement group %s: this node holds a part of it (or of "
                         "a group of the same tag) already",
                         g->hex);
            goto fail;
        }
        pp = &o->next;
    }
    g->part = 1;
    g->state = TR_PG_PENDING;
    if (!try_place(p, g)) {
        rc = tr__err(TR_ERESOURCES, "%s", g->reason);
        goto fail;
    }
    append(p, g);
    free(text);
    tr__server_reply_status(c, seq, 0, NULL);
    p->h.changed(p->h.ctx); /* actors that wait for the group's names */
    return;
fail:
    tr__server_reply_status(c, seq, rc, tr__last_error());
    free(text);
    pg_free(g);
}

static void on_by_name(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__pgroups *p = ctx;
    if (forwarded(p, TR__MSG_PG_BY_NAME, c, seq, body)) return;
    const char *name;
    size_t n;
    if (tr__get_str(body, "name", &name, &n)) {
        tr__server_reply_status(c, seq, TR_EPROTO, tr__last_error());
        return;
    }
    for (pg *g = p->all; g; g = g->next) {
        if (g->name && g->state != TR_PG_REMOVED && strlen(g->name) == n &&
            memcmp(g->name, name, n) == 0) {
            tr__buf b = TR__BUF_INIT;
            tr__reply_begin(&b, 0, NULL, 1);
            tr__enc_str(&b, "id");
            tr__enc_bin(&b, g->id, 16);
            tr__server_reply(c, seq, &b);
            tr__buf_free(&b);
            return;
        }
    }
    tr__server_reply_status(c, seq, TR_ENOTFOUND, "no live placement group has that name");
}

void tr__pgroups_mount(tr__pgroups *p, tr__server *s) {
    tr__server_on(s, TR__MSG_PG_CREATE, on_create, p);
    tr__server_on(s, TR__MSG_PG_INFO, on_info, p);
    tr__server_on(s, TR__MSG_PG_REMOVE, on_remove, p);
    tr__server_on(s, TR__MSG_PG_BY_NAME, on_by_name, p);
    tr__server_on(s, TR__MSG_PG_RESERVE, on_reserve, p);
}

/* Whether req (an actor's, as asked) can ever fit in bundle b. */
static int fits_bundle(const tr__res *req, const bundle *b) {
    if (!tr__res_fits(req, &b->res)) return 0;
    double k = tr__res_get(req, "GPU");
    return k <= 0 || (k < 1 ? b->gpu > 0 : k <= b->gpu + EPS);
}

int tr__pgroups_actor_req(tr__pgroups *p, const uint8_t id[16], int bundle_index, tr__res *req,
                          uint32_t *tag, double *gpu) {
    pg *g = by_id(p, id);
    char hex[33];
    tr__hex(id, 16, hex);
    if (!g)
        return tr__err(TR_ENOTFOUND,
                       "placement group %s: no such group on this node (never made, or its "
                       "creator exited)",
                       hex);
    if (g->state == TR_PG_REMOVED)
        return tr__err(TR_ESTATE, "placement group %s was removed (%s)", hex, g->reason);
    if (bundle_index < -1 || bundle_index >= g->n)
        return tr__err(TR_EINVAL,
                       "bundle_index %d is out of range: placement group %s has %d bundle%s "
                       "(0..%d, or -1 for any)",
                       bundle_index, hex, g->n, g->n == 1 ? "" : "s", g->n - 1);
    if (bundle_index >= 0 && !g->b[bundle_index].here)
        return tr__err(TR_ENOTFOUND, "bundle %d of placement group %s is on another node",
                       bundle_index, hex);
    int ok = 0;
    for (int i = bundle_index < 0 ? 0 : bundle_index;
         i < (bundle_index < 0 ? g->n : bundle_index + 1) && !ok; i++)
        ok = g->b[i].here && fits_bundle(req, &g->b[i]);
    if (!ok) {
        char want[512], have[512] = "";
        tr__res_format(req, want, sizeof want);
        if (bundle_index >= 0) tr__res_format(&g->b[bundle_index].res, have, sizeof have);
        return bundle_index >= 0
                   ? tr__err(TR_ERESOURCES,
                             "the actor needs {%s}, more than bundle %d of placement group %s "
                             "holds ({%s})",
                             want, bundle_index, hex, have)
                   : tr__err(TR_ERESOURCES,
                             "the actor needs {%s}, more than any bundle of placement group %s "
                             "holds",
                             want, hex);
    }
    tr__res out = {0};
    char nm[64];
    int rc = 0;
    for (int j = 0; j < req->n && !rc; j++) {
        if (req->qty[j] <= 0) continue;
        if (bundle_index >= 0) {
            renamed(nm, sizeof nm, req->name[j], g->tag, bundle_index);
            rc = tr__res_add(&out, nm, req->qty[j]);
        }
        renamed(nm, sizeof nm, req->name[j], g->tag, -1);
        if (!rc) rc = tr__res_add(&out, nm, req->qty[j]);
    }
    if (!rc && bundle_index >= 0) {
        renamed(nm, sizeof nm, "bundle", g->tag, bundle_index);
        rc = tr__res_add(&out, nm, MARK_REQ);
    }
    renamed(nm, sizeof nm, "bundle", g->tag, -1);
    if (!rc) rc = tr__res_add(&out, nm, MARK_REQ);
    if (rc) return rc;
    *gpu = tr__res_get(req, "GPU");
    *req = out;
    *tag = g->tag;
    return 0;
}

static int in_range(const pg *g, int j, int bundle) {
    return bundle < 0 || g->g_bundle[j] == bundle;
}

int tr__pgroups_gpu_fit(tr__pgroups *p, uint32_t tag, int bundle, double k) {
    if (k <= 0) return 1;
    pg *g = by_tag(p, tag);
    if (!g) return 0;
    int whole = 0;
    for (int j = 0; j < g->n_g; j++) {
        if (!in_range(g, j, bundle)) continue;
        if (k < 1 && g->g_cap[j] - g->g_used[j] + EPS >= k) return 1;
        whole += g->g_used[j] <= EPS && g->g_cap[j] >= 1 - EPS;
    }
    return k >= 1 && whole >= (int)k;
}

int tr__pgroups_gpu_take(tr__pgroups *p, uint32_t tag, int bundle, double k, int *out, int cap) {
    pg *g = k > 0 ? by_tag(p, tag) : NULL;
    if (!g) return 0;
    if (k < 1) { /* the device with the least room that has enough, as the node's */
        int best = -1;
        for (int j = 0; j < g->n_g; j++) {
            double room = g->g_cap[j] - g->g_used[j];
            if (in_range(g, j, bundle) && room + EPS >= k &&
                (best < 0 || room < g->g_cap[best] - g->g_used[best]))
                best = j;
        }
        if (best < 0 || cap < 1) return 0;
        g->g_used[best] += k;
        out[0] = g->g_dev[best];
        return 1;
    }
    int n = 0;
    for (int j = 0; j < g->n_g && n < (int)k && n < cap; j++) {
        if (!in_range(g, j, bundle) || g->g_used[j] > EPS || g->g_cap[j] < 1 - EPS) continue;
        g->g_used[j] = 1;
        out[n++] = g->g_dev[j];
    }
    return n;
}

void tr__pgroups_gpu_give(tr__pgroups *p, uint32_t tag, double k, const int *ids, int n) {
    pg *g = k > 0 ? by_tag(p, tag) : NULL;
    if (!g) return;
    double each = k < 1 ? k : 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < g->n_g; j++)
            if (g->g_dev[j] == ids[i] && g->g_used[j] + EPS >= each) {
                g->g_used[j] -= each;
                if (g->g_used[j] < EPS) g->g_used[j] = 0;
                break;
            }
}

int tr__pgroups_waiting(const tr__pgroups *p) {
    for (const pg *g = p->all; g; g = g->next)
        if (g->state == TR_PG_PENDING && strncmp(g->reason, "infeasible", 10) != 0) {
            for (int i = 0; i < g->n; i++)
                if (g->b[i].here) return 1;
        }
    return 0;
}

void tr__pgroups_status_json(const tr__pgroups *p, tr__buf *out) {
    char tmp[256];
    tr__buf_append(out, ",\"placement_groups\":[", 21);
    for (const pg *g = p->all; g; g = g->next) {
        int n = snprintf(tmp, sizeof tmp, "%s{\"id\":\"%s\",\"state\":\"%s\",\"strategy\":\"%s\"",
                         g == p->all ? "" : ",", g->hex, state_names[g->state],
                         strategy_names[g->strategy]);
        tr__buf_append(out, tmp, (size_t)n);
        size_t ns_len = 0; /* (kept as its namespace, 0x1f, the name) */
        const char *bare = g->name ? tr__actor_unqualify(g->name, &ns_len) : "";
        char ns[256];
        snprintf(ns, sizeof ns, "%.*s", (int)ns_len, g->name ? g->name : "");
        tr__buf_append(out, ",\"name\":", 8);
        tr__buf_json_str(out, bare);
        tr__buf_append(out, ",\"namespace\":", 13);
        tr__buf_json_str(out, ns);
        tr__buf_append(out, ",\"reason\":", 10);
        tr__buf_json_str(out, g->reason);
        tr__buf_append(out, ",\"node\":", 8);
        tr__buf_json_str(out, g->state == TR_PG_CREATED ? p->h.node_path : "");
        tr__buf_append(out, ",\"bundles\":[", 12);
        for (int i = 0; i < g->n; i++) {
            tr__buf_append(out, i ? ",{" : "{", i ? 2 : 1);
            for (int j = 0; j < g->b[i].res.n; j++) {
                if (j) tr__buf_append(out, ",", 1);
                tr__buf_json_str(out, g->b[i].res.name[j]); /* (a client's names: escaped) */
                n = snprintf(tmp, sizeof tmp, ":%.17g", g->b[i].res.qty[j]);
                tr__buf_append(out, tmp, (size_t)n);
            }
            tr__buf_append(out, "}", 1);
        }
        tr__buf_append(out, "]}", 2);
    }
    tr__buf_append(out, "]", 1);
}
