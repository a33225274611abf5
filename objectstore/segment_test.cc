/* objectstore/segment_test.cc - the allocator and object table on a private segment:
 * random allocations and frees checked against a reference (no overlap, bounds,
 * alignment), full coalescing, table insert/find/remove under churn, corrupt input. */
#include <gtest/gtest.h>
#include <stdlib.h>

#include <array>
#include <map>
#include <random>
#include <vector>

extern "C" {
#include "core/status.h"
#include "objectstore/segment.h"
}

namespace {

struct Seg {
    explicit Seg(size_t capacity) {
        size = tr__seg_size_for(capacity);
        mem = aligned_alloc(4096, size);
        memset(mem, 0, size);
        EXPECT_EQ(tr__seg_format(mem, size), 0);
        h = (tr__seg_hdr *)mem;
    }
    ~Seg() {
        free(mem);
    }
    void *mem;
    size_t size;
    tr__seg_hdr *h;
};

TEST(Segment, FormatAndCheck) {
    Seg s(1 << 20);
    EXPECT_EQ(tr__seg_check(s.mem, s.size), 0);
    EXPECT_EQ(tr__seg_check(s.mem, s.size - 4096), TR_EPROTO);
    EXPECT_GE(tr__seg_max_alloc(s.h), (1u << 20) - 64);
    char small[8192] = {0};
    EXPECT_EQ(tr__seg_format(small, sizeof small), TR_EINVAL);
}

TEST(Segment, RandomAllocFreeAgainstReference) {
    Seg s(8 << 20);
    std::mt19937_64 rng(42);
    std::map<uint64_t, uint64_t> live; /* off -> size */
    for (int i = 0; i < 20000; i++) {
        if (live.empty() || rng() % 3) {
            uint64_t sz = rng() % 5 == 0 ? rng() % (512 << 10) : rng() % 4096;
            uint64_t off;
            int rc = tr__seg_alloc(s.h, sz, &off);
            if (rc) {
                ASSERT_EQ(rc, TR_ENOMEM);
                continue;
            }
            ASSERT_EQ(off % TR__SEG_ALIGN, 0u);
            ASSERT_LE(off + sz, s.h->data_size);
            auto next = live.lower_bound(off);
            if (next != live.end()) {
                ASSERT_LE(off + sz, next->first) << "overlaps the next";
            }
            if (next != live.begin()) {
                auto prev = std::prev(next);
                ASSERT_LE(prev->first + prev->second, off) << "overlaps the previous";
            }
            memset((char *)tr__seg_data(s.h) + off, 0xee, sz); /* must not corrupt tags */
            live[off] = sz;
        } else {
            auto it = live.begin();
            std::advance(it, rng() % live.size());
            ASSERT_EQ(tr__seg_free(s.h, it->first), 0);
            live.erase(it);
        }
    }
    for (auto &kv : live)
        ASSERT_EQ(tr__seg_free(s.h, kv.first), 0);
    EXPECT_EQ(s.h->bytes_used, 0u);
    uint64_t off;
    ASSERT_EQ(tr__seg_alloc(s.h, tr__seg_max_alloc(s.h), &off), 0) << "free blocks did not merge";
    EXPECT_EQ(tr__seg_free(s.h, off), 0);
}

TEST(Segment, BadFreesAreRejected) {
    Seg s(1 << 20);
    uint64_t off;
    ASSERT_EQ(tr__seg_alloc(s.h, 100, &off), 0);
    EXPECT_EQ(tr__seg_free(s.h, off + 8), TR_EPROTO);
    EXPECT_EQ(tr__seg_free(s.h, 0), TR_EPROTO);
    EXPECT_EQ(tr__seg_free(s.h, s.h->data_size + 64), TR_EPROTO);
    ASSERT_EQ(tr__seg_free(s.h, off), 0);
    EXPECT_EQ(tr__seg_free(s.h, off), TR_EPROTO) << "double free";
    EXPECT_EQ(tr__seg_alloc(s.h, s.h->data_size + 1, &off), TR_ENOMEM);
}

TEST(Segment, TableChurn) {
    Seg s(16 << 20);
    std::mt19937_64 rng(7);
    std::vector<std::array<uint8_t, 16>> ids;
    for (int i = 0; i < 30000; i++) {
        if (ids.empty() || rng() % 2) {
            std::array<uint8_t, 16> id;
            for (auto &b : id)
                b = (uint8_t)rng();
            int rc;
            tr__obj_entry *e = tr__seg_insert(s.h, id.data(), &rc);
            if (!e) {
                ASSERT_EQ(rc, TR_ENOMEM);
                continue;
            }
            ASSERT_EQ(tr__seg_alloc(s.h, 100, &e->off), 0);
            e->size = 100;
            ids.push_back(id);
            EXPECT_EQ(tr__seg_insert(s.h, id.data(), &rc), nullptr);
            EXPECT_EQ(rc, TR_EEXIST);
        } else {
            size_t k = rng() % ids.size();
            tr__obj_entry *e = tr__seg_find(s.h, ids[k].data());
            ASSERT_NE(e, nullptr);
            tr__seg_remove(s.h, e);
            EXPECT_EQ(tr__seg_find(s.h, ids[k].data()), nullptr);
            ids[k] = ids.back();
            ids.pop_back();
        }
    }
    for (auto &id : ids)
        ASSERT_NE(tr__seg_find(s.h, id.data()), nullptr);
    EXPECT_EQ(s.h->n_objects, ids.size());
    for (auto &id : ids)
        tr__seg_remove(s.h, tr__seg_find(s.h, id.data()));
    EXPECT_EQ(s.h->n_objects, 0u);
    EXPECT_EQ(s.h->bytes_used, 0u);
}

} // namespace
