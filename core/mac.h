/* core/mac.h - message authentication for troupe's own connections between nodes (a
 * compiled graph's bridges): HMAC-SHA256 with a shared secret, over OpenSSL's libcrypto
 * (the only file that includes it). Thread safety: any thread. */
#ifndef TR_CORE_MAC_H
#define TR_CORE_MAC_H

#include <stddef.h>
#include <stdint.h>

#define TR__MAC_BYTES 32

/* out = HMAC-SHA256(key, the n pieces of msg one after another). Returns 0, or TR_EINTERNAL
 * (libcrypto refused: out is zeroed, and matches nothing tr__mac_equal accepts). */
int tr__mac(const void *key, size_t key_len, const void *const *msg, const size_t *len, int n,
            uint8_t out[TR__MAC_BYTES]);
/* Whether two MACs are equal, in time that does not depend on where they differ; an
 * all-zero MAC is never equal to anything. */
int tr__mac_equal(const uint8_t a[TR__MAC_BYTES], const uint8_t b[TR__MAC_BYTES]);

#endif
