/* api/node/lists.c - the node's lists, as JSON (lists.h). */
#include "api/node/lists.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/control.h"
#include "actor/protocol.h"
#include "actor/tasks.h"
#include "collective/group.h"
#include "core/http.h"
#include "core/events.h"
#include "core/ids.h"
#include "core/trace.h"
#include "objectstore/segment.h"

/* An item as fields: what filters compare (as text) and what the JSON shows. */
#define MAX_FIELDS 16
typedef struct row {
    int n;
    const char *key[MAX_FIELDS];
    char val[MAX_FIELDS][256];
    int num[MAX_FIELDS]; /* a number: unquoted in the JSON */
    const char *raw;     /* JSON appended as is after the fields ("ranks":[...]), or NULL */
} row;

static void field(row *r, const char *key, int num, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void field(row *r, const char *key, int num, const char *fmt, ...) {
    if (r->n >= MAX_FIELDS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->val[r->n], sizeof r->val[r->n], fmt, ap);
    va_end(ap);
    r->key[r->n] = key;
    r->num[r->n] = num;
    r->n++;
}

#define MAX_FILTERS 8
typedef struct query {
    char key[MAX_FILTERS][64], val[MAX_FILTERS][256];
    int neg[MAX_FILTERS];
    int n_filters;
    long limit, offset;
    int table; /* format=table: text, a line per item (the CLI's), not JSON */
} query;

/* Percent-decodes src (n bytes) into dst (cap): 0, or -1 if it does not fit or is bad. */
static int decode(const char *src, size_t n, char *dst, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = src[i];
        if (c == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)src[i + 1]) ||
                !isxdigit((unsigned char)src[i + 2]))
                return -1;
            char hex[3] = {src[i + 1], src[i + 2], '\0'};
            c = (char)strtol(hex, NULL, 16);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (k + 1 >= cap || c == '\0') return -1;
        dst[k++] = c;
    }
    dst[k] = '\0';
    return 0;
}

static int parse_query(const char *q, query *out) {
    memset(out, 0, sizeof *out);
    out->limit = TR__LIST_DEFAULT_LIMIT;
    for (const char *at = q; at && *at;) {
        const char *amp = strchr(at, '&');
        size_t len = amp ? (size_t)(amp - at) : strlen(at);
        const char *eq = memchr(at, '=', len);
        char key[32], val[400];
        if (!eq || (size_t)(eq - at) >= sizeof key ||
            decode(eq + 1, len - (size_t)(eq + 1 - at), val, sizeof val))
            return -1;
        memcpy(key, at, (size_t)(eq - at));
        key[eq - at] = '\0';
        char *end;
        if (strcmp(key, "limit") == 0 || strcmp(key, "offset") == 0) {
            long v = strtol(val, &end, 10);
            if (*end || end == val || v < 0) return -1;
            if (key[0] == 'l')
                out->limit = v > TR__LIST_MAX_LIMIT ? TR__LIST_MAX_LIMIT : v;
            else
                out->offset = v;
        } else if (strcmp(key, "filter") == 0) {
            if (out->n_filters == MAX_FILTERS) return -1;
            char *op = strchr(val, '=');
            if (!op || op == val) return -1;
            int neg = op[-1] == '!';
            size_t kl = (size_t)(op - val) - (size_t)neg;
            if (kl == 0 || kl >= sizeof out->key[0] || strlen(op + 1) >= sizeof out->val[0])
                return -1;
            int f = out->n_filters++;
            memcpy(out->key[f], val, kl);
            out->key[f][kl] = '\0';
            strcpy(out->val[f], op + 1);
            out->neg[f] = neg;
        } else if (strcmp(key, "format") == 0) { /* json, table, or verdicts (groups) */
            if (strcmp(val, "table") != 0 && strcmp(val, "json") != 0 &&
                strcmp(val, "verdicts") != 0)
                return -1;
            out->table = val[0] == 't' ? 1 : val[0] == 'v' ? 2 : 0;
        } else if (strcmp(key, "token") != 0) { /* (a browser's token: not ours to check) */
            return -1;
        }
        at = amp ? amp + 1 : NULL;
    }
    return 0;
}

/* A list being made: its rows filtered, counted, and those in [offset, offset+limit)
 * serialized. */
typedef struct lister {
    const query *q;
    tr__buf *out;
    long total, matched, shown;
    int bad_key;         /* a filter named a field no item has */
    const char *want_id; /* get: the id (or prefix) wanted; NULL: a list */
    int found;           /* get: how many matched */
    const char *node;    /* each row's "node" (this node's address), or NULL: none */
    char node_buf[300];  /* (what node points at) */
} lister;

