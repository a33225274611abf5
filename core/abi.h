/* core/abi.h - reading and writing the public API's extensible structs (STYLE.md 6).
 *
 * Each starts with uint32_t struct_size. The library accepts every published version of a
 * struct, from the first one up: a caller built against an older header passes a smaller
 * struct (the fields it lacks take their defaults), one built against a newer header a
 * larger one (the fields this library does not know are ignored). So adding a field at
 * the end never breaks a compiled binding; only a struct_size below the first published
 * size is refused. Header-only; thread safety: any thread.
 */
#ifndef TR_CORE_ABI_H
#define TR_CORE_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"

/* The size of a struct's version whose last field is `last` (the first published size of
 * a struct is this with its first version's last field, and never changes). */
#define TR__SIZE_UPTO(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))

static inline int tr__struct_too_small(const char *what, uint32_t n, size_t v1_size) {
    return tr__err(TR_EINVAL,
                   "%s: struct_size %u is below the smallest this library accepts (%zu); "
                   "initialise the struct with its _INIT macro or _init function",
                   what, n, v1_size);
}

/* Copies a caller's struct into dst (dst_size bytes, filled with defaults beforehand):
 * as much of it as both versions have. dst's struct_size becomes dst_size. Returns 0, or
 * TR_EINVAL if src's struct_size is below v1_size. */
static inline int tr__struct_in(void *dst, size_t dst_size, const void *src, size_t v1_size,
                                const char *what) {
    uint32_t n;
    memcpy(&n, src, sizeof n);
    if (n < v1_size) return tr__struct_too_small(what, n, v1_size);
    memcpy(dst, src, n < dst_size ? n : dst_size);
    uint32_t mine = (uint32_t)dst_size;
    memcpy(dst, &mine, sizeof mine);
    return 0;
}

/* Writes src (src_size bytes, struct_size first) into a caller's struct, as much of it as
 * the caller's struct_size holds; the caller's struct_size is left as it was. Returns 0,
 * or TR_EINVAL if that struct_size is below v1_size. */
static inline int tr__struct_out(void *dst, const void *src, size_t src_size, size_t v1_size,
                                 const char *what) {
    uint32_t n;
    memcpy(&n, dst, sizeof n);
    if (n < v1_size) return tr__struct_too_small(what, n, v1_size);
    size_t k = n < src_size ? n : src_size;
    memcpy((char *)dst + sizeof n, (const char *)src + sizeof n, k - sizeof n);
    return 0;
}

#endif
