// core/mac_test.cc - HMAC-SHA256 against RFC 4231's test vectors, and its comparison.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

extern "C" {
#include "core/ids.h"
#include "core/mac.h"
}

namespace {

std::string hex(const uint8_t *p, size_t n) {
    char out[2 * TR__MAC_BYTES + 1];
    tr__hex(p, n, out);
    return out;
}

/* RFC 4231, test cases 1 and 2; the message in pieces is the same MAC. */
TEST(Mac, Rfc4231Vectors) {
    uint8_t key[20], out[TR__MAC_BYTES];
    memset(key, 0x0b, sizeof key);
    const void *msg[] = {"Hi There"};
    size_t len[] = {8};
    ASSERT_EQ(tr__mac(key, sizeof key, msg, len, 1, out), 0);
    EXPECT_EQ(hex(out, sizeof out),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    const void *msg2[] = {"what do ya want ", "for nothing?"};
    size_t len2[] = {16, 12};
    ASSERT_EQ(tr__mac("Jefe", 4, msg2, len2, 2, out), 0);
    EXPECT_EQ(hex(out, sizeof out),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Mac, EqualIsExactAndZeroMatchesNothing) {
    uint8_t a[TR__MAC_BYTES], b[TR__MAC_BYTES], zero[TR__MAC_BYTES] = {0};
    const void *msg[] = {"x"};
    size_t len[] = {1};
    ASSERT_EQ(tr__mac("k", 1, msg, len, 1, a), 0);
    memcpy(b, a, sizeof b);
    EXPECT_TRUE(tr__mac_equal(a, b));
    b[31] ^= 1;
    EXPECT_FALSE(tr__mac_equal(a, b));
    EXPECT_FALSE(tr__mac_equal(zero, zero));
    ASSERT_EQ(tr__mac("K", 1, msg, len, 1, b), 0); /* another key */
    EXPECT_FALSE(tr__mac_equal(a, b));
}

} // namespace
