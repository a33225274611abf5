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
        EXPECT_EQ(tr__seg_format(&view, mem, size), 0);
        v = &view;
        hdr = view.h;
    }
    ~Seg() {
        free(mem);
    }
    void *mem;
    size_t size;
    tr__seg view;
    tr__seg *v;       /* the view the operations take */
    tr__seg_hdr *hdr; /* the shared header */
};

TEST(Segment, FormatAndCheck) {
    Seg s(1 << 20);
    tr__seg o;
    ASSERT_EQ(tr__seg_open(&o, s.mem, s.size), 0);
    EXPECT_EQ(o.data, s.view.data);
    EXPECT_EQ(o.table, s.view.table);
    EXPECT_EQ(o.table_cap, s.view.table_cap);
    EXPECT_EQ(o.data_size, s.view.data_size);
    EXPECT_EQ(tr__seg_open(&o, s.mem, s.size - 4096), TR_EPROTO);
    EXPECT_GE(tr__seg_max_alloc(s.v), (1u << 20) - 64);
    char small[8192] = {0};
    tr__seg none;
    EXPECT_EQ(tr__seg_format(&none, small, sizeof small), TR_EINVAL);
}

TEST(Segment, RandomAllocFreeAgainstReference) {
    Seg s(8 << 20);
    std::mt19937_64 rng(42);
    std::map<uint64_t, uint64_t> live; /* off -> size */
    for (int i = 0; i < 20000; i++) {
        if (live.empty() || rng() % 3) {
            uint64_t sz = rng() % 5 == 0 ? rng() % (512 << 10) : rng() % 4096;
            uint64_t off;
            int rc = tr__seg_alloc(s.v, sz, &off);
            if (rc) {
                ASSERT_EQ(rc, TR_ENOMEM);
                continue;
            }
            ASSERT_EQ(off % TR__SEG_ALIGN, 0u);
            ASSERT_LE(off + sz, s.v->data_size);
            auto next = live.lower_bound(off);
            if (next != live.end()) {
                ASSERT_LE(off + sz, next->first) << "overlaps the next";
            }
            if (next != live.begin()) {
                auto prev = std::prev(next);
                ASSERT_LE(prev->first + prev->second, off) << "overlaps the previous";
            }
            memset((char *)tr__seg_data(s.v) + off, 0xee, sz); /* must not corrupt tags */
            live[off] = sz;
        } else {
            auto it = live.begin();
            std::advance(it, rng() % live.size());
            ASSERT_EQ(tr__seg_free(s.v, it->first), 0);
            live.erase(it);
        }
    }
    for (auto &kv : live)
        ASSERT_EQ(tr__seg_free(s.v, kv.first), 0);
    EXPECT_EQ(s.hdr->bytes_used, 0u);
    uint64_t off;
    ASSERT_EQ(tr__seg_alloc(s.v, tr__seg_max_alloc(s.v), &off), 0) << "free blocks did not merge";
    EXPECT_EQ(tr__seg_free(s.v, off), 0);
}

TEST(Segment, BadFreesAreRejected) {
    Seg s(1 << 20);
    uint64_t off;
    ASSERT_EQ(tr__seg_alloc(s.v, 100, &off), 0);
    EXPECT_EQ(tr__seg_free(s.v, off + 8), TR_EPROTO);
    EXPECT_EQ(tr__seg_free(s.v, 0), TR_EPROTO);
    EXPECT_EQ(tr__seg_free(s.v, s.v->data_size + 64), TR_EPROTO);
    ASSERT_EQ(tr__seg_free(s.v, off), 0);
    EXPECT_EQ(tr__seg_free(s.v, off), TR_EPROTO) << "double free";
    EXPECT_EQ(tr__seg_alloc(s.v, s.v->data_size + 1, &off), TR_ENOMEM);
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
            tr__obj_entry *e = tr__seg_insert(s.v, id.data(), &rc);
            if (!e) {
                ASSERT_EQ(rc, TR_ENOMEM);
                continue;
            }
            ASSERT_EQ(tr__seg_alloc(s.v, 100, &e->off), 0);
            e->size = 100;
            ids.push_back(id);
            EXPECT_EQ(tr__seg_insert(s.v, id.data(), &rc), nullptr);
            EXPECT_EQ(rc, TR_EEXIST);
        } else {
            size_t k = rng() % ids.size();
            tr__obj_entry *e = tr__seg_find(s.v, ids[k].data());
            ASSERT_NE(e, nullptr);
            tr__seg_remove(s.v, e);
            EXPECT_EQ(tr__seg_find(s.v, ids[k].data()), nullptr);
            ids[k] = ids.back();
            ids.pop_back();
        }
    }
    for (auto &id : ids)
        ASSERT_NE(tr__seg_find(s.v, id.data()), nullptr);
    EXPECT_EQ(s.hdr->n_objects, ids.size());
    for (auto &id : ids)
        tr__seg_remove(s.v, tr__seg_find(s.v, id.data()));
    EXPECT_EQ(s.hdr->n_objects, 0u);
    EXPECT_EQ(s.hdr->bytes_used, 0u);
}

