// core/codec_test.cc - the msgpack codec: round trips of every type, typed getters on
// wrong types, rejection of truncated/trailing/garbage input, and a fuzz-ish loop.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "core/buf.h"
#include "core/codec.h"
#include "core/status.h"
}

namespace {

std::string bytes(const tr__buf &b) {
    return std::string(b.data + b.off, tr__buf_avail(&b));
}

// Owns an encoded message and its decoding.
struct Decoded {
    std::string msg;
    tr__dec d;
    int rc;
    explicit Decoded(std::string m) : msg(std::move(m)) {
        rc = tr__dec_init(&d, msg.data(), msg.size());
    }
    explicit Decoded(tr__buf *b) : Decoded(bytes(*b)) {
        tr__buf_free(b);
    }
    ~Decoded() {
        tr__dec_free(&d);
    }
    const tr__obj *root() const {
        return d.root;
    }
};

template <typename F> std::string encode(F f) {
    tr__buf b = TR__BUF_INIT;
    f(&b);
    EXPECT_FALSE(b.oom);
    std::string s = bytes(b);
    tr__buf_free(&b);
    return s;
}

TEST(Codec, Nil) {
    Decoded x(encode([](tr__buf *b) { tr__enc_nil(b); }));
    ASSERT_EQ(x.rc, 0);
    EXPECT_EQ(x.msg, std::string("\xc0", 1));
    EXPECT_EQ(tr__obj_type(x.root()), TR__T_NIL);
    Decoded y(encode([](tr__buf *b) { tr__enc_str(b, nullptr); }));
    ASSERT_EQ(y.rc, 0);
    EXPECT_EQ(tr__obj_type(y.root()), TR__T_NIL);
}

TEST(Codec, Bool) {
    for (bool v : {true, false}) {
        Decoded x(encode([v](tr__buf *b) { tr__enc_bool(b, v); }));
        ASSERT_EQ(x.rc, 0);
        EXPECT_EQ(tr__obj_type(x.root()), TR__T_BOOL);
        bool got = !v;
        EXPECT_EQ(tr__obj_bool(x.root(), "b", &got), 0);
        EXPECT_EQ(got, v);
    }
}

TEST(Codec, SignedInts) {
    const int64_t vals[] = {INT64_MIN, INT64_MIN + 1, -2147483649LL, -2147483648LL, -32769, -32768,
                            -129,      -128,          -33,           -32,           -1,     0,
                            1,         127,           128,           255,           256,    65535,
                            65536,     4294967295LL,  4294967296LL,  INT64_MAX};
    for (int64_t v : vals) {
        Decoded x(encode([v](tr__buf *b) { tr__enc_int(b, v); }));
        ASSERT_EQ(x.rc, 0) << v;
        EXPECT_EQ(tr__obj_type(x.root()), TR__T_INT);
        int64_t got = v ^ 1;
        EXPECT_EQ(tr__obj_int(x.root(), "i", &got), 0);
        EXPECT_EQ(got, v);
        uint64_t u = 12345;
        if (v >= 0) {
            EXPECT_EQ(tr__obj_uint(x.root(), "i", &u), 0);
            EXPECT_EQ(u, (uint64_t)v);
        } else {
            EXPECT_EQ(tr__obj_uint(x.root(), "i", &u), TR_EPROTO) << v;
            EXPECT_EQ(u, 12345u);
        }
        double d = 0;
        EXPECT_EQ(tr__obj_double(x.root(), "i", &d), 0); // ints are accepted as numbers
        EXPECT_EQ(d, (double)v);
    }
}

TEST(Codec, UnsignedInts) {
    const uint64_t vals[] = {0,
                             1,
                             127,
                             128,
                             255,
                             256,
                             65535,
                             65536,
                             4294967295u,
                             4294967296u,
                             (uint64_t)INT64_MAX,
                             (uint64_t)INT64_MAX + 1,
                             UINT64_MAX};
    for (uint64_t v : vals) {
        Decoded x(encode([v](tr__buf *b) { tr__enc_uint(b, v); }));
        ASSERT_EQ(x.rc, 0) << v;
        EXPECT_EQ(tr__obj_type(x.root()), TR__T_INT);
        uint64_t got = v ^ 1;
        EXPECT_EQ(tr__obj_uint(x.root(), "u", &got), 0);
        EXPECT_EQ(got, v);
        int64_t i = 7;
        if (v <= (uint64_t)INT64_MAX) {
            EXPECT_EQ(tr__obj_int(x.root(), "u", &i), 0);
            EXPECT_EQ(i, (int64_t)v);
        } else {
            EXPECT_EQ(tr__obj_int(x.root(), "u", &i), TR_EPROTO) << v;
            EXPECT_EQ(i, 7);
        }
    }
}

TEST(Codec, Doubles) {
    const double vals[] = {0.0,     -0.0,     1.5,     -2.25,    1e-300,
                           DBL_MAX, -DBL_MAX, DBL_MIN, INFINITY, -INFINITY};
    for (double v : vals) {
        Decoded x(encode([v](tr__buf *b) { tr__enc_double(b, v); }));
        ASSERT_EQ(x.rc, 0) << v;
        EXPECT_EQ(tr__obj_type(x.root()), TR__T_FLOAT);
        double got = 42;
        EXPECT_EQ(tr__obj_double(x.root(), "d", &got), 0);
        EXPECT_EQ(got, v);
        EXPECT_EQ(std::signbit(got), std::signbit(v));
        int64_t i;
        uint64_t u;
        EXPECT_EQ(tr__obj_int(x.root(), "d", &i), TR_EPROTO);
        EXPECT_EQ(tr__obj_uint(x.root(), "d", &u), TR_EPROTO);
    }
    Decoded n(encode([](tr__buf *b) { tr__enc_double(b, NAN); }));
    ASSERT_EQ(n.rc, 0);
    double got = 0;
    EXPECT_EQ(tr__obj_double(n.root(), "d", &got), 0);
    EXPECT_TRUE(std::isnan(got));
}

TEST(Codec, Float32FromAPeer) {
    Decoded x(std::string("\xca\x3f\xc0\x00\x00", 5)); // float32 1.5
    ASSERT_EQ(x.rc, 0);
    EXPECT_EQ(tr__obj_type(x.root()), TR__T_FLOAT);
    double got = 0;
    EXPECT_EQ(tr__obj_double(x.root(), "f", &got), 0);
    EXPECT_EQ(got, 1.5);
}

TEST(Codec, Strings) {
    const std::string vals[] = {"",
                                "a",
                                std::string(31, 's'),
                                std::string(32, 's'),
                                std::string(255, 'm'),
                                std::string(256, 'm'),
                                std::string(70000, 'L'),
                                std::string("nul\0inside", 10)};
    for (const std::string &v : vals) {
        Decoded x(encode([&v](tr__buf *b) { tr__enc_strn(b, v.data(), v.size()); }));
        ASSERT_EQ(x.rc, 0) << v.size();
        EXPECT_EQ(tr__obj_type(x.root()), TR__T_STR);
        const char *p = nullptr;
        size_t n = 1234567;
        ASSERT_EQ(tr__obj_str(x.root(), "s", &p, &n), 0);
        EXPECT_EQ(std::string(p, n), v);
        // Views point into the message (no copy).
        if (n > 0) {
            EXPECT_GE(p, x.msg.data());
            EXPECT_LE(p + n, x.msg.data() + x.msg.size());
        }
        // A str is acceptable as bytes.
        const void *q = nullptr;
        size_t m = 0;
        ASSERT_EQ(tr__obj_bin(x.root(), "s", &q, &m), 0);
        EXPECT_EQ(std::string((const char *)q, m), v);
    }
    Decoded c(encode([](tr__buf *b) { tr__enc_str(b, "hello"); }));
    ASSERT_EQ(c.rc, 0);
    EXPECT_EQ(c.msg, "\xa5hello");
}

TEST(Codec, Binaries) {
    const std::string vals[] = {"", std::string("\0\1\2\xff", 4), std::string(255, 'b'),
                                std::string(256, 'b'), std::string(70000, 'B')};
    for (const std::string &v : vals) {
        Decoded x(encode([&v](tr__buf *b) { tr__enc_bin(b, v.data(), v.size()); }));
        ASSERT_EQ(x.rc, 0) << v.size();
        EXPECT_EQ(tr__obj_type(x.root()), TR__T_BIN);
        const void *p = nullptr;
        size_t n = 99;
        ASSERT_EQ(tr__obj_bin(x.root(), "b", &p, &n), 0);
        EXPECT_EQ(std::string((const char *)p, n), v);
        const char *s;
        EXPECT_EQ(tr__obj_str(x.root(), "b", &s, &n), TR_EPROTO); // bin is not a str
    }
}

TEST(Codec, BinHeaderThenBody) {
    std::string body(1000, 'x');
    for (size_t i = 0; i < body.size(); i++)
        body[i] = (char)(i * 7);
    tr__buf b = TR__BUF_INIT;
    tr__enc_array(&b, 2);
    tr__enc_bin_header(&b, body.size());
    ASSERT_EQ(tr__buf_append(&b, body.data(), body.size()), 0);
    tr__enc_int(&b, -5);
    Decoded x(&b);
    ASSERT_EQ(x.rc, 0);
    const void *p;
    size_t n;
    ASSERT_EQ(tr__obj_bin(tr__obj_at(x.root(), 0), "body", &p, &n), 0);
    EXPECT_EQ(std::string((const char *)p, n), body);
    int64_t i;
    ASSERT_EQ(tr__obj_int(tr__obj_at(x.root(), 1), "i", &i), 0);
    EXPECT_EQ(i, -5);
}

TEST(Codec, OversizedLengthsSetOom) {
    // Lengths above UINT32_MAX are rejected before msgpack reads a byte of the body.
    const char dummy[1] = {0};
    const size_t huge = (size_t)UINT32_MAX + 1;
    {
        tr__buf b = TR__BUF_INIT;
        tr__enc_strn(&b, dummy, huge);
        EXPECT_TRUE(b.oom);
        EXPECT_EQ(tr__buf_avail(&b), 0u);
        tr__buf_free(&b);
    }
    {
        tr__buf b = TR__BUF_INIT;
        tr__enc_bin(&b, dummy, huge);
        EXPECT_TRUE(b.oom);
        EXPECT_EQ(tr__buf_avail(&b), 0u);
        tr__buf_free(&b);
    }
    {
        tr__buf b = TR__BUF_INIT;
        tr__enc_bin_header(&b, huge);
        EXPECT_TRUE(b.oom);
        EXPECT_EQ(tr__buf_avail(&b), 0u);
        tr__buf_free(&b);
    }
}

TEST(Codec, EncodingAfterOomAppendsNothing) {
    tr__buf b = TR__BUF_INIT;
    b.oom = true;
    tr__enc_map(&b, 1);
    tr__enc_str(&b, "k");
    tr__enc_int(&b, 1);
    tr__enc_double(&b, 1.0);
    tr__enc_bin(&b, "x", 1);
    tr__enc_bool(&b, true);
    tr__enc_nil(&b);
    EXPECT_EQ(tr__buf_avail(&b), 0u);
    EXPECT_TRUE(b.oom);
    tr__buf_free(&b);
}

std::string everything() {
    return encode([](tr__buf *b) {
        tr__enc_map(b, 10);
        tr__enc_str(b, "nil");
        tr__enc_nil(b);
        tr__enc_str(b, "t");
        tr__enc_bool(b, true);
        tr__enc_str(b, "i");
        tr__enc_int(b, -123456789);
        tr__enc_str(b, "u");
        tr__enc_uint(b, 987654321012ull);
        tr__enc_str(b, "d");
        tr__enc_double(b, 3.25);
        tr__enc_str(b, "s");
        tr__enc_str(b, "text");
        tr__enc_str(b, "b");
        tr__enc_bin(b, "\x01\x02\x03", 3);
        tr__enc_str(b, "a");
        tr__enc_array(b, 3);
        tr__enc_int(b, 1);
        tr__enc_str(b, "two");
        tr__enc_array(b, 0);
        tr__enc_str(b, "m");
        tr__enc_map(b, 1);
        tr__enc_str(b, "inner");
        tr__enc_uint(b, 7);
        tr__enc_str(b, "id");
        tr__enc_bin(b, "0123456789abcdef", 16);
    });
}

TEST(Codec, MapOfEverything) {
    Decoded x(everything());
    ASSERT_EQ(x.rc, 0);
    const tr__obj *r = x.root();
    ASSERT_EQ(tr__obj_type(r), TR__T_MAP);
    EXPECT_EQ(tr__obj_len(r), 10u);
    EXPECT_EQ(tr__obj_type(tr__obj_get(r, "nil")), TR__T_NIL);
    bool t = false;
    EXPECT_EQ(tr__obj_bool(tr__obj_get(r, "t"), "t", &t), 0);
    EXPECT_TRUE(t);
    int64_t i;
    EXPECT_EQ(tr__get_int(r, "i", &i), 0);
    EXPECT_EQ(i, -123456789);
    uint64_t u;
    EXPECT_EQ(tr__get_uint(r, "u", &u), 0);
    EXPECT_EQ(u, 987654321012ull);
    double d;
    EXPECT_EQ(tr__get_double(r, "d", &d), 0);
    EXPECT_EQ(d, 3.25);
    EXPECT_EQ(tr__get_double(r, "u", &d), 0);
    EXPECT_EQ(d, 987654321012.0);
    const char *s;
    size_t n;
    EXPECT_EQ(tr__get_str(r, "s", &s, &n), 0);
    EXPECT_EQ(std::string(s, n), "text");
    const void *p;
    EXPECT_EQ(tr__get_bin(r, "b", &p, &n), 0);
    EXPECT_EQ(std::string((const char *)p, n), "\x01\x02\x03");

    const tr__obj *a = tr__obj_get(r, "a");
    ASSERT_EQ(tr__obj_type(a), TR__T_ARRAY);
    ASSERT_EQ(tr__obj_len(a), 3u);
    EXPECT_EQ(tr__obj_int(tr__obj_at(a, 0), "a[0]", &i), 0);
    EXPECT_EQ(i, 1);
    EXPECT_EQ(tr__obj_str(tr__obj_at(a, 1), "a[1]", &s, &n), 0);
    EXPECT_EQ(std::string(s, n), "two");
    EXPECT_EQ(tr__obj_type(tr__obj_at(a, 2)), TR__T_ARRAY);
    EXPECT_EQ(tr__obj_len(tr__obj_at(a, 2)), 0u);
    EXPECT_EQ(tr__obj_at(a, 3), nullptr);
    EXPECT_EQ(tr__obj_at(a, SIZE_MAX), nullptr);

    const tr__obj *m = tr__obj_get(r, "m");
    ASSERT_EQ(tr__obj_type(m), TR__T_MAP);
    EXPECT_EQ(tr__get_uint(m, "inner", &u), 0);
    EXPECT_EQ(u, 7u);
    EXPECT_EQ(tr__obj_str(tr__obj_key_at(m, 0), "key", &s, &n), 0);
    EXPECT_EQ(std::string(s, n), "inner");
    EXPECT_EQ(tr__obj_uint(tr__obj_val_at(m, 0), "val", &u), 0);
    EXPECT_EQ(tr__obj_key_at(m, 1), nullptr);
    EXPECT_EQ(tr__obj_val_at(m, 1), nullptr);

    unsigned char id[16];
    EXPECT_EQ(tr__get_id(r, "id", id, sizeof id), 0);
    EXPECT_EQ(memcmp(id, "0123456789abcdef", 16), 0);

    // Map keys in order.
    const char *keys[] = {"nil", "t", "i", "u", "d", "s", "b", "a", "m", "id"};
    for (size_t k = 0; k < 10; k++) {
        EXPECT_EQ(tr__obj_str(tr__obj_key_at(r, k), "key", &s, &n), 0);
        EXPECT_EQ(std::string(s, n), keys[k]);
        EXPECT_EQ(tr__obj_val_at(r, k), tr__obj_get(r, keys[k]));
    }
}

// A map opened, then closed with the count of pairs written: 0, 1, 20 and 70000 pairs
// (70000 needs a map32 anyway), each decoding with every pair in order.
TEST(Codec, MapClosedWithThePairsWritten) {
    for (uint32_t n : {0u, 1u, 20u, 70000u}) {
        std::string msg = encode([n](tr__buf *b) {
            size_t m = tr__enc_map_open(b);
            for (uint32_t i = 0; i < n; i++) {
                tr__enc_str(b, ("k" + std::to_string(i)).c_str());
                tr__enc_uint(b, i);
            }
            tr__enc_map_close(b, m);
        });
        ASSERT_EQ((uint8_t)msg[0], 0xdf) << n; // a map32, whatever its count
        Decoded x(msg);
        ASSERT_EQ(x.rc, 0) << n << ": " << tr__last_error();
        ASSERT_EQ(tr__obj_type(x.root()), TR__T_MAP);
        ASSERT_EQ(tr__obj_len(x.root()), n);
        for (uint32_t i = 0; i < n; i += n / 10 + 1) {
            uint64_t u;
            ASSERT_EQ(tr__get_uint(x.root(), ("k" + std::to_string(i)).c_str(), &u), 0) << i;
            EXPECT_EQ(u, i);
        }
    }
}

// Maps inside maps (counted and fixed ones), arrays of maps, values of every kind (a bin
// of 70 KiB, a long string), and a map opened after other bytes in the buffer.
TEST(Codec, NestedMapsAreClosedInnermostFirst) {
    std::string big(70000, 'x');
    std::string msg = encode([&big](tr__buf *b) {
        tr__enc_array(b, 2);
        tr__enc_str(b, "before"); /* the map does not start at the buffer's front */
        size_t outer = tr__enc_map_open(b);
        tr__enc_str(b, "inner");
        size_t inner = tr__enc_map_open(b);
        tr__enc_str(b, "deepest");
        size_t deepest = tr__enc_map_open(b);
        tr__enc_map_close(b, deepest); /* empty */
        tr__enc_str(b, "fixed");
        tr__enc_map(b, 1);
        tr__enc_str(b, "one");
        tr__enc_double(b, 1.5);
        tr__enc_map_close(b, inner);
        tr__enc_str(b, "list");
        tr__enc_array(b, 3);
        for (int i = 0; i < 3; i++) {
            size_t m = tr__enc_map_open(b);
            for (int j = 0; j <= i; j++) {
                tr__enc_int(b, j); /* keys need not be strings */
                tr__enc_bool(b, j % 2);
            }
            tr__enc_map_close(b, m);
        }
        tr__enc_str(b, "bin");
        tr__enc_bin(b, big.data(), big.size());
        tr__enc_str(b, "str");
        tr__enc_str(b, big.c_str());
        tr__enc_str(b, "nil");
        tr__enc_nil(b);
        tr__enc_map_close(b, outer);
    });
    Decoded x(msg);
    ASSERT_EQ(x.rc, 0) << tr__last_error();
    const tr__obj *r = tr__obj_at(x.root(), 1);
    ASSERT_EQ(tr__obj_len(r), 5u);
    const tr__obj *in = tr__obj_get(r, "inner");
    ASSERT_EQ(tr__obj_len(in), 2u);
    EXPECT_EQ(tr__obj_type(tr__obj_get(in, "deepest")), TR__T_MAP);
    EXPECT_EQ(tr__obj_len(tr__obj_get(in, "deepest")), 0u);
    double d;
    EXPECT_EQ(tr__get_double(tr__obj_get(in, "fixed"), "one", &d), 0);
    EXPECT_EQ(d, 1.5);
    const tr__obj *list = tr__obj_get(r, "list");
    ASSERT_EQ(tr__obj_len(list), 3u);
    for (size_t i = 0; i < 3; i++)
        EXPECT_EQ(tr__obj_len(tr__obj_at(list, i)), i + 1);
    const void *p;
    size_t n;
    ASSERT_EQ(tr__get_bin(r, "bin", &p, &n), 0);
    EXPECT_EQ(n, big.size());
    EXPECT_EQ(tr__obj_type(tr__obj_get(r, "nil")), TR__T_NIL);
}

// A miscount cannot go out: a key without its value, a bin header whose body is not in
// the buffer, a header that is not the open's, all fail the encoding (b.oom); after an
// allocation failure the close leaves the buffer alone.
TEST(Codec, MapCloseRefusesWhatIsNotPairs) {
    tr__buf b = TR__BUF_INIT;
    size_t m = tr__enc_map_open(&b);
    tr__enc_str(&b, "key without a value");
    tr__enc_map_close(&b, m);
    EXPECT_TRUE(b.oom);
    tr__buf_free(&b);

    b = TR__BUF_INIT;
    m = tr__enc_map_open(&b);
    tr__enc_str(&b, "body");
    tr__enc_bin_header(&b, 100); /* its 100 bytes would follow separately */
    tr__enc_map_close(&b, m);
    EXPECT_TRUE(b.oom);
    tr__buf_free(&b);

    b = TR__BUF_INIT;
    tr__enc_map(&b, 0);
    tr__enc_map_close(&b, 0); /* not a map32 of an open */
    EXPECT_TRUE(b.oom);
    tr__buf_free(&b);

    b = TR__BUF_INIT;
    b.oom = true;
    m = tr__enc_map_open(&b);
    tr__enc_map_close(&b, m);
    EXPECT_EQ(b.len, 0u);
    tr__buf_free(&b);
}

TEST(Codec, NavigationOnWrongTypesAndNull) {
    Decoded x(everything());
    ASSERT_EQ(x.rc, 0);
    const tr__obj *r = x.root();
    const tr__obj *a = tr__obj_get(r, "a");
    const tr__obj *s = tr__obj_get(r, "s");
    EXPECT_EQ(tr__obj_get(r, "missing"), nullptr);
    EXPECT_EQ(tr__obj_get(r, ""), nullptr);
    EXPECT_EQ(tr__obj_get(r, "i2"), nullptr);    // longer than a key
    EXPECT_EQ(tr__obj_get(r, "inner"), nullptr); // nested keys are not visible
    EXPECT_EQ(tr__obj_get(a, "a"), nullptr);     // not a map
    EXPECT_EQ(tr__obj_get(nullptr, "a"), nullptr);
    EXPECT_EQ(tr__obj_len(s), 0u);
    EXPECT_EQ(tr__obj_len(nullptr), 0u);
    EXPECT_EQ(tr__obj_at(r, 0), nullptr); // a map is not an array
    EXPECT_EQ(tr__obj_at(nullptr, 0), nullptr);
    EXPECT_EQ(tr__obj_key_at(a, 0), nullptr);
    EXPECT_EQ(tr__obj_val_at(a, 0), nullptr);
    EXPECT_EQ(tr__obj_key_at(nullptr, 0), nullptr);
    EXPECT_EQ(tr__obj_val_at(nullptr, 0), nullptr);
    EXPECT_EQ(tr__obj_type(nullptr), TR__T_OTHER);
}

TEST(Codec, NonStringMapKeysAreSkipped) {
    Decoded x(encode([](tr__buf *b) {
        tr__enc_map(b, 2);
        tr__enc_int(b, 1);
        tr__enc_str(b, "by int");
        tr__enc_bin(b, "k", 1);
        tr__enc_str(b, "by bin");
    }));
    ASSERT_EQ(x.rc, 0);
    EXPECT_EQ(tr__obj_get(x.root(), "k"), nullptr);
    EXPECT_EQ(tr__obj_get(x.root(), "1"), nullptr);
}

TEST(Codec, TypedGettersRejectWrongTypes) {
    Decoded x(everything());
    ASSERT_EQ(x.rc, 0);
    const tr__obj *r = x.root();
    const char *s;
    const void *p;
    size_t n;
    int64_t i;
    uint64_t u;
    double d;
    bool b;
    // Each field read as every type it is not.
    EXPECT_EQ(tr__obj_str(tr__obj_get(r, "i"), "i", &s, &n), TR_EPROTO);
    EXPECT_EQ(tr__obj_str(tr__obj_get(r, "nil"), "nil", &s, &n), TR_EPROTO);
    EXPECT_EQ(tr__obj_bin(tr__obj_get(r, "t"), "t", &p, &n), TR_EPROTO);
    EXPECT_EQ(tr__obj_bin(tr__obj_get(r, "a"), "a", &p, &n), TR_EPROTO);
    EXPECT_EQ(tr__obj_int(tr__obj_get(r, "s"), "s", &i), TR_EPROTO);
    EXPECT_EQ(tr__obj_int(tr__obj_get(r, "t"), "t", &i), TR_EPROTO);
    EXPECT_EQ(tr__obj_uint(tr__obj_get(r, "i"), "i", &u), TR_EPROTO); // negative
    EXPECT_EQ(tr__obj_uint(tr__obj_get(r, "m"), "m", &u), TR_EPROTO);
    EXPECT_EQ(tr__obj_double(tr__obj_get(r, "s"), "s", &d), TR_EPROTO);
    EXPECT_EQ(tr__obj_double(tr__obj_get(r, "nil"), "nil", &d), TR_EPROTO);
    EXPECT_EQ(tr__obj_bool(tr__obj_get(r, "i"), "i", &b), TR_EPROTO);
    EXPECT_EQ(tr__obj_bool(tr__obj_get(r, "nil"), "nil", &b), TR_EPROTO);
    // NULL objects (a missing field) are TR_EPROTO too, never a crash.
    EXPECT_EQ(tr__obj_str(nullptr, "x", &s, &n), TR_EPROTO);
    EXPECT_EQ(tr__obj_bin(nullptr, "x", &p, &n), TR_EPROTO);
    EXPECT_EQ(tr__obj_int(nullptr, "x", &i), TR_EPROTO);
    EXPECT_EQ(tr__obj_uint(nullptr, "x", &u), TR_EPROTO);
    EXPECT_EQ(tr__obj_double(nullptr, "x", &d), TR_EPROTO);
    EXPECT_EQ(tr__obj_bool(nullptr, nullptr, &b), TR_EPROTO);
    // The error text names the field.
    EXPECT_EQ(tr__obj_int(tr__obj_get(r, "s"), "my_field", &i), TR_EPROTO);
    EXPECT_NE(strstr(tr__last_error(), "my_field"), nullptr) << tr__last_error();
}

TEST(Codec, MapShortcutsOnMissingAndWrongFields) {
    Decoded x(everything());
    ASSERT_EQ(x.rc, 0);
    const tr__obj *r = x.root();
    const char *s;
    const void *p;
    size_t n;
    int64_t i;
    uint64_t u;
    double d;
    char *dup = nullptr;
    unsigned char id[16];
    EXPECT_EQ(tr__get_str(r, "nope", &s, &n), TR_EPROTO);
    EXPECT_NE(strstr(tr__last_error(), "nope"), nullptr) << tr__last_error();
    EXPECT_EQ(tr__get_bin(r, "nope", &p, &n), TR_EPROTO);
    EXPECT_EQ(tr__get_int(r, "nope", &i), TR_EPROTO);
    EXPECT_EQ(tr__get_uint(r, "nope", &u), TR_EPROTO);
    EXPECT_EQ(tr__get_double(r, "nope", &d), TR_EPROTO);
    EXPECT_EQ(tr__get_strdup(r, "nope", &dup), TR_EPROTO);
    EXPECT_EQ(tr__get_id(r, "nope", id, 16), TR_EPROTO);
    EXPECT_EQ(tr__get_str(r, "b", &s, &n), TR_EPROTO);
    EXPECT_EQ(tr__get_int(r, "d", &i), TR_EPROTO);
    EXPECT_EQ(tr__get_uint(r, "i", &u), TR_EPROTO);
    EXPECT_EQ(tr__get_strdup(r, "i", &dup), TR_EPROTO);
    EXPECT_EQ(dup, nullptr);
    // Shortcuts on something that is not a map.
    EXPECT_EQ(tr__get_int(tr__obj_get(r, "a"), "x", &i), TR_EPROTO);
    EXPECT_EQ(tr__get_int(nullptr, "x", &i), TR_EPROTO);
}

TEST(Codec, GetId) {
    Decoded x(encode([](tr__buf *b) {
        tr__enc_map(b, 3);
        tr__enc_str(b, "short");
        tr__enc_bin(b, "0123456789abcde", 15);
        tr__enc_str(b, "long");
        tr__enc_bin(b, "0123456789abcdefg", 17);
        tr__enc_str(b, "num");
        tr__enc_int(b, 16);
    }));
    ASSERT_EQ(x.rc, 0);
    unsigned char id[16];
    memset(id, 0xee, sizeof id);
    EXPECT_EQ(tr__get_id(x.root(), "short", id, 16), TR_EPROTO);
    EXPECT_EQ(tr__get_id(x.root(), "long", id, 16), TR_EPROTO);
    EXPECT_EQ(tr__get_id(x.root(), "num", id, 16), TR_EPROTO);
    for (unsigned char c : id)
        EXPECT_EQ(c, 0xee); // untouched on error
    EXPECT_EQ(tr__get_id(x.root(), "short", id, 15), 0);
    EXPECT_EQ(memcmp(id, "0123456789abcde", 15), 0);
}

TEST(Codec, GetStrdup) {
    Decoded x(encode([](tr__buf *b) {
        tr__enc_map(b, 3);
        tr__enc_str(b, "ok");
        tr__enc_str(b, "value");
        tr__enc_str(b, "nul");
        tr__enc_strn(b, "a\0b", 3);
        tr__enc_str(b, "empty");
        tr__enc_str(b, "");
    }));
    ASSERT_EQ(x.rc, 0);
    char *s = nullptr;
    ASSERT_EQ(tr__get_strdup(x.root(), "ok", &s), 0);
    EXPECT_STREQ(s, "value");
    free(s);
    s = nullptr;
    EXPECT_EQ(tr__get_strdup(x.root(), "nul", &s), TR_EPROTO);
    EXPECT_EQ(s, nullptr);
    ASSERT_EQ(tr__get_strdup(x.root(), "empty", &s), 0);
    EXPECT_STREQ(s, "");
    free(s);
}

TEST(Codec, RejectsEmptyInput) {
    tr__dec d;
    EXPECT_EQ(tr__dec_init(&d, "", 0), TR_EPROTO);
    EXPECT_FALSE(d.live);
    EXPECT_EQ(d.root, nullptr);
    tr__dec_free(&d); // harmless after a failed init
    EXPECT_EQ(tr__dec_init(&d, nullptr, 0), TR_EPROTO);
}

TEST(Codec, RejectsEveryTruncation) {
    std::string msg = everything();
    for (size_t len = 0; len < msg.size(); len++) {
        tr__dec d;
        ASSERT_EQ(tr__dec_init(&d, msg.data(), len), TR_EPROTO) << "prefix of " << len;
        ASSERT_FALSE(d.live);
    }
    tr__dec d;
    ASSERT_EQ(tr__dec_init(&d, msg.data(), msg.size()), 0);
    tr__dec_free(&d);
}

TEST(Codec, RejectsTrailingBytes) {
    std::string msg = everything();
    tr__dec d;
    EXPECT_EQ(tr__dec_init(&d, (msg + '\0').data(), msg.size() + 1), TR_EPROTO);
    EXPECT_NE(strstr(tr__last_error(), "trailing"), nullptr) << tr__last_error();
    std::string two = msg + msg;
    EXPECT_EQ(tr__dec_init(&d, two.data(), two.size()), TR_EPROTO);
    EXPECT_EQ(tr__dec_init(&d, "\xc0\xc0", 2), TR_EPROTO);
}

TEST(Codec, RejectsGarbage) {
    tr__dec d;
    EXPECT_EQ(tr__dec_init(&d, "\xc1", 1), TR_EPROTO); // the one never-used byte
    EXPECT_EQ(tr__dec_init(&d, "\x92\x01\xc1", 3), TR_EPROTO);
    EXPECT_EQ(tr__dec_init(&d, "\x81\xa1k\xc1", 4), TR_EPROTO);
    EXPECT_EQ(tr__dec_init(&d, "\xdb\x00\x00\x10\x00", 5), TR_EPROTO); // str32 of 4 KiB, absent
    EXPECT_EQ(tr__dec_init(&d, "\xc6\xff\xff\xff\xff", 5), TR_EPROTO); // bin32 of 4 GiB, absent
    EXPECT_FALSE(d.live);
}

TEST(Codec, ExtIsOther) {
    Decoded x(std::string("\xd4\x01\x02", 3)); // fixext1
    ASSERT_EQ(x.rc, 0);
    EXPECT_EQ(tr__obj_type(x.root()), TR__T_OTHER);
    const void *p;
    size_t n;
    EXPECT_EQ(tr__obj_bin(x.root(), "ext", &p, &n), TR_EPROTO);
}

TEST(Codec, DecFreeIsIdempotent) {
    tr__dec d;
    ASSERT_EQ(tr__dec_init(&d, "\x90", 1), 0);
    EXPECT_TRUE(d.live);
    tr__dec_free(&d);
    EXPECT_FALSE(d.live);
    EXPECT_EQ(d.root, nullptr);
    tr__dec_free(&d);
    tr__dec_free(nullptr);
}

TEST(Codec, ModerateNestingDecodes) {
    std::string msg(20, '\x91'); // 20 nested one-element arrays around a nil
    msg += '\xc0';
    Decoded x(msg);
    ASSERT_EQ(x.rc, 0);
    const tr__obj *o = x.root();
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(tr__obj_type(o), TR__T_ARRAY);
        o = tr__obj_at(o, 0);
    }
    EXPECT_EQ(tr__obj_type(o), TR__T_NIL);
}

