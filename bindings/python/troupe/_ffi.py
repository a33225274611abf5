"""The C ABI of libtroupe (api/include/troupe/*.h) through ctypes.

Only the public tr_* API is used, as any binding would: opaque handles as void pointers,
16-byte ids by value, option structs that start with struct_size (filled by the
library's *_init functions). Every call that blocks releases the GIL (ctypes.CDLL).
"""
import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char, c_char_p, c_double,
                    c_int, c_size_t, c_uint, c_uint8, c_uint32, c_uint64, c_void_p)

ABI_VERSION = 1

FOREVER = -1


class Id16(Structure):
    _fields_ = [("b", c_uint8 * 16)]


ActorId = Id16
Ref = Id16

METHOD_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t)
CTOR_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, POINTER(c_void_p))
DTOR_FN = CFUNCTYPE(None, c_void_p)
TASK_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)  # tr_task_fn


class MethodDef(Structure):
    _fields_ = [("name", c_char_p), ("fn", METHOD_FN)]


class ActorClass(Structure):
    _fields_ = [("struct_size", c_uint32), ("name", c_char_p), ("ctor", CTOR_FN),
                ("dtor", DTOR_FN), ("methods", POINTER(MethodDef)), ("n_methods", c_size_t),
                ("dispatch", METHOD_FN), ("idle", c_void_p)]


class Resource(Structure):
    _fields_ = [("name", c_char_p), ("quantity", c_double)]


class ConcurrencyGroup(Structure):
    _fields_ = [("name", c_char_p), ("max_concurrency", c_int),
                ("methods", POINTER(c_char_p)), ("n_methods", c_size_t)]


class ActorOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("num_cpus", c_double), ("num_gpus", c_double),
                ("resources", POINTER(Resource)), ("n_resources", c_size_t),
                ("name", c_char_p), ("max_restarts", c_int),
                ("placement_group", Id16), ("bundle_index", c_int), ("detached", c_int),
                ("max_concurrency", c_int), ("concurrency_groups", POINTER(ConcurrencyGroup)),
                ("n_concurrency_groups", c_size_t), ("class_label", c_char_p),
                ("binding_data", c_char_p), ("max_task_retries", c_int), ("ns", c_char_p)]


class TaskOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("num_cpus", c_double), ("num_gpus", c_double),
                ("resources", POINTER(Resource)), ("n_resources", c_size_t),
                ("max_retries", c_int), ("contained", POINTER(Ref)),
                ("n_contained", c_size_t), ("placement_group", Id16), ("bundle_index", c_int)]


class CallOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("num_returns", c_size_t), ("contained", POINTER(Ref)),
                ("n_contained", c_size_t), ("max_task_retries", c_int)]


class Bundle(Structure):
    _fields_ = [("struct_size", c_uint32), ("num_cpus", c_double), ("num_gpus", c_double),
                ("resources", POINTER(Resource)), ("n_resources", c_size_t)]


class PgInfo(Structure):
    _fields_ = [("struct_size", c_uint32), ("state", c_int), ("strategy", c_int),
                ("n_bundles", c_int), ("name", c_char * 256), ("reason", c_char * 512),
                ("bundles", c_char * 2048), ("node", c_char * 256)]


class ActorDetails(Structure):
    _fields_ = [("struct_size", c_uint32), ("state", c_int), ("pid", c_int),
                ("restarts", c_int), ("max_restarts", c_int), ("class_name", c_char * 256),
                ("name", c_char * 256), ("node", c_char * 256), ("reason", c_char * 512),
                ("cpus", c_char * 128), ("gpus", c_char * 1024)]


class StoreStats(Structure):
    _fields_ = [("struct_size", c_uint32), ("capacity", c_uint64), ("bytes_used", c_uint64),
                ("bytes_objects", c_uint64), ("n_objects", c_uint64),
                ("bytes_spilled", c_uint64), ("spills", c_uint64), ("restores", c_uint64)]


class DagOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("max_inflight", c_uint32),
                ("slot_bytes", c_uint64), ("submit_timeout_ms", c_int),
                ("attach_timeout_ms", c_int)]


