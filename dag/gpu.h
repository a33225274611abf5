/* dag/gpu.h - device values on a compiled graph's edges (the CUDA build: dag/gpu.c).
 *
 * A node whose transport is TR_DAG_NCCL or TR_DAG_CUDA_IPC sends its value, device memory,
 * to the actors that read it; the shm channel carries only a small payload per value
 * (its code as ever, and flags TR__CHAN_DEV_NCCL or TR__CHAN_DEV_IPC):
 * - nccl: {uint32 sender's rank in the graph's nccl group, uint32 0, uint64 length}; the
 *   data goes by NCCL send/recv on the graph's own communicator: the writer sends to
 *   every reader at once (one NCCL group) and waits until all have it, each reader
 *   receives as it reads the input, into a device buffer of its own. The driver checks
 *   at compile time that this rendezvous cannot deadlock (graph.c).
 * - cuda_ipc: {cudaIpcMemHandle_t (64 bytes), uint64 offset, uint64 length}: the writer
 *   copies the value into its slot of a device buffer of its own (slots x slot_bytes,
 *   exported once), and the reader maps that buffer (once) and reads in place: one copy,
 *   for processes sharing a GPU (or with peer access).
 * The structs below hold no CUDA types, so dag/exec.c includes this in either build.
 */
#ifndef TR_DAG_GPU_H
#define TR_DAG_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "dag/chan.h"
#include "troupe/troupe.h"

#define TR__DAG_NCCL_PAYLOAD 16
#define TR__DAG_IPC_PAYLOAD 80

/* A step's device output. */
typedef struct tr__dag_gpu_out {
    int transport; /* TR_DAG_NCCL or TR_DAG_CUDA_IPC */
    int n_dst;     /* nccl: the readers' ranks in the graph's group */
    int dst[TR__CHAN_MAX_READERS];
    void *dev; /* cuda_ipc: slots x slot_bytes, exported; nccl: staging for host replies */
    uint64_t slot_bytes;
    uint32_t slots;
    unsigned char handle[64];
    void *stream;
} tr__dag_gpu_out;

/* A step's device input. */
typedef struct tr__dag_gpu_in {
    void *buf; /* nccl: where values land */
    size_t cap;
    unsigned char handle[64]; /* cuda_ipc: the writer's buffer, mapped */
    void *mapped;
} tr__dag_gpu_in;

/* Right after the method, under the actor's lock (the reply may be the actor's own
 * memory): takes value e (len bytes at src: device memory when on_dev, else host) into the
 * edge's device memory (cuda_ipc: its slot of the exported buffer; nccl: the staging
 * buffer) and fills the slot's payload (*out_len bytes) and *flags. Over slot_bytes:
 * TR_EMSGSIZE, and the caller writes the error instead. */
int tr__dag_gpu_take(tr__dag_gpu_out *o, tr_group *nccl, uint64_t e, const void *src, size_t len,
                     int on_dev, void *payload, size_t cap, size_t *out_len, uint32_t *flags);
/* After the slot is published (its readers learn of the value from it): nccl sends the
 * taken value (len bytes) to every reader at once and waits until all have it; cuda_ipc
 * has nothing to do. A failure leaves the graph's group unusable: the caller stops. */
int tr__dag_gpu_send(tr__dag_gpu_out *o, tr_group *nccl, size_t len);
/* Takes a device value of input channel c's value e, whose payload the channel gave
 * (receiving it, for nccl): *dev is what the reading method gets, valid until it returns.
 * The payload is checked against c's dimensions. A failure: the caller stops (an nccl
 * writer waits for this reader). */
int tr__dag_gpu_read(tr__dag_gpu_in *in, tr_group *nccl, const tr__chan *c, uint64_t e,
                     const void *payload, size_t plen, uint32_t flags, const void **dev,
                     size_t *len);
/* A device reply to host memory (a device value on an shm edge). */
int tr__dag_gpu_to_host(void *dst, const void *src, size_t len);
void tr__dag_gpu_out_free(tr__dag_gpu_out *o);
void tr__dag_gpu_in_free(tr__dag_gpu_in *in);

#endif
