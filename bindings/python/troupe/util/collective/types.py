"""Backends and reduction ops, by Ray's names (ray.util.collective.types), and the
element types the C library reduces."""
import enum


class Backend(str, enum.Enum):
    SHM = "shm"      # ranks on one node, through shared memory
    GLOO = "gloo"    # Gloo over TCP (any nodes)
    NCCL = "nccl"    # GPUs (a troupe built with CUDA)
    AUTO = "auto"    # shm on one node; across nodes hier or gloo
    HIER = "hier"    # allreduce in two levels: shm in each node, gloo between nodes

    def __str__(self):
        return self.value


class ReduceOp(enum.IntEnum):
    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    AVERAGE = 4


# numpy dtype name -> tr_dtype (api/include/troupe/troupe.h)
DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 3, "float16": 4, "bfloat16": 5,
          "float32": 6, "float64": 7}

unset_timeout_ms = -2  # the group's default timeout (60 s, or tr_group_set_timeout's)
