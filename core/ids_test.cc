// core/ids_test.cc - random ids and their hex text.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "core/ids.h"
#include "core/status.h"
#include "tools/seccomp.h"
}

namespace {

TEST(Ids, HexKnownValue) {
    const uint8_t in[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    char out[2 * sizeof in + 1];
    memset(out, 'X', sizeof out);
    tr__hex(in, sizeof in, out);
    EXPECT_STREQ(out, "00017f80abff");
}

TEST(Ids, HexEmpty) {
    char out[1] = {'X'};
    tr__hex("", 0, out);
    EXPECT_STREQ(out, "");
    uint8_t b;
    EXPECT_EQ(tr__unhex("", 0, &b, 0), 0);
}

TEST(Ids, RoundTripRandom) {
    std::mt19937 rng(7);
    for (int i = 0; i < 1000; i++) {
        uint8_t id[16], back[16];
        for (auto &x : id)
            x = (uint8_t)rng();
        char hex[33];
        tr__hex(id, sizeof id, hex);
        ASSERT_EQ(strlen(hex), 32u);
        memset(back, 0, sizeof back);
        ASSERT_EQ(tr__unhex(hex, 32, back, sizeof back), 0);
        ASSERT_EQ(memcmp(id, back, sizeof id), 0);
    }
}

TEST(Ids, UnhexAcceptsUpperCase) {
    uint8_t b[3];
    ASSERT_EQ(tr__unhex("ABcdEf", 6, b, 3), 0);
    EXPECT_EQ(b[0], 0xab);
    EXPECT_EQ(b[1], 0xcd);
    EXPECT_EQ(b[2], 0xef);
}

TEST(Ids, UnhexRejectsWrongLength) {
    uint8_t b[4] = {1, 2, 3, 4};
    EXPECT_EQ(tr__unhex("0011223", 7, b, 4), TR_EINVAL);
    EXPECT_EQ(tr__unhex("001122334", 9, b, 4), TR_EINVAL);
    EXPECT_EQ(tr__unhex("0011223344", 10, b, 4), TR_EINVAL);
    EXPECT_EQ(tr__unhex("", 0, b, 4), TR_EINVAL);
    EXPECT_EQ(tr__unhex(nullptr, 8, b, 4), TR_EINVAL);
}

TEST(Ids, UnhexRejectsBadDigits) {
    const char *bad[] = {"0g",    "g0",    "0G", " 0", "0 ", "-1", "0x",
                         "\2000", "0\377", ":0", "0/", "@0", "`0", "0`"};
    for (const char *s : bad) {
        uint8_t b = 0;
        EXPECT_EQ(tr__unhex(s, 2, &b, 1), TR_EINVAL) << s;
    }
    // Every single byte value: exactly 22 are hex digits.
    int ok = 0;
    for (int c = 0; c < 256; c++) {
        char s[2] = {(char)c, '0'};
        uint8_t b;
        if (tr__unhex(s, 2, &b, 1) == 0) ok++;
    }
    EXPECT_EQ(ok, 22);
}

TEST(Ids, UnhexRejectsEmbeddedNul) {
    uint8_t b[2];
    const char s[] = {'0', '0', '\0', '0'};
    EXPECT_EQ(tr__unhex(s, 4, b, 2), TR_EINVAL);
}

TEST(Ids, RandomBytesDiffer) {
    std::set<std::string> seen;
    for (int i = 0; i < 1000; i++) {
        uint8_t id[16];
        ASSERT_EQ(tr__random_bytes(id, sizeof id), 0);
        ASSERT_TRUE(seen.emplace((const char *)id, sizeof id).second) << "repeated random id";
    }
    EXPECT_EQ(tr__random_bytes(nullptr, 0), 0);
    // Odd sizes fill every byte (all-zero 1000 bytes is practically impossible).
    uint8_t big[1001] = {0};
    ASSERT_EQ(tr__random_bytes(big, sizeof big), 0);
    int zeros = 0;
    for (uint8_t x : big)
        zeros += x == 0;
    EXPECT_LT(zeros, 40);
}

/* getrandom refused (a seccomp filter, as some sandboxes have): an error, never bytes made
 * up from the time and the pid. In a child, which the filter stays in. */
TEST(Ids, NoRandomBytesIsAnError) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (tr_test_deny_getrandom() != 0) _exit(10);
        uint8_t id[16] = {0};
        int rc = tr__random_bytes(id, sizeof id);
        int said = strstr(tr__last_error(), "getrandom") != nullptr;
        uint8_t zero[16] = {0};
        _exit(rc == 0 ? 11 : !said ? 12 : memcmp(id, zero, 16) != 0 ? 13 : 0);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0) << "10: no filter, 11: bytes anyway, 12: no reason, 13: "
                                     "bytes written";
}

TEST(Ids, IdKeyIsFirstEightBytes) {
    uint8_t id[16];
    for (int i = 0; i < 16; i++)
        id[i] = (uint8_t)(i + 1);
    uint64_t want;
    memcpy(&want, id, 8);
    EXPECT_EQ(tr__id_key(id), want);
    id[8] = 0xff; // the second half does not matter
    EXPECT_EQ(tr__id_key(id), want);
}

} // namespace
