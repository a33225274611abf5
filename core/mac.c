/* core/mac.c - see mac.h. */
#include "core/mac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <string.h>

#include "core/status.h"

int tr__mac(const void *key, size_t key_len, const void *const *msg, const size_t *len, int n,
            uint8_t out[TR__MAC_BYTES]) {
    memset(out, 0, TR__MAC_BYTES);
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *c = mac ? EVP_MAC_CTX_new(mac) : NULL;
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
                           OSSL_PARAM_construct_end()};
    size_t got = 0;
    int ok = c && EVP_MAC_init(c, key, key_len, params) == 1;
    for (int i = 0; ok && i < n; i++)
        ok = EVP_MAC_update(c, msg[i], len[i]) == 1;
    ok = ok && EVP_MAC_final(c, out, &got, TR__MAC_BYTES) == 1 && got == TR__MAC_BYTES;
    EVP_MAC_CTX_free(c);
    EVP_MAC_free(mac);
    if (!ok) {
        memset(out, 0, TR__MAC_BYTES);
        return tr__err(TR_EINTERNAL, "HMAC-SHA256: libcrypto refused");
    }
    return 0;
}

int tr__mac_equal(const uint8_t a[TR__MAC_BYTES], const uint8_t b[TR__MAC_BYTES]) {
    static const uint8_t zero[TR__MAC_BYTES];
    return CRYPTO_memcmp(a, b, TR__MAC_BYTES) == 0 && CRYPTO_memcmp(a, zero, TR__MAC_BYTES) != 0;
}
