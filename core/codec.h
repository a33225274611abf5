/* core/codec.h - the msgpack codec: the only module that includes msgpack.h.
 *
 * Encoding appends msgpack to a tr__buf (errors are sticky in buf->oom: check once).
 * Decoding parses one whole message into a tr__dec; values are views (tr__obj) into the
 * message and into the tr__dec, valid until tr__dec_free. Every getter checks the type
 * and returns TR_EPROTO naming the field, so handlers never trust peer input.
 * Not thread-safe per object; no global state.
 */
#ifndef TR_CORE_CODEC_H
#define TR_CORE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/buf.h"

void tr__enc_map(tr__buf *b, uint32_t n);
/* A map counted where it ends, for one whose pairs depend on conditions:
 *     size_t m = tr__enc_map_open(b);
 *     ... keys and values (nested maps opened and closed inside) ...
 *     tr__enc_map_close(b, m);
 * The header is a map32 (five bytes, valid for any count); the close counts the whole
 * values written since the open and writes half of them into it. Between the two, only
 * whole values: not a tr__enc_bin_header whose body goes elsewhere. A count that is odd,
 * or bytes that are not whole values, set b->oom (the encoding failed, as on no memory). */
size_t tr__enc_map_open(tr__buf *b);
void tr__enc_map_close(tr__buf *b, size_t m);
void tr__enc_array(tr__buf *b, uint32_t n);
void tr__enc_str(tr__buf *b, const char *s); /* NULL encodes nil */
void tr__enc_strn(tr__buf *b, const char *s, size_t n);
void tr__enc_bin(tr__buf *b, const void *p, size_t n);
/* Only the header of a bin of n bytes: the body follows separately (writev). */
void tr__enc_bin_header(tr__buf *b, size_t n);
void tr__enc_int(tr__buf *b, int64_t v);
void tr__enc_uint(tr__buf *b, uint64_t v);
void tr__enc_double(tr__buf *b, double v);
void tr__enc_bool(tr__buf *b, bool v);
void tr__enc_nil(tr__buf *b);

/* A decoded value (really a msgpack_object). */
typedef struct tr__obj tr__obj;

typedef struct tr__dec {
    union { /* msgpack_unpacked, kept opaque (C and C++ both accept an anonymous union) */
        unsigned char impl[32];
        void *align_ptr_;
        double align_dbl_;
    };
    const tr__obj *root;
    bool live;
} tr__dec;

/* Parses exactly one message filling all of data[0..len). Returns 0 or TR_EPROTO
 * (malformed, truncated, trailing bytes) or TR_ENOMEM. On error nothing needs freeing. */
int tr__dec_init(tr__dec *d, const void *data, size_t len);
void tr__dec_free(tr__dec *d);

/* Flat reads of one value at p[*pos] (of len bytes), with no decoder: for the hot frames
 * whose shape is fixed (a call's, a result's), read in place. Each returns 1 and moves
 * *pos past the value where it is of the kind asked for and whole, else 0 with *pos
 * unchanged and no error set (the caller then takes tr__dec_init, which words what is
 * wrong). They accept what tr__obj_* accept: an array's count; an integer that fits
 * int64; bin or str (tr__flat_bin); str (tr__flat_str). */
int tr__flat_array(const void *p, size_t len, size_t *pos, size_t *n);
int tr__flat_int(const void *p, size_t len, size_t *pos, int64_t *v);
int tr__flat_bin(const void *p, size_t len, size_t *pos, const void **data, size_t *n);
int tr__flat_str(const void *p, size_t len, size_t *pos, const char **data, size_t *n);

enum {
    TR__T_NIL,
    TR__T_BOOL,
    TR__T_INT,
    TR__T_FLOAT,
    TR__T_STR,
    TR__T_BIN,
    TR__T_ARRAY,
    TR__T_MAP,
    TR__T_OTHER
};
int tr__obj_type(const tr__obj *o);

/* Map lookup by string key; NULL if o is not a map or has no such key. */
const tr__obj *tr__obj_get(const tr__obj *o, const char *key);
size_t tr__obj_len(const tr__obj *o);                      /* array/map entries, 0 otherwise */
const tr__obj *tr__obj_at(const tr__obj *o, size_t i);     /* array element */
const tr__obj *tr__obj_key_at(const tr__obj *o, size_t i); /* map key */
const tr__obj *tr__obj_val_at(const tr__obj *o, size_t i); /* map value */

/* Typed reads: 0 or TR_EPROTO (wrong type / out of range). `what` names the field in the
 * error text. */
int tr__obj_str(const tr__obj *o, const char *what, const char **p, size_t *n);
int tr__obj_bin(const tr__obj *o, const char *what, const void **p, size_t *n);
int tr__obj_int(const tr__obj *o, const char *what, int64_t *v);
int tr__obj_uint(const tr__obj *o, const char *what, uint64_t *v);
int tr__obj_double(const tr__obj *o, const char *what, double *v); /* ints accepted */
int tr__obj_bool(const tr__obj *o, const char *what, bool *v);

/* Map field shortcuts: a missing field is TR_EPROTO too. */
int tr__get_str(const tr__obj *map, const char *key, const char **p, size_t *n);
int tr__get_bin(const tr__obj *map, const char *key, const void **p, size_t *n);
int tr__get_int(const tr__obj *map, const char *key, int64_t *v);
int tr__get_uint(const tr__obj *map, const char *key, uint64_t *v);
int tr__get_double(const tr__obj *map, const char *key, double *v);
/* Copies a str field into a NUL-terminated malloc'd string (caller frees). */
int tr__get_strdup(const tr__obj *map, const char *key, char **out);
/* A fixed-size id given as bin of exactly n bytes. */
int tr__get_id(const tr__obj *map, const char *key, void *out, size_t n);

#endif