vp = c_void_p
P = POINTER

_PROTOS = {
    # status.h
    "tr_strerror": (c_char_p, [c_int]),
    "tr_errname": (c_char_p, [c_int]),
    "tr_last_error": (c_char_p, []),
    "tr_version_string": (c_char_p, []),
    "tr_abi_version": (c_uint, []),
    "tr_free": (None, [vp]),
    # configuration and runtime
    "tr_config_create": (c_int, [P(vp)]),
    "tr_config_destroy": (None, [vp]),
    "tr_config_set": (c_int, [vp, c_char_p, c_char_p]),
    "tr_config_add_class": (c_int, [vp, P(ActorClass)]),
    "tr_actor_class_init": (None, [P(ActorClass)]),
    "tr_config_add_function": (c_int, [vp, c_char_p, TASK_FN]),
    "tr_init_abi": (c_int, [vp, P(vp), c_uint]),
    "tr_worker_main": (c_int, [vp]),
    "tr_shutdown": (None, [vp]),
    "tr_runtime_address": (c_char_p, [vp]),
    "tr_runtime_namespace": (c_int, [vp, c_char_p, c_size_t]),
    "tr_node_status": (c_int, [vp, P(vp)]),
    "tr_timeline_dump": (c_int, [vp, c_char_p]),
    # method context
    "tr_ctx_reply": (c_int, [vp, vp, c_size_t]),
    "tr_ctx_reply_contains": (c_int, [vp, vp, c_size_t, P(Ref), c_size_t]),
    "tr_ctx_reply_multi": (c_int, [vp, P(vp), P(c_size_t), c_size_t]),
    "tr_ctx_canceled": (c_int, [vp]),
    "tr_ctx_started": (None, [vp]),
    "tr_ctx_failed": (None, [vp]),
    "tr_ctx_reply_multi_contains": (c_int, [vp, P(vp), P(c_size_t), c_size_t, P(Ref),
                                            c_size_t]),
    "tr_ctx_set_error": (c_int, [vp, c_char_p]),
    "tr_ctx_exit_actor": (c_int, [vp, c_char_p]),
    "tr_ctx_yield": (c_int, [vp, vp, c_size_t]),
    "tr_ctx_yield_contains": (c_int, [vp, vp, c_size_t, P(Ref), c_size_t]),
    "tr_ctx_runtime": (vp, [vp]),
    "tr_ctx_method": (c_char_p, [vp]),
    "tr_ctx_actor_id": (ActorId, [vp]),
    "tr_ctx_num_refs": (c_size_t, [vp]),
    "tr_ctx_ref": (c_int, [vp, c_size_t, P(vp), P(c_size_t)]),
    "tr_ctx_gpu_ids": (c_char_p, [vp]),
    # actors
    "tr_actor_options_init": (None, [P(ActorOptions)]),
    "tr_actor_create": (c_int, [vp, c_char_p, P(ActorOptions), vp, c_size_t, P(ActorId)]),
    "tr_actor_wait_ready": (c_int, [vp, ActorId, c_int]),
    "tr_actor_get": (c_int, [vp, c_char_p, P(ActorId)]),
    "tr_actor_get_in": (c_int, [vp, c_char_p, c_char_p, P(ActorId)]),
    "tr_actor_kill": (c_int, [vp, ActorId, c_int]),
    "tr_actor_handle": (c_int, [vp, ActorId, P(Ref)]),
    "tr_actor_details_init": (None, [P(ActorDetails)]),
    "tr_actor_info": (c_int, [vp, ActorId, P(ActorDetails)]),
    "tr_actor_binding_data": (c_int, [vp, ActorId, P(vp)]),
    # calls and objects
    "tr_call": (c_int, [vp, ActorId, c_char_p, vp, c_size_t, P(Ref)]),
    "tr_call_refs": (c_int, [vp, ActorId, c_char_p, vp, c_size_t, P(Ref), c_size_t, P(Ref)]),
    "tr_call_multi": (c_int, [vp, ActorId, c_char_p, vp, c_size_t, P(Ref), c_size_t, c_size_t,
                              P(Ref)]),
    "tr_stream_next": (c_int, [vp, Ref, c_int, P(Ref)]),
    "tr_get": (c_int, [vp, Ref, c_int, P(vp), P(c_size_t)]),
    "tr_wait": (c_int, [vp, P(Ref), c_size_t, c_size_t, c_int, P(c_uint8), P(c_size_t)]),
    "tr_ref_release": (c_int, [vp, Ref]),
    "tr_ref_borrow": (c_int, [vp, Ref]),
    "tr_cancel": (c_int, [vp, Ref, c_int]),
    "tr_object_map_private": (c_int, [vp, Ref, c_int, P(vp), P(c_size_t)]),
    "tr_object_unmap_private": (c_int, [vp, Ref, vp, c_size_t]),
    "tr_call_contains": (c_int, [vp, ActorId, c_char_p, vp, c_size_t, P(Ref), c_size_t, P(Ref),
                                 c_size_t, P(Ref)]),
    # tasks (remote functions)
    "tr_call_options_init": (None, [P(CallOptions)]),
    "tr_call_opts": (c_int, [vp, ActorId, c_char_p, vp, c_size_t, P(Ref), c_size_t,
                             P(CallOptions), P(Ref)]),
    "tr_task_options_init": (None, [P(TaskOptions)]),
    "tr_task_submit": (c_int, [vp, c_char_p, vp, c_size_t, P(Ref), c_size_t, P(TaskOptions),
                               P(Ref)]),
    "tr_task_submit_multi": (c_int, [vp, c_char_p, vp, c_size_t, P(Ref), c_size_t,
                                     P(TaskOptions), c_size_t, P(Ref)]),
    # placement groups
    "tr_bundle_init": (None, [P(Bundle)]),
    "tr_pg_info_init": (None, [P(PgInfo)]),
    "tr_placement_group_create": (c_int, [vp, P(Bundle), c_size_t, c_int, c_char_p, P(Id16)]),
    "tr_placement_group_wait": (c_int, [vp, Id16, c_int]),
    "tr_placement_group_info": (c_int, [vp, Id16, P(PgInfo)]),
    "tr_placement_group_remove": (c_int, [vp, Id16]),
    "tr_placement_group_get": (c_int, [vp, c_char_p, P(Id16)]),
    "tr_put": (c_int, [vp, vp, c_size_t, P(Ref)]),
    "tr_put_refs": (c_int, [vp, vp, c_size_t, P(Ref), c_size_t, P(Ref)]),
    "tr_object_create": (c_int, [vp, c_size_t, P(Ref), P(vp)]),
    "tr_object_seal": (c_int, [vp, Ref]),
    "tr_object_stats": (c_int, [vp, P(StoreStats)]),
    "tr_object_holders": (c_int, [vp, Ref, P(c_size_t)]),
    "tr_store_stats_init": (None, [P(StoreStats)]),
    "tr_dag_options_init": (None, [P(DagOptions)]),
    # collective groups
    "tr_group_join": (c_int, [vp, c_int, c_int, c_char_p, c_char_p, c_int, P(vp)]),
    "tr_group_declare": (c_int, [vp, P(ActorId), c_size_t, P(c_int), c_char_p, c_char_p]),
    "tr_group_open": (c_int, [vp, c_char_p, c_int, P(vp)]),
    "tr_group_get": (c_int, [vp, c_char_p, P(vp)]),
    "tr_group_destroy": (c_int, [vp]),
    "tr_group_rank": (c_int, [vp]),
    "tr_group_size": (c_int, [vp]),
    "tr_group_is_initialized": (c_int, [vp, c_char_p]),
    "tr_group_is_declared": (c_int, [vp, c_char_p]),
    "tr_group_set_timeout": (c_int, [vp, c_int]),
    "tr_barrier": (c_int, [vp, c_int]),
    "tr_allreduce": (c_int, [vp, vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_broadcast": (c_int, [vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_reduce": (c_int, [vp, vp, vp, c_size_t, c_int, c_int, c_int, c_int]),
    "tr_allgather": (c_int, [vp, vp, vp, c_size_t, c_int, c_int]),
    "tr_gather": (c_int, [vp, vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_scatter": (c_int, [vp, vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_reduce_scatter": (c_int, [vp, vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_send": (c_int, [vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_recv": (c_int, [vp, vp, c_size_t, c_int, c_int, c_int]),
    "tr_alltoall": (c_int, [vp, vp, vp, c_size_t, c_int, c_int]),
    "tr_object_allreduce": (c_int, [vp, c_char_p, c_int, c_int, c_uint64, vp, c_size_t, c_int,
                                    c_int, c_int]),
    # compiled graphs (dag.h)
    "tr_dag_create": (c_int, [vp, P(vp)]),
    "tr_dag_input": (c_int, [vp, P(c_uint32)]),
    "tr_dag_bind": (c_int, [vp, ActorId, c_char_p, P(c_uint32), c_size_t, P(c_uint32)]),
    "tr_dag_allreduce": (c_int, [vp, P(c_uint32), c_size_t, c_int, c_int, P(c_uint32)]),
    "tr_dag_output": (c_int, [vp, P(c_uint32), c_size_t]),
    "tr_dag_compile": (c_int, [vp, P(DagOptions)]),
    "tr_dag_execute": (c_int, [vp, vp, c_size_t, P(c_uint64)]),
    "tr_dag_execute_ref": (c_int, [vp, Ref, P(c_uint64)]),
    "tr_dag_get": (c_int, [vp, c_uint64, c_size_t, c_int, P(vp), P(c_size_t)]),
    "tr_dag_get_ref": (c_int, [vp, c_uint64, c_size_t, c_int, P(Ref)]),
    "tr_dag_ready": (c_int, [vp, c_uint64]),
    "tr_dag_fd": (c_int, [vp]),
    "tr_dag_release": (c_int, [vp, c_uint64]),
    "tr_dag_to_dot": (c_int, [vp, P(vp)]),
    "tr_dag_destroy": (c_int, [vp]),
}


def _library_path():
    # TROUPE_LIBRARY: the user's choice; PYTROUPE_LIBRARY: the driver's, for its node and
    # workers (troupe.init sets it: a node passes its workers no TROUPE_* variable)
    env = os.environ.get("TROUPE_LIBRARY") or os.environ.get("PYTROUPE_LIBRARY")
    if env:
        return env
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libtroupe.so.1")
    if os.path.exists(here):
        return here
    return "libtroupe.so.1"  # the dynamic linker's search (an installed troupe)


def _load():
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
        path = os.path.abspath(path) if os.sep in path else path
    except OSError as e:
        raise ImportError(f"troupe: cannot load libtroupe ({path}): {e}; set TROUPE_LIBRARY "
                          f"to libtroupe.so.1, or reinstall the package") from None
    for name, (res, args) in _PROTOS.items():
        try:
            f = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"troupe: {path} lacks {name}: an older libtroupe") from None
        f.restype = res
        f.argtypes = args
    if lib.tr_abi_version() != ABI_VERSION:
        raise ImportError(f"troupe: {path} has ABI {lib.tr_abi_version()}, this package "
                          f"{ABI_VERSION}")
    return lib, path


lib, library_path = _load()


def _status_codes():
    """{"TR_ETIMEDOUT": -5, ...}: every status code this library names (tr_errname), asked
    of it rather than copied from status.h, so a code added there is known here at once.
    Codes are negative and small; "TR_E?" is the library's name for a number it lacks."""
    codes = {}
    for rc in range(-1, -65, -1):
        name = lib.tr_errname(rc).decode()
        if name != "TR_E?":
            codes[name] = rc
    return codes


STATUS = _status_codes()  # name -> code; troupe._errors maps them to exceptions


def errname(rc):
    return lib.tr_errname(rc).decode()


def strerror(rc):
    return lib.tr_strerror(rc).decode(errors="replace")


def last_error():
    return lib.tr_last_error().decode(errors="replace")


def out_ptr():
    return c_void_p()


__all__ = ["lib", "library_path", "STATUS", "errname", "strerror", "last_error", "byref",
           "c_void_p", "c_size_t", "c_uint8", "c_uint32", "c_uint64", "c_int"]