static int matches(const row *r, const query *q) {
    for (int f = 0; f < q->n_filters; f++) {
        int hit = 0, known = 0;
        for (int i = 0; i < r->n; i++)
            if (strcmp(r->key[i], q->key[f]) == 0) {
                known = 1;
                hit = strcmp(r->val[i], q->val[f]) == 0;
            }
        if (!known || hit == q->neg[f]) return 0;
    }
    return 1;
}

static void row_json(const row *r, tr__buf *out) {
    tr__buf_append(out, "{", 1);
    for (int i = 0; i < r->n; i++) {
        if (i) tr__buf_append(out, ",", 1);
        tr__buf_json_str(out, r->key[i]);
        tr__buf_append(out, ":", 1);
        if (r->num[i])
            tr__buf_append(out, r->val[i], strlen(r->val[i]));
        else
            tr__buf_json_str(out, r->val[i]);
    }
    if (r->raw) tr__buf_append(out, r->raw, strlen(r->raw));
    tr__buf_append(out, "}", 1);
}

/* A row as a line of the CLI's table: each value padded to its column's width (the
 * header's, at least 10), long ones in full; the header before the first. */
static void row_text(const row *r, tr__buf *out, int header) {
    static const int width[] = {32, 14, 14, 10, 12, 8, 8, 10, 10, 10, 10, 10, 10, 10, 10, 10};
    char cell[300];
    for (int pass = header ? 0 : 1; pass < 2; pass++) {
        for (int i = 0; i < r->n; i++) {
            const char *v = pass ? r->val[i] : r->key[i];
            int w = width[i] > (int)strlen(r->key[i]) ? width[i] : (int)strlen(r->key[i]);
            int k = snprintf(cell, sizeof cell, "%-*s%s", w, v, i + 1 < r->n ? "  " : "");
            for (int c = 0; c < k && c < (int)sizeof cell; c++) /* (a line an item) */
                if (!pass)
                    cell[c] = (char)toupper((unsigned char)cell[c]);
                else if ((unsigned char)cell[c] < ' ')
                    cell[c] = ' ';
            tr__buf_append(out, cell, (size_t)(k < (int)sizeof cell ? k : (int)sizeof cell - 1));
        }
        tr__buf_append(out, "\n", 1);
    }
}

static void take(lister *l, const row *in) {
    row with_node;
    const row *r = in;
    if (l->node && in->n < MAX_FIELDS) { /* (last: the other columns keep their widths) */
        with_node = *in;
        field(&with_node, "node", 0, "%s", l->node);
        r = &with_node;
    }
    l->total++;
    if (l->want_id) { /* get: the item of that id, or whose id starts with it (4+) */
        size_t n = strlen(l->want_id);
        int exact = r->n && strcmp(r->val[0], l->want_id) == 0;
        if ((exact || (n >= 4 && r->n && strncmp(r->val[0], l->want_id, n) == 0)) &&
            l->found++ == 0)
            row_json(r, l->out);
        return;
    }
    for (int f = 0; f < l->q->n_filters; f++) {
        int known = 0;
        for (int i = 0; i < r->n; i++)
            known |= strcmp(r->key[i], l->q->key[f]) == 0;
        if (!known) l->bad_key = 1;
    }
    if (!matches(r, l->q)) return;
    long k = l->matched++;
    if (k < l->q->offset || l->shown >= l->q->limit) return;
    if (l->q->table == 2) { /* each item's verdict alone, a line each */
        l->shown++;
        for (int i = 0; i < r->n; i++)
            if (strcmp(r->key[i], "verdict") == 0) {
                tr__buf_append(l->out, r->val[i], strlen(r->val[i]));
                tr__buf_append(l->out, "\n", 1);
            }
        return;
    }
    if (l->q->table) {
        row_text(r, l->out, l->shown++ == 0);
        return;
    }
    if (l->shown++) tr__buf_append(l->out, ",", 1);
    row_json(r, l->out);
}

/* ---- the kinds ---------------------------------------------------------------------- */

static void actor_row(void *ctx, const tr__actor_view *a) {
    row r = {0};
    char hex[33];
    tr__hex(a->id, 16, hex);
    field(&r, "id", 0, "%s", hex);
    field(&r, "class_name", 0, "%s", a->cls);
    field(&r, "class", 0, "%s", a->class_c ? a->class_c : a->cls);
    field(&r, "state", 0, "%s", tr__actor_state_name(a->state));
    size_t ns_len = 0; /* (the node keeps a name as its namespace, 0x1f, the name) */
    const char *bare = a->name ? tr__actor_unqualify(a->name, &ns_len) : "";
    field(&r, "name", 0, "%s", bare);
    field(&r, "namespace", 0, "%.*s", (int)ns_len, a->name ? a->name : "");
    field(&r, "pid", 1, "%d", (int)a->pid);
    field(&r, "restarts", 1, "%d", a->restarts);
    field(&r, "reason", 0, "%s", a->reason ? a->reason : "");
    take(ctx, &r);
}

