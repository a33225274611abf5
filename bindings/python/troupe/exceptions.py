"""troupe's exceptions, with Ray's names as aliases so that code catching them runs
unchanged (``except ray.exceptions.RayActorError`` becomes ``troupe.exceptions``').

Which class a C status code raises is troupe._errors' one table; every exception troupe
raises for a status has ``code`` (its name) and ``status`` (its number), also the
ValueError of an argument the library refused (TR_EINVAL)."""
from . import _ffi


class TroupeError(Exception):
    """A failure the runtime reports: ``code`` is the C status name (e.g. "TR_ETIMEDOUT"),
    ``status`` its number (as the library has it: -5); the message ends with
    tr_last_error()'s text."""

    def __init__(self, message="", code=None):
        super().__init__(message)
        self.code = code
        self.status = _ffi.STATUS.get(code)  # (None for no code, or a name not a status)


class TaskError(TroupeError):
    """A method raised: ``cause`` is the exception, ``traceback_str`` its remote traceback.
    ``get`` raises an instance that is also of the cause's class (``as_instanceof_cause``),
    so ``except ValueError`` catches a remote ValueError, as in Ray."""

    def __init__(self, function_name="", traceback_str="", cause=None, message=None):
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        super().__init__(message if message is not None else self._text(), "TR_ETASK")

    def _text(self):
        head = f"{type(self.cause).__name__ if self.cause is not None else 'Error'}"
        return (f"{head} in {self.function_name}:\n{self.traceback_str}".rstrip()
                if self.traceback_str else f"{head} in {self.function_name}")

    def __str__(self):
        return self.args[0] if self.args else self._text()

    def as_instanceof_cause(self):
        """This error as an instance of a class that derives from both TaskError and the
        cause's class (or self, where that class cannot be derived from)."""
        root = self.cause
        while isinstance(root, TaskError) and root.cause is not None:
            root = root.cause  # (an upstream call's error, passed on as an argument's)
        cause_cls = type(root) if root is not None else None
        if cause_cls is None or isinstance(self, cause_cls) or not issubclass(cause_cls,
                                                                             Exception):
            return self  # (never a SystemExit or KeyboardInterrupt the caller's process
            #               would take for its own end)
        try:
            cls = _derived(cause_cls)
            err = cls.__new__(cls)
            err.__dict__.update(getattr(root, "__dict__", {}))
            TaskError.__init__(err, self.function_name, self.traceback_str, self.cause,
                               self.args[0] if self.args else None)
            if "status" in getattr(root, "__dict__", {}):  # the cause's own (an HTTP
                err.status = root.status                    # error's) stays readable
            err.args = (self.args[0],) if self.args else ()
            return err
        except Exception:  # a class with __slots__, a final class, ...
            return self


_derived_cache = {}


def _derived(cause_cls):
    cls = _derived_cache.get(cause_cls)
    if cls is None:
        name = f"TaskError({cause_cls.__name__})"
        # (a cause that is a TaskError already, TaskCancelledError: derived from it alone)
        bases = (cause_cls,) if issubclass(cause_cls, TaskError) else (TaskError, cause_cls)
        cls = type(name, bases, {
            "__init__": lambda self, *a, **k: None,
            "__str__": TaskError.__str__,
            "__reduce__": lambda self: (TaskError, (self.function_name, self.traceback_str,
                                                    self.cause, self.args[0])),
        })
        cls.__module__ = "troupe.exceptions"
        _derived_cache[cause_cls] = cls
    return cls


class ActorDiedError(TroupeError):
    """The actor is dead (killed, crashed, its constructor failed, its node went): every
    call to it, pending or new, raises this."""

    def __init__(self, message="", code="TR_EACTOR_DIED"):
        super().__init__(message, code)


class ActorUnavailableError(ActorDiedError):
    pass


class ActorExit(SystemExit):
    """Raised in an actor by exit_actor(): the worker ends the actor when it reaches it
    (a SystemExit, so that an ``except Exception`` in the method lets it through)."""


AsyncioActorExit = ActorExit  # (Ray's name for the asyncio actors' one)


class GetTimeoutError(TroupeError, TimeoutError):
    """``get`` (or a compiled graph's result) did not come within its timeout."""

    def __init__(self, message="", code="TR_ETIMEDOUT"):
        super().__init__(message, code)


class RayChannelTimeoutError(GetTimeoutError):
    """A compiled graph's output did not come within the get's timeout (Ray's name)."""


class RayCgraphCapacityExceeded(TroupeError):
    """A compiled graph has as many executions in flight as it may
    (``_max_inflight_executions``): get (or drop) a result before submitting more."""

    def __init__(self, message="", code="TR_ESTATE"):
        super().__init__(message, code)


class ObjectLostError(TroupeError):
    """The object is gone: freed, or the node that had it is lost."""

    def __init__(self, message="", code="TR_EOBJECT_LOST"):
        super().__init__(message, code)


class OwnerDiedError(ObjectLostError):
    """The process that made the ref (its owner) died before its value was in (Ray's
    OwnerDiedError)."""

    def __init__(self, message="", code="TR_EOWNER_DIED"):
        super().__init__(message, code)


class TaskCancelledError(TaskError):
    """The task or call was canceled (troupe.cancel) before its result was in. A TaskError
    too, as Ray raises a RayTaskError for an async method canceled while it ran (its
    documented ``except ray.exceptions.RayTaskError``)."""

    def __init__(self, message="", code="TR_ECANCELED"):
        self.function_name, self.traceback_str, self.cause = "", "", None
        TroupeError.__init__(self, message, code)


class CollectiveError(TroupeError, RuntimeError):
    """A collective op failed (a peer died, ranks disagree, a timeout, a group this process
    is not in or has destroyed): a RuntimeError, as Ray's ray.util.collective raises."""


class CollectiveArgumentError(RuntimeError, ValueError):
    """A collective op's list argument is wrong (not a list, a length other than the
    world's, arrays of another shape or dtype): a RuntimeError as in Ray, and a
    ValueError as troupe raised before."""


# Ray's names
RayError = TroupeError
RayTaskError = TaskError
RayActorError = ActorDiedError
WorkerCrashedError = ActorDiedError  # (a task whose worker died after its max_retries)
ActorError = ActorDiedError
WorkerCrashedError = ActorDiedError  # (a task whose worker died after its max_retries)
ObjectFreedError = ObjectLostError
