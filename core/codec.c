/* core/codec.c - msgpack-c behind a small typed interface. Decoded str/bin values point
 * into the caller's message buffer (msgpack-c references it), so no payload is copied. */
#include "core/codec.h"

#include <assert.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

static_assert(sizeof(msgpack_unpacked) <= sizeof(((tr__dec *)0)->impl), "tr__dec too small");

static int buf_write(void *data, const char *p, size_t n) {
    return tr__buf_append(data, p, n) ? -1 : 0;
}

#define PACKER(b)                                                                                  \
    msgpack_packer pk;                                                                             \
    msgpack_packer_init(&pk, (b), buf_write)

void tr__enc_map(tr__buf *b, uint32_t n) {
    PACKER(b);
    msgpack_pack_map(&pk, n);
}
void tr__enc_array(tr__buf *b, uint32_t n) {
    PACKER(b);
    msgpack_pack_array(&pk, n);
}
void tr__enc_strn(tr__buf *b, const char *s, size_t n) {
    PACKER(b);
    if (n > UINT32_MAX) {
        b->oom = true;
        return;
    }
    msgpack_pack_str(&pk, n);
    msgpack_pack_str_body(&pk, s, n);
}
void tr__enc_str(tr__buf *b, const char *s) {
    if (!s) {
        tr__enc_nil(b);
        return;
    }
    tr__enc_strn(b, s, strlen(s));
}
void tr__enc_bin_header(tr__buf *b, size_t n) {
    PACKER(b);
    if (n > UINT32_MAX) {
        b->oom = true;
        return;
    }
    msgpack_pack_bin(&pk, n);
}
void tr__enc_bin(tr__buf *b, const void *p, size_t n) {
    PACKER(b);
    if (n > UINT32_MAX) {
        b->oom = true;
        return;
    }
    msgpack_pack_bin(&pk, n);
    msgpack_pack_bin_body(&pk, p, n);
}
void tr__enc_int(tr__buf *b, int64_t v) {
    PACKER(b);
    msgpack_pack_int64(&pk, v);
}
void tr__enc_uint(tr__buf *b, uint64_t v) {
    PACKER(b);
    msgpack_pack_uint64(&pk, v);
}
void tr__enc_double(tr__buf *b, double v) {
    PACKER(b);
    msgpack_pack_double(&pk, v);
}
void tr__enc_bool(tr__buf *b, bool v) {
    PACKER(b);
    if (v)
        msgpack_pack_true(&pk);
    else
        msgpack_pack_false(&pk);
}
void tr__enc_nil(tr__buf *b) {
    PACKER(b);
    msgpack_pack_nil(&pk);
}

#define MO(o) ((const msgpack_object *)(o))

#define MAX_DEPTH 32
/* Elements of all the containers of one message, at most. msgpack-c gives each a 24-byte
 * object up front (a map entry two), so this bounds a decode's memory to 6 MiB whatever
 * the message's size (a 64 MiB message of one-byte elements cost ~1.5 GiB). The largest
 * message troupe makes holds far fewer: a compiled graph's attach, with at most 4096
 * channels, sends and receives of a few elements each (~90,000). */
#define MAX_ELEMS ((uint64_t)1 << 18)

static uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* One value's head at p[*pos] (pos < len): moves *pos past it, and says how many bytes
 * its body takes after it (*skip: a str's, a bin's, a number's) and how many elements it
 * holds (*children: a container's, a map's pairs counted twice). Returns 0, HEAD_BAD (no
 * such type byte) or HEAD_SHORT (the message ends inside its length field). */
enum { HEAD_BAD = 1, HEAD_SHORT };
static int head(const uint8_t *p, size_t len, size_t *pos, uint64_t *skip, uint64_t *children) {
    uint8_t b = p[(*pos)++];
    int hdr = 0; /* bytes of length/count field */
    *skip = *children = 0;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
    } else if (b <= 0x8f) {
        *children = 2u * (b & 0x0f);
    } else if (b <= 0x9f) {
        *children = b & 0x0f;
    } else if (b <= 0xbf) {
        *skip = b & 0x1f;
    } else {
        switch (b) {
        case 0xc4:
        case 0xc5:
        case 0xc6: /* bin 8/16/32 */
        case 0xd9:
        case 0xda:
        case 0xdb: /* str 8/16/32 */
            hdr = b == 0xc4 || b == 0xd9 ? 1 : b == 0xc5 || b == 0xda ? 2 : 4;
            break;
        case 0xc7:
        case 0xc8:
        case 0xc9: /* ext 8/16/32: length, then a type byte */
            hdr = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
            *skip = 1;
            break;
        case 0xca:
            *skip = 4;
            break;
        case 0xcb:
            *skip = 8;
            break;
        case 0xcc:
        case 0xd0:
            *skip = 1;
            break;
        case 0xcd:
        case 0xd1:
            *skip = 2;
            break;
        case 0xce:
        case 0xd2:
            *skip = 4;
            break;
        case 0xcf:
        case 0xd3:
            *skip = 8;
            break;
        case 0xd4:
            *skip = 2;
            break;
        case 0xd5:
            *skip = 3;
            break;
        case 0xd6:
            *skip = 5;
            break;
        case 0xd7:
            *skip = 9;
            break;
        case 0xd8:
            *skip = 17;
            break;
        case 0xdc:
        case 0xdd: /* array 16/32 */
        case 0xde:
        case 0xdf: /* map 16/32 */
            hdr = b == 0xdc || b == 0xde ? 2 : 4;
            break;
        default:
            return HEAD_BAD;
        }
    }
    if (hdr) {
        if (len - *pos < (size_t)hdr) return HEAD_SHORT;
        uint64_t n = be(p + *pos, hdr);
        *pos += (size_t)hdr;
        if (b >= 0xdc && b <= 0xdf)
            *children = b >= 0xde ? 2 * n : n;
        else
            *skip += n;
    }
    return 0;
}

/* One pass over the bytes, without recursion, before msgpack-c sees them: msgpack-c
 * allocates a container's declared element count up front, so a 5-byte message claiming
 * 2^32 elements would ask for 64 GiB. Here every count must fit in the bytes that are
 * left (each element takes at least one), every length must fit in the message, the
 * containers' elements add up to MAX_ELEMS at most, and nesting stays within MAX_DEPTH.
 * Returns 0 or TR_EPROTO. */
static int prescan(const uint8_t *p, size_t len) {
    uint64_t stack[MAX_DEPTH + 1], elems = 0;
    int depth = 0;
    stack[0] = 1;
    size_t pos = 0;
    while (depth >= 0) {
        if (stack[depth] == 0) {
            depth--;
            continue;
        }
        stack[depth]--;
        if (pos >= len) return tr__err(TR_EPROTO, "msgpack: truncated message of %zu bytes", len);
        uint64_t children, skip;
        uint8_t b = p[pos];
        int h = head(p, len, &pos, &skip, &children);
        if (h == HEAD_BAD) return tr__err(TR_EPROTO, "msgpack: invalid type byte 0x%02x", b);
        if (h == HEAD_SHORT)
            return tr__err(TR_EPROTO, "msgpack: truncated message of %zu bytes", len);
        if (skip > len - pos)
            return tr__err(TR_EPROTO,
                           "msgpack: a value of %llu bytes overruns the %zu-byte "
                           "message",
                           (unsigned long long)skip, len);
        pos += (size_t)skip;
        if (children) {
            if (children > len - pos)
                return tr__err(TR_EPROTO,
                               "msgpack: a container of %llu elements cannot fit in "
                               "%zu bytes",
                               (unsigned long long)children, len - pos);
            if (depth == MAX_DEPTH)
                return tr__err(TR_EPROTO, "msgpack: nesting deeper than %d", MAX_DEPTH);
            if ((elems += children) > MAX_ELEMS)
                return tr__err(TR_EPROTO, "msgpack: more than %llu elements in one message",
                               (unsigned long long)MAX_ELEMS);
            stack[++depth] = children;
        }
    }
    if (pos != len)
        return tr__err(TR_EPROTO, "msgpack: %zu trailing bytes after the message", len - pos);
    return 0;
}

/* A map whose count is patched at its close: its header is always a map32 (0xdf and four
 * bytes), which msgpack allows for any count. */
size_t tr__enc_map_open(tr__buf *b) {
    size_t m = b->len;
    tr__buf_append(b, "\xdf\0\0\0\0", 5);
    return m;
}

/* Counts the whole values written after the header (containers are walked, not counted:
 * one value each), and writes half of that, the pairs, into it. Encoders wrote those
 * bytes, so they are sound unless a caller broke the rules (an odd count, a bin header
 * whose body is not there): then b->oom, as any failed encode. An inner map must be
 * closed before its outer one (an open one's count still reads 0). */