static const char *obj_state(const tr__store_obj_view *o) {
    if (o->error) return "FAILED";
    if (o->promise) return "PENDING";
    switch (o->state) {
    case TR__OBJ_CREATED:
        return "CREATED";
    case TR__OBJ_SEALED:
        return "SEALED";
    case TR__OBJ_SPILLING:
        return "SPILLING";
    case TR__OBJ_SPILLED:
        return "SPILLED";
    case TR__OBJ_RESTORING:
        return "RESTORING";
    default:
        return "?";
    }
}

static void object_row(void *ctx, const tr__store_obj_view *o) {
    row r = {0};
    char hex[33];
    tr__hex(o->id, 16, hex);
    field(&r, "id", 0, "%s", hex);
    field(&r, "state", 0, "%s", obj_state(o));
    field(&r, "size", 1, "%llu", (unsigned long long)o->size);
    field(&r, "holders", 1, "%d", o->holders);
    field(&r, "pinned", 1, "%s", o->pinned ? "true" : "false");
    field(&r, "contains", 1, "%u", o->n_refs);
    field(&r, "contained_by", 1, "%u", o->contained_by);
    take(ctx, &r);
}

/* What the ranks' last ops say of a group: who died during which op, or which ranks have
 * not begun the op the others are in (a hang's culprit), or that they are in step. */
static void verdict(const tr__group_view *g, char *out, size_t cap) {
    size_t k = 0;
    uint64_t top = 0;
    int at_top = 0;
    out[0] = '\0';
    int world = g->world < 64 ? g->world : 64;
    for (int r = 0; r < world; r++)
        if (g->rank_seq[r] > top) top = g->rank_seq[r], at_top = r;
    for (int r = 0; r < world && k < cap; r++)
        if (g->dead >> r & 1)
            k += (size_t)snprintf(
                out + k, cap - k, "%sgroup %s: rank %d (pid %d) died during op #%llu %s",
                k ? "; " : "", g->name, r, (int)g->pid[r], (unsigned long long)g->rank_seq[r],
                tr__coll_op_name(g->rank_kind[r]));
    for (int r = 0; r < world && k < cap; r++)
        if (!(g->dead >> r & 1) && g->rank_seq[r] < top)
            k += (size_t)snprintf(
                out + k, cap - k,
                "%sgroup %s, op #%llu %s: rank %d never entered; its last op was #%llu",
                k ? "; " : "", g->name, (unsigned long long)top,
                tr__coll_op_name(g->rank_kind[at_top]), r, (unsigned long long)g->rank_seq[r]);
    if (!k && g->complete)
        snprintf(out, cap, "group %s: every rank at op #%llu%s%s", g->name, (unsigned long long)top,
                 top ? " " : "", top ? tr__coll_op_name(g->rank_kind[at_top]) : "");
    else if (!k)
        snprintf(out, cap, "group %s: %d of %d ranks have joined", g->name, g->joined, g->world);
}

/* A compiled graph's segment is a group of its own (dag/graph.c names it "dag-<hex>"): it
 * is listed as a graph, not as a collective group. */
static int is_graph(const tr__group_view *g) {
    return strncmp(g->name, "dag-", 4) == 0;
}

static void graph_row(void *ctx, const tr__group_view *g) {
    if (!is_graph(g)) return;
    row r = {0};
    field(&r, "id", 0, "%s", g->name);
    field(&r, "state", 0, "%s",
          !g->complete ? "COMPILING"
          : g->dead    ? "BROKEN"
          : g->live    ? "RUNNING"
                       : "ENDED");
    field(&r, "processes", 1, "%d", g->world); /* (its actors and its driver) */
    field(&r, "joined", 1, "%d", g->joined);
    field(&r, "live", 1, "%d", g->live);
    int dead = 0;
    for (int i = 0; i < g->world && i < 64; i++)
        dead += (int)(g->dead >> i & 1);
    field(&r, "dead", 1, "%d", dead);
    take(ctx, &r);
}

