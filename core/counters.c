/* core/counters.c - what a process counts for its node's metrics (core/counters.h). */
#include "core/counters.h"

#include <string.h>

#include "core/status.h"

tr__coll_counters *tr__coll_counters_self;

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
