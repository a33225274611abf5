"""``ray._private.internal_api``, as far as Ray's documented examples use it."""
from .. import _runtime, cloudpickle


def free(object_refs, local_only=False):
    """Lets go of this process's holds of object_refs (one ref or a list) taken when they
    were pickled out of band (troupe.cloudpickle): their objects go once no other holder
    remains. (Ray's deletes the objects from every store at once, holders or not; troupe
    never frees an object another process still holds.) local_only is accepted and
    changes nothing: a ref's owner frees it wherever it is."""
    if isinstance(object_refs, _runtime.ObjectRef):
        object_refs = [object_refs]
    if not isinstance(object_refs, (list, tuple)) or \
            not all(isinstance(r, _runtime.ObjectRef) for r in object_refs):
        raise TypeError("free() takes an ObjectRef or a list of them, got "
                        f"{type(object_refs).__name__}")
    cloudpickle.unpin(object_refs)


def memory_summary(address=None, group_by="NODE_ADDRESS", sort_by="OBJECT_SIZE", units="B",
                   line_wrap=True, stats_only=False, num_entries=None):
    """The node's object store as text (Ray's memory_summary; troupe's are the store's
    counters, object_store_stats: objects, bytes, pins, spills). The arguments are taken
    as Ray's and change nothing."""
    stats = _runtime.object_store_stats()
    width = max(len(k) for k in stats)
    return "\n".join(["--- Object store (troupe.object_store_stats) ---"] +
                     [f"{k.ljust(width)}  {v}" for k, v in stats.items()])
