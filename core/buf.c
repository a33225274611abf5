/* core/buf.c - growable byte buffer. */
#include "core/buf.h"

#include <stdarg.h>
#include <stdio.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"

int tr__buf_reserve(tr__buf *b, size_t extra) {
    if (b->oom) return TR_ENOMEM;
    if (b->cap - b->len >= extra) return 0;
    /* Reclaim the consumed prefix before growing. */
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->cap - b->len >= extra) return 0;
    }
    size_t need = b->len + extra;
    if (need < b->len) goto oom;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > ((size_t)-1) / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) goto oom;
    b->data = p;
    b->cap = cap;
    return 0;
oom:
    b->oom = true;
    return tr__err(TR_ENOMEM, "buffer growth to %zu more bytes failed", extra);
}

int tr__buf_append(tr__buf *b, const void *p, size_t n) {
    if (n == 0) return b->oom ? TR_ENOMEM : 0;
    int rc = tr__buf_reserve(b, n);
    if (rc) return rc;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void tr__buf_consume(tr__buf *b, size_t n) {
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

void tr__buf_reset(tr__buf *b) {
    b->off = b->len = 0;
    b->oom = false;
}

void tr__buf_free(tr__buf *b) {
    free(b->data);
    b->data = NULL;
    b->off = b->len = b->cap = 0;
    b->oom = false;
}

void tr__buf_printf(tr__buf *b, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) tr__buf_append(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

void tr__buf_json_str(tr__buf *b, const char *s) {
    tr__buf_append(b, "\"", 1);
    for (; s && *s; s++) {
        char esc[8];
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            tr__buf_append(b, esc, 2);
        } else if (ch < 0x20) {
            int n = snprintf(esc, sizeof esc, "\\u%04x", ch);
            tr__buf_append(b, esc, (size_t)n);
        } else {
            tr__buf_append(b, s, 1);
        }
    }
    tr__buf_append(b, "\"", 1);
}
