/* core/idmap.h - a hash map from non-zero uint64 keys to pointers (open addressing,
 * linear probing, backward-shift deletion). Keys 0 is reserved. Not thread-safe: the
 * owner locks. */
#ifndef TR_CORE_IDMAP_H
#define TR_CORE_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tr__idmap {
    uint64_t *keys;
    void **vals;
    size_t cap; /* power of two, or 0 */
    size_t count;
} tr__idmap;

#define TR__IDMAP_INIT                                                                             \
    { NULL, NULL, 0, 0 }

void *tr__idmap_get(const tr__idmap *m, uint64_t key);
/* Inserts or replaces. Returns 0, TR_EINVAL (key 0), TR_ENOMEM. */
int tr__idmap_put(tr__idmap *m, uint64_t key, void *val);
/* Removes and returns the value, or NULL. */
void *tr__idmap_del(tr__idmap *m, uint64_t key);
/* Iteration: *pos starts at 0; returns 0 at the end. Do not modify while iterating. */
int tr__idmap_next(const tr__idmap *m, size_t *pos, uint64_t *key, void **val);
void tr__idmap_free(tr__idmap *m);

#endif
