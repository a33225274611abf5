"""troupe.util: the collective library (troupe.util.collective, Ray's
ray.util.collective), ActorPool (Ray's ray.util.ActorPool), placement groups (Ray's
ray.util.placement_group, ray.util.scheduling_strategies)."""
import sys

from .. import exceptions
from .placement_group import (PlacementGroup, get_current_placement_group,  # noqa: F401
                              get_placement_group, placement_group, placement_group_table,
                              remove_placement_group)


def _api():
    """The troupe package, looked up at each use: Ray's ActorPool calls ray.get and
    ray.wait as they are then (a test or a user may wrap them)."""
    return sys.modules[__name__.rpartition(".")[0]]


def _key(future):
    """A submitted item's key: its ref, or the tuple of its refs (num_returns > 1)."""
    return tuple(future) if isinstance(future, list) else future


def _first(key):
    """The ref that says whether the item is done (a method's values come together)."""
    return key[0] if isinstance(key, tuple) else key


class ActorPool:
    """Runs work over a fixed set of actors, each given one item at a time (Ray's
    ray.util.ActorPool): ``pool.map(lambda a, v: a.f.remote(v), values)`` submits every
    value at once and yields the results in order, ``map_unordered`` as they come;
    ``submit`` / ``get_next`` / ``get_next_unordered`` do it step by step (items wait
    for a free actor). An item whose actor died (RayActorError) raises it, and the actor
    leaves the pool; any other error keeps it."""

    def __init__(self, actors):
        self._idle_actors = list(actors)
        self._future_to_actor = {}   # key (_key) -> (index, actor)
        self._index_to_future = {}   # index -> key
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits = []   # (fn, value) waiting for an actor

    def map(self, fn, values):
        """fn(actor, value) -> ObjectRef over values, all submitted now; returns an
        iterator of the results in order."""
        self._drain()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next()
        return results()

    def map_unordered(self, fn, values):
        """As map, the iterator yielding each result as it comes."""
        self._drain()
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next_unordered()
        return results()

    def _drain(self):
        """Results nobody took yet are dropped (Ray's map starts so)."""
        while self.has_next():
            try:
                self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass

    def submit(self, fn, value):
        """Runs fn(actor, value) on a free actor, or queues it until one is free."""
        if self._idle_actors:
            actor = self._idle_actors.pop()
            key = _key(fn(actor, value))
            self._future_to_actor[key] = (self._next_task_index, actor)
            self._index_to_future[self._next_task_index] = key
            self._next_task_index += 1
        else:
            self._pending_submits.append((fn, value))

    def has_next(self):
        """Whether a submitted item's result is still to be got."""
        return bool(self._future_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order; TimeoutError after timeout seconds (with
        ignore_if_timedout, the item is dropped from the pool first)."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after "
                             "get_next_unordered().")
        key = self._index_to_future[self._next_return_index]
        dropped = False
        if timeout is not None:
            ready, _ = _api().wait([_first(key)], timeout=timeout)
            if not ready:
                if not ignore_if_timedout:
                    raise TimeoutError("Timed out waiting for result")
                dropped = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(key)
        if dropped:
            self._return_actor(actor)
            raise TimeoutError(f"Timed out waiting for result. The task {key} has been "
                               f"ignored.")
        return self._result(key, actor)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Any next result, the first to come; TimeoutError after timeout seconds (with
        ignore_if_timedout, the oldest item is dropped from the pool first)."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        firsts = {_first(k): k for k in self._future_to_actor}
        ready, _ = _api().wait(list(firsts), num_returns=1, timeout=timeout)
        dropped = False
        if not ready:
            if not ignore_if_timedout:
                raise TimeoutError("Timed out waiting for result")
            key, dropped = next(iter(self._future_to_actor)), True  # (the oldest)
        else:
            key = firsts[ready[0]]
        i, actor = self._future_to_actor.pop(key)
        del self._index_to_future[i]
        self._next_return_index = max(self._next_return_index, i + 1)
        if dropped:
            self._return_actor(actor)
            raise TimeoutError(f"Timed out waiting for result. The task {key} has been "
                               f"ignored.")
        return self._result(key, actor)

    def _result(self, key, actor):
        """The item's value (a list of them for num_returns > 1); its actor back in the
        pool unless it died."""
        try:
            value = _api().get(list(key) if isinstance(key, tuple) else key)
        except exceptions.ActorUnavailableError:  # (it may come back: kept)
            self._return_actor(actor)
            raise
        except exceptions.ActorDiedError:  # (gone for good: out of the pool)
            if self._pending_submits and self._idle_actors:
                self.submit(*self._pending_submits.pop(0))
            raise
        except BaseException:
            self._return_actor(actor)
            raise
        self._return_actor(actor)
        return value

    def _return_actor(self, actor):
        self._idle_actors.append(actor)
        if self._pending_submits:
            self.submit(*self._pending_submits.pop(0))

    def has_free(self):
        """Whether an actor is idle (and no item waits for one)."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Takes an idle actor out of the pool (None if none is free)."""
        return self._idle_actors.pop() if self.has_free() else None

    def push(self, actor):
        """Adds an actor to the pool (ValueError if it is in it already)."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)


__all__ = ["ActorPool"]