TEST(Codec, DeepNestingIsRejectedNotACrash) {
    // msgpack-c's parser stack holds 32 levels; deeper input must fail cleanly.
    std::string msg(100000, '\x91');
    msg += '\xc0';
    tr__dec d;
    int rc = tr__dec_init(&d, msg.data(), msg.size());
    EXPECT_TRUE(rc == TR_EPROTO || rc == TR_ENOMEM) << tr__errname(rc);
    EXPECT_FALSE(d.live);
}

TEST(Codec, DeepNestingIsEproto) {
    // Known core bug (codec.c tr__dec_init): msgpack-c reports "stack too deep" as
    // MSGPACK_UNPACK_NOMEM_ERROR, so a 34-byte malformed message gives TR_ENOMEM.
    std::string msg(33, '\x91');
    msg += '\xc0';
    tr__dec d;
    EXPECT_EQ(tr__dec_init(&d, msg.data(), msg.size()), TR_EPROTO);
}

TEST(Codec, HugeContainerCountIsEproto) {
    // Known core bug (codec.c tr__dec_init): msgpack-c allocates count * 16 bytes for an
    // array header before reading any element, so this 5-byte peer message asks malloc
    // for 64 GiB (TR_ENOMEM here; an abort under ASan; real memory where overcommit
    // allows). Counts beyond the bytes left should be rejected as TR_EPROTO up front.
    tr__dec d;
    EXPECT_EQ(tr__dec_init(&d, "\xdd\xff\xff\xff\xff", 5), TR_EPROTO);
    EXPECT_EQ(tr__dec_init(&d, "\xdf\xff\xff\xff\xff", 5), TR_EPROTO);
}

