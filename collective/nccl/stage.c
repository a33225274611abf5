/* collective/nccl/stage.c - device buffers on the CPU backends (shm, gloo): an op whose
 * buffers are device memory runs on pinned host copies (one buffer per group, grown as
 * needed): device to host before the op, host to device after it. Which buffers an op
 * reads and writes, and their sizes, follow troupe.h's description of each op. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collective/nccl/nccl.h"
#include "core/reduce.h"
#include "core/status.h"

int tr__gpu_present(void) {
    static int present; /* 0: not asked yet, 1: yes, 2: no */
    int p = __atomic_load_n(&present, __ATOMIC_ACQUIRE);
    if (!p) {
        int n = 0;
        p = cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 1 : 2;
        if (p == 2) cudaGetLastError(); /* clear the sticky "no driver" */
        __atomic_store_n(&present, p, __ATOMIC_RELEASE);
    }
    return p == 1;
}

int tr__gpu_is_device(const void *p) {
    if (!p) return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* A group's staging (g->stage, set at join where this process sees a device). */
typedef struct stage {
    void *host; /* pinned */
    size_t bytes;
} stage;

/* Bytes the op reads from send / writes to recv on this rank (0: not touched). */
static void sizes(const tr_group *g, const tr__coll_args *a, size_t *in, size_t *out) {
    size_t n = a->count * tr__dtype_size(a->dtype), W = (size_t)g->world;
    int root = a->root == g->rank;
    *in = *out = 0;
    switch (a->kind) {
    case TR__COLL_ALLREDUCE:
        *in = *out = n;
        break;
    case TR__COLL_BROADCAST:
        if (root)
            *in = n;
        else
            *out = n;
        break;
    case TR__COLL_REDUCE:
        *in = n;
        *out = root ? n : 0;
        break;
    case TR__COLL_ALLGATHER:
        *in = n;
        *out = W * n;
        break;
    case TR__COLL_GATHER:
        *in = n;
        *out = root ? W * n : 0;
        break;
    case TR__COLL_SCATTER:
        *in = root ? W * n : 0;
        *out = n;
        break;
    case TR__COLL_REDUCE_SCATTER:
        *in = W * n;
        *out = n;
        break;
    case TR__COLL_ALLTOALL:
        *in = *out = W * n;
        break;
    case TR__COLL_SEND:
        *in = n;
        break;
    case TR__COLL_RECV:
        *out = n;
        break;
    default:
        break;
    }
}

static void drop(stage *st) {
    if (st->host) cudaFreeHost(st->host);
    st->host = NULL;
    st->bytes = 0;
}

static int staged(tr_group *g, const tr__coll_args *a, int64_t deadline,
                  int (*run)(tr_group *g, const tr__coll_args *host, int64_t deadline)) {
    stage *st = g->stage;
    size_t in, out;
    sizes(g, a, &in, &out);
    /* In place (broadcast's one buffer too): one host copy, read and written. */
    int same = a->send == a->recv;
    int dev_in = in && tr__gpu_is_device(a->send);
    int dev_out = out && (same && in ? dev_in : tr__gpu_is_device(a->recv));
    if (same && (dev_in || dev_out)) dev_in = dev_out = 1;
    if (!dev_in && !dev_out) return run(g, a, deadline);
    size_t need = same ? (in > out ? in : out) : (dev_in ? in : 0) + (dev_out ? out : 0);
    if (need > st->bytes) {
        drop(st);
        if (cudaMallocHost(&st->host, need) != cudaSuccess) {
            cudaGetLastError();
            st->host = NULL;
            return tr__err(TR_ENOMEM, "group '%s': %zu bytes of pinned memory for device buffers",
                           g->name, need);
        }
        st->bytes = need;
    }
    tr__coll_args h = *a;
    char *hin = st->host, *hout = same ? hin : hin + (dev_in ? in : 0);
    if (dev_in) {
        cudaError_t ce = in ? cudaMemcpy(hin, a->send, in, cudaMemcpyDeviceToHost) : cudaSuccess;
        if (ce != cudaSuccess) { /* (this rank skips the op: its peers time out) */
            cudaGetLastError();
            return tr__err(TR_EINTERNAL, "group '%s': copying the device buffer: %s", g->name,
                           cudaGetErrorString(ce));
        }
        h.send = hin;
    }
    if (dev_out) h.recv = hout;
    int rc = run(g, &h, deadline);
    if (!rc && dev_out && out) {
        cudaError_t ce = cudaMemcpy(a->recv, hout, out, cudaMemcpyHostToDevice);
        if (ce != cudaSuccess) {
            cudaGetLastError();
            rc = tr__err(TR_EINTERNAL, "group '%s': copying to the device buffer: %s", g->name,
                         cudaGetErrorString(ce));
        }
    }
    return rc;
}

static int open_stage(tr_group *g) {
    if (!tr__gpu_present()) return 0;
    if (!(g->stage = calloc(1, sizeof(stage))))
        return tr__err(TR_ENOMEM, "group '%s': staging of device buffers", g->name);
    return 0;
}

static void close_stage(tr_group *g) {
    if (!g->stage) return;
    drop(g->stage);
    free(g->stage);
    g->stage = NULL;
}

const tr__coll_stager tr__gpu_stager = {open_stage, staged, close_stage};
