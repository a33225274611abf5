/* tests/fuzz/codec_fuzz.c - fuzz target: the msgpack decoder and every typed getter, and
 * the flat reads (tr__flat_*), as used on bytes that arrive from a socket. Build with libFuzzer via
 * tools/fuzz.sh; the regression driver (fuzz_driver.cc) runs it in every test run. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/codec.h"

static size_t walk(const tr__obj *o, int depth) {
    if (!o || depth > 40) return 0;
    size_t n = 1;
    const char *s;
    const void *b;
    size_t len;
    int64_t i;
    uint64_t u;
    double d;
    bool v;
    (void)tr__obj_str(o, "s", &s, &len);
    (void)tr__obj_bin(o, "b", &b, &len);
    (void)tr__obj_int(o, "i", &i);
    (void)tr__obj_uint(o, "u", &u);
    (void)tr__obj_double(o, "d", &d);
    (void)tr__obj_bool(o, "v", &v);
    switch (tr__obj_type(o)) {
    case TR__T_ARRAY:
        for (size_t k = 0; k < tr__obj_len(o); k++)
            n += walk(tr__obj_at(o, k), depth + 1);
        break;
    case TR__T_MAP:
        for (size_t k = 0; k < tr__obj_len(o); k++) {
            n += walk(tr__obj_key_at(o, k), depth + 1);
            n += walk(tr__obj_val_at(o, k), depth + 1);
        }
        (void)tr__obj_get(o, "id");
        break;
    default:
        break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the flat reads (the call's and the result's frames), from every offset's value on */
    for (size_t pos = 0, k = 0; pos < size && k < 64; k++) {
        size_t at = pos, n;
        int64_t v;
        const void *b;
        const char *s;
        if (!tr__flat_array(data, size, &at, &n) && !tr__flat_int(data, size, &at, &v) &&
            !tr__flat_bin(data, size, &at, &b, &n) && !tr__flat_str(data, size, &at, &s, &n))
            break;
        pos = at;
    }
    tr__dec d;
    if (tr__dec_init(&d, data, size) == 0) {
        walk(d.root, 0);
        char *s = NULL;
        if (tr__get_strdup(d.root, "key", &s) == 0) free(s);
        uint8_t id[16];
        (void)tr__get_id(d.root, "id", id, sizeof id);
        tr__dec_free(&d);
    }
    return 0;
}