void tr__enc_map_close(tr__buf *b, size_t m) {
    if (b->oom) return;
    if (m > b->len || b->len - m < 5 || (uint8_t)b->data[m] != 0xdf) {
        b->oom = true;
        return;
    }
    const uint8_t *p = (const uint8_t *)b->data + m + 5;
    size_t len = b->len - m - 5, pos = 0;
    uint64_t values = 0, pending = 0; /* elements of the current value still to walk */
    while (pos < len) {
        if (pending == 0) {
            values++;
            pending = 1;
        }
        pending--;
        uint64_t children, skip;
        if (head(p, len, &pos, &skip, &children) || skip > len - pos) {
            b->oom = true;
            return;
        }
        pos += (size_t)skip;
        pending += children;
    }
    if (pending || values % 2 || values / 2 > UINT32_MAX) {
        b->oom = true;
        return;
    }
    uint32_t n = (uint32_t)(values / 2);
    uint8_t be32[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    memcpy(b->data + m + 1, be32, 4);
}

/* Each thread keeps the zone of its last decode (cleared: its first chunk kept) for its
 * next one: msgpack_unpack_next allocates an 8 KiB zone per message and frees it after,
 * two trips through malloc on every call's and every result's way. A decode while
 * another lives on the same thread takes a zone of its own. The kept zone goes with its
 * thread (the key's destructor). */
static pthread_key_t zone_key;
static pthread_once_t zone_once = PTHREAD_ONCE_INIT;

static void zone_drop(void *z) {
    msgpack_zone_free(z);
}

static void zone_key_make(void) {
    if (pthread_key_create(&zone_key, zone_drop) != 0) zone_key = (pthread_key_t)-1;
}

static msgpack_zone *zone_take(void) {
    pthread_once(&zone_once, zone_key_make);
    msgpack_zone *z = zone_key != (pthread_key_t)-1 ? pthread_getspecific(zone_key) : NULL;
    if (z) {
        pthread_setspecific(zone_key, NULL);
        return z;
    }
    return msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
}

static void zone_give(msgpack_zone *z) {
    if (zone_key != (pthread_key_t)-1 && !pthread_getspecific(zone_key)) {
        msgpack_zone_clear(z);
        if (pthread_setspecific(zone_key, z) == 0) return;
    }
    msgpack_zone_free(z);
}

int tr__dec_init(tr__dec *d, const void *data, size_t len) {
    msgpack_unpacked *u = (msgpack_unpacked *)d->impl;
    d->live = false;
    d->root = NULL;
    int rc = prescan(data, len);
    if (rc) return rc;
    msgpack_unpacked_init(u);
    if (!(u->zone = zone_take())) return tr__err(TR_ENOMEM, "msgpack: out of memory");
    size_t off = 0;
    msgpack_unpack_return r = msgpack_unpack(data, len, &off, u->zone, &u->data);
    if (r != MSGPACK_UNPACK_SUCCESS || off != len) {
        zone_give(u->zone);
        u->zone = NULL;
        if (r == MSGPACK_UNPACK_NOMEM_ERROR)
            return tr__err(TR_ENOMEM, "msgpack: out of memory decoding %zu bytes", len);
        if (r == MSGPACK_UNPACK_SUCCESS || r == MSGPACK_UNPACK_EXTRA_BYTES)
            return tr__err(TR_EPROTO, "msgpack: %zu trailing bytes after the message", len - off);
        return tr__err(TR_EPROTO, "msgpack: %s message of %zu bytes",
                       r == MSGPACK_UNPACK_CONTINUE ? "truncated" : "malformed", len);
    }
    d->live = true;
    d->root = (const tr__obj *)&u->data;
    return 0;
}

int tr__flat_array(const void *p, size_t len, size_t *pos, size_t *n) {
    const uint8_t *b = p;
    size_t at = *pos;
    if (at >= len) return 0;
    if (b[at] >= 0x90 && b[at] <= 0x9f) {
        *n = b[at] & 0x0f;
        *pos = at + 1;
        return 1;
    }
    int w = b[at] == 0xdc ? 2 : b[at] == 0xdd ? 4 : 0;
    if (!w || len - at - 1 < (size_t)w) return 0;
    *n = (size_t)be(b + at + 1, w);
    *pos = at + 1 + (size_t)w;
    return 1;
}

int tr__flat_int(const void *p, size_t len, size_t *pos, int64_t *v) {
    const uint8_t *b = p;
    size_t at = *pos;
    if (at >= len) return 0;
    uint8_t t = b[at];
    if (t <= 0x7f || t >= 0xe0) { /* positive and negative fixint */
        *v = (int8_t)t;
        *pos = at + 1;
        return 1;
    }
    int w = t == 0xcc || t == 0xd0   ? 1
            : t == 0xcd || t == 0xd1 ? 2
            : t == 0xce || t == 0xd2 ? 4
            : t == 0xcf || t == 0xd3 ? 8
                                     : 0;
    if (!w || len - at - 1 < (size_t)w) return 0;
    uint64_t u = be(b + at + 1, w);
    if (t >= 0xd0) { /* signed: sign-extended from w bytes */
        if (w < 8 && (u >> (8 * w - 1)) & 1) u |= ~(uint64_t)0 << (8 * w);
        *v = (int64_t)u;
    } else {
        if (u > INT64_MAX) return 0;
        *v = (int64_t)u;
    }
    *pos = at + 1 + (size_t)w;
    return 1;
}

/* bin (allow_bin) or str at p[*pos]: its bytes in place. */
static int flat_bytes(const uint8_t *b, size_t len, size_t *pos, const void **data, size_t *n,
                      int allow_bin) {
    size_t at = *pos, hdr, body;
    if (at >= len) return 0;
    uint8_t t = b[at];
    if (t >= 0xa0 && t <= 0xbf) {
        hdr = 1, body = t & 0x1f;
    } else {
        int w = t == 0xd9 ? 1 : t == 0xda ? 2 : t == 0xdb ? 4 : 0;
        if (!w && allow_bin) w = t == 0xc4 ? 1 : t == 0xc5 ? 2 : t == 0xc6 ? 4 : 0;
        if (!w || len - at - 1 < (size_t)w) return 0;
        hdr = 1 + (size_t)w, body = (size_t)be(b + at + 1, w);
    }
    if (len - at - hdr < body) return 0;
    *data = b + at + hdr;
    *n = body;
    *pos = at + hdr + body;
    return 1;
}

int tr__flat_bin(const void *p, size_t len, size_t *pos, const void **data, size_t *n) {
    return flat_bytes(p, len, pos, data, n, 1);
}

int tr__flat_str(const void *p, size_t len, size_t *pos, const char **data, size_t *n) {
    const void *d;
    if (!flat_bytes(p, len, pos, &d, n, 0)) return 0;
    *data = d;
    return 1;
}

void tr__dec_free(tr__dec *d) {
    if (d && d->live) {
        msgpack_unpacked *u = (msgpack_unpacked *)d->impl;
        zone_give(u->zone);
        u->zone = NULL;
        d->live = false;
        d->root = NULL;
    }
}

int tr__obj_type(const tr__obj *o) {
    if (!o) return TR__T_OTHER;
    switch (MO(o)->type) {
    case MSGPACK_OBJECT_NIL:
        return TR__T_NIL;
    case MSGPACK_OBJECT_BOOLEAN:
        return TR__T_BOOL;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return TR__T_INT;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return TR__T_FLOAT;
    case MSGPACK_OBJECT_STR:
        return TR__T_STR;
    case MSGPACK_OBJECT_BIN:
        return TR__T_BIN;
    case MSGPACK_OBJECT_ARRAY:
        return TR__T_ARRAY;
    case MSGPACK_OBJECT_MAP:
        return TR__T_MAP;
    default:
        return TR__T_OTHER;
    }
}

const tr__obj *tr__obj_get(const tr__obj *o, const char *key) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_MAP) return NULL;
    size_t klen = strlen(key);
    const msgpack_object_map *m = &MO(o)->via.map;
    for (uint32_t i = 0; i < m->size; i++) {
        const msgpack_object *k = &m->ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
            memcmp(k->via.str.ptr, key, klen) == 0)
            return (const tr__obj *)&m->ptr[i].val;
    }
    return NULL;
}

