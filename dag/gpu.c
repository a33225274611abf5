/* dag/gpu.c - see gpu.h (the CUDA build only), and tr_ctx_reply_device. */
#include "dag/gpu.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "actor/ctx.h"
#include "collective/group.h"
#include "collective/ops.h"
#include "collective/nccl/nccl.h"
#include "core/clock.h"
#include "core/status.h"
#include "troupe/dag.h"

/* A send or receive of the graph's waits as long as the readers' upstream methods take;
 * a reader or writer that goes (teardown, death) fails it within a second. */
#define GPU_TIMEOUT_MS TR__GROUP_FOREVER_MS

static int cuda_err(cudaError_t ce, const char *what) {
    return tr__err(TR_EINTERNAL, "%s: %s", what, cudaGetErrorString(ce));
}

/* len bytes from src (device or host) to device memory at dst, finished on return. */
static int to_device(void *dst, const void *src, size_t len, int on_dev, cudaStream_t st) {
    cudaError_t ce = cudaMemcpyAsync(
        dst, src, len, on_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, st);
    if (ce == cudaSuccess) ce = cudaStreamSynchronize(st);
    return ce == cudaSuccess ? 0 : cuda_err(ce, "copying the value to the device");
}

static int setup(tr__dag_gpu_out *o) {
    cudaError_t ce;
    if (!o->stream) {
        cudaStream_t st;
        /* blocking: the copies come after what the method left on the default stream */
        if ((ce = cudaStreamCreate(&st))) return cuda_err(ce, "the graph's stream");
        o->stream = st;
    }
    if (o->dev) return 0;
    size_t bytes =
        o->transport == TR_DAG_CUDA_IPC ? (size_t)o->slots * o->slot_bytes : (size_t)o->slot_bytes;
    if ((ce = cudaMalloc(&o->dev, bytes ? bytes : 1))) {
        o->dev = NULL;
        return cuda_err(ce, "the edge's device buffer");
    }
    if (o->transport == TR_DAG_CUDA_IPC) {
        cudaIpcMemHandle_t h;
        if ((ce = cudaIpcGetMemHandle(&h, o->dev))) return cuda_err(ce, "exporting the buffer");
        memcpy(o->handle, &h, sizeof o->handle);
    }
    return 0;
}

int tr__dag_gpu_take(tr__dag_gpu_out *o, tr_group *nccl, uint64_t e, const void *src, size_t len,
                     int on_dev, void *payload, size_t cap, size_t *out_len, uint32_t *flags) {
    if (len > o->slot_bytes)
        return tr__err(TR_EMSGSIZE,
                       "a device value of %zu bytes exceeds the graph's slot_bytes (%llu)", len,
                       (unsigned long long)o->slot_bytes);
    int rc = setup(o);
    if (rc) return rc;
    if (o->transport == TR_DAG_CUDA_IPC) {
        if (cap < TR__DAG_IPC_PAYLOAD) return tr__err(TR_EMSGSIZE, "slot_bytes below 80");
        uint64_t off = (e % o->slots) * o->slot_bytes;
        if (len && (rc = to_device((char *)o->dev + off, src, len, on_dev, o->stream))) return rc;
        uint64_t meta[2] = {off, len};
        memcpy(payload, o->handle, 64);
        memcpy((char *)payload + 64, meta, sizeof meta);
        *out_len = TR__DAG_IPC_PAYLOAD;
        *flags = TR__CHAN_DEV_IPC;
        return 0;
    }
    if (!nccl) return tr__err(TR_ESTATE, "an nccl edge without the graph's group");
    /* a copy of its own: the method's buffer may change once the actor's lock goes */
    if (len && (rc = to_device(o->dev, src, len, on_dev, o->stream))) return rc;
    uint32_t meta[2] = {(uint32_t)tr__group_rank(nccl), 0};
    uint64_t n64 = len;
    memcpy(payload, meta, 8);
    memcpy((char *)payload + 8, &n64, 8);
    *out_len = TR__DAG_NCCL_PAYLOAD;
    *flags = TR__CHAN_DEV_NCCL;
    return 0;
}

int tr__dag_gpu_send(tr__dag_gpu_out *o, tr_group *nccl, size_t len) {
    if (o->transport != TR_DAG_NCCL || !len) return 0;
    return tr__nccl_send_many(nccl, o->dev, len, o->dst, o->n_dst, tr__deadline(GPU_TIMEOUT_MS));
}