/* Before: every count fitted the bytes left, yet a 64 MiB message of one-byte elements had
 * msgpack-c allocate ~1.5 GiB of objects. Now the elements of one message add up to 2^18
 * at most (a decode's memory stays within 6 MiB): one over is refused, however it is
 * split across containers; 2^18 decode. */
TEST(Codec, ElementsOfOneMessageAreBounded) {
    auto nils = [](uint32_t arrays, uint32_t each) {
        tr__buf b = TR__BUF_INIT;
        tr__enc_array(&b, arrays);
        for (uint32_t a = 0; a < arrays; a++) {
            tr__enc_array(&b, each);
            for (uint32_t i = 0; i < each; i++)
                tr__enc_nil(&b);
        }
        std::string s(b.data, b.len);
        tr__buf_free(&b);
        return s;
    };
    tr__dec d;
    std::string ok = nils(1, (1u << 18) - 1); /* the outer array's one, and 2^18 - 1 */
    ASSERT_EQ(tr__dec_init(&d, ok.data(), ok.size()), 0) << tr__last_error();
    tr__dec_free(&d);
    std::string one = nils(1, 1u << 18);
    EXPECT_EQ(tr__dec_init(&d, one.data(), one.size()), TR_EPROTO);
    EXPECT_NE(std::string(tr__last_error()).find("elements"), std::string::npos);
    std::string split = nils(1024, 256); /* 1024 + 262144 elements in 1025 arrays */
    EXPECT_EQ(tr__dec_init(&d, split.data(), split.size()), TR_EPROTO);
    std::string flat(64u << 20, '\xc0'); /* 64 MiB: an array of 2^26 - 5 nils */
    flat[0] = '\xdd';
    uint32_t n = htonl((64u << 20) - 5);
    memcpy(&flat[1], &n, 4);
    EXPECT_EQ(tr__dec_init(&d, flat.data(), flat.size()), TR_EPROTO);
}

