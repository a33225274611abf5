/* core/ids.c - random ids and hex encoding. */
#include "core/ids.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/status.h"

void tr__random_bytes(void *p, size_t n) {
    uint8_t *out = p;
    while (n > 0) {
        ssize_t r = getrandom(out, n, 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            break;
        }
        out += r;
        n -= (size_t)r;
    }
    if (n > 0) { /* getrandom unavailable: splitmix64 over time and pid */
        uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)p;
        while (n > 0) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            size_t k = n < 8 ? n : 8;
            memcpy(out, &z, k);
            out += k;
            n -= k;
        }
    }
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
