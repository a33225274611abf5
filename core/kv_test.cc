// core/kv_test.cc - the node's key-value store (the table; its handlers need a server).
#include <gtest/gtest.h>

#include <string>
#include <unordered_map>

extern "C" {
#include "core/kv.h"
#include "core/status.h"
}

namespace {

class Kv : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(tr__kv_create(&kv), 0);
        ASSERT_NE(kv, nullptr);
    }
    void TearDown() override {
        tr__kv_destroy(kv);
    }
    int put(const std::string &k, const std::string &v) {
        return tr__kv_put(kv, k.data(), k.size(), v.data(), v.size());
    }
    int get(const std::string &k, std::string *v) {
        const void *p = nullptr;
        size_t n = 0;
        int rc = tr__kv_get(kv, k.data(), k.size(), &p, &n);
        if (rc == 0) *v = std::string((const char *)p, n);
        return rc;
    }
    int del(const std::string &k) {
        return tr__kv_del(kv, k.data(), k.size());
    }
    tr__kv *kv = nullptr;
};

TEST_F(Kv, PutGetDel) {
    std::string v;
    EXPECT_EQ(tr__kv_count(kv), 0u);
    ASSERT_EQ(put("group/a/rank0", "addr0"), 0);
    EXPECT_EQ(tr__kv_count(kv), 1u);
    ASSERT_EQ(get("group/a/rank0", &v), 0);
    EXPECT_EQ(v, "addr0");
    ASSERT_EQ(del("group/a/rank0"), 0);
    EXPECT_EQ(tr__kv_count(kv), 0u);
    EXPECT_EQ(get("group/a/rank0", &v), TR_ENOTFOUND);
}

TEST_F(Kv, DeleteByPrefix) {
    std::string v;
    for (int i = 0; i < 300; i++) /* enough to grow the table: every chain is scanned */
        ASSERT_EQ(put("g/a/" + std::to_string(i), "x"), 0);
    ASSERT_EQ(put("g/ab/0", "kept"), 0);
    ASSERT_EQ(put("g/a", "kept too"), 0);
    EXPECT_EQ(tr__kv_del_prefix(kv, "g/a/", 4), 300u);
    EXPECT_EQ(tr__kv_count(kv), 2u);
    EXPECT_EQ(get("g/a/7", &v), TR_ENOTFOUND);
    ASSERT_EQ(get("g/ab/0", &v), 0);
    ASSERT_EQ(get("g/a", &v), 0);
    EXPECT_EQ(tr__kv_del_prefix(kv, "g/a/", 4), 0u);
    EXPECT_EQ(tr__kv_del_prefix(kv, "", 0), 2u); /* the empty prefix matches every key */
    EXPECT_EQ(tr__kv_count(kv), 0u);
}

TEST_F(Kv, Overwrite) {
    std::string v;
    ASSERT_EQ(put("k", "first"), 0);
    ASSERT_EQ(put("k", "second, longer"), 0);
    EXPECT_EQ(tr__kv_count(kv), 1u);
    ASSERT_EQ(get("k", &v), 0);
    EXPECT_EQ(v, "second, longer");
    ASSERT_EQ(put("k", ""), 0);
    ASSERT_EQ(get("k", &v), 0);
    EXPECT_EQ(v, "");
    EXPECT_EQ(tr__kv_count(kv), 1u);
}

TEST_F(Kv, MissingKeys) {
    std::string v = "untouched";
    EXPECT_EQ(get("nope", &v), TR_ENOTFOUND);
    EXPECT_NE(std::string(tr__last_error()).find("nope"), std::string::npos) << tr__last_error();
    EXPECT_EQ(v, "untouched");
    EXPECT_EQ(del("nope"), TR_ENOTFOUND);
    ASSERT_EQ(put("abc", "1"), 0);
    EXPECT_EQ(get("ab", &v), TR_ENOTFOUND); // prefixes are different keys
    EXPECT_EQ(get("abcd", &v), TR_ENOTFOUND);
    EXPECT_EQ(del("abc"), 0);
    EXPECT_EQ(del("abc"), TR_ENOTFOUND);
}

