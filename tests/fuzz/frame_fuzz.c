/* tests/fuzz/frame_fuzz.c - fuzz target: what a node, a worker or a caller does with a
 * byte stream from a peer: reassemble frames, then parse CALL/RESULT bodies and the node
 * configuration. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "actor/protocol.h"
#include "core/config.h"
#include "core/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tr__buf b = TR__BUF_INIT;
    /* Feed the stream in two pieces, as a socket might deliver it. */
    size_t cut = size ? data[0] % (size + 1) : 0;
    for (int part = 0; part < 2; part++) {
        const uint8_t *p = part ? data + cut : data;
        size_t n = part ? size - cut : cut;
        if (tr__buf_append(&b, p, n)) break;
        for (;;) {
            tr__frame_hdr h;
            const char *body;
            int r = tr__frame_parse(&b, 1 << 16, &h, &body);
            if (r <= 0) break;
            const char *m;
            size_t mlen, alen, dlen, nrefs, inl_len;
            const void *args, *dat, *refs, *inl;
            int rc, is_ref;
            const void *kept;
            if (tr__call_parse(body, h.len, &m, &mlen, &args, &alen, &refs, &nrefs, &inl,
                               &inl_len) == 0) {
                /* as the worker resolves them: an all-zero ref takes the next inline value */
                static const uint8_t zero[16];
                for (size_t i = 0; i < nrefs; i++) {
                    const void *v;
                    size_t vlen;
                    if (memcmp((const uint8_t *)refs + 16 * i, zero, 16) == 0 &&
                        tr__call_inline_next(&inl, &inl_len, &v, &vlen))
                        break;
                }
            }
            (void)tr__result_parse(body, h.len, &rc, &dat, &dlen, &is_ref, &kept);
            tr_config cfg;
            memset(&cfg, 0, sizeof cfg);
            (void)tr__config_decode_node(body, h.len, &cfg);
            tr__buf_consume(&b, TR__FRAME_HDR + h.len);
        }
    }
    tr__buf_free(&b);
    return 0;
}