// Visits every value of a decoded tree through the typed getters: the right getter
// succeeds, a wrong one fails with TR_EPROTO, and every byte of a view is readable.
void walk(const tr__obj *o, int depth, size_t *sum) {
    ASSERT_LT(depth, 100);
    const char *s;
    const void *p;
    size_t n;
    int64_t i;
    uint64_t u;
    double d;
    bool b;
    switch (tr__obj_type(o)) {
    case TR__T_NIL:
        EXPECT_EQ(tr__obj_bool(o, "v", &b), TR_EPROTO);
        break;
    case TR__T_BOOL:
        EXPECT_EQ(tr__obj_bool(o, "v", &b), 0);
        EXPECT_EQ(tr__obj_int(o, "v", &i), TR_EPROTO);
        break;
    case TR__T_INT:
        EXPECT_TRUE(tr__obj_int(o, "v", &i) == 0 || tr__obj_uint(o, "v", &u) == 0);
        EXPECT_EQ(tr__obj_double(o, "v", &d), 0);
        EXPECT_EQ(tr__obj_str(o, "v", &s, &n), TR_EPROTO);
        break;
    case TR__T_FLOAT:
        EXPECT_EQ(tr__obj_double(o, "v", &d), 0);
        EXPECT_EQ(tr__obj_int(o, "v", &i), TR_EPROTO);
        break;
    case TR__T_STR:
        ASSERT_EQ(tr__obj_str(o, "v", &s, &n), 0);
        for (size_t k = 0; k < n; k++)
            *sum += (unsigned char)s[k];
        break;
    case TR__T_BIN:
        ASSERT_EQ(tr__obj_bin(o, "v", &p, &n), 0);
        for (size_t k = 0; k < n; k++)
            *sum += ((const unsigned char *)p)[k];
        EXPECT_EQ(tr__obj_str(o, "v", &s, &n), TR_EPROTO);
        break;
    case TR__T_ARRAY:
        for (size_t k = 0; k < tr__obj_len(o); k++)
            walk(tr__obj_at(o, k), depth + 1, sum);
        EXPECT_EQ(tr__obj_at(o, tr__obj_len(o)), nullptr);
        break;
    case TR__T_MAP:
        for (size_t k = 0; k < tr__obj_len(o); k++) {
            walk(tr__obj_key_at(o, k), depth + 1, sum);
            walk(tr__obj_val_at(o, k), depth + 1, sum);
        }
        (void)tr__obj_get(o, "key");
        break;
    default:
        EXPECT_EQ(tr__obj_int(o, "v", &i), TR_EPROTO);
        break;
    }
}

