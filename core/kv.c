/* core/kv.c - a chained hash table of byte strings (FNV-1a), doubling at load 1. */
#include "core/kv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/frame.h"
#include "core/nodeconn.h"
#include "core/status.h"

#define MAX_KEY 1024

typedef struct entry {
    struct entry *next;
    uint64_t hash;
    size_t klen, vlen;
    char *val;
    char key[];
} entry;

typedef struct waiter {
    struct waiter *next;
    struct tr__kv *kv;
    tr__conn *conn;
    uint64_t seq;
    char *key;
    size_t klen;
    uv_timer_t timer;
} waiter;

struct tr__kv {
    entry **slots;
    size_t cap, count;
    uv_loop_t *loop; /* set by tr__kv_mount */
    waiter *waiters; /* gets held until their key is put */
};

static uint64_t fnv(const char *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

int tr__kv_create(tr__kv **out) {
    tr__kv *kv = calloc(1, sizeof *kv);
    if (kv) kv->slots = calloc(64, sizeof *kv->slots);
    if (!kv || !kv->slots) {
        free(kv);
        return tr__err(TR_ENOMEM, "kv store");
    }
    kv->cap = 64;
    *out = kv;
    return 0;
}

void tr__kv_destroy(tr__kv *kv) {
    if (!kv) return;
    for (size_t i = 0; i < kv->cap; i++) {
        for (entry *e = kv->slots[i], *n; e; e = n) {
            n = e->next;
            free(e->val);
            free(e);
        }
    }
    free(kv->slots);
    free(kv);
}

static entry **find(const tr__kv *kv, const char *key, size_t klen, uint64_t h) {
    entry **pp = &kv->slots[h & (kv->cap - 1)];
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0) break;
    return pp;
}

static void grow(tr__kv *kv) {
    size_t cap = kv->cap * 2;
    entry **slots = calloc(cap, sizeof *slots);
    if (!slots) return; /* keep the old table: slower, still correct */
    for (size_t i = 0; i < kv->cap; i++) {
        for (entry *e = kv->slots[i], *n; e; e = n) {
            n = e->next;
            e->next = slots[e->hash & (cap - 1)];
            slots[e->hash & (cap - 1)] = e;
        }
    }
    free(kv->slots);
    kv->slots = slots;
    kv->cap = cap;
}

int tr__kv_put(tr__kv *kv, const char *key, size_t klen, const void *val, size_t vlen) {
    if (klen == 0 || klen > MAX_KEY)
        return tr__err(TR_EINVAL, "kv key must have 1..%d bytes, got %zu", MAX_KEY, klen);
    char *v = malloc(vlen ? vlen : 1);
    if (!v) return tr__err(TR_ENOMEM, "kv value of %zu bytes", vlen);
    if (vlen) memcpy(v, val, vlen);
    uint64_t h = fnv(key, klen);
    entry **pp = find(kv, key, klen, h);
    if (*pp) {
        free((*pp)->val);
        (*pp)->val = v;
        (*pp)->vlen = vlen;
        return 0;
    }
    entry *e = malloc(sizeof *e + klen);
    if (!e) {
        free(v);
        return tr__err(TR_ENOMEM, "kv entry");
    }
    e->next = NULL;
    e->hash = h;
    e->klen = klen;
    e->vlen = vlen;
    e->val = v;
    memcpy(e->key, key, klen);
    *pp = e;
    if (++kv->count > kv->cap) grow(kv);
    return 0;
}

int tr__kv_get(const tr__kv *kv, const char *key, size_t klen, const void **val, size_t *vlen) {
    entry **pp = find(kv, key, klen, fnv(key, klen));
    if (!*pp)
        return tr__err(TR_ENOTFOUND, "kv: no key '%.*s'", (int)(klen > 200 ? 200 : klen), key);
    *val = (*pp)->val;
    *vlen = (*pp)->vlen;
    return 0;
}

int tr__kv_del(tr__kv *kv, const char *key, size_t klen) {
    entry **pp = find(kv, key, klen, fnv(key, klen));
    if (!*pp)
        return tr__err(TR_ENOTFOUND, "kv: no key '%.*s'", (int)(klen > 200 ? 200 : klen), key);
    entry *e = *pp;
    *pp = e->next;
    free(e->val);
    free(e);
    kv->count--;
    return 0;
}

size_t tr__kv_count(const tr__kv *kv) {
    return kv->count;
}

