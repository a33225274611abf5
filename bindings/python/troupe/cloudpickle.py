"""troupe.cloudpickle (Ray's ``ray.cloudpickle``): cloudpickle's dumps, dump, loads and
load, where an ObjectRef pickled out of band (into bytes whose travels troupe does not
see: a file, another store) stays held by this process, as Ray pins it, so that whoever
unpickles the bytes later can get its value. The hold lasts until
``troupe._private.internal_api.free(ref)``, or this process's shutdown."""
import pickle
import threading

from . import _runtime, _serial

_pinned = {}  # ref id bytes -> the ObjectRef kept (its hold)
_lock = threading.Lock()


@_runtime.on_shutdown
def _let_go():
    """The runtime ends: its refs with it."""
    with _lock:
        _pinned.clear()


def dumps(obj, protocol=None, buffer_callback=None):
    import cloudpickle  # (when first needed, as _serial's)
    with _serial.collect() as refs:
        data = cloudpickle.dumps(obj, protocol=protocol, buffer_callback=buffer_callback)
    _pin(refs)
    return data


def dump(obj, file, protocol=None, buffer_callback=None):
    file.write(dumps(obj, protocol=protocol, buffer_callback=buffer_callback))


loads = pickle.loads  # (cloudpickle's are pickle's)
load = pickle.load


def _pin(refs):
    """Keeps each ref (the ObjectRef holds its object while it lives)."""
    with _lock:
        for r in refs:
            _pinned.setdefault(r.binary(), r)


def unpin(refs):
    """Lets go of the holds kept for refs pickled out of band (internal_api.free)."""
    with _lock:
        return [_pinned.pop(r.binary(), None) for r in refs]