static void group_row(void *ctx, const tr__group_view *g) {
    if (is_graph(g)) return;
    row r = {0};
    field(&r, "id", 0, "%s", g->name); /* (a group's name is its id) */
    field(&r, "backend", 0, "%s", g->backend);
    field(&r, "state", 0, "%s",
          !g->complete ? "FORMING"
          : g->dead    ? "BROKEN"
          : g->live    ? "ALIVE"
                       : "LEFT");
    field(&r, "world", 1, "%d", g->world);
    field(&r, "joined", 1, "%d", g->joined);
    /* each rank: its pid, whether it died, and its last op (the flight recorder's seed) */
    static char ranks[64 * 120 + 32];
    size_t k = (size_t)snprintf(ranks, sizeof ranks, ",\"ranks\":[");
    for (int i = 0; i < g->world && i < 64 && k < sizeof ranks - 130; i++) {
        uint32_t kind = g->rank_kind[i];
        k += (size_t)snprintf(ranks + k, sizeof ranks - k,
                              "%s{\"rank\":%d,\"pid\":%d,\"dead\":%s,\"last_op\":%llu,"
                              "\"last_kind\":\"%s\"}",
                              i ? "," : "", i, (int)g->pid[i], g->dead >> i & 1 ? "true" : "false",
                              (unsigned long long)g->rank_seq[i], tr__coll_op_name(kind));
    }
    snprintf(ranks + k, sizeof ranks - k, "]");
    r.raw = ranks;
    verdict(g, r.val[r.n], sizeof r.val[r.n]);
    r.key[r.n++] = "verdict";
    take(ctx, &r);
}

/* The groups the node's registry does not hold - gloo and nccl ranks meet through the
 * cluster's store, not here - as their ranks' flight recorders on this node show them
 * (core/trace.h): those that ran an op. */
typedef struct group_walk {
    lister *l;
    char (*names)[200]; /* the registry's, listed first */
    size_t n;
    /* a summary's instead of rows: each group counted by its state */
    void *sum;
    void (*sum_registry)(void *sum, const tr__group_view *g);
    void (*sum_flight)(void *sum, const char *state);
} group_walk;

static void registry_group(void *ctx, const tr__group_view *g) {
    group_walk *w = ctx;
    if (is_graph(g)) return;
    char(*more)[200] = realloc(w->names, (w->n + 1) * sizeof *w->names);
    if (more) {
        w->names = more;
        snprintf(w->names[w->n++], sizeof *w->names, "%s", g->name);
    }
    if (w->sum)
        w->sum_registry(w->sum, g);
    else
        group_row(w->l, g);
}

static void flight_group(void *ctx, const tr__flight_group_view *g) {
    group_walk *w = ctx;
    if (strncmp(g->name, "dag-", 4) == 0) return;
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->names[i], g->name) == 0) return;
    int alive = 0;
    for (int i = 0; i < g->n_ranks; i++)
        alive += g->ranks[i].alive != 0;
    const char *state = alive == g->n_ranks ? "ALIVE" : alive ? "BROKEN" : "LEFT";
    if (w->sum) {
        w->sum_flight(w->sum, state);
        return;
    }
    row r = {0};
    field(&r, "id", 0, "%s", g->name);
    field(&r, "backend", 0, "%s", g->backend);
    field(&r, "state", 0, "%s", state);
    field(&r, "world", 1, "%d", g->world);
    field(&r, "joined", 1, "%d", g->n_ranks); /* (its ranks on this node) */
    static char ranks[64 * 120 + 32];
    size_t k = (size_t)snprintf(ranks, sizeof ranks, ",\"ranks\":[");
    for (int i = 0; i < g->n_ranks && k < sizeof ranks - 130; i++) {
        const tr__flight_rank_view *x = &g->ranks[i];
        k += (size_t)snprintf(ranks + k, sizeof ranks - k,
                              "%s{\"rank\":%d,\"pid\":%d,\"dead\":%s,\"last_op\":%llu,"
                              "\"last_kind\":\"%s\"}",
                              i ? "," : "", x->rank, x->pid, x->alive ? "false" : "true",
                              (unsigned long long)x->last_op,
                              x->last_op ? tr__coll_op_name((unsigned)x->last_kind) : "");
    }
    snprintf(ranks + k, sizeof ranks - k, "]");
    r.raw = ranks;
    field(&r, "verdict", 0, "%s", g->verdict);
    take(w->l, &r);
}

static void node_row(void *ctx, const tr__member *m, int head) {
    row r = {0};
    field(&r, "id", 0, "%s", m->id);
    field(&r, "address", 0, "%s", m->address);
    field(&r, "state", 0, "%s", m->alive ? "ALIVE" : "LOST");
    field(&r, "role", 0, "%s", head ? "head" : m->client ? "driver" : "node");
    field(&r, "cpus", 1, "%g", m->cpus);
    field(&r, "gpus", 1, "%d", m->gpus);
    field(&r, "actors", 1, "%llu", (unsigned long long)m->actors);
    field(&r, "objects", 1, "%llu", (unsigned long long)m->objects);
    field(&r, "object_bytes", 1, "%llu", (unsigned long long)m->object_bytes);
    field(&r, "metrics", 0, "%s", m->metrics);
    take(ctx, &r);
}

