/* actor/protocol.c - CALL and RESULT bodies. */
#include "actor/protocol.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "core/codec.h"
#include "core/frame.h"
#include "core/status.h"

const char *tr__actor_state_name(int state) {
    static const char *names[] = {"PENDING", "STARTING", "ALIVE", "RESTARTING", "DEAD"};
    return state >= 0 && state <= 4 ? names[state] : "UNKNOWN";
}

/* Frames are built in place: reserve the header, encode the body after it, then fill the
 * header in with the body's length. A frame that fails is taken back whole, and the
 * buffer stays usable (its allocation failure is not left sticky): the stream of a
 * connection holds other frames. */
static int finish(tr__buf *out, size_t hdr_at, uint8_t type, uint64_t seq) {
    if (out->oom) {
        out->len = hdr_at;
        out->oom = false;
        return tr__err(TR_ENOMEM, "encoding a frame");
    }
    size_t body = out->len - hdr_at - TR__FRAME_HDR;
    if (body > UINT32_MAX) {
        out->len = hdr_at;
        return tr__err(TR_EMSGSIZE, "frame body of %zu bytes", body);
    }
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, (uint32_t)body, seq};
    memcpy(out->data + hdr_at, &h, sizeof h);
    return 0;
}

static int begin(tr__buf *out, size_t *hdr_at, size_t body_guess) {
    *hdr_at = out->len;
    if (tr__buf_reserve(out, TR__FRAME_HDR + body_guess)) {
        out->oom = false; /* nothing was appended */
        return tr__err(TR_ENOMEM, "encoding a frame of %zu bytes", body_guess);
    }
    *hdr_at = out->len;
    out->len += TR__FRAME_HDR;
    return 0;
}

int tr__call_frame(tr__buf *out, uint64_t seq, const char *method, const void *args, size_t len,
                   const tr__wire_arg *wargs, size_t n) {
    size_t at, mlen = strlen(method), inl = 0, n_inl = 0;
    for (size_t i = 0; i < n; i++)
        if (wargs[i].data || wargs[i].len) {
            if (wargs[i].len > UINT32_MAX) return tr__err(TR_EMSGSIZE, "argument %zu", i);
            inl += 4 + wargs[i].len;
            n_inl++;
        }
    if (begin(out, &at, 32 + mlen + len + 16 * n + inl)) return TR_ENOMEM;
    tr__enc_array(out, n_inl ? 4 : n ? 3 : 2);
    tr__enc_strn(out, method, mlen);
    tr__enc_bin(out, args, len);
    if (n) {
        tr__enc_bin_header(out, 16 * n);
        for (size_t i = 0; i < n; i++)
            tr__buf_append(out, wargs[i].ref, 16);
    }
    if (n_inl) {
        tr__enc_bin_header(out, inl);
        for (size_t i = 0; i < n; i++) {
            if (!wargs[i].data && !wargs[i].len) continue;
            uint8_t le[4] = {(uint8_t)wargs[i].len, (uint8_t)(wargs[i].len >> 8),
                             (uint8_t)(wargs[i].len >> 16), (uint8_t)(wargs[i].len >> 24)};
            tr__buf_append(out, le, 4);
            tr__buf_append(out, wargs[i].data, wargs[i].len);
        }
    }
    return finish(out, at, TR__MSG_CALL, seq);
}

int tr__result_frame(tr__buf *out, uint64_t seq, int rc, const void *data, size_t len) {
    size_t at;
    if (begin(out, &at, 16 + len)) return TR_ENOMEM;
    tr__enc_array(out, 2);
    tr__enc_int(out, rc);
    tr__enc_bin(out, data, len);
    return finish(out, at, TR__MSG_RESULT, seq);
}

int tr__result_frame_ref(tr__buf *out, uint64_t seq, const void *ref16) {
    size_t at;
    if (begin(out, &at, 32)) return TR_ENOMEM;
    tr__enc_array(out, 3);
    tr__enc_int(out, 0);
    tr__enc_bin(out, ref16, 16);
    tr__enc_int(out, TR__RESULT_HANDED);
    return finish(out, at, TR__MSG_RESULT, seq);
}

int tr__result_frame_kept(tr__buf *out, uint64_t seq, const void *ref16, const void *data,
                          size_t len) {
    size_t at;
    if (begin(out, &at, 40 + len)) return TR_ENOMEM;
    tr__enc_array(out, 4);
    tr__enc_int(out, 0);
    tr__enc_bin(out, ref16, 16); /* (first: the relay reads it from the body's prefix) */
    tr__enc_int(out, TR__RESULT_KEPT);
    tr__enc_bin(out, data, len);
    return finish(out, at, TR__MSG_RESULT, seq);
}

int tr__send_empty_frame(int fd, uint8_t type, uint64_t seq) {
    tr__frame_hdr h = {TR__FRAME_MAGIC, TR__FRAME_VERSION, type, 0, seq};
    ssize_t n;
    do
        n = send(fd, &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)sizeof h ? 0 : tr__err(TR_EIO, "a %u frame did not go", type);
}

int tr__caller_frame(tr__buf *out, int client, int relayed, unsigned tag) {
    size_t at;
    if (begin(out, &at, 24)) return TR_ENOMEM;
    tr__enc_array(out, relayed ? 3 : 1);
    tr__enc_int(out, client);
    if (relayed) {
        tr__enc_int(out, 1);
        tr__enc_int(out, tag);
    }
    return finish(out, at, TR__MSG_CALLER, 0);
}

