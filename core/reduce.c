/* core/reduce.c - reduction kernels: one loop per (type, op), written so the compiler
 * vectorises the common float32/int cases. */
#include "core/reduce.h"

#include <stdint.h>
#include <string.h>

#include "core/status.h"

size_t tr__dtype_size(tr_dtype dtype) {
    switch (dtype) {
    case TR_INT8:
    case TR_UINT8:
        return 1;
    case TR_FLOAT16:
    case TR_BFLOAT16:
        return 2;
    case TR_INT32:
    case TR_FLOAT32:
        return 4;
    case TR_INT64:
    case TR_FLOAT64:
        return 8;
    }
    return 0;
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
        uint32_t m = man >> shift;
        if (rest > half || (rest == half && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t m = man >> 13, rest = man & 0x1fff;
    uint32_t h = sign | (uint32_t)exp << 10 | m;
    if (rest > 0x1000 || (rest == 0x1000 && (m & 1))) h++; /* may carry into the exponent */
    return (uint16_t)h;
}

static float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000) == 0x7f800000 && (x & 0x7fffff)) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1); /* round to nearest even */
    return (uint16_t)(x >> 16);
}

/* out and out2 may each be exactly a or b (each element is read before it is written); GCC
 * versions these loops on aliasing and takes the vector path for exact aliases too. */
#define LOOP(T, EXPR)                                                                              \
    do {                                                                                           \
        T *o = out, *o2 = out2;                                                                    \
        const T *a = in_a;                                                                         \
        const T *b = in;                                                                           \
        if (o2) {                                                                                  \
            for (size_t i = 0; i < count; i++) {                                                   \
                T x = a[i], y = b[i], r = (EXPR);                                                  \
                o[i] = r;                                                                          \
                o2[i] = r;                                                                         \
            }                                                                                      \
        } else {                                                                                   \
            for (size_t i = 0; i < count; i++) {                                                   \
                T x = a[i], y = b[i];                                                              \
                o[i] = (EXPR);                                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)

#define OPS(T)                                                                                     \
    switch (op) {                                                                                  \
    case TR_SUM:                                                                                   \
    case TR_AVG:                                                                                   \
        LOOP(T, (T)(x + y));                                                                       \
        return 0;                                                                                  \
    case TR_PROD:                                                                                  \
        LOOP(T, (T)(x * y));                                                                       \
        return 0;                                                                                  \
    case TR_MIN:                                                                                   \
        LOOP(T, y < x ? y : x);                                                                    \
        return 0;                                                                                  \
    case TR_MAX:                                                                                   \
        LOOP(T, y > x ? y : x);                                                                    \
        return 0;                                                                                  \
    }                                                                                              \
    break

/* float16/bfloat16: computed in float32, rounded back; one loop per op so each vectorises. */
#define HALF_LOOP(TO, FROM, EXPR)                                                                  \
    do {                                                                                           \
        uint16_t *o = out, *o2 = out2;                                                             \
        const uint16_t *a = in_a;                                                                  \
        const uint16_t *b = in;                                                                    \
        for (size_t i = 0; i < count; i++) {                                                       \
            float x = FROM(a[i]), y = FROM(b[i]);                                                  \
            o[i] = TO(EXPR);                                                                       \
            if (o2) o2[i] = o[i];                                                                  \
        }                                                                                          \
    } while (0)

#define HALF_OPS(TO, FROM)                                                                         \
    switch (op) {                                                                                  \
    case TR_PROD:                                                                                  \
        HALF_LOOP(TO, FROM, x *y);                                                                 \
        return 0;                                                                                  \
    case TR_MIN:                                                                                   \
        HALF_LOOP(TO, FROM, y < x ? y : x);                                                        \
        return 0;                                                                                  \
    case TR_MAX:                                                                                   \
        HALF_LOOP(TO, FROM, y > x ? y : x);                                                        \
        return 0;                                                                                  \
    default:                                                                                       \
        HALF_LOOP(TO, FROM, x + y);                                                                \
        return 0;                                                                                  \
    }

/* Unsigned 8-bit arithmetic wraps; signed integers are computed in unsigned arithmetic so
 * that overflow wraps (two's complement) instead of being undefined behaviour. */
int tr__reduce(void *acc, const void *in, size_t count, tr_dtype dtype, tr_redop op) {
    return tr__reduce_to(acc, NULL, acc, in, count, dtype, op);
}

int tr__reduce_to(void *out, void *out2, const void *in_a, const void *in, size_t count,
                  tr_dtype dtype, tr_redop op) {
    if ((unsigned)op > TR_AVG) return tr__err(TR_EINVAL, "unknown reduction op %d", (int)op);
    switch (dtype) {
    case TR_INT8:
        if (op == TR_MIN || op == TR_MAX) {
            OPS(int8_t);
        } else {
            OPS(uint8_t);
        }
    case TR_UINT8:
        OPS(uint8_t);
    case TR_INT32:
        if (op == TR_MIN || op == TR_MAX) {
            OPS(int32_t);
        } else {
            OPS(uint32_t);
        }
    case TR_INT64:
        if (op == TR_MIN || op == TR_MAX) {
            OPS(int64_t);
        } else {
            OPS(uint64_t);
        }
    case TR_FLOAT32:
        OPS(float);
    case TR_FLOAT64:
        OPS(double);
    case TR_FLOAT16:
        HALF_OPS(f32_to_f16, f16_to_f32);
    case TR_BFLOAT16:
        HALF_OPS(f32_to_bf16, bf16_to_f32);
    }
    return tr__err(TR_EINVAL, "unknown dtype %d", (int)dtype);
}

int tr__reduce_finish(void *acc, size_t count, tr_dtype dtype, tr_redop op, int n) {
    if (op != TR_AVG || n <= 1) return 0;
    size_t i;
    switch (dtype) {
    case TR_INT8:
        for (i = 0; i < count; i++)
            ((int8_t *)acc)[i] = (int8_t)(((int8_t *)acc)[i] / n);
        return 0;
    case TR_UINT8:
        for (i = 0; i < count; i++)
            ((uint8_t *)acc)[i] = (uint8_t)(((uint8_t *)acc)[i] / n);
        return 0;
    case TR_INT32:
        for (i = 0; i < count; i++)
            ((int32_t *)acc)[i] /= n;
        return 0;
    case TR_INT64:
        for (i = 0; i < count; i++)
            ((int64_t *)acc)[i] /= n;
        return 0;
    case TR_FLOAT32:
        for (i = 0; i < count; i++)
            ((float *)acc)[i] /= (float)n;
        return 0;
    case TR_FLOAT64:
        for (i = 0; i < count; i++)
            ((double *)acc)[i] /= n;
        return 0;
    case TR_FLOAT16:
        for (i = 0; i < count; i++) {
            uint16_t *a = acc;
            a[i] = f32_to_f16(f16_to_f32(a[i]) / (float)n);
        }
        return 0;
    case TR_BFLOAT16:
        for (i = 0; i < count; i++) {
            uint16_t *a = acc;
            a[i] = f32_to_bf16(bf16_to_f32(a[i]) / (float)n);
        }
        return 0;
    }
    return tr__err(TR_EINVAL, "unknown dtype %d", (int)dtype);
}