/* ---- a session's event log, replayed (core/events.h) -------------------------------- */

/* What the log says of one item at its end: its fields, in the order they came. */
typedef struct item {
    row r;
} item;

typedef struct replay {
    const char *kind; /* actors, nodes, groups, or events */
    item *v;
    size_t n, cap;
    lister *l;
} replay;

static row *find_item(replay *p, const char *id, int add) {
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->v[i].r.val[0], id) == 0) return &p->v[i].r;
    if (!add || p->n == 20000) return NULL; /* (bounded: 20000 items of a kind) */
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        item *g = realloc(p->v, cap * sizeof *g);
        if (!g) return NULL;
        p->v = g;
        p->cap = cap;
    }
    row *r = &p->v[p->n++].r;
    memset(r, 0, sizeof *r);
    field(r, "id", 0, "%s", id);
    return r;
}

/* Sets field key of r to val (added if new). */
static void set(row *r, const char *key, int num, const char *val) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->key[i], key) == 0) {
            snprintf(r->val[i], sizeof r->val[i], "%s", val);
            return;
        }
    field(r, key, num, "%s", val);
}

static void on_event(void *ctx, const tr__evlog_rec *e) {
    replay *p = ctx;
    const char *ev = tr__evlog_get(e, "event"), *t = tr__evlog_get(e, "t");
    if (strcmp(p->kind, "events") == 0) { /* each event: t, event, what it names, the rest */
        row r = {0};
        const char *id = tr__evlog_get(e, "id");
        field(&r, "t", 0, "%s", t);
        field(&r, "event", 0, "%s", ev);
        field(&r, "id", 0, "%s", *id ? id : tr__evlog_get(e, "name"));
        char more[256];
        size_t k = 0;
        more[0] = '\0';
        for (int i = 0; i < e->n && k < sizeof more; i++)
            if (strcmp(e->key[i], "t") && strcmp(e->key[i], "event") && strcmp(e->key[i], "id") &&
                strcmp(e->key[i], "name"))
                k += (size_t)snprintf(more + k, sizeof more - k, "%s%s=%s", k ? " " : "", e->key[i],
                                      e->val[i]);
        field(&r, "details", 0, "%s", more);
        take(p->l, &r);
        return;
    }
    row *r = NULL;
    if (strcmp(p->kind, "actors") == 0 && strncmp(ev, "actor_", 6) == 0) {
        if (!(r = find_item(p, tr__evlog_get(e, "id"), strcmp(ev, "actor_created") == 0))) return;
        if (strcmp(ev, "actor_created") == 0) {
            set(r, "class_name", 0, tr__evlog_get(e, "class"));
            size_t ns_len = 0; /* (kept as its namespace, 0x1f, the name: as live rows) */
            const char *kept = tr__evlog_get(e, "name");
            set(r, "name", 0, tr__actor_unqualify(kept, &ns_len));
            char ns[256];
            snprintf(ns, sizeof ns, "%.*s", (int)ns_len, kept);
            set(r, "namespace", 0, ns);
            set(r, "state", 0, "PENDING");
            set(r, "pid", 1, "0");
            set(r, "restarts", 1, "0");
            set(r, "created", 0, t);
            set(r, "ended", 0, "");
            set(r, "reason", 0, "");
        } else if (strcmp(ev, "actor_alive") == 0) {
            set(r, "state", 0, "ALIVE");
            set(r, "pid", 1, tr__evlog_get(e, "pid"));
        } else if (strcmp(ev, "actor_restarting") == 0) {
            char n[24];
            long k = 0;
            for (int i = 0; i < r->n; i++)
                if (strcmp(r->key[i], "restarts") == 0) k = atol(r->val[i]);
            snprintf(n, sizeof n, "%ld", k + 1);
            set(r, "state", 0, "RESTARTING");
            set(r, "restarts", 1, n);
            set(r, "reason", 0, tr__evlog_get(e, "reason"));
        } else if (strcmp(ev, "actor_died") == 0) {
            set(r, "state", 0, "DEAD");
            set(r, "ended", 0, t);
            set(r, "reason", 0, tr__evlog_get(e, "reason"));
        }
    } else if (strcmp(p->kind, "nodes") == 0) {
        int self = strcmp(ev, "node_started") == 0 || strcmp(ev, "node_stopped") == 0;
        if (!self && strcmp(ev, "node_joined") != 0 && strcmp(ev, "node_lost") != 0) return;
        const char *id = self ? "this node" : tr__evlog_get(e, "id");
        if (!(r = find_item(p, id, 1))) return;
        if (strcmp(ev, "node_started") == 0 || strcmp(ev, "node_joined") == 0) {
            set(r, "address", 0, tr__evlog_get(e, "address"));
            set(r, "state", 0, "ALIVE");
            set(r, "since", 0, t);
            set(r, "reason", 0, "");
        } else {
            set(r, "state", 0, self ? "STOPPED" : "LOST");
            set(r, "since", 0, t);
            set(r, "reason", 0, tr__evlog_get(e, "reason"));
        }
    } else if (strcmp(p->kind, "groups") == 0 && strncmp(ev, "group_", 6) == 0) {
        if (!(r = find_item(p, tr__evlog_get(e, "name"), 1))) return;
        if (strcmp(ev, "group_formed") == 0) {
            set(r, "backend", 0, tr__evlog_get(e, "backend"));
            set(r, "world", 1, tr__evlog_get(e, "world"));
            set(r, "state", 0, "ALIVE");
            set(r, "since", 0, t);
            set(r, "reason", 0, "");
        } else if (strcmp(ev, "group_failed") == 0) {
            set(r, "backend", 0, tr__evlog_get(e, "backend"));
            set(r, "state", 0, "FAILED");
            set(r, "since", 0, t);
            set(r, "reason", 0, tr__evlog_get(e, "reason"));
        } else if (strcmp(ev, "group_rank_died") == 0) {
            char why[200];
            snprintf(why, sizeof why, "rank %s (pid %s) died", tr__evlog_get(e, "rank"),
                     tr__evlog_get(e, "pid"));
            set(r, "state", 0, "BROKEN");
            set(r, "since", 0, t);
            set(r, "reason", 0, why);
        }
    }
}

