// core/idmap_test.cc - the uint64 -> pointer hash map against std::unordered_map.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

extern "C" {
#include "core/idmap.h"
#include "core/status.h"
}

namespace {

void *val_of(uint64_t k) {
    return reinterpret_cast<void *>(static_cast<uintptr_t>(k * 2 + 1));
}

// Checks count, every lookup, and that iteration yields exactly the reference's entries.
void expect_same(const tr__idmap &m, const std::unordered_map<uint64_t, void *> &ref) {
    ASSERT_EQ(m.count, ref.size());
    for (const auto &kv : ref)
        ASSERT_EQ(tr__idmap_get(&m, kv.first), kv.second) << kv.first;
    std::unordered_map<uint64_t, void *> seen;
    size_t pos = 0;
    uint64_t k;
    void *v;
    while (tr__idmap_next(&m, &pos, &k, &v)) {
        ASSERT_NE(k, 0u);
        ASSERT_TRUE(seen.emplace(k, v).second) << "key " << k << " iterated twice";
    }
    EXPECT_EQ(pos, m.cap);
    EXPECT_EQ(seen, ref);
}

TEST(Idmap, EmptyMap) {
    tr__idmap m = TR__IDMAP_INIT;
    EXPECT_EQ(tr__idmap_get(&m, 1), nullptr);
    EXPECT_EQ(tr__idmap_del(&m, 1), nullptr);
    size_t pos = 0;
    EXPECT_EQ(tr__idmap_next(&m, &pos, nullptr, nullptr), 0);
    tr__idmap_free(&m);
    tr__idmap_free(&m);
}

TEST(Idmap, KeyZeroIsReserved) {
    tr__idmap m = TR__IDMAP_INIT;
    EXPECT_EQ(tr__idmap_put(&m, 0, val_of(0)), TR_EINVAL);
    EXPECT_EQ(m.count, 0u);
    ASSERT_EQ(tr__idmap_put(&m, 5, val_of(5)), 0);
    EXPECT_EQ(tr__idmap_get(&m, 0), nullptr);
    EXPECT_EQ(tr__idmap_del(&m, 0), nullptr);
    EXPECT_EQ(m.count, 1u);
    tr__idmap_free(&m);
}

TEST(Idmap, PutReplaceGetDel) {
    tr__idmap m = TR__IDMAP_INIT;
    int a = 1, b = 2;
    ASSERT_EQ(tr__idmap_put(&m, 42, &a), 0);
    EXPECT_EQ(tr__idmap_get(&m, 42), &a);
    EXPECT_EQ(m.count, 1u);
    ASSERT_EQ(tr__idmap_put(&m, 42, &b), 0); // replace
    EXPECT_EQ(tr__idmap_get(&m, 42), &b);
    EXPECT_EQ(m.count, 1u);
    EXPECT_EQ(tr__idmap_del(&m, 43), nullptr);
    EXPECT_EQ(tr__idmap_del(&m, 42), &b);
    EXPECT_EQ(tr__idmap_get(&m, 42), nullptr);
    EXPECT_EQ(tr__idmap_del(&m, 42), nullptr);
    EXPECT_EQ(m.count, 0u);
    tr__idmap_free(&m);
}

TEST(Idmap, NullValueIsStoredButIndistinguishableFromMissing) {
    tr__idmap m = TR__IDMAP_INIT;
    ASSERT_EQ(tr__idmap_put(&m, 7, nullptr), 0);
    EXPECT_EQ(m.count, 1u);
    EXPECT_EQ(tr__idmap_get(&m, 7), nullptr);
    size_t pos = 0;
    uint64_t k = 0;
    void *v = &k;
    EXPECT_EQ(tr__idmap_next(&m, &pos, &k, &v), 1);
    EXPECT_EQ(k, 7u);
    EXPECT_EQ(v, nullptr);
    EXPECT_EQ(tr__idmap_del(&m, 7), nullptr);
    EXPECT_EQ(m.count, 0u);
    tr__idmap_free(&m);
}

TEST(Idmap, LoadFactorAtMostHalf) {
    tr__idmap m = TR__IDMAP_INIT;
    for (uint64_t k = 1; k <= 1000; k++) {
        ASSERT_EQ(tr__idmap_put(&m, k, val_of(k)), 0);
        ASSERT_LE(m.count * 2, m.cap);
        ASSERT_EQ(m.cap & (m.cap - 1), 0u) << "capacity is a power of two";
    }
    tr__idmap_free(&m);
    EXPECT_EQ(m.cap, 0u);
    EXPECT_EQ(m.count, 0u);
}

// Random inserts and deletes over a narrow key range (long probe runs, many backward
// shifts) and a wide one, checked against std::unordered_map.
void random_ops(uint64_t seed, uint64_t key_range, int ops) {
    std::mt19937_64 rng(seed);
    tr__idmap m = TR__IDMAP_INIT;
    std::unordered_map<uint64_t, void *> ref;
    for (int i = 0; i < ops; i++) {
        uint64_t k = rng() % key_range + 1;
        unsigned op = rng() % 10;
        if (op < 5) {
            void *v = val_of(rng());
            ASSERT_EQ(tr__idmap_put(&m, k, v), 0);
            ref[k] = v;
        } else if (op < 9) {
            auto it = ref.find(k);
            void *want = it == ref.end() ? nullptr : it->second;
            ASSERT_EQ(tr__idmap_del(&m, k), want) << "op " << i << " key " << k;
            if (it != ref.end()) ref.erase(it);
        } else {
            auto it = ref.find(k);
            ASSERT_EQ(tr__idmap_get(&m, k), it == ref.end() ? nullptr : it->second);
        }
        ASSERT_EQ(m.count, ref.size());
        if (i % 25000 == 0) expect_same(m, ref);
    }
    expect_same(m, ref);
    // Delete everything, in a random order of the keys iteration yields.
    std::vector<uint64_t> keys;
    size_t pos = 0;
    uint64_t k;
    while (tr__idmap_next(&m, &pos, &k, nullptr))
        keys.push_back(k);
    ASSERT_EQ(keys.size(), ref.size());
    std::shuffle(keys.begin(), keys.end(), rng);
    for (uint64_t key : keys) {
        ASSERT_EQ(tr__idmap_del(&m, key), ref[key]);
        ref.erase(key);
        ASSERT_EQ(m.count, ref.size());
    }
    expect_same(m, ref);
    tr__idmap_free(&m);
}

TEST(Idmap, RandomOpsNarrowKeys) {
    random_ops(1, 2000, 100000);
}

TEST(Idmap, RandomOpsWideKeys) {
    random_ops(2, UINT64_MAX - 1, 100000);
}

TEST(Idmap, RandomOpsTinyKeys) {
    random_ops(3, 40, 100000);
}

TEST(Idmap, IterationVisitsEachOnce) {
    tr__idmap m = TR__IDMAP_INIT;
    for (uint64_t k = 1; k <= 100; k++)
        ASSERT_EQ(tr__idmap_put(&m, k * 0x100000001ull, val_of(k)), 0);
    size_t pos = 0, n = 0;
    uint64_t k;
    void *v;
    while (tr__idmap_next(&m, &pos, &k, &v)) {
        n++;
        ASSERT_EQ(k % 0x100000001ull, 0u);
        EXPECT_EQ(v, val_of(k / 0x100000001ull));
    }
    EXPECT_EQ(n, 100u);
    // Once at the end it stays at the end.
    EXPECT_EQ(tr__idmap_next(&m, &pos, &k, &v), 0);
    tr__idmap_free(&m);
}

} // namespace
