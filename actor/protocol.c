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

int tr__call_frame(tr__buf *out, uint64_t seq, const char *method, const void *args, size_t len) {
    size_t at, mlen = strlen(method);
    if (begin(out, &at, 16 + mlen + len)) return TR_ENOMEM;
    tr__enc_array(out, 2);
    tr__enc_strn(out, method, mlen);
    tr__enc_bin(out, args, len);
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

int tr__call_parse(const char *body, size_t n, const char **method, size_t *mlen, const void **args,
                   size_t *alen) {
    tr__dec d;
    int rc = tr__dec_init(&d, body, n);
    if (rc) return rc;
    if (tr__obj_len(d.root) != 2 || tr__obj_type(d.root) != TR__T_ARRAY ||
        tr__obj_str(tr__obj_at(d.root, 0), "method", method, mlen) ||
        tr__obj_bin(tr__obj_at(d.root, 1), "args", args, alen))
        rc = tr__err(TR_EPROTO, "malformed call body (want [method, args])");
    tr__dec_free(&d); /* the views point into body, not into d */
    return rc;
}

int tr__result_parse(const char *body, size_t n, int *rcode, const void **data, size_t *dlen) {
    tr__dec d;
    int rc = tr__dec_init(&d, body, n);
    if (rc) return rc;
    int64_t v = 0;
    if (tr__obj_len(d.root) != 2 || tr__obj_type(d.root) != TR__T_ARRAY ||
        tr__obj_int(tr__obj_at(d.root, 0), "rc", &v) ||
        tr__obj_bin(tr__obj_at(d.root, 1), "data", data, dlen) || v > 0 || v < -1000)
        rc = tr__err(TR_EPROTO, "malformed result body (want [rc, data])");
    *rcode = (int)v;
    tr__dec_free(&d);
    return rc;
}