size_t tr__obj_len(const tr__obj *o) {
    if (!o) return 0;
    if (MO(o)->type == MSGPACK_OBJECT_ARRAY) return MO(o)->via.array.size;
    if (MO(o)->type == MSGPACK_OBJECT_MAP) return MO(o)->via.map.size;
    return 0;
}

const tr__obj *tr__obj_at(const tr__obj *o, size_t i) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_ARRAY || i >= MO(o)->via.array.size) return NULL;
    return (const tr__obj *)&MO(o)->via.array.ptr[i];
}

const tr__obj *tr__obj_key_at(const tr__obj *o, size_t i) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_MAP || i >= MO(o)->via.map.size) return NULL;
    return (const tr__obj *)&MO(o)->via.map.ptr[i].key;
}

const tr__obj *tr__obj_val_at(const tr__obj *o, size_t i) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_MAP || i >= MO(o)->via.map.size) return NULL;
    return (const tr__obj *)&MO(o)->via.map.ptr[i].val;
}

static int bad(const char *what, const char *want) {
    return tr__err(TR_EPROTO, "field '%s' is missing or not %s", what ? what : "?", want);
}

int tr__obj_str(const tr__obj *o, const char *what, const char **p, size_t *n) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_STR) return bad(what, "a string");
    *p = MO(o)->via.str.ptr;
    *n = MO(o)->via.str.size;
    return 0;
}

