"""troupe: actors, remote functions (tasks), objects, collective groups and compiled
graphs over troupe's C runtime, with Ray's API: ``import troupe as ray`` runs Ray's task,
actor, collective and compiled-graph examples. See bindings/python/README.md."""
from . import (_private, cloudpickle, dag, exceptions, job_config, ray_constants,
               remote_function, util)
from ._ffi import library_path
from ._runtime import (DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator, cancel, get,
                       init, is_initialized, node_address, object_store_stats, put, shutdown,
                       timeline, wait)
from .remote_function import RemoteFunction
from .actor import (ActorClass, ActorHandle, available_resources, cluster_resources,
                    exit_actor, get_actor, get_gpu_ids, get_runtime_context, kill, method, nodes,
                    remote)

__version__ = "0.2.0"
ObjectID = ObjectRef  # (Ray's old name of ObjectRef, which Ray 2 still exports)

__all__ = ["init", "shutdown", "is_initialized", "remote", "get", "put", "wait", "kill",
           "cancel", "get_actor", "method", "exit_actor", "ObjectRef", "ObjectID", "ObjectRefGenerator",
           "DynamicObjectRefGenerator", "ActorHandle", "ActorClass",
           "exceptions", "util", "dag", "library_path", "object_store_stats",
           "node_address", "get_runtime_context", "get_gpu_ids", "available_resources",
           "cluster_resources", "nodes", "RemoteFunction", "remote_function", "timeline",
           "ray_constants"]