TEST_F(Kv, KeyLimits) {
    std::string v;
    EXPECT_EQ(put("", "v"), TR_EINVAL);
    std::string max(1024, 'k');
    std::string over(1025, 'k');
    EXPECT_EQ(put(over, "v"), TR_EINVAL);
    EXPECT_NE(std::string(tr__last_error()).find("1025"), std::string::npos) << tr__last_error();
    EXPECT_EQ(tr__kv_count(kv), 0u);
    EXPECT_EQ(get(over, &v), TR_ENOTFOUND);
    EXPECT_EQ(get("", &v), TR_ENOTFOUND);
    ASSERT_EQ(put(max, "v"), 0);
    ASSERT_EQ(get(max, &v), 0);
    EXPECT_EQ(v, "v");
}

TEST_F(Kv, BinaryKeysAndValues) {
    std::string k("a\0b", 3), k2("a\0c", 3), val("\0\xff\0", 3);
    std::string v;
    ASSERT_EQ(put(k, val), 0);
    ASSERT_EQ(put(k2, "other"), 0);
    ASSERT_EQ(get(k, &v), 0);
    EXPECT_EQ(v, val);
    ASSERT_EQ(get(k2, &v), 0);
    EXPECT_EQ(v, "other");
    EXPECT_EQ(get("a", &v), TR_ENOTFOUND);
}

TEST_F(Kv, EmptyValueWithNullPointer) {
    ASSERT_EQ(tr__kv_put(kv, "k", 1, nullptr, 0), 0);
    const void *p = nullptr;
    size_t n = 99;
    ASSERT_EQ(tr__kv_get(kv, "k", 1, &p, &n), 0);
    EXPECT_EQ(n, 0u);
}

TEST_F(Kv, ValuesAreCopiedIn) {
    std::string val = "original";
    ASSERT_EQ(put("k", val), 0);
    val[0] = 'X';
    std::string v;
    ASSERT_EQ(get("k", &v), 0);
    EXPECT_EQ(v, "original");
}

TEST_F(Kv, LargeValue) {
    std::string big(5 << 20, 'v');
    big[12345] = 'x';
    ASSERT_EQ(put("big", big), 0);
    std::string v;
    ASSERT_EQ(get("big", &v), 0);
    EXPECT_EQ(v, big);
}

TEST_F(Kv, TenThousandKeys) {
    std::unordered_map<std::string, std::string> ref;
    for (int i = 0; i < 10000; i++) {
        std::string k = "key/" + std::to_string(i * 7919);
        std::string v = "value-" + std::to_string(i);
        ASSERT_EQ(put(k, v), 0);
        ref[k] = v;
        ASSERT_EQ(tr__kv_count(kv), ref.size());
    }
    std::string v;
    for (const auto &e : ref) {
        ASSERT_EQ(get(e.first, &v), 0) << e.first;
        ASSERT_EQ(v, e.second);
    }
    // Delete every other one, overwrite the rest.
    int i = 0;
    for (auto it = ref.begin(); it != ref.end(); i++) {
        if (i % 2 == 0) {
            ASSERT_EQ(del(it->first), 0);
            it = ref.erase(it);
        } else {
            it->second += "/2";
            ASSERT_EQ(put(it->first, it->second), 0);
            ++it;
        }
    }
    EXPECT_EQ(tr__kv_count(kv), ref.size());
    EXPECT_EQ(ref.size(), 5000u);
    for (const auto &e : ref) {
        ASSERT_EQ(get(e.first, &v), 0) << e.first;
        ASSERT_EQ(v, e.second);
    }
    for (int j = 0; j < 10000; j++) {
        std::string k = "key/" + std::to_string(j * 7919);
        if (ref.count(k)) continue;
        ASSERT_EQ(get(k, &v), TR_ENOTFOUND) << k;
    }
}

TEST(KvLifecycle, DestroyNullIsNoop) {
    tr__kv_destroy(nullptr);
}

} // namespace
