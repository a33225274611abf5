"""What the package tells its user when something is not as asked: the one table from each
status code the library names to the exception it raises, ``check(rc)`` that every C
call's status goes through (pyzmq's ``_check_rc``), and the warning for a Ray option that
troupe accepts and ignores."""
import threading
import warnings

from . import _ffi
from .exceptions import (ActorDiedError, GetTimeoutError, ObjectLostError, OwnerDiedError,
                         TaskCancelledError, TaskError, TroupeError)


def _code(name):
    try:
        return _ffi.STATUS[name]
    except KeyError:
        raise ImportError(f"troupe: {_ffi.library_path} has no status {name}: an older "
                          f"libtroupe than this package") from None


# the codes the package tells apart by number (the library's numbers, by name)
EINVAL = _code("TR_EINVAL")
ENOTFOUND = _code("TR_ENOTFOUND")
ETIMEDOUT = _code("TR_ETIMEDOUT")
ETASK = _code("TR_ETASK")
ESTALE = _code("TR_ESTALE")
ESTATE = _code("TR_ESTATE")
EEXIST = _code("TR_EEXIST")
EACTOR_DIED = _code("TR_EACTOR_DIED")

# by name; a code not named here raises TroupeError
_BY_NAME = {
    "TR_EINVAL": ValueError,  # (Python's own, as Ray's code expects: code and status set)
    "TR_ETIMEDOUT": GetTimeoutError,
    "TR_EACTOR_DIED": ActorDiedError,
    "TR_ETASK": TaskError,
    "TR_EOBJECT_LOST": ObjectLostError,
    "TR_EOWNER_DIED": OwnerDiedError,
    "TR_ECANCELED": TaskCancelledError,
    "TR_ESTALE": ObjectLostError,  # a released ref (the only stale thing the API has)
}
CLASSES = {rc: _BY_NAME.get(name, TroupeError) for name, rc in _ffi.STATUS.items()}


def error(rc, what=None, family=None):
    """The exception for a C status rc, to raise: its class from CLASSES, ``code`` its
    name and ``status`` rc, its message "what: tr_last_error()'s text (TR_E...)". Call it
    right after the failing call (the text is the thread's until its next tr_ call).
    family: the call site's own class (CollectiveError for a group's ops), which every
    code but an invalid argument (ValueError) raises there."""
    detail = _ffi.last_error()
    name = _ffi.errname(rc)
    text = f"{': '.join(x for x in (what, detail) if x) or _ffi.strerror(rc)} ({name})"
    cls = CLASSES.get(rc, TroupeError)
    if family is not None and cls is not ValueError:
        cls = family
    if cls is TaskError:  # (a call failed in C before any Python ran: no cause, no trace)
        return TaskError(what or "", "", None, text)
    if issubclass(cls, TroupeError):
        return cls(text, name)
    e = cls(text)
    e.code, e.status = name, rc
    return e


def check(rc, what=None, family=None):
    """Raises error(rc, what, family) for a failed status; 0 passes."""
    if rc != 0:
        raise error(rc, what, family)


def task_error(remote, what):
    """The TaskError for a method's exception as a payload brought it (_serial.RemoteError:
    cause, traceback_str, text), also an instance of the cause's class."""
    err = TaskError(what, remote.traceback_str, remote.cause,
                    f"{remote.text}\n\nRemote traceback ({what}):\n{remote.traceback_str}"
                    .rstrip())
    return err.as_instanceof_cause()


# ------------------------------------------------------------------ ignored options

_warned = set()
_warned_lock = threading.Lock()


def ignored(where, names, stacklevel=1):
    """Warns that troupe ignores these options a Ray user passed (where: "troupe.init",
    "an actor's options", ...), once per option and place per process: Ray's code runs
    unchanged, but what the option asks for does not happen, and saying so on every call
    would drown the rest. stacklevel: as warnings.warn's, counted from the caller."""
    for name in sorted(names):
        with _warned_lock:
            if (where, name) in _warned:
                continue
            _warned.add((where, name))
        warnings.warn(f"troupe ignores {name!r} in {where}: Ray's code runs, without what "
                      f"the option asks for", stacklevel=stacklevel + 1)