/* The kind's items as the session's event log leaves them; 0, or -1 (an unknown kind),
 * or -2 (the log cannot be read). */
static int walk_log(const char *log, const char *kind, lister *l) {
    static const char *const kinds[] = {"actors", "nodes", "groups", "events"};
    int known = 0;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        known |= strcmp(kind, kinds[i]) == 0;
    if (!known) return -1;
    replay p = {kind, NULL, 0, 0, l};
    if (tr__evlog_read(log, on_event, &p)) return -2;
    for (size_t i = 0; i < p.n; i++)
        take(l, &p.v[i].r);
    free(p.v);
    return 0;
}

/* A task run recently on this node, as its worker's ring has it (core/trace.h). */
static void task_row(void *ctx, const tr__trace_view *e) {
    row r = {0};
    field(&r, "id", 0, "%016llx", (unsigned long long)e->flow);
    field(&r, "name", 0, "%s", e->name);
    field(&r, "state", 0, "%s", e->failed ? "FAILED" : "FINISHED");
    field(&r, "worker_pid", 1, "%d", e->pid);
    field(&r, "start", 0, "%lld.%06lld", (long long)(e->ts / 1000000000),
          (long long)(e->ts % 1000000000 / 1000));
    field(&r, "duration_s", 1, "%.6f", (double)e->dur / 1e9);
    take(ctx, &r);
}

/* The node's trace directory (beside its socket): 1, or 0 if it has none. */
static int trace_dir(const tr__lists_src *src, char *dir, size_t cap) {
    const char *slash = src->node_sock ? strrchr(src->node_sock, '/') : NULL;
    if (!slash) return 0;
    snprintf(dir, cap, "%.*s/%s", (int)(slash - src->node_sock), src->node_sock, TR__TRACE_DIR);
    return 1;
}

/* Walks kind's items into l; 0, or -1 for an unknown kind. */
static int walk(const tr__lists_src *src, const char *kind, lister *l) {
    char dir[700];
    if (src->events_log) return walk_log(src->events_log, kind, l) == 0 ? 0 : -1;
    /* a node's items say where they are (the nodes list's "address"): a cluster's head
     * merges every node's (api/cmd/merge.h) */
    if (strcmp(kind, "nodes") != 0) {
        if (!src->cluster || !*src->cluster ||
            tr__cluster_self_address(*src->cluster, l->node_buf, sizeof l->node_buf))
            snprintf(l->node_buf, sizeof l->node_buf, "%s", src->node_sock ? src->node_sock : "");
        l->node = l->node_buf;
    }
    if (strcmp(kind, "actors") == 0) {
        tr__directory_each(*src->dir, actor_row, l);
    } else if (strcmp(kind, "objects") == 0) {
        tr__store_each(src->store, object_row, l);
    } else if (strcmp(kind, "groups") == 0) {
        group_walk w = {l, NULL, 0, NULL, NULL, NULL};
        tr__groups_each(src->groups, registry_group, &w);
        if (trace_dir(src, dir, sizeof dir)) tr__flight_each(dir, flight_group, &w);
        free(w.names);
    } else if (strcmp(kind, "graphs") == 0) {
        tr__groups_each(src->groups, graph_row, l);
    } else if (strcmp(kind, "tasks") == 0) { /* the last runs each task worker's ring has */
        if (trace_dir(src, dir, sizeof dir))
            tr__trace_each(dir, TR__EV_RUN, TR__TASKS_CLASS, task_row, l);
    } else if (strcmp(kind, "nodes") == 0) {
        if (!tr__cluster_each_node(*src->cluster, node_row, l)) { /* alone: this node */
            tr__member self;
            memset(&self, 0, sizeof self);
            snprintf(self.address, sizeof self.address, "%s", src->node_sock);
            self.alive = 1;
            uint64_t objects, bytes;
            tr__store_counts(src->store, &objects, &bytes);
            self.objects = objects;
            self.object_bytes = bytes;
            self.actors = tr__directory_live(*src->dir);
            node_row(l, &self, 1);
        }
    } else {
        return -1;
    }
    return 0;
}

