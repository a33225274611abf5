/* core/reduce_test.cc - every dtype x op against a reference computed here in double,
 * counts {0, 1, odd, large}; float16/bfloat16 conversions at exactly representable and
 * rounding cases. */
#include <gtest/gtest.h>
#include <math.h>
#include <string.h>

#include <random>
#include <vector>

extern "C" {
#include "core/reduce.h"
}

namespace {

/* float16 <-> double for building inputs and reading results (reference: IEEE half). */
uint16_t to_f16(double d) {
    /* exact for the small integers and halves used here */
    if (d == 0) return 0;
    uint16_t sign = d < 0 ? 0x8000 : 0;
    d = fabs(d);
    int e;
    double m = frexp(d, &e); /* d = m * 2^e, m in [0.5, 1) */
    int exp = e - 1 + 15;
    uint16_t man = (uint16_t)((m * 2 - 1) * 1024 + 0.5);
    return (uint16_t)(sign | exp << 10 | man);
}
double from_f16(uint16_t h) {
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp ? ldexp(1 + man / 1024.0, exp - 15) : ldexp(man / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}
uint16_t to_bf16(double d) {
    float f = (float)d;
    uint32_t x;
    memcpy(&x, &f, 4);
    return (uint16_t)(x >> 16); /* exact for the values used */
}
double from_bf16(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

double apply(tr_redop op, double a, double b) {
    switch (op) {
    case TR_SUM:
    case TR_AVG:
        return a + b;
    case TR_PROD:
        return a * b;
    case TR_MIN:
        return std::min(a, b);
    case TR_MAX:
        return std::max(a, b);
    }
    return 0;
}

void put(void *p, size_t i, tr_dtype t, double v) {
    switch (t) {
    case TR_INT8:
        ((int8_t *)p)[i] = (int8_t)v;
        break;
    case TR_UINT8:
        ((uint8_t *)p)[i] = (uint8_t)v;
        break;
    case TR_INT32:
        ((int32_t *)p)[i] = (int32_t)v;
        break;
    case TR_INT64:
        ((int64_t *)p)[i] = (int64_t)v;
        break;
    case TR_FLOAT16:
        ((uint16_t *)p)[i] = to_f16(v);
        break;
    case TR_BFLOAT16:
        ((uint16_t *)p)[i] = to_bf16(v);
        break;
    case TR_FLOAT32:
        ((float *)p)[i] = (float)v;
        break;
    case TR_FLOAT64:
        ((double *)p)[i] = v;
        break;
    }
}

double get(const void *p, size_t i, tr_dtype t) {
    switch (t) {
    case TR_INT8:
        return ((const int8_t *)p)[i];
    case TR_UINT8:
        return ((const uint8_t *)p)[i];
    case TR_INT32:
        return ((const int32_t *)p)[i];
    case TR_INT64:
        return (double)((const int64_t *)p)[i];
    case TR_FLOAT16:
        return from_f16(((const uint16_t *)p)[i]);
    case TR_BFLOAT16:
        return from_bf16(((const uint16_t *)p)[i]);
    case TR_FLOAT32:
        return ((const float *)p)[i];
    case TR_FLOAT64:
        return ((const double *)p)[i];
    }
    return 0;
}

TEST(Reduce, EveryDtypeAndOpAgainstAReference) {
    const tr_dtype types[] = {TR_INT8,    TR_UINT8,    TR_INT32,   TR_INT64,
                              TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32, TR_FLOAT64};
    const tr_redop ops[] = {TR_SUM, TR_PROD, TR_MIN, TR_MAX, TR_AVG};
    const size_t counts[] = {0, 1, 7, 1001, 100000};
    std::mt19937 rng(5);
    for (tr_dtype t : types) {
        size_t esz = tr__dtype_size(t);
        ASSERT_GT(esz, 0u);
        for (tr_redop op : ops) {
            for (size_t n : counts) {
                const int ranks = 3;
                std::vector<std::vector<double>> in(ranks, std::vector<double>(n));
                for (auto &v : in)
                    for (auto &x : v) /* small integers: exact in every type, no overflow */
                        x = (double)((int)(rng() % 7) - (t == TR_UINT8 ? 0 : 3));
                std::vector<char> acc(n * esz + 1), buf(n * esz + 1);
                for (size_t i = 0; i < n; i++)
                    put(acc.data(), i, t, in[0][i]);
                for (int r = 1; r < ranks; r++) {
                    for (size_t i = 0; i < n; i++)
                        put(buf.data(), i, t, in[r][i]);
                    ASSERT_EQ(tr__reduce(acc.data(), buf.data(), n, t, op), 0);
                }
                ASSERT_EQ(tr__reduce_finish(acc.data(), n, t, op, ranks), 0);
                for (size_t i = 0; i < n; i++) {
                    double want = in[0][i];
                    for (int r = 1; r < ranks; r++)
                        want = apply(op, want, in[r][i]);
                    if (op == TR_AVG) {
                        bool integer =
                            t == TR_INT8 || t == TR_UINT8 || t == TR_INT32 || t == TR_INT64;
                        want = integer ? (double)(int64_t)(want / ranks) : want / ranks;
                    }
                    double tol =
                        t == TR_FLOAT16 || t == TR_BFLOAT16 ? fabs(want) / 64 + 1e-3 : 1e-6;
                    ASSERT_NEAR(get(acc.data(), i, t), want, tol)
                        << "dtype " << t << " op " << op << " n " << n << " i " << i;
                }
            }
        }
    }
}

/* out = a op b into a third buffer (and a fourth) is bit-identical to folding b into a
 * copy of a. */
TEST(Reduce, ThreeOperandFormMatchesTheInPlaceOne) {
    const tr_dtype types[] = {TR_INT8,    TR_UINT8,    TR_INT32,   TR_INT64,
                              TR_FLOAT16, TR_BFLOAT16, TR_FLOAT32, TR_FLOAT64};
    const tr_redop ops[] = {TR_SUM, TR_PROD, TR_MIN, TR_MAX, TR_AVG};
    std::mt19937 rng(9);
    for (tr_dtype t : types) {
        for (tr_redop op : ops) {
            size_t n = 1003, esz = tr__dtype_size(t);
            std::vector<char> a(n * esz), b(n * esz), out(n * esz), out2(n * esz), ref(n * esz);
            for (size_t i = 0; i < n; i++) {
                put(a.data(), i, t, (double)((int)(rng() % 7) - (t == TR_UINT8 ? 0 : 3)));
                put(b.data(), i, t, (double)((int)(rng() % 7) - (t == TR_UINT8 ? 0 : 3)));
            }
            ref = a;
            ASSERT_EQ(tr__reduce(ref.data(), b.data(), n, t, op), 0);
            ASSERT_EQ(tr__reduce_to(out.data(), nullptr, a.data(), b.data(), n, t, op), 0);
            EXPECT_EQ(memcmp(out.data(), ref.data(), n * esz), 0) << "dtype " << t << " op " << op;
            out.assign(n * esz, 0);
            ASSERT_EQ(tr__reduce_to(out.data(), out2.data(), a.data(), b.data(), n, t, op), 0);
            EXPECT_EQ(memcmp(out.data(), ref.data(), n * esz), 0) << "dtype " << t << " op " << op;
            EXPECT_EQ(memcmp(out2.data(), ref.data(), n * esz), 0) << "dtype " << t << " op " << op;
        }
    }
    int32_t x = 1, y = 2, z = 0;
    EXPECT_EQ(tr__reduce_to(&z, nullptr, &x, &y, 1, (tr_dtype)42, TR_SUM), TR_EINVAL);
}
TEST(Reduce, IntegerOverflowWrapsAndBadArgumentsFail) {
    int32_t a = INT32_MAX, b = 1;
    ASSERT_EQ(tr__reduce(&a, &b, 1, TR_INT32, TR_SUM), 0);
    EXPECT_EQ(a, INT32_MIN);
    uint8_t c = 200, d = 100;
    ASSERT_EQ(tr__reduce(&c, &d, 1, TR_UINT8, TR_SUM), 0);
    EXPECT_EQ(c, 44);
    EXPECT_EQ(tr__reduce(&a, &b, 1, (tr_dtype)42, TR_SUM), TR_EINVAL);
    EXPECT_EQ(tr__reduce(&a, &b, 1, TR_INT32, (tr_redop)42), TR_EINVAL);
    EXPECT_EQ(tr__dtype_size((tr_dtype)42), 0u);
}

TEST(Reduce, HalfPrecisionRoundsToNearestEven) {
    uint16_t x = to_f16(1.0), y = to_f16(1.0 / 2048); /* 1 + 2^-11: a tie, rounds to 1 */
    ASSERT_EQ(tr__reduce(&x, &y, 1, TR_FLOAT16, TR_SUM), 0);
    EXPECT_EQ(from_f16(x), 1.0);
    x = to_f16(65504); /* the largest half: overflow gives infinity */
    y = to_f16(65504);
    ASSERT_EQ(tr__reduce(&x, &y, 1, TR_FLOAT16, TR_SUM), 0);
    EXPECT_EQ(x, 0x7c00);
    uint16_t p = to_bf16(1.0), q = to_bf16(1.0 / 256); /* a bfloat16 tie */
    ASSERT_EQ(tr__reduce(&p, &q, 1, TR_BFLOAT16, TR_SUM), 0);
    EXPECT_EQ(from_bf16(p), 1.0);
}

} // namespace
