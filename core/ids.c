/* core/ids.c - random ids and hex encoding. */
#include "core/ids.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/status.h"

int tr__random_bytes(void *p, size_t n) {
    uint8_t *out = p;
    while (n > 0) {
        ssize_t r = getrandom(out, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) /* no silent fallback: ids, tickets and tokens must not be guessable */
            return tr__err_errno(r < 0 ? errno : EIO,
                                 "getrandom: the kernel gives no random bytes (ids, tickets "
                                 "and tokens need them)");
        out += r;
        n -= (size_t)r;
    }
    return 0;
}

void tr__hex(const void *p, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int tr__unhex(const char *s, size_t slen, void *out, size_t n) {
    if (!s || slen != 2 * n) return TR_EINVAL;
    uint8_t *b = out;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return TR_EINVAL;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

uint64_t tr__id_key(const uint8_t id[16]) {
    uint64_t k;
    memcpy(&k, id, sizeof k);
    return k;
}