/* Counts by a field's value (and, for actors, by class and state). */
typedef struct summary {
    char state[16][24];
    long n_state[16];
    int states;
    tr__buf by_class;
    char cls[64][128];
    long cls_n[64][8];
    int classes;
    long total;
} summary;

static void sum_state(summary *s, const char *state) {
    for (int i = 0; i < s->states; i++)
        if (strcmp(s->state[i], state) == 0) {
            s->n_state[i]++;
            return;
        }
    if (s->states < 16) {
        snprintf(s->state[s->states], sizeof s->state[0], "%s", state);
        s->n_state[s->states++] = 1;
    }
}

static void sum_actor(void *ctx, const tr__actor_view *a) {
    summary *s = ctx;
    s->total++;
    sum_state(s, tr__actor_state_name(a->state));
    int c = 0;
    while (c < s->classes && strcmp(s->cls[c], a->cls) != 0)
        c++;
    if (c == s->classes) {
        if (s->classes == 64) return;
        snprintf(s->cls[s->classes++], sizeof s->cls[0], "%s", a->cls);
    }
    if (a->state >= 0 && a->state < 8) s->cls_n[c][a->state]++;
}

static void sum_object(void *ctx, const tr__store_obj_view *o) {
    summary *s = ctx;
    s->total++;
    sum_state(s, obj_state(o));
}

static void sum_group(void *ctx, const tr__group_view *g) {
    summary *s = ctx;
    if (is_graph(g)) return;
    s->total++;
    sum_state(s, !g->complete ? "FORMING" : g->dead ? "BROKEN" : g->live ? "ALIVE" : "LEFT");
}

static void sum_flight_group(void *ctx, const char *state) {
    summary *s = ctx;
    s->total++;
    sum_state(s, state);
}

static void sum_graph(void *ctx, const tr__group_view *g) {
    summary *s = ctx;
    if (!is_graph(g)) return;
    s->total++;
    sum_state(s, !g->complete ? "COMPILING" : g->dead ? "BROKEN" : g->live ? "RUNNING" : "ENDED");
}

static void sum_node(void *ctx, const tr__member *m, int head) {
    (void)head;
    summary *s = ctx;
    s->total++;
    sum_state(s, m->alive ? "ALIVE" : "LOST");
}

static int answer_summary(const tr__lists_src *src, const char *kind, tr__buf *out) {
    if (src->events_log) return 404; /* (a live node's only) */
    static summary s;                /* (the loop thread's alone: it is large) */
    memset(&s, 0, sizeof s);
    if (strcmp(kind, "actors") == 0) {
        for (int st = 0; st <= TR__ACTOR_DEAD; st++) { /* (every state, in order) */
            sum_state(&s, tr__actor_state_name(st));
            s.n_state[st] = 0;
        }
        tr__directory_each(*src->dir, sum_actor, &s);
    } else if (strcmp(kind, "objects") == 0)
        tr__store_each(src->store, sum_object, &s);
    else if (strcmp(kind, "groups") == 0) { /* (the registry's, then the rest: walk's) */
        group_walk w = {NULL, NULL, 0, &s, sum_group, sum_flight_group};
        char dir[700];
        tr__groups_each(src->groups, registry_group, &w);
        if (trace_dir(src, dir, sizeof dir)) tr__flight_each(dir, flight_group, &w);
        free(w.names);
    } else if (strcmp(kind, "graphs") == 0)
        tr__groups_each(src->groups, sum_graph, &s);
    else if (strcmp(kind, "nodes") == 0) {
        if (!tr__cluster_each_node(*src->cluster, sum_node, &s)) {
            s.total = 1;
            sum_state(&s, "ALIVE");
        }
    } else
        return 404;
    char tmp[200];
    snprintf(tmp, sizeof tmp, "{\"kind\":\"%s\",\"total\":%ld,\"by_state\":{", kind, s.total);
    tr__buf_append(out, tmp, strlen(tmp));
    for (int i = 0; i < s.states; i++) {
        snprintf(tmp, sizeof tmp, "%s\"%s\":%ld", i ? "," : "", s.state[i], s.n_state[i]);
        tr__buf_append(out, tmp, strlen(tmp));
    }
    tr__buf_append(out, "}", 1);
    if (strcmp(kind, "actors") == 0) {
        tr__buf_append(out, ",\"by_class\":{", 13);
        for (int c = 0; c < s.classes; c++) {
            if (c) tr__buf_append(out, ",", 1);
            tr__buf_json_str(out, s.cls[c]);
            tr__buf_append(out, ":{", 2);
            int first = 1;
            for (int st = 0; st <= TR__ACTOR_DEAD; st++) {
                if (!s.cls_n[c][st]) continue;
                snprintf(tmp, sizeof tmp, "%s\"%s\":%ld", first ? "" : ",",
                         tr__actor_state_name(st), s.cls_n[c][st]);
                tr__buf_append(out, tmp, strlen(tmp));
                first = 0;
            }
            tr__buf_append(out, "}", 1);
        }
        tr__buf_append(out, "}", 1);
    }
    tr__buf_append(out, "}", 1);
    return 200;
}

