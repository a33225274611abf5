/* api/cmd/merge.c - the nodes' list and summary answers put together (merge.h). The
 * answers are the nodes' own JSON (api/node/lists.c writes it); this reads only what it
 * needs of it - the items' extents, a few numbers, a summary's counts - and copies the
 * items as they are. */
#include "api/cmd/merge.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

#define MAX_DEPTH 32

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')
        p++;
    return p;
}

/* Past the JSON string at p (its escapes kept), or NULL. */
static const char *skip_str(const char *p) {
    if (*p != '"') return NULL;
    for (p++; *p; p++) {
        if (*p == '\\') {
            if (!*++p) return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* Past the JSON value at p (after any blanks), or NULL if there is none whole. */
static const char *skip_value(const char *p, int depth) {
    p = skip_ws(p);
    if (depth > MAX_DEPTH) return NULL;
    if (*p == '"') return skip_str(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = skip_ws(p + 1);
        if (*p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (!(p = skip_str(skip_ws(p)))) return NULL;
                p = skip_ws(p);
                if (*p++ != ':') return NULL;
            }
            if (!(p = skip_value(p, depth + 1))) return NULL;
            p = skip_ws(p);
            if (*p == close) return p + 1;
            if (*p++ != ',') return NULL;
        }
    }
    const char *start = p; /* a number, true, false, null */
    while (*p && (isalnum((unsigned char)*p) || *p == '-' || *p == '+' || *p == '.'))
        p++;
    return p == start ? NULL : p;
}

/* The value of key in the JSON object at obj (its top level), or NULL. */
static const char *find_key(const char *obj, const char *key) {
    const char *p = skip_ws(obj);
    if (*p++ != '{') return NULL;
    size_t kn = strlen(key);
    for (;;) {
        p = skip_ws(p);
        const char *k = p, *end = skip_str(p);
        if (!end) return NULL;
        p = skip_ws(end);
        if (*p++ != ':') return NULL;
        p = skip_ws(p);
        if ((size_t)(end - k) == kn + 2 && memcmp(k + 1, key, kn) == 0) return p;
        if (!(p = skip_value(p, 1))) return NULL;
        p = skip_ws(p);
        if (*p++ != ',') return NULL;
    }
}

static int number_of(const char *obj, const char *key, long *out) {
    const char *v = find_key(obj, key);
    char *end;
    if (!v) return -1;
    *out = strtol(v, &end, 10);
    return end == v ? -1 : 0;
}

/* a piece of an answer */
typedef struct span {
    const char *p;
    size_t n;
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

static int spans_add(spans *s, const char *p, size_t n) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return tr__err(TR_ENOMEM, "merging the nodes' lists");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){p, n};
    return 0;
}

/* A JSON list answer's items into items; its counts added to total and matched. */
static int json_items(const char *a, size_t which, spans *items, long *total, long *matched) {
    long t, m;
    const char *p = find_key(a, "items");
    if (!p || *p != '[' || number_of(a, "total", &t) || number_of(a, "matched", &m))
        return tr__err(TR_EPROTO, "answer %zu is not a list: %.80s", which, a);
    p = skip_ws(p + 1);
    while (*p != ']') {
        const char *end = skip_value(p, 1);
        if (!end) return tr__err(TR_EPROTO, "answer %zu: a broken item", which);
        int rc = spans_add(items, p, (size_t)(end - p));
        if (rc) return rc;
        p = skip_ws(end);
        if (*p == ',')
            p = skip_ws(p + 1);
        else if (*p != ']')
            return tr__err(TR_EPROTO, "answer %zu: a broken items array", which);
    }
    *total += t;
    *matched += m;
    return 0;
}

/* A table answer's rows into items, its header (if it has rows) into *header. */
static int table_items(const char *a, size_t which, spans *items, span *header, long *total,
                       long *matched) {
    spans lines = {0};
    int rc = 0;
    for (const char *p = a; *p && !rc;) {
        size_t n = strcspn(p, "\n");
        rc = spans_add(&lines, p, n);
        p += n + (p[n] == '\n');
    }
    long shown, m, t;
    char tail[200] = "";
    if (!rc && lines.n) {
        span f = lines.v[lines.n - 1];
        snprintf(tail, sizeof tail, "%.*s", (int)(f.n < sizeof tail ? f.n : sizeof tail - 1), f.p);
    }
    if (!rc &&
        (!lines.n || sscanf(tail, "(%ld shown of %ld matched, %ld in all)", &shown, &m, &t) != 3 ||
         (size_t)shown + (shown > 0) + 1 != lines.n))
        rc = tr__err(TR_EPROTO, "answer %zu is not a list's table: %.80s", which, a);
    for (size_t i = 1; !rc && shown > 0 && i + 1 < lines.n; i++)
        rc = spans_add(items, lines.v[i].p, lines.v[i].n);
    if (!rc && shown > 0 && !header->p) *header = lines.v[0];
    if (!rc) {
        *total += t;
        *matched += m;
    }
    free(lines.v);
    return rc;
}

int tr__merge_list(const char *kind, const char *const *answers, size_t n, int table, long offset,
                   long limit, tr__buf *out) {
    spans items = {0};
    span header = {NULL, 0};
    long total = 0, matched = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++)
        rc = table ? table_items(answers[i], i, &items, &header, &total, &matched)
                   : json_items(answers[i], i, &items, &total, &matched);
    if (rc) {
        free(items.v);
        return rc;
    }
    size_t from = offset < 0 ? 0 : (size_t)offset, shown = 0;
    if (!table) {
        tr__buf_printf(out, "{\"kind\":");
        tr__buf_json_str(out, kind);
        tr__buf_printf(out, ",\"items\":[");
    }
    for (size_t i = from; i < items.n && (long)shown < limit; i++, shown++) {
        if (table && shown == 0 && header.p) {
            tr__buf_append(out, header.p, header.n);
            tr__buf_append(out, "\n", 1);
        }
        if (!table && shown) tr__buf_append(out, ",", 1);
        tr__buf_append(out, items.v[i].p, items.v[i].n);
        if (table) tr__buf_append(out, "\n", 1);
    }
    if (table)
        tr__buf_printf(out, "(%zu shown of %ld matched, %ld in all)\n", shown, matched, total);
    else
        tr__buf_printf(out, "],\"total\":%ld,\"matched\":%ld,\"offset\":%ld,\"limit\":%ld}", total,
                       matched, offset, limit);
    free(items.v);
    return out->oom ? tr__err(TR_ENOMEM, "merging the nodes' lists") : 0;
}