size_t tr__kv_del_prefix(tr__kv *kv, const char *prefix, size_t plen) {
    size_t n = 0;
    for (size_t i = 0; i < kv->cap; i++) {
        for (entry **pp = &kv->slots[i]; *pp;) {
            entry *e = *pp;
            if (e->klen < plen || memcmp(e->key, prefix, plen) != 0) {
                pp = &e->next;
                continue;
            }
            *pp = e->next;
            free(e->val);
            free(e);
            kv->count--;
            n++;
        }
    }
    return n;
}

static void wake_waiters(tr__kv *kv, const char *k, size_t kn, const void *v, size_t vn);

static void on_put(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    const char *k;
    size_t kn, vn;
    const void *v;
    int rc = tr__get_str(body, "key", &k, &kn);
    if (!rc) rc = tr__get_bin(body, "value", &v, &vn);
    if (!rc) rc = tr__kv_put(ctx, k, kn, v, vn);
    tr__server_reply_status(c, seq, rc, rc ? tr__last_error() : NULL);
    if (!rc) wake_waiters(ctx, k, kn, v, vn);
}

static void reply_value(tr__conn *c, uint64_t seq, const void *v, size_t vn) {
    tr__buf b = TR__BUF_INIT;
    tr__reply_begin(&b, 0, NULL, 1);
    tr__enc_str(&b, "value");
    tr__enc_bin(&b, v, vn);
    tr__server_reply(c, seq, &b);
    tr__buf_free(&b);
}

static void on_waiter_closed(uv_handle_t *h) {
    waiter *w = h->data;
    tr__conn_unref(w->conn);
    free(w->key);
    free(w);
}

static void waiter_unlink(waiter *w) {
    for (waiter **pp = &w->kv->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_waiter_closed);
}

static void on_wait_timeout(uv_timer_t *t) {
    waiter *w = t->data;
    tr__server_reply_status(w->conn, w->seq, TR_ENOTFOUND, "kv: the key did not appear in time");
    waiter_unlink(w);
}

static void on_get(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    tr__kv *kv = ctx;
    const char *k;
    size_t kn, vn;
    const void *v;
    int rc = tr__get_str(body, "key", &k, &kn);
    if (!rc) rc = tr__kv_get(kv, k, kn, &v, &vn);
    int64_t wait_ms = 0;
    if (rc == TR_ENOTFOUND && tr__obj_get(body, "wait_ms")) tr__get_int(body, "wait_ms", &wait_ms);
    if (rc == TR_ENOTFOUND && wait_ms > 0 && kv->loop) {
        waiter *w = calloc(1, sizeof *w);
        char *key = malloc(kn);
        if (w && key) {
            memcpy(key, k, kn);
            w->kv = kv;
            w->conn = c;
            w->seq = seq;
            w->key = key;
            w->klen = kn;
            tr__conn_ref(c);
            uv_timer_init(kv->loop, &w->timer);
            w->timer.data = w;
            uv_timer_start(&w->timer, on_wait_timeout,
                           (uint64_t)(wait_ms > 3600000 ? 3600000 : wait_ms), 0);
            w->next = kv->waiters;
            kv->waiters = w;
            return;
        }
        free(w);
        free(key);
        rc = tr__err(TR_ENOMEM, "kv: out of memory");
    }
    if (rc) {
        tr__server_reply_status(c, seq, rc, tr__last_error());
        return;
    }
    reply_value(c, seq, v, vn);
}

/* Answers the gets waiting for a key that was just put. */
static void wake_waiters(tr__kv *kv, const char *k, size_t kn, const void *v, size_t vn) {
    for (waiter *w = kv->waiters, *next; w; w = next) {
        next = w->next;
        if (w->klen != kn || memcmp(w->key, k, kn) != 0) continue;
        reply_value(w->conn, w->seq, v, vn);
        waiter_unlink(w);
    }
}

void tr__kv_close(tr__kv *kv) {
    while (kv && kv->waiters) {
        waiter *w = kv->waiters;
        tr__server_reply_status(w->conn, w->seq, TR_ECLOSED, "kv: the node is shutting down");
        waiter_unlink(w);
    }
}

static void on_del(void *ctx, tr__conn *c, uint64_t seq, const tr__obj *body) {
    const char *k;
    size_t kn;
    int rc = tr__get_str(body, "key", &k, &kn);
    if (!rc) rc = tr__kv_del(ctx, k, kn);
    tr__server_reply_status(c, seq, rc, rc ? tr__last_error() : NULL);
}

void tr__kv_mount(tr__kv *kv, tr__server *s) {
    kv->loop = tr__server_loop(s);
    tr__server_on(s, TR__MSG_KV_PUT, on_put, kv);
    tr__server_on(s, TR__MSG_KV_GET, on_get, kv);
    tr__server_on(s, TR__MSG_KV_DEL, on_del, kv);
}

