/* core/counters.c - what a process counts for its node's metrics (core/counters.h). */
#include "core/counters.h"

#include <string.h>

#include "core/status.h"

tr__coll_counters *tr__coll_counters_self;

const uint64_t tr__hist_bound_ns[TR__HIST_BUCKETS - 1] = {
    10000,    50000,     100000,    500000,     1000000,       5000000,       10000000,
    50000000, 100000000, 500000000, 1000000000, 5000000000ull, 10000000000ull};

static int bucket_of(uint64_t ns) {
    int b = 0;
    while (b < TR__HIST_BUCKETS - 1 && ns > tr__hist_bound_ns[b])
        b++;
    return b;
}

void tr__hist_add(tr__hist *h, uint64_t ns, int err) {
    int b = bucket_of(ns);
    __atomic_fetch_add(&h->n, 1, __ATOMIC_RELAXED);
    if (err) __atomic_fetch_add(&h->errors, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->ns, ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->bucket[b], 1, __ATOMIC_RELAXED);
}

void tr__hist_add_local(tr__hist *h, uint64_t ns, int err) {
    h->n++;
    h->errors += err != 0;
    h->ns += ns;
    h->bucket[bucket_of(ns)]++;
}

void tr__hist_merge(tr__hist *to, tr__hist *from) {
    if (!from->n) return;
    __atomic_fetch_add(&to->n, from->n, __ATOMIC_RELAXED);
    if (from->errors) __atomic_fetch_add(&to->errors, from->errors, __ATOMIC_RELAXED);
    __atomic_fetch_add(&to->ns, from->ns, __ATOMIC_RELAXED);
    for (int b = 0; b < TR__HIST_BUCKETS; b++)
        if (from->bucket[b]) __atomic_fetch_add(&to->bucket[b], from->bucket[b], __ATOMIC_RELAXED);
    memset(from, 0, sizeof *from);
}

static uint64_t ld(const uint64_t *v) {
    return __atomic_load_n(v, __ATOMIC_RELAXED);
}

void tr__proc_cnt_add(tr__proc_counters *to, const tr__proc_counters *from) {
    to->pulls += ld(&from->pulls);
    to->pull_bytes += ld(&from->pull_bytes);
    to->pull_errors += ld(&from->pull_errors);
    to->rpc_errors += ld(&from->rpc_errors);
    to->graph_execs += ld(&from->graph_execs);
    tr__hist_sum(&to->steps, (tr__hist *)&from->steps, 0);
    for (int b = 0; b < TR__CNT_BACKENDS; b++)
        tr__hist_sum(&to->coll[b], (tr__hist *)&from->coll[b], 0);
}

int tr__cnt_backend(const char *name) {
    if (!name) return TR__CNT_OTHER;
    if (strcmp(name, "shm") == 0) return TR__CNT_SHM;
    if (strcmp(name, "gloo") == 0) return TR__CNT_GLOO;
    if (strcmp(name, "nccl") == 0) return TR__CNT_NCCL;
    return TR__CNT_OTHER;
}

void tr__cnt_coll(int backend, int kind, uint64_t bytes, uint64_t ns, int rc) {
    tr__coll_counters *c = __atomic_load_n(&tr__coll_counters_self, __ATOMIC_ACQUIRE);
    if (!c || backend < 0 || backend >= TR__CNT_BACKENDS || kind <= 0 || kind >= TR__CNT_OPS)
        return;
    __atomic_fetch_add(&c->ops[backend][kind], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->bytes[backend][kind], bytes, __ATOMIC_RELAXED);
    __atomic_fetch_add(&c->ns[backend][kind], ns, __ATOMIC_RELAXED);
    if (rc) __atomic_fetch_add(&c->errors[backend], 1, __ATOMIC_RELAXED);
    if (rc == TR_ETIMEDOUT) __atomic_fetch_add(&c->timeouts[backend], 1, __ATOMIC_RELAXED);
    if (rc == TR_EPEER_DIED) __atomic_fetch_add(&c->peer_deaths[backend], 1, __ATOMIC_RELAXED);
}

/* (each field read once with a relaxed load, and cleared by a relaxed store) */
static uint64_t take(uint64_t *v, int clear) {
    uint64_t x = __atomic_load_n(v, __ATOMIC_RELAXED);
    if (clear) __atomic_store_n(v, 0, __ATOMIC_RELAXED);
    return x;
}

void tr__hist_sum(tr__hist *to, tr__hist *from, int clear) {
    to->n += take(&from->n, clear);
    to->errors += take(&from->errors, clear);
    to->ns += take(&from->ns, clear);
    for (int i = 0; i < TR__HIST_BUCKETS; i++)
        to->bucket[i] += take(&from->bucket[i], clear);
}

void tr__cnt_coll_add(tr__coll_counters *to, tr__coll_counters *from, int clear) {
    for (int b = 0; b < TR__CNT_BACKENDS; b++) {
        for (int k = 0; k < TR__CNT_OPS; k++) {
            to->ops[b][k] += take(&from->ops[b][k], clear);
            to->bytes[b][k] += take(&from->bytes[b][k], clear);
            to->ns[b][k] += take(&from->ns[b][k], clear);
        }
        to->errors[b] += take(&from->errors[b], clear);
        to->timeouts[b] += take(&from->timeouts[b], clear);
        to->peer_deaths[b] += take(&from->peer_deaths[b], clear);
    }
}