int tr__obj_bin(const tr__obj *o, const char *what, const void **p, size_t *n) {
    if (!o || (MO(o)->type != MSGPACK_OBJECT_BIN && MO(o)->type != MSGPACK_OBJECT_STR))
        return bad(what, "bytes");
    /* str and bin share layout in msgpack_object. */
    *p = MO(o)->via.bin.ptr;
    *n = MO(o)->via.bin.size;
    return 0;
}

int tr__obj_int(const tr__obj *o, const char *what, int64_t *v) {
    if (!o) return bad(what, "an integer");
    if (MO(o)->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *v = MO(o)->via.i64;
        return 0;
    }
    if (MO(o)->type == MSGPACK_OBJECT_POSITIVE_INTEGER && MO(o)->via.u64 <= INT64_MAX) {
        *v = (int64_t)MO(o)->via.u64;
        return 0;
    }
    return bad(what, "an int64");
}

int tr__obj_uint(const tr__obj *o, const char *what, uint64_t *v) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return bad(what, "a uint64");
    *v = MO(o)->via.u64;
    return 0;
}

int tr__obj_double(const tr__obj *o, const char *what, double *v) {
    if (!o) return bad(what, "a number");
    switch (MO(o)->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        *v = MO(o)->via.f64;
        return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *v = (double)MO(o)->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *v = (double)MO(o)->via.i64;
        return 0;
    default:
        return bad(what, "a number");
    }
}

int tr__obj_bool(const tr__obj *o, const char *what, bool *v) {
    if (!o || MO(o)->type != MSGPACK_OBJECT_BOOLEAN) return bad(what, "a boolean");
    *v = MO(o)->via.boolean;
    return 0;
}

int tr__get_str(const tr__obj *map, const char *key, const char **p, size_t *n) {
    return tr__obj_str(tr__obj_get(map, key), key, p, n);
}
int tr__get_bin(const tr__obj *map, const char *key, const void **p, size_t *n) {
    return tr__obj_bin(tr__obj_get(map, key), key, p, n);
}
int tr__get_int(const tr__obj *map, const char *key, int64_t *v) {
    return tr__obj_int(tr__obj_get(map, key), key, v);
}
int tr__get_uint(const tr__obj *map, const char *key, uint64_t *v) {
    return tr__obj_uint(tr__obj_get(map, key), key, v);
}
int tr__get_double(const tr__obj *map, const char *key, double *v) {
    return tr__obj_double(tr__obj_get(map, key), key, v);
}

int tr__get_strdup(const tr__obj *map, const char *key, char **out) {
    const char *p = NULL;
    size_t n = 0;
    int rc = tr__get_str(map, key, &p, &n);
    if (rc) return rc;
    if (memchr(p, '\0', n)) return tr__err(TR_EPROTO, "field '%s' contains a NUL byte", key);
    char *s = malloc(n + 1);
    if (!s) return tr__err(TR_ENOMEM, "copying field '%s'", key);
    memcpy(s, p, n);
    s[n] = '\0';
    *out = s;
    return 0;
}

int tr__get_id(const tr__obj *map, const char *key, void *out, size_t n) {
    const void *p = NULL;
    size_t len = 0;
    int rc = tr__get_bin(map, key, &p, &len);
    if (rc) return rc;
    if (len != n) return tr__err(TR_EPROTO, "field '%s' has %zu bytes, want %zu", key, len, n);
    memcpy(out, p, n);
    return 0;
}