int tr__call_parse(const char *body, size_t n, const char **method, size_t *mlen, const void **args,
                   size_t *alen, const void **refs, size_t *n_refs, const void **inl,
                   size_t *inl_len) {
    size_t pos = 0, k;
    *refs = NULL;
    *n_refs = 0;
    *inl = NULL;
    *inl_len = 0;
    /* [method, args], the usual call, read in place (the decoder's zone and objects cost
     * ~650 instructions a call); any other shape, or a malformed one, the decoder's */
    if (tr__flat_array(body, n, &pos, &k) && k == 2 && tr__flat_str(body, n, &pos, method, mlen) &&
        tr__flat_bin(body, n, &pos, args, alen) && pos == n)
        return 0;
    tr__dec d;
    int rc = tr__dec_init(&d, body, n);
    if (rc) return rc;
    size_t rlen = 0;
    k = tr__obj_len(d.root);
    if (k < 2 || k > 4 || tr__obj_type(d.root) != TR__T_ARRAY ||
        tr__obj_str(tr__obj_at(d.root, 0), "method", method, mlen) ||
        tr__obj_bin(tr__obj_at(d.root, 1), "args", args, alen) ||
        (k >= 3 &&
         (tr__obj_bin(tr__obj_at(d.root, 2), "refs", refs, &rlen) || rlen % 16 || rlen == 0)) ||
        (k == 4 && tr__obj_bin(tr__obj_at(d.root, 3), "inline", inl, inl_len)))
        rc = tr__err(TR_EPROTO, "malformed call body (want [method, args, refs?, inline?])");
    *n_refs = rlen / 16;
    tr__dec_free(&d); /* the views point into body, not into d */
    return rc;
}

int tr__call_inline_next(const void **p, size_t *left, const void **data, size_t *len) {
    const uint8_t *b = *p;
    if (*left < 4) return tr__err(TR_EPROTO, "malformed call: an inline argument is missing");
    size_t n = (size_t)b[0] | (size_t)b[1] << 8 | (size_t)b[2] << 16 | (size_t)b[3] << 24;
    if (n > *left - 4) return tr__err(TR_EPROTO, "malformed call: an inline argument is cut");
    *data = b + 4;
    *len = n;
    *p = b + 4 + n;
    *left -= 4 + n;
    return 0;
}

int tr__result_parse(const char *body, size_t n, int *rcode, const void **data, size_t *dlen,
                     int *is_ref, const void **kept) {
    int64_t v = 0, who = -1;
    size_t pos = 0, k;
    *kept = NULL;
    /* [rc, data], the usual result, read in place (as tr__call_parse's [method, args]) */
    if (tr__flat_array(body, n, &pos, &k) && k == 2 && tr__flat_int(body, n, &pos, &v) && v <= 0 &&
        v >= -1000 && tr__flat_bin(body, n, &pos, data, dlen) && pos == n) {
        *rcode = (int)v;
        *is_ref = 0;
        return 0;
    }
    tr__dec d;
    int rc = tr__dec_init(&d, body, n);
    if (rc) return rc;
    size_t rlen = 0;
    k = tr__obj_len(d.root);
    if ((k < 2 || k > 4) || tr__obj_type(d.root) != TR__T_ARRAY ||
        tr__obj_int(tr__obj_at(d.root, 0), "rc", &v) ||
        tr__obj_bin(tr__obj_at(d.root, 1), "data", data, dlen) || v > 0 || v < -1000 ||
        (k >= 3 &&
         (tr__obj_int(tr__obj_at(d.root, 2), "handed", &who) ||
          who != (k == 3 ? TR__RESULT_HANDED : TR__RESULT_KEPT) || *dlen != 16 || v != 0)) ||
        (k == 4 && tr__obj_bin(tr__obj_at(d.root, 3), "data", kept, &rlen)))
        rc = tr__err(TR_EPROTO, "malformed result body (want [rc, data], [0, ref, 65535] or "
                                "[0, ref, 65534, data])");
    if (!rc && k == 4) { /* the ref came second: swap them into place */
        const void *ref = *data;
        *data = *kept;
        *dlen = rlen;
        *kept = ref;
    }
    *rcode = (int)v;
    *is_ref = k == 3 ? 1 : k == 4 ? 2 : 0;
    tr__dec_free(&d);
    return rc;
}

void tr__enc_tls_files(tr__buf *b, const tr__rpc_tls_files *f) {
    tr__enc_str(b, "tls_ca");
    tr__enc_str(b, f ? f->ca : "");
    tr__enc_str(b, "tls_cert");
    tr__enc_str(b, f ? f->cert : "");
    tr__enc_str(b, "tls_key");
    tr__enc_str(b, f ? f->key : "");
}

int tr__get_tls_files(const tr__obj *map, tr__rpc_tls_files *out) {
    memset(out, 0, sizeof *out);
    struct {
        const char *key;
        char *dst;
    } f[] = {{"tls_ca", out->ca}, {"tls_cert", out->cert}, {"tls_key", out->key}};
    for (size_t i = 0; i < 3; i++) {
        const char *p;
        size_t n;
        if (tr__obj_type(tr__obj_get(map, f[i].key)) != TR__T_STR) continue;
        if (tr__get_str(map, f[i].key, &p, &n) || n >= sizeof out->ca || memchr(p, 0, n)) {
            memset(out, 0, sizeof *out);
            return tr__err(TR_EPROTO, "the node names a TLS file ('%s') it cannot be given",
                           f[i].key);
        }
        memcpy(f[i].dst, p, n);
    }
    return 0;
}
