"""Collective groups among actors, with Ray's names and signatures
(ray.util.collective): ops run in place on numpy arrays, out of band, through troupe's
``shm``, ``gloo`` (or ``nccl``) backend. Ops Ray lacks take MPI's shapes: gather,
scatter, alltoall.

In an actor: ``init_collective_group(world_size, rank, backend, group_name)``; from the
driver: ``create_collective_group(actors, world_size, ranks, backend, group_name)`` (each
actor joins on its first op)."""
from .collective import (allgather, allreduce, alltoall, barrier, broadcast,
                         create_collective_group, declare_collective_group,
                         destroy_collective_group, gather, get_collective_group_size,
                         get_rank, init_collective_group, is_group_initialized, recv, reduce,
                         reduce_scatter, reducescatter, scatter, send)
from .types import Backend, ReduceOp

__all__ = ["init_collective_group", "create_collective_group", "declare_collective_group",
           "destroy_collective_group", "get_rank", "get_collective_group_size",
           "is_group_initialized", "allreduce", "barrier", "reduce", "broadcast", "allgather",
           "reduce_scatter", "reducescatter", "send", "recv", "gather", "scatter", "alltoall",
           "Backend", "ReduceOp"]
