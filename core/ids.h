/* core/ids.h - random ids and their hex text. Thread safety: any thread. */
#ifndef TR_CORE_IDS_H
#define TR_CORE_IDS_H

#include <stddef.h>
#include <stdint.h>

/* Fills p with n random bytes from getrandom(2). Returns 0, or TR_EIO (or the errno's code)
 * when the kernel gives none: there is no fallback, the caller fails (nothing of troupe
 * runs on guessable ids, tickets or tokens). */
int tr__random_bytes(void *p, size_t n) __attribute__((warn_unused_result));
/* Writes 2n hex digits and a NUL into out. */
void tr__hex(const void *p, size_t n, char *out);
/* Parses exactly 2n hex digits. Returns 0 or TR_EINVAL. */
int tr__unhex(const char *s, size_t slen, void *out, size_t n);
/* 64-bit key for hashing a 16-byte id (its first 8 bytes are random). */
uint64_t tr__id_key(const uint8_t id[16]);

#endif