TEST(Codec, FuzzRandomAndMutatedInputNeverCrashes) {
    std::mt19937_64 rng(12345);
    std::vector<std::string> seeds = {everything(), std::string("\x93\x01\xa1x\xc3", 5)};
    seeds.push_back(encode([](tr__buf *b) {
        tr__enc_array(b, 4);
        tr__enc_double(b, -1.5);
        tr__enc_bin(b, "abcdefghijklmnopqrstuvwxyz", 26);
        tr__enc_map(b, 1);
        tr__enc_int(b, -70000);
        tr__enc_array(b, 2);
        tr__enc_uint(b, UINT64_MAX);
        tr__enc_nil(b);
        tr__enc_str(b, std::string(300, 'p').c_str());
    }));
    int ok = 0, proto = 0;
    size_t sum = 0;
    for (int iter = 0; iter < 10000; iter++) {
        std::string in;
        unsigned kind = iter % 4;
        if (kind == 0) { // pure random bytes
            size_t len = rng() % 64;
            for (size_t k = 0; k < len; k++)
                in.push_back((char)rng());
        } else { // a mutated valid message
            in = seeds[rng() % seeds.size()];
            unsigned muts = 1 + rng() % 4;
            for (unsigned m = 0; m < muts && !in.empty(); m++) {
                size_t at = rng() % in.size();
                switch (rng() % 4) {
                case 0:
                    in[at] = (char)rng();
                    break;
                case 1:
                    in.resize(at);
                    break;
                case 2:
                    in.insert(in.begin() + (long)at, (char)rng());
                    break;
                default:
                    in[at] = (char)(in[at] ^ (1 << (rng() % 8)));
                    break;
                }
            }
        }
        // Decode from an exact-size heap copy so ASan sees any read past the end.
        std::vector<char> heap(in.begin(), in.end());
        tr__dec d;
        int rc = tr__dec_init(&d, heap.data(), heap.size());
        if (rc == 0) {
            ok++;
            walk(d.root, 0, &sum);
            tr__dec_free(&d);
        } else {
            ASSERT_TRUE(rc == TR_EPROTO || rc == TR_ENOMEM) << tr__errname(rc);
            ASSERT_FALSE(d.live);
            proto++;
        }
    }
    EXPECT_EQ(ok + proto, 10000);
    EXPECT_GT(ok, 100);     // the mutations leave some messages valid...
    EXPECT_GT(proto, 1000); // ...and break many
    RecordProperty("valid", ok);
}

} // namespace