#define KV_RPC_MS 10000

int tr__kv_client_put(struct tr__nodeconn *c, const char *key, const void *value, size_t len) {
    if (!key || !*key) return tr__err(TR_EINVAL, "kv: empty key");
    if (!value && len) return tr__err(TR_EINVAL, "kv: value is NULL");
    if (len + strlen(key) + 64 > c->max_msg)
        return tr__err(TR_EMSGSIZE, "kv value of %zu bytes exceeds the message limit", len);
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 2);
    tr__enc_str(&b, "key");
    tr__enc_str(&b, key);
    tr__enc_str(&b, "value");
    tr__enc_bin(&b, value ? value : "", len);
    int rc = tr__nodeconn_call(c, TR__MSG_KV_PUT, &b, KV_RPC_MS, NULL);
    tr__buf_free(&b);
    return rc;
}

int tr__kv_client_get(struct tr__nodeconn *c, const char *key, void **value, size_t *len) {
    return tr__kv_client_wait(c, key, 0, value, len);
}

int tr__kv_client_wait(struct tr__nodeconn *c, const char *key, int wait_ms, void **value,
                       size_t *len) {
    if (!key || !*key) return tr__err(TR_EINVAL, "kv: empty key");
    if (!value || !len) return tr__err(TR_EINVAL, "kv: NULL output");
    *value = NULL;
    *len = 0;
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "key");
    tr__enc_str(&b, key);
    if (wait_ms > 0) {
        tr__enc_str(&b, "wait_ms");
        tr__enc_int(&b, wait_ms);
    }
    tr__enc_map_close(&b, m);
    tr__reply r;
    int rc =
        tr__nodeconn_call(c, TR__MSG_KV_GET, &b, wait_ms > 0 ? wait_ms + KV_RPC_MS : KV_RPC_MS, &r);
    tr__buf_free(&b);
    if (rc) return rc;
    const void *p;
    size_t n;
    rc = tr__get_bin(r.root, "value", &p, &n);
    if (!rc) {
        *value = malloc(n ? n : 1);
        if (!*value) {
            rc = tr__err(TR_ENOMEM, "kv value");
        } else {
            memcpy(*value, p, n);
            *len = n;
        }
    }
    tr__reply_free(&r);
    return rc;
}

int tr__kv_client_del(struct tr__nodeconn *c, const char *key) {
    if (!key || !*key) return tr__err(TR_EINVAL, "kv: empty key");
    tr__buf b = TR__BUF_INIT;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "key");
    tr__enc_str(&b, key);
    int rc = tr__nodeconn_call(c, TR__MSG_KV_DEL, &b, KV_RPC_MS, NULL);
    tr__buf_free(&b);
    return rc;
}

int tr__kv_client_cluster(struct tr__nodeconn *c, const char *op, const char *key,
                          const void *value, size_t len, void **out, size_t *out_len) {
    if (!op || !key || !*key) return tr__err(TR_EINVAL, "cluster kv: empty key");
    int put = strcmp(op, "put") == 0, get = strcmp(op, "get") == 0;
    if ((put && !value && len) || (get && (!out || !out_len)))
        return tr__err(TR_EINVAL, "cluster kv: NULL value or output");
    if (put && len + strlen(key) + 64 > c->max_msg)
        return tr__err(TR_EMSGSIZE, "kv value of %zu bytes exceeds the message limit", len);
    if (get) {
        *out = NULL;
        *out_len = 0;
    }
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "op");
    tr__enc_str(&b, op);
    tr__enc_str(&b, "key");
    tr__enc_str(&b, key);
    if (put) {
        tr__enc_str(&b, "value");
        tr__enc_bin(&b, value ? value : "", len);
    }
    tr__enc_map_close(&b, m);
    tr__reply r;
    /* the node asks the head (its own wait for it is 2.5 s) */
    int rc = tr__nodeconn_call(c, TR__MSG_CLUSTER_KV, &b, KV_RPC_MS, get ? &r : NULL);
    tr__buf_free(&b);
    if (rc || !get) return rc;
    const void *p;
    size_t n;
    rc = tr__get_bin(r.root, "value", &p, &n);
    if (!rc && !(*out = malloc(n ? n : 1))) rc = tr__err(TR_ENOMEM, "kv value");
    if (!rc) {
        if (n) memcpy(*out, p, n);
        *out_len = n;
    }
    tr__reply_free(&r);
    return rc;
}
