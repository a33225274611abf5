/* actor/protocol.c - CALL and RESULT bodies. */
#include "actor/protocol.h"

#include <string.h>

#include "core/codec.h"
#include "core/frame.h"
#include "core/status.h"

const char *tr__actor_state_name(int state) {
    static const char *names[] = {"PENDING", "STARTING", "ALIVE", "RESTARTING", "DEAD"};
    return state >= 0 && state <= 4 ? names[state] : "UNKNOWN";
}

/* Frames are built in place: reserve the header, encode the body after it, then fill the
 * header in with the body's length. */
static int finish(tr__buf *out, size_t hdr_at, uint8_t type, uint64_t seq) {
    if (out->oom) return tr__err(TR_ENOMEM, "encoding a frame");
    size_t body = out->len - hdr_at - TR__FRAME_HDR;
    if (body > UINT32_MAX) return tr__err(TR_EMSGSIZE, "frame body of %zu bytes", body);
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)body, seq};
    memcpy(out->data + hdr_at, &h, sizeof h);
    return 0;
}

static int begin(tr__buf *out, size_t *hdr_at, size_t body_guess) {
    if (tr__buf_reserve(out, TR__FRAME_HDR + body_guess)) return TR_ENOMEM;
    *hdr_at = out->len;
    out->len += TR__FRAME_HDR;
    return 0;
}

int tr__call_frame(tr__buf *out, uint64_t seq, const char *method, const void *args, size_t len,
                   const void *refs, size_t n_refs) {
    size_t at, mlen = strlen(method);
    if (begin(out, &at, 24 + mlen + len + 16 * n_refs)) return TR_ENOMEM;
    tr__enc_array(out, n_refs ? 3 : 2);
    tr__enc_strn(out, method, mlen);
    tr__enc_bin(out, args, len);
    if (n_refs) tr__enc_bin(out, refs, 16 * n_refs);
    int rc = finish(out, at, TR__MSG_CALL, seq);
    if (rc) out->len = at;
    return rc;
}

int tr__result_frame(tr__buf *out, uint64_t seq, int rc, const void *data, size_t len) {
    size_t at;
    if (begin(out, &at, 16 + len)) return TR_ENOMEM;
    tr__enc_array(out, 2);
    tr__enc_int(out, rc);
    tr__enc_bin(out, data, len);
    int r = finish(out, at, TR__MSG_RESULT, seq);
    if (r) out->len = at;
    return r;
}

int tr__result_frame_ref(tr__buf *out, uint64_t seq, const void *ref16, int creator) {
    size_t at;
    if (begin(out, &at, 32)) return TR_ENOMEM;
    tr__enc_array(out, 3);
    tr__enc_int(out, 0);
    tr__enc_bin(out, ref16, 16);
    tr__enc_int(out, creator);
    int r = finish(out, at, TR__MSG_RESULT, seq);
    if (r) out->len = at;
    return r;
}

int tr__call_parse(const char *body, size_t n, const char **method, size_t *mlen, const void **args,
                   size_t *alen, const void **refs, size_t *n_refs) {
    tr__dec d;
    int rc = tr__dec_init(&d, body, n);
    if (rc) return rc;
    size_t k = tr__obj_len(d.root), rlen = 0;
    *refs = NULL;
    if ((k != 2 && k != 3) || tr__obj_type(d.root) != TR__T_ARRAY ||
        tr__obj_str(tr__obj_at(d.root, 0), "method", method, mlen) ||
        tr__obj_bin(tr__obj_at(d.root, 1), "args", args, alen) ||
        (k == 3 &&
         (tr__obj_bin(tr__obj_at(d.root, 2), "refs", refs, &rlen) || rlen % 16 || rlen == 0)))
        rc = tr__err(TR_EPROTO, "malformed call body (want [method, args, refs?])");
    *n_refs = rlen / 16;
    tr__dec_free(&d); /* the views point into body, not into d */
    return rc;
}

int tr__result_parse(const char *body, size_t n, int *rcode, const void **data, size_t *dlen,
                     int *creator) {
    tr__dec d;
    int rc = tr__dec_init(&d, body, n);
    if (rc) return rc;
    int64_t v = 0, who = -1;
    size_t k = tr__obj_len(d.root);
    if ((k != 2 && k != 3) || tr__obj_type(d.root) != TR__T_ARRAY ||
        tr__obj_int(tr__obj_at(d.root, 0), "rc", &v) ||
        tr__obj_bin(tr__obj_at(d.root, 1), "data", data, dlen) || v > 0 || v < -1000 ||
        (k == 3 && (tr__obj_int(tr__obj_at(d.root, 2), "creator", &who) || who < 0 || who > 65535 ||
                    *dlen != 16 || v != 0)))
        rc = tr__err(TR_EPROTO, "malformed result body (want [rc, data] or [0, ref, creator])");
    *rcode = (int)v;
    *creator = (int)who;
    tr__dec_free(&d);
    return rc;
}
