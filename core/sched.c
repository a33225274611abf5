/* core/sched.c - resource vectors. Quantities are doubles (fractional GPUs, as in Ray);
 * comparisons allow a small epsilon so that 0.1 * 10 fits in 1. */
#include "core/sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define EPS 1e-9

static int find(const tr__res *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->name[i], name) == 0) return i;
    return -1;
}

int tr__res_add(tr__res *r, const char *name, double qty) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= TR__RES_NAME)
        return tr__err(TR_EINVAL, "resource name '%s' must have 1..%d characters",
                       name ? name : "(null)", TR__RES_NAME - 1);
    if (!(qty >= 0) || isinf(qty))
        return tr__err(TR_EINVAL, "resource '%s': quantity must be a finite number >= 0", name);
    int i = find(r, name);
    if (i < 0) {
        if (r->n == TR__MAX_RES)
            return tr__err(TR_EINVAL, "more than %d distinct resources", TR__MAX_RES);
        i = r->n++;
        memcpy(r->name[i], name, len + 1);
        r->qty[i] = 0;
    }
    r->qty[i] += qty;
    return 0;
}

double tr__res_get(const tr__res *r, const char *name) {
    int i = find(r, name);
    return i < 0 ? 0 : r->qty[i];
}

bool tr__res_has(const tr__res *r, const char *name) {
    return find(r, name) >= 0;
}

void tr__res_drop(tr__res *r, const char *name) {
    int i = find(r, name);
    if (i < 0) return;
    r->n--;
    if (i != r->n) { /* the last one takes its place */
        memcpy(r->name[i], r->name[r->n], TR__RES_NAME);
        r->qty[i] = r->qty[r->n];
    }
}

int tr__res_parse(tr__res *r, const char *text) {
    const char *p = text;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[96];
        if (len >= sizeof item) return tr__err(TR_EINVAL, "resource item too long in '%s'", text);
        memcpy(item, p, len);
        item[len] = '\0';
        char *eq = strchr(item, '=');
        if (!eq) return tr__err(TR_EINVAL, "resource '%s' has no '=qty'", item);
        *eq = '\0';
        char *q_end;
        double q = strtod(eq + 1, &q_end);
        if (q_end == eq + 1 || *q_end != '\0')
            return tr__err(TR_EINVAL, "resource '%s': bad quantity '%s'", item, eq + 1);
        int rc = tr__res_add(r, item, q);
        if (rc) return rc;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

void tr__res_format(const tr__res *r, char *out, size_t cap) {
    size_t off = 0;
    if (cap) out[0] = '\0';
    for (int i = 0; i < r->n && off < cap; i++) {
        /* %.17g: the text goes through strtod on the other side and must round-trip */
        int n = snprintf(out + off, cap - off, "%s%s=%.17g", off ? "," : "", r->name[i], r->qty[i]);
        if (n < 0) break;
        off += (size_t)n;
    }
}

bool tr__res_fits(const tr__res *req, const tr__res *avail) {
    for (int i = 0; i < req->n; i++) {
        if (req->qty[i] <= 0) continue;
        if (tr__res_get(avail, req->name[i]) + EPS < req->qty[i]) return false;
    }
    return true;
}

void tr__res_take(tr__res *avail, const tr__res *req) {
    for (int i = 0; i < req->n; i++) {
        int j = find(avail, req->name[i]);
        if (j >= 0) {
            avail->qty[j] -= req->qty[i];
            if (avail->qty[j] < EPS) avail->qty[j] = 0;
        }
    }
}

void tr__res_give(tr__res *avail, const tr__res *req) {
    for (int i = 0; i < req->n; i++) {
        int j = find(avail, req->name[i]);
        if (j >= 0) avail->qty[j] += req->qty[i];
    }
}

void tr__cores_init(tr__cores *c, const int *ids, int n) {
    memset(c, 0, sizeof *c);
    for (int id = 0; id < TR__MAX_CORES; id++) /* ascending, each once */
        for (int i = 0; i < n; i++)
            if (ids[i] == id) {
                c->id[c->n++] = (short)id;
                break;
            }
}

int tr__cores_take(tr__cores *c, int k, int *out) {
    if (k < 1) return 0;
    int free_n = 0;
    for (int i = 0; i < c->n; i++)
        free_n += !c->taken[i];
    if (free_n < k) return 0;
    int got = 0;
    for (int i = 0; i < c->n && got < k; i++)
        if (!c->taken[i]) {
            c->taken[i] = 1;
            out[got++] = c->id[i];
        }
    return got;
}

void tr__cores_give(tr__cores *c, const int *ids, int k) {
    for (int j = 0; j < k; j++)
        for (int i = 0; i < c->n; i++)
            if (c->id[i] == ids[j]) c->taken[i] = 0;
}

void tr__cores_format(const int *ids, int k, char *out, size_t cap) {
    size_t at = 0;
    if (cap) out[0] = '\0';
    for (int i = 0; i < k && at < cap; i++) {
        int w = snprintf(out + at, cap - at, "%s%d", i ? "," : "", ids[i]);
        if (w < 0) break;
        at += (size_t)w;
    }
}

int tr__cores_parse(const char *text, int *out, int cap) {
    int n = 0;
    const char *p = text;
    if (!p) return -1;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b;
        if (end == p || a < 0 || a >= TR__MAX_CORES) return -1;
        b = a;
        if (*end == '-') {
            p = end + 1;
            b = strtol(p, &end, 10);
            if (end == p || b < a || b >= TR__MAX_CORES) return -1;
        }
        for (long id = a; id <= b; id++) {
            if (n == cap) return -1;
            out[n++] = (int)id;
        }
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        p = end;
    }
    return n;
}

