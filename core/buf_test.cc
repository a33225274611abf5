// core/buf_test.cc - the growable byte buffer: growth, consumption, sticky OOM.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

extern "C" {
#include "core/buf.h"
#include "core/status.h"
}

namespace {

std::string unread(const tr__buf &b) {
    return std::string(b.data + b.off, tr__buf_avail(&b));
}

TEST(Buf, InitIsEmpty) {
    tr__buf b = TR__BUF_INIT;
    EXPECT_EQ(b.data, nullptr);
    EXPECT_EQ(tr__buf_avail(&b), 0u);
    EXPECT_FALSE(b.oom);
    tr__buf_free(&b);
    tr__buf_free(&b); // twice is fine
}

TEST(Buf, AppendAndGrowGeometrically) {
    tr__buf b = TR__BUF_INIT;
    std::string ref;
    for (int i = 0; i < 5000; i++) {
        char c = (char)('a' + i % 26);
        ASSERT_EQ(tr__buf_append(&b, &c, 1), 0);
        ref.push_back(c);
    }
    EXPECT_EQ(unread(b), ref);
    EXPECT_EQ(b.len, 5000u);
    EXPECT_EQ(b.cap, 8192u); // 256 doubled until >= 5000
    tr__buf_free(&b);
    EXPECT_EQ(b.data, nullptr);
    EXPECT_EQ(b.cap, 0u);
}

TEST(Buf, FirstReserveIs256) {
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__buf_reserve(&b, 1), 0);
    EXPECT_EQ(b.cap, 256u);
    ASSERT_EQ(tr__buf_reserve(&b, 1000), 0);
    EXPECT_EQ(b.cap, 1024u);
    EXPECT_EQ(b.len, 0u);
    tr__buf_free(&b);
}

TEST(Buf, AppendZeroBytes) {
    tr__buf b = TR__BUF_INIT;
    EXPECT_EQ(tr__buf_append(&b, nullptr, 0), 0);
    EXPECT_EQ(tr__buf_avail(&b), 0u);
    b.oom = true;
    EXPECT_EQ(tr__buf_append(&b, nullptr, 0), TR_ENOMEM);
    tr__buf_free(&b);
}

TEST(Buf, ConsumeAndCompact) {
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__buf_append(&b, "hello world", 11), 0);
    tr__buf_consume(&b, 6);
    EXPECT_EQ(unread(b), "world");
    EXPECT_EQ(b.off, 6u);
    tr__buf_consume(&b, 5); // everything read: back to the start
    EXPECT_EQ(b.off, 0u);
    EXPECT_EQ(b.len, 0u);
    ASSERT_EQ(tr__buf_append(&b, "x", 1), 0);
    EXPECT_EQ(unread(b), "x");
    tr__buf_free(&b);
}

TEST(Buf, ReserveReclaimsConsumedPrefixBeforeGrowing) {
    tr__buf b = TR__BUF_INIT;
    std::string full(256, 'z');
    for (int i = 0; i < 256; i++)
        full[i] = (char)i;
    ASSERT_EQ(tr__buf_append(&b, full.data(), full.size()), 0);
    ASSERT_EQ(b.cap, 256u);
    tr__buf_consume(&b, 100);
    ASSERT_EQ(tr__buf_reserve(&b, 50), 0);
    EXPECT_EQ(b.cap, 256u); // no growth: the prefix was reclaimed
    EXPECT_EQ(b.off, 0u);
    EXPECT_EQ(b.len, 156u);
    EXPECT_EQ(unread(b), full.substr(100));
    tr__buf_free(&b);
}

TEST(Buf, OverflowingReserveSetsStickyOom) {
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__buf_append(&b, "ab", 2), 0);
    tr__err_clear();
    EXPECT_EQ(tr__buf_reserve(&b, SIZE_MAX), TR_ENOMEM); // len + extra wraps around
    EXPECT_TRUE(b.oom);
    EXPECT_STRNE(tr__last_error(), "");
    EXPECT_EQ(tr__buf_append(&b, "c", 1), TR_ENOMEM);
    EXPECT_EQ(tr__buf_reserve(&b, 1), TR_ENOMEM);
    EXPECT_EQ(unread(b), "ab"); // contents untouched
    tr__buf_reset(&b);
    EXPECT_FALSE(b.oom);
    EXPECT_EQ(tr__buf_avail(&b), 0u);
    EXPECT_EQ(tr__buf_append(&b, "c", 1), 0);
    EXPECT_EQ(unread(b), "c");
    tr__buf_free(&b);
}

TEST(Buf, ResetKeepsCapacity) {
    tr__buf b = TR__BUF_INIT;
    ASSERT_EQ(tr__buf_reserve(&b, 4000), 0);
    size_t cap = b.cap;
    ASSERT_EQ(tr__buf_append(&b, "abc", 3), 0);
    tr__buf_reset(&b);
    EXPECT_EQ(b.cap, cap);
    EXPECT_EQ(b.len, 0u);
    EXPECT_EQ(b.off, 0u);
    tr__buf_free(&b);
}

TEST(Buf, LargeAppend) {
    tr__buf b = TR__BUF_INIT;
    std::string big(3 << 20, 'q');
    ASSERT_EQ(tr__buf_append(&b, big.data(), big.size()), 0);
    ASSERT_EQ(tr__buf_append(&b, "!", 1), 0);
    EXPECT_EQ(tr__buf_avail(&b), big.size() + 1);
    EXPECT_EQ(b.data[big.size()], '!');
    tr__buf_free(&b);
}

} // namespace

TEST(Buf, JsonStringEscapes) {
    tr__buf b = TR__BUF_INIT;
    tr__buf_json_str(&b, "a\"b\\c\nd\x01\xc3\xa9");
    tr__buf_json_str(&b, nullptr);
    EXPECT_EQ(std::string(b.data, b.len), "\"a\\\"b\\\\c\\u000ad\\u0001\xc3\xa9\"\"\"");
    tr__buf_free(&b);
}
