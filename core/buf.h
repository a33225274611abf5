/* core/buf.h - a growable byte buffer: the one used by the codec, framing and sockets.
 *
 * Contract: data[off .. len) is the unread part (input buffers consume from the front);
 * appends grow the buffer geometrically. After an allocation failure `oom` stays set and
 * further appends are ignored, so encoders check once at the end. Not thread-safe.
 */
#ifndef TR_CORE_BUF_H
#define TR_CORE_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tr__buf {
    char *data;
    size_t off; /* first unread byte */
    size_t len; /* end of valid bytes */
    size_t cap;
    bool oom;
} tr__buf;

#define TR__BUF_INIT                                                                               \
    { NULL, 0, 0, 0, false }

/* Makes room for `extra` more bytes after len. Returns 0 or TR_ENOMEM. */
int tr__buf_reserve(tr__buf *b, size_t extra);
int tr__buf_append(tr__buf *b, const void *p, size_t n);
/* Drops n unread bytes from the front; compacts when everything is read. */
void tr__buf_consume(tr__buf *b, size_t n);
/* Unread byte count. */
static inline size_t tr__buf_avail(const tr__buf *b) {
    return b->len - b->off;
}
void tr__buf_reset(tr__buf *b);
/* Appends s as a JSON string: quoted, '"' and '\' escaped, control characters as \u00XX
 * (NULL: ""). Other bytes pass as they are (UTF-8 stays UTF-8). */
void tr__buf_json_str(tr__buf *b, const char *s);
/* Appends printf's text (at most 1023 bytes of it). */
void tr__buf_printf(tr__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tr__buf_free(tr__buf *b);

#endif
