/* core/idmap.c - open-addressing hash map, load factor <= 1/2. */
#include "core/idmap.h"

#include <stdlib.h>

#include "core/status.h"

static size_t slot_of(uint64_t key, size_t cap) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

void *tr__idmap_get(const tr__idmap *m, uint64_t key) {
    if (m->cap == 0 || key == 0) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (m->keys[i] == 0) return NULL;
    }
}

static int grow(tr__idmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 16;
    uint64_t *keys = calloc(cap, sizeof *keys);
    void **vals = calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return tr__err(TR_ENOMEM, "idmap growth to %zu slots failed", cap);
    }
    for (size_t j = 0; j < m->cap; j++) {
        if (!m->keys[j]) continue;
        size_t i = slot_of(m->keys[j], cap);
        while (keys[i])
            i = (i + 1) & (cap - 1);
        keys[i] = m->keys[j];
        vals[i] = m->vals[j];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int tr__idmap_put(tr__idmap *m, uint64_t key, void *val) {
    if (key == 0) return tr__err(TR_EINVAL, "idmap key 0 is reserved");
    if ((m->count + 1) * 2 > m->cap) {
        int rc = grow(m);
        if (rc) return rc;
    }
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->count++;
    m->keys[i] = key;
    m->vals[i] = val;
    return 0;
}

void *tr__idmap_del(tr__idmap *m, uint64_t key) {
    if (m->cap == 0 || key == 0) return NULL;
    size_t mask = m->cap - 1, i = slot_of(key, m->cap);
    while (m->keys[i] != key) {
        if (!m->keys[i]) return NULL;
        i = (i + 1) & mask;
    }
    void *val = m->vals[i];
    m->count--;
    /* Backward-shift: move later entries of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        /* j's entry may move to hole if home is not cyclically in (hole, j]. */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            m->keys[hole] = m->keys[j];
            m->vals[hole] = m->vals[j];
            hole = j;
        }
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    return val;
}

int tr__idmap_next(const tr__idmap *m, size_t *pos, uint64_t *key, void **val) {
    for (size_t i = *pos; i < m->cap; i++) {
        if (m->keys[i]) {
            if (key) *key = m->keys[i];
            if (val) *val = m->vals[i];
            *pos = i + 1;
            return 1;
        }
    }
    *pos = m->cap;
    return 0;
}

void tr__idmap_free(tr__idmap *m) {
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
    m->cap = m->count = 0;
}