#define GPU_EPS 1e-9

void tr__gpus_init(tr__gpus *g, int n, const char *visible) {
    memset(g, 0, sizeof *g);
    g->n = n < 0 ? 0 : n > TR__MAX_GPUS ? TR__MAX_GPUS : n;
    for (int i = 0; i < g->n; i++) {
        if (!visible) {
            snprintf(g->name[i], sizeof g->name[i], "%d", i);
            continue;
        }
        const char *end = strchr(visible, ',');
        size_t len = end ? (size_t)(end - visible) : strlen(visible);
        if (!*visible || len == 0 || len >= sizeof g->name[i]) {
            g->n = i; /* the list names no more devices the node may use */
            break;
        }
        memcpy(g->name[i], visible, len);
        g->name[i][len] = 0;
        visible = end ? end + 1 : "";
    }
}

void tr__gpus_format(const tr__gpus *g, const int *ids, int n, char *out, size_t cap) {
    size_t at = 0;
    if (cap) out[0] = 0;
    for (int j = 0; j < n && at < cap; j++) {
        if (ids[j] < 0 || ids[j] >= g->n) continue;
        int k = snprintf(out + at, cap - at, "%s%s", at ? "," : "", g->name[ids[j]]);
        if (k < 0) break;
        at += (size_t)k;
    }
}

/* The device a fraction k goes to: the one with the least room left that has enough
 * (best fit keeps whole devices whole); -1 if none. */
static int fraction_home(const tr__gpus *g, double k) {
    int best = -1;
    for (int i = 0; i < g->n; i++)
        if (1.0 - g->used[i] + GPU_EPS >= k && (best < 0 || g->used[i] > g->used[best])) best = i;
    return best;
}

int tr__gpus_fit(const tr__gpus *g, double k) {
    if (k <= 0) return 1;
    if (k > TR__MAX_GPUS) return 0;
    if (k < 1) return fraction_home(g, k) >= 0;
    if (k != (double)(int)k) return 0;
    int free_whole = 0;
    for (int i = 0; i < g->n; i++)
        free_whole += g->used[i] < GPU_EPS;
    return free_whole >= (int)k;
}

int tr__gpus_take(tr__gpus *g, double k, int *out, int cap) {
    if (k <= 0 || !tr__gpus_fit(g, k)) return 0;
    if (k < 1) {
        int i = fraction_home(g, k);
        if (cap < 1) return 0;
        g->used[i] += k;
        out[0] = i;
        return 1;
    }
    int n = 0;
    for (int i = 0; i < g->n && n < (int)k && n < cap; i++)
        if (g->used[i] < GPU_EPS) {
            g->used[i] = 1.0;
            out[n++] = i;
        }
    return n;
}

void tr__gpus_give(tr__gpus *g, double k, const int *ids, int n) {
    for (int j = 0; j < n; j++) {
        int i = ids[j];
        if (i < 0 || i >= g->n) continue;
        g->used[i] -= k < 1 ? k : 1.0;
        if (g->used[i] < GPU_EPS) g->used[i] = 0;
    }
}