/* Another process may rewrite the header's geometry at any moment: a view keeps the copy
 * it took, and a header that says the segment lies elsewhere is refused. */
TEST(Segment, TheGeometryIsCopiedOnce) {
    Seg s(4 << 20);
    tr__seg v;
    ASSERT_EQ(tr__seg_open(&v, s.mem, s.size), 0);
    s.hdr->table_off = 1ull << 45;
    s.hdr->table_cap = 1ull << 40;
    s.hdr->data_off = 1ull << 46;
    s.hdr->data_size = 1ull << 46;
    uint8_t id[16] = {1, 2, 3};
    int rc;
    tr__obj_entry *e = tr__seg_insert(&v, id, &rc);
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(tr__seg_alloc(&v, 1000, &e->off), 0);
    EXPECT_LT(e->off, v.data_size);
    e->size = 1000;
    memset((char *)tr__seg_data(&v) + e->off, 0x11, 1000);
    EXPECT_EQ(tr__seg_find(&v, id), e);
    tr__seg_remove(&v, e);
    EXPECT_EQ(tr__seg_find(&v, id), nullptr);
    EXPECT_EQ(s.hdr->bytes_used, 0u);
    EXPECT_EQ(tr__seg_max_alloc(&v), tr__seg_max_alloc(s.v));
    tr__seg w;
    EXPECT_EQ(tr__seg_open(&w, s.mem, s.size), TR_EPROTO);
    /* a table offset that wraps round when its table is added */
    s.hdr->table_off = UINT64_MAX - 4095;
    s.hdr->table_cap = 4096;
    s.hdr->data_off = s.view.data_off;
    s.hdr->data_size = s.view.data_size;
    EXPECT_EQ(tr__seg_open(&w, s.mem, s.size), TR_EPROTO);
}

/* The free lists and block tags are shared memory too: an offset or a size read from
 * them never takes an operation outside the data region, which here ends where the
 * allocation does (an ASan build sees any access past it). */
TEST(Segment, CorruptFreeListsStayInside) {
    {
        Seg s(1 << 20);
        s.hdr->bins[0] = s.v->data_size - 1; /* below data_size, but no block */
        uint64_t off;
        EXPECT_EQ(tr__seg_alloc(s.v, 100, &off), TR_EPROTO);
    }
    {
        Seg s(1 << 20); /* a free block whose tag claims more than the region */
        uint64_t a, b;
        ASSERT_EQ(tr__seg_alloc(s.v, 100, &a), 0);
        uint64_t tail = a - TR__SEG_ALIGN + 192; /* a's block: 100 bytes and a header, rounded */
        uint64_t *tag = (uint64_t *)((char *)tr__seg_data(s.v) + tail);
        ASSERT_TRUE(*tag & 1) << "the free tail";
        *tag = (s.v->data_size * 4) | 1;
        EXPECT_EQ(tr__seg_alloc(s.v, 1000, &b), TR_EPROTO);
        /* and freeing the block before it does not merge with it */
        EXPECT_EQ(tr__seg_free(s.v, a), 0);
    }
    {
        Seg s(1 << 20); /* a free block whose list link points past the end */
        uint64_t a, b, c, d;
        ASSERT_EQ(tr__seg_alloc(s.v, 100, &a), 0);
        ASSERT_EQ(tr__seg_alloc(s.v, 100, &b), 0);
        ASSERT_EQ(tr__seg_alloc(s.v, 100, &c), 0);
        ASSERT_EQ(tr__seg_free(s.v, b), 0); /* b's block: free, alone in its bin */
        uint64_t *links = (uint64_t *)((char *)tr__seg_data(s.v) + b);
        links[0] = s.v->data_size - 8;             /* next */
        links[1] = s.v->data_size - 8;             /* prev */
        ASSERT_EQ(tr__seg_alloc(s.v, 100, &d), 0); /* takes b's block: unlinks it */
        EXPECT_EQ(d, b);
    }
}

} // namespace