// The flat reads (tr__flat_*) take a value in place where the decoder would take it the
// same way, and refuse (0, *pos unchanged) whatever it would not: checked against
// tr__dec_init and tr__obj_* on every encoding of every width, on each of their
// truncations, with a byte after, and on random bytes.
namespace {

// What the decoder says of one value filling msg: kind 0 int, 1 bin-or-str, 2 str, 3 array.
bool dec_reads(const std::string &msg, int kind, int64_t *v, std::string *s, size_t *n) {
    tr__dec d;
    if (tr__dec_init(&d, msg.data(), msg.size())) return false;
    const void *p = nullptr;
    const char *c = nullptr;
    bool ok;
    if (kind == 0) {
        ok = tr__obj_int(d.root, "x", v) == 0;
    } else if (kind == 1) {
        ok = tr__obj_bin(d.root, "x", &p, n) == 0;
        if (ok) *s = std::string(static_cast<const char *>(p), *n);
    } else if (kind == 2) {
        ok = tr__obj_str(d.root, "x", &c, n) == 0;
        if (ok) *s = std::string(c, *n);
    } else {
        ok = tr__obj_type(d.root) == TR__T_ARRAY;
        if (ok) *n = tr__obj_len(d.root);
    }
    tr__dec_free(&d);
    return ok;
}

bool flat_reads(const std::string &msg, int kind, int64_t *v, std::string *s, size_t *n,
                size_t *pos) {
    *pos = 0;
    const void *p = nullptr;
    const char *c = nullptr;
    std::vector<char> heap(msg.begin(), msg.end()); // (exact size: ASan sees a read past it)
    const char *at = heap.data();
    int r = kind == 0   ? tr__flat_int(at, heap.size(), pos, v)
            : kind == 1 ? tr__flat_bin(at, heap.size(), pos, &p, n)
            : kind == 2 ? tr__flat_str(at, heap.size(), pos, &c, n)
                        : tr__flat_array(at, heap.size(), pos, n);
    if (r && kind == 1) *s = std::string(static_cast<const char *>(p), *n);
    if (r && kind == 2) *s = std::string(c, *n);
    if (!r) {
        EXPECT_EQ(*pos, 0u) << "a refused read moved pos";
    }
    return r != 0;
}

// A flat read that fills msg agrees with the decoder exactly.
void same_as_decoder(const std::string &msg, int kind) {
    int64_t dv = 0, fv = 0;
    std::string ds, fs;
    size_t dn = 0, fn = 0, pos = 0;
    bool dec = dec_reads(msg, kind, &dv, &ds, &dn);
    bool flat = flat_reads(msg, kind, &fv, &fs, &fn, &pos);
    if (kind == 3) { // (an array's head only: the decoder sees it with fn nils after)
        if (flat && fn <= 65536) {
            EXPECT_TRUE(dec_reads(msg + std::string(fn, '\xc0'), 3, &dv, &ds, &dn));
            EXPECT_EQ(dn, fn);
            EXPECT_EQ(pos, msg.size());
        }
        return;
    }
    flat = flat && pos == msg.size(); // (the decoder takes one value filling msg)
    ASSERT_EQ(dec, flat) << "kind " << kind << ", " << msg.size() << " bytes, first 0x" << std::hex
                         << (msg.empty() ? 0 : (unsigned char)msg[0]);
    if (!flat) return;
    EXPECT_EQ(dv, fv);
    EXPECT_EQ(ds, fs);
    EXPECT_EQ(dn, fn);
}

} // namespace

