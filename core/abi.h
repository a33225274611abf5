/* core/abi.h - reading and writing the public API's extensible structs (docs/STYLE.md,
 * "Structs that grow").
 *
 * Each starts with uint32_t struct_size: the caller's size of the struct, with
 * TR_STRUCT_MAGIC in its high 16 bits (troupe.h: TR_STRUCT_SIZE, set by the _INIT macros
 * and _init functions), so that a struct nobody initialised is refused, never read past
 * its end. The library accepts every published version of a struct, from the first one
 * up: a caller built against an older header passes a smaller struct (the fields it
 * lacks take their defaults), one built against a newer header a larger one (the fields
 * this library does not know are ignored). So adding a field at the end never breaks a
 * compiled binding. A binary built before 0.3 has no magic: its struct_size is accepted
 * at exactly the struct's first size or the library's (every struct's size as of 0.2;
 * api_test pins them, so a struct that grows must keep accepting 0.2's size here).
 * Header-only; thread safety: any thread.
 */
#ifndef TR_CORE_ABI_H
#define TR_CORE_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/status.h"
#include "troupe/troupe.h"

/* The size of a struct's version whose last field is `last` (the first published size of
 * a struct is this with its first version's last field, and never changes). */
#define TR__SIZE_UPTO(type, last) (offsetof(type, last) + sizeof(((type *)0)->last))
/* sizeof the struct as it was when `last` was its last field (padding included): what a
 * binary built then passes, for a struct that has grown since. */
#define TR__SIZE_WHEN(type, last)                                                                  \
    ((TR__SIZE_UPTO(type, last) + _Alignof(type) - 1) & ~(_Alignof(type) - 1))

/* The caller's size of a struct from its struct_size word (see above): 0 (with the error
 * set) if the word is not one an initialiser wrote or the size is below v1_size. mine:
 * this library's size of the struct. */
static inline size_t tr__struct_size(uint32_t word, size_t v1_size, size_t mine, const char *what) {
    size_t n;
    if ((word & 0xffff0000u) == TR_STRUCT_MAGIC) {
        n = word & 0xffffu;
    } else if (word == v1_size || word == mine) { /* a binary from before 0.3 */
        n = word;
    } else {
        tr__err(TR_EINVAL,
                "%s: struct_size 0x%x is not one an initialiser wrote (no TR_STRUCT_MAGIC): "
                "initialise the struct with its _INIT macro or _init function",
                what, word);
        return 0;
    }
    if (n < v1_size) {
        tr__err(TR_EINVAL,
                "%s: struct_size %zu is below the smallest this library accepts (%zu); "
                "initialise the struct with its _INIT macro or _init function",
                what, n, v1_size);
        return 0;
    }
    return n;
}

/* Copies a caller's struct into dst (dst_size bytes, filled with defaults beforehand):
 * as much of it as both versions have. dst's struct_size becomes dst_size (the library's
 * own copy: no magic). Returns 0, or TR_EINVAL (see tr__struct_size). */
static inline int tr__struct_in(void *dst, size_t dst_size, const void *src, size_t v1_size,
                                const char *what) {
    uint32_t word;
    memcpy(&word, src, sizeof word);
    size_t n = tr__struct_size(word, v1_size, dst_size, what);
    if (!n) return TR_EINVAL;
    memcpy(dst, src, n < dst_size ? n : dst_size);
    uint32_t mine = (uint32_t)dst_size;
    memcpy(dst, &mine, sizeof mine);
    return 0;
}

/* Writes src (src_size bytes, struct_size first) into a caller's struct, as much of it as
 * the caller's struct_size holds; the caller's struct_size is left as it was. Returns 0,
 * or TR_EINVAL (see tr__struct_size). */
static inline int tr__struct_out(void *dst, const void *src, size_t src_size, size_t v1_size,
                                 const char *what) {
    uint32_t word;
    memcpy(&word, dst, sizeof word);
    size_t n = tr__struct_size(word, v1_size, src_size, what);
    if (!n) return TR_EINVAL;
    size_t k = n < src_size ? n : src_size;
    memcpy((char *)dst + sizeof word, (const char *)src + sizeof word, k - sizeof word);
    return 0;
}

#endif