static void error_json(tr__buf *out, const char *msg) {
    tr__buf_append(out, "{\"error\":", 9);
    tr__buf_json_str(out, msg);
    tr__buf_append(out, "}", 1);
}

int tr__lists_answer(const tr__lists_src *src, const char *path, const char *query_text,
                     tr__buf *out) {
    static const char prefix[] = "/api/v1/";
    if (strncmp(path, prefix, sizeof prefix - 1) != 0) return 404;
    const char *rest = path + sizeof prefix - 1;
    char kind[32];
    if (strncmp(rest, "summary/", 8) == 0) {
        snprintf(kind, sizeof kind, "%s", rest + 8);
        int st = answer_summary(src, kind, out);
        if (st == 404)
            error_json(out, "no such kind (actors, objects, groups, graphs, tasks, nodes)");
        return st;
    }
    const char *slash = strchr(rest, '/');
    size_t kn = slash ? (size_t)(slash - rest) : strlen(rest);
    if (kn == 0 || kn >= sizeof kind) return 404;
    memcpy(kind, rest, kn);
    kind[kn] = '\0';
    query q;
    if (parse_query(query_text ? query_text : "", &q)) {
        error_json(out, "a bad query: filter=KEY=VALUE (or KEY!=VALUE), limit=N, offset=N");
        return 400;
    }
    lister l = {&q, out, 0, 0, 0, 0, NULL, 0, NULL, ""};
    char tmp[200];
    if (slash) { /* get: one item by its id, or a unique prefix of it */
        const char *id = slash + 1;
        if (!*id || strchr(id, '/')) {
            error_json(out, "an id (or 4 or more of its first characters)");
            return 400;
        }
        l.want_id = id;
        snprintf(tmp, sizeof tmp, "{\"kind\":\"%s\",\"item\":", kind);
        size_t mark = out->len;
        tr__buf_append(out, tmp, strlen(tmp));
        if (walk(src, kind, &l)) return 404;
        if (l.found != 1) {
            out->len = mark; /* (drop what was written) */
            error_json(out, l.found ? "that prefix names several" : "no such item");
            return l.found ? 400 : 404;
        }
        tr__buf_append(out, "}", 1);
        return 200;
    }
    snprintf(tmp, sizeof tmp, "{\"kind\":\"%s\",\"items\":[", kind);
    size_t mark = out->len;
    if (!q.table) tr__buf_append(out, tmp, strlen(tmp));
    if (walk(src, kind, &l)) {
        out->len = mark;
        error_json(out, "no such kind (actors, objects, groups, graphs, tasks, nodes)");
        return 404;
    }
    if (l.bad_key && l.total) {
        out->len = mark;
        error_json(out, "a filter names a field the items do not have");
        return 400;
    }
    if (q.table == 2)
        tmp[0] = '\0';
    else if (q.table)
        snprintf(tmp, sizeof tmp, "(%ld shown of %ld matched, %ld in all)\n", l.shown, l.matched,
                 l.total);
    else
        snprintf(tmp, sizeof tmp, "],\"total\":%ld,\"matched\":%ld,\"offset\":%ld,\"limit\":%ld}",
                 l.total, l.matched, q.offset, q.limit);
    tr__buf_append(out, tmp, strlen(tmp));
    return 200;
}