TEST(Codec, FlatReadsAgreeWithTheDecoder) {
    std::vector<std::string> msgs;
    const int64_t ints[] = {0,     1,         31,           127,       128,   255,      256, 65535,
                            65536, INT32_MAX, 4294967295LL, INT64_MAX, -1,    -32,      -33, -128,
                            -129,  -32768,    -32769,       INT32_MIN, -1000, INT64_MIN};
    for (int64_t v : ints) {
        tr__buf b = {};
        tr__enc_int(&b, v);
        msgs.push_back(bytes(b));
        tr__buf_free(&b);
    }
    tr__buf u = {};
    tr__enc_uint(&u, UINT64_MAX); // (over int64: refused by both)
    msgs.push_back(bytes(u));
    tr__buf_free(&u);
    // every integer type byte with every value width, as another encoder may write them
    const unsigned char types[] = {0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3};
    for (unsigned char t : types)
        for (unsigned char fill : {0x00, 0x7f, 0x80, 0xff}) {
            int w = 1 << ((t - 0xcc) & 3);
            msgs.push_back(std::string(1, (char)t) + std::string(w, (char)fill));
        }
    for (size_t n : {0, 1, 31, 32, 255, 256, 65535, 65536}) {
        std::string body(n, 'x');
        tr__buf b = {};
        tr__enc_bin(&b, body.data(), n);
        msgs.push_back(bytes(b));
        tr__buf_free(&b);
        tr__buf s = {};
        tr__enc_strn(&s, body.data(), n);
        msgs.push_back(bytes(s));
        tr__buf_free(&s);
    }
    for (uint32_t n : {0u, 2u, 15u, 16u, 65535u, 65536u}) {
        tr__buf b = {};
        tr__enc_array(&b, n);
        msgs.push_back(bytes(b));
        tr__buf_free(&b);
    }
    msgs.push_back(std::string("\xc0", 1));                 // nil
    msgs.push_back(std::string("\xc3", 1));                 // true
    msgs.push_back(std::string("\xca\x3f\x80\x00\x00", 5)); // float32
    size_t checked = 0;
    for (const std::string &m : msgs)
        for (int kind = 0; kind < 4; kind++) {
            same_as_decoder(m, kind);
            for (size_t cut = 0; cut < m.size() && cut < 12; cut++) // (truncations)
                same_as_decoder(m.substr(0, cut), kind);
            // a byte after: the flat read takes the value and stops before it
            int64_t v;
            std::string s;
            size_t n, pos;
            if (kind != 3 && flat_reads(m + "\x01", kind, &v, &s, &n, &pos)) {
                EXPECT_EQ(pos, m.size());
            }
            checked++;
        }
    std::mt19937 rng(7);
    for (int i = 0; i < 20000; i++) { // random bytes: never a read past the end
        std::string m(1 + rng() % 10, '\0');
        for (char &c : m)
            c = (char)rng();
        for (int kind = 0; kind < 3; kind++)
            same_as_decoder(m, kind);
    }
    EXPECT_GT(checked, 100u);
}
