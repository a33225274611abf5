"""Ray's ray.ray_constants, for programs that import it: the resource names troupe uses,
the default object store's share of memory, and Ray's KV table names (troupe has no
internal KV API of Ray's shape: they are names only, for code that passes them along)."""

CPU = "CPU"
GPU = "GPU"
NODE_ID_PREFIX = "node:"  # a node's own resource: "node:<IP>" (NodeAffinity's)
# the default object store: this share of the machine's memory, at most 1 GiB
# (core/config.c, tr__config_store_bytes)
DEFAULT_OBJECT_STORE_MEMORY_PROPORTION = 0.3
KV_NAMESPACE_FUNCTION_TABLE = b"fun"
KV_NAMESPACE_JOB = b"job"
# a remote function or actor class whose pickle is larger is refused (ValueError), one
# over the warning's size warned of (Ray's: the function likely captures a large object)
FUNCTION_SIZE_ERROR_THRESHOLD = 10**8
FUNCTION_SIZE_WARN_THRESHOLD = 10**7