int tr__dag_gpu_read(tr__dag_gpu_in *in, tr_group *nccl, const tr__chan *c, uint64_t e,
                     const void *payload, size_t plen, uint32_t flags, const void **dev,
                     size_t *len) {
    cudaError_t ce;
    if (flags & TR__CHAN_DEV_IPC) {
        uint64_t meta[2];
        if (plen != TR__DAG_IPC_PAYLOAD) return tr__err(TR_EPROTO, "a malformed device value");
        memcpy(meta, (const char *)payload + 64, sizeof meta);
        if (meta[0] != (e % c->slots) * c->slot_bytes || meta[1] > c->slot_bytes)
            return tr__err(TR_EPROTO, "a device value at offset %llu of %llu bytes",
                           (unsigned long long)meta[0], (unsigned long long)meta[1]);
        if (!in->mapped || memcmp(in->handle, payload, 64) != 0) {
            if (in->mapped) cudaIpcCloseMemHandle(in->mapped);
            in->mapped = NULL;
            cudaIpcMemHandle_t h;
            memcpy(&h, payload, sizeof h);
            if ((ce = cudaIpcOpenMemHandle(&in->mapped, h, cudaIpcMemLazyEnablePeerAccess))) {
                in->mapped = NULL;
                return cuda_err(ce, "mapping the writer's device buffer");
            }
            memcpy(in->handle, payload, 64);
        }
        *dev = (const char *)in->mapped + meta[0];
        *len = (size_t)meta[1];
        return 0;
    }
    uint32_t meta[2];
    uint64_t n;
    if (plen != TR__DAG_NCCL_PAYLOAD || !nccl)
        return tr__err(TR_EPROTO, "a malformed device value");
    memcpy(meta, payload, 8);
    memcpy(&n, (const char *)payload + 8, 8);
    if (meta[0] >= (uint32_t)tr__group_size(nccl) || (int)meta[0] == tr__group_rank(nccl) ||
        n > c->slot_bytes)
        return tr__err(TR_EPROTO, "a device value from rank %u of %llu bytes", meta[0],
                       (unsigned long long)n);
    if (n > in->cap) {
        if (in->buf) cudaFree(in->buf);
        in->buf = NULL;
        in->cap = 0;
        if ((ce = cudaMalloc(&in->buf, (size_t)n))) return cuda_err(ce, "room for a device value");
        in->cap = (size_t)n;
    }
    *dev = in->buf;
    *len = (size_t)n;
    if (!n) return 0;
    return tr__group_recv(nccl, in->buf, (size_t)n, TR_UINT8, (int)meta[0], GPU_TIMEOUT_MS);
}

int tr__dag_gpu_to_host(void *dst, const void *src, size_t len) {
    cudaError_t ce = cudaMemcpy(dst, src, len, cudaMemcpyDeviceToHost);
    return ce == cudaSuccess ? 0 : cuda_err(ce, "copying a device value to the host");
}

void tr__dag_gpu_out_free(tr__dag_gpu_out *o) {
    if (o->dev) cudaFree(o->dev);
    if (o->stream) cudaStreamDestroy((cudaStream_t)o->stream);
    o->dev = o->stream = NULL;
}

void tr__dag_gpu_in_free(tr__dag_gpu_in *in) {
    if (in->buf) cudaFree(in->buf);
    if (in->mapped) cudaIpcCloseMemHandle(in->mapped);
    in->buf = in->mapped = NULL;
    in->cap = 0;
}

/* A classic call's device reply is copied to the host; a graph step's is taken by the
 * step (dag/exec.c), which sends it on or copies it into its slot. */
int tr__ctx_reply_device(tr_ctx *ctx, const void *dev, size_t len) {
    if (!ctx || (len && !dev)) return tr__err(TR_EINVAL, "tr_ctx_reply_device: NULL argument");
    if (ctx->in_graph) {
        ctx->dev_ptr = dev;
        ctx->dev_len = len;
        ctx->dev_used = 1;
        ctx->fwd_used = 0;
        return 0;
    }
    void *host = malloc(len ? len : 1);
    if (!host) return tr__err(TR_ENOMEM, "tr_ctx_reply_device: %zu bytes", len);
    int rc = len ? tr__dag_gpu_to_host(host, dev, len) : 0;
    if (!rc) rc = tr__ctx_reply(ctx, host, len);
    free(host);
    return rc;
}
