/* collective/shm/shm.h - what the shm backend (shm.c, table tr__coll_shm_v2 in group.h)
 * shows of a group's state behind g->impl, for tests: its single-copy counters, and what
 * the process found of its host. Thread safety: not with the group's ops. */
#ifndef TR_COLLECTIVE_SHM_H
#define TR_COLLECTIVE_SHM_H

#include <stdint.h>

#include "collective/group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ops this rank did by single copy (reading a peer's buffer in its memory); 0 for a group
 * of another backend. */
uint64_t tr__shm_single_ops(const tr_group *g);

/* Of those, 2-rank allreduces the pair's way (each rank read the whole of the other's
 * send); 0 for a group of another backend. */
uint64_t tr__shm_pair_ops(const tr_group *g);

/* Single-copy broadcasts in which this rank, the root, wrote a share of its peers'
 * buffers itself (it could write their memory); 0 for a group of another backend. */
uint64_t tr__shm_root_writes(const tr_group *g);

/* Sets what this process found of the two ways on this host (the default's starting way
 * for every op kind and size class): 1 single copy, 0 the slots, -1 nothing yet. */
void tr__shm_set_host_way(int single);

/* Makes every 2-rank single-copy allreduce of this process whose ranks' send and recv are
 * apart go the pair's way (1: each reads the whole of the other's send), or by shares (0),
 * or as timed (-1, the default). */
void tr__shm_force_pair(int on);

#ifdef __cplusplus
}
#endif
#endif