/* ---- summaries ---------------------------------------------------------------------- */

/* counts by key, in the order the keys came; a key's value a number or counts of its own */
typedef struct counts {
    size_t n, cap;
    struct count {
        char *key; /* as the JSON has it: quoted, escapes kept */
        long long val;
        struct counts *sub;
    } * v;
} counts;

static void counts_free(counts *c) {
    for (size_t i = 0; c && i < c->n; i++) {
        free(c->v[i].key);
        counts_free(c->v[i].sub);
        free(c->v[i].sub);
    }
    if (c) free(c->v);
}

static struct count *count_of(counts *c, const char *key, size_t kn) {
    for (size_t i = 0; i < c->n; i++)
        if (strlen(c->v[i].key) == kn && memcmp(c->v[i].key, key, kn) == 0) return &c->v[i];
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct count *v = realloc(c->v, cap * sizeof *v);
        if (!v) return NULL;
        c->v = v;
        c->cap = cap;
    }
    struct count *e = &c->v[c->n];
    if (!(e->key = strndup(key, kn))) return NULL;
    e->val = 0;
    e->sub = NULL;
    c->n++;
    return e;
}

/* Adds the counts object at p (numbers, or - depth 0 - objects of numbers) into c. */
static int add_counts(const char *p, counts *c, int depth) {
    p = skip_ws(p);
    if (*p++ != '{') return -1;
    p = skip_ws(p);
    if (*p == '}') return 0;
    for (;;) {
        const char *k = skip_ws(p), *end = skip_str(k);
        if (!end) return -1;
        p = skip_ws(end);
        if (*p++ != ':') return -1;
        p = skip_ws(p);
        struct count *e = count_of(c, k, (size_t)(end - k));
        if (!e) return -1;
        if (*p == '{' && depth == 0) {
            if (!e->sub && !(e->sub = calloc(1, sizeof *e->sub))) return -1;
            if (add_counts(p, e->sub, 1) || !(p = skip_value(p, 1))) return -1;
        } else {
            char *num_end;
            e->val += strtoll(p, &num_end, 10);
            if (num_end == p) return -1;
            p = num_end;
        }
        p = skip_ws(p);
        if (*p == '}') return 0;
        if (*p++ != ',') return -1;
    }
}

static void emit_counts(const counts *c, tr__buf *out) {
    tr__buf_append(out, "{", 1);
    for (size_t i = 0; i < c->n; i++) {
        tr__buf_printf(out, "%s%s:", i ? "," : "", c->v[i].key);
        if (c->v[i].sub)
            emit_counts(c->v[i].sub, out);
        else
            tr__buf_printf(out, "%lld", c->v[i].val);
    }
    tr__buf_append(out, "}", 1);
}

int tr__merge_summary(const char *kind, const char *const *answers, size_t n, tr__buf *out) {
    counts states = {0}, classes = {0};
    long total = 0;
    int rc = 0, has_classes = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        long t = 0;
        const char *st = find_key(answers[i], "by_state"), *cl = find_key(answers[i], "by_class");
        if (number_of(answers[i], "total", &t) || !st || add_counts(st, &states, 1) ||
            (cl && add_counts(cl, &classes, 0)))
            rc = tr__err(TR_EPROTO, "answer %zu is not a summary: %.80s", i, answers[i]);
        total += t;
        has_classes |= cl != NULL;
    }
    if (!rc) {
        tr__buf_printf(out, "{\"kind\":");
        tr__buf_json_str(out, kind);
        tr__buf_printf(out, ",\"total\":%ld,\"by_state\":", total);
        emit_counts(&states, out);
        if (has_classes) {
            tr__buf_printf(out, ",\"by_class\":");
            emit_counts(&classes, out);
        }
        tr__buf_append(out, "}", 1);
        if (out->oom) rc = tr__err(TR_ENOMEM, "merging the nodes' summaries");
    }
    counts_free(&states);
    counts_free(&classes);
    return rc;
}
