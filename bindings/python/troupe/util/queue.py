"""Ray's ray.util.queue: a first-in first-out queue that drivers, tasks and actors share,
kept by an async actor of its own (items go to it by value, refs in them borrowed as in
any call). ``Queue(maxsize)`` pickles with its actor's handle, so it can be passed to
tasks and actors; ``put`` and ``get`` block (up to ``timeout`` seconds) or raise
``Full`` and ``Empty`` (subclasses of the standard queue module's)."""
import asyncio
import queue as _std_queue

from .. import actor as _actor
from .._runtime import get as _get


class Empty(_std_queue.Empty):
    pass


class Full(_std_queue.Full):
    pass


class _QueueActor:
    """The queue's keeper: an asyncio.Queue in an async actor (its calls wait on it side by
    side). Each answer says whether it could (no exception crosses for a full or empty
    queue)."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.queue = asyncio.Queue(maxsize)

    async def qsize(self):
        return self.queue.qsize()

    async def empty(self):
        return self.queue.empty()

    async def full(self):
        return self.queue.full()

    async def put(self, item, timeout=None):
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def get(self, timeout=None):
        try:
            return True, await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            return False, None

    async def put_nowait(self, item):
        try:
            self.queue.put_nowait(item)
            return True
        except asyncio.QueueFull:
            return False

    async def put_nowait_batch(self, items):
        if self.maxsize > 0 and len(items) + self.queue.qsize() > self.maxsize:
            return False
        for item in items:
            self.queue.put_nowait(item)
        return True

    async def get_nowait(self):
        try:
            return True, self.queue.get_nowait()
        except asyncio.QueueEmpty:
            return False, None

    async def get_nowait_batch(self, num_items):
        if num_items > self.queue.qsize():
            return False, []
        return True, [self.queue.get_nowait() for _ in range(num_items)]


_Keeper = _actor.remote(_QueueActor)


def _check_timeout(timeout):
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


class Queue:
    """Ray's ray.util.queue.Queue(maxsize=0, actor_options=None): maxsize <= 0 has no
    bound; actor_options are the keeper actor's (Cls.options')."""

    def __init__(self, maxsize=0, actor_options=None):
        self.maxsize = maxsize
        self.actor = _Keeper.options(**(actor_options or {})).remote(maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        return _get(self.actor.qsize.remote())

    qsize = size

    def empty(self):
        return _get(self.actor.empty.remote())

    def full(self):
        return _get(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        """Puts item in; with block, waits for room (up to timeout seconds, then Full)."""
        if not block:
            return self.put_nowait(item)
        _check_timeout(timeout)
        if not _get(self.actor.put.remote(item, timeout)):
            raise Full
        return None

    async def put_async(self, item, block=True, timeout=None):
        if not block:
            if not await self.actor.put_nowait.remote(item):
                raise Full
            return
        _check_timeout(timeout)
        if not await self.actor.put.remote(item, timeout):
            raise Full

    def get(self, block=True, timeout=None):
        """The first item; with block, waits for one (up to timeout seconds, then Empty)."""
        if not block:
            return self.get_nowait()
        _check_timeout(timeout)
        ok, item = _get(self.actor.get.remote(timeout))
        if not ok:
            raise Empty
        return item

    async def get_async(self, block=True, timeout=None):
        if not block:
            ok, item = await self.actor.get_nowait.remote()
        else:
            _check_timeout(timeout)
            ok, item = await self.actor.get.remote(timeout)
        if not ok:
            raise Empty
        return item

    def put_nowait(self, item):
        if not _get(self.actor.put_nowait.remote(item)):
            raise Full
        return None

    def put_nowait_batch(self, items):
        """Puts all of items in at once, or none of them (Full)."""
        if not isinstance(items, list):
            raise TypeError("Argument 'items' must be a list")
        if not _get(self.actor.put_nowait_batch.remote(items)):
            raise Full(f"Cannot add {len(items)} items to queue of size "
                       f"{self.size()} and maxsize {self.maxsize}.")

    def get_nowait(self):
        ok, item = _get(self.actor.get_nowait.remote())
        if not ok:
            raise Empty
        return item

    def get_nowait_batch(self, num_items):
        """num_items items at once, or none of them (Empty)."""
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        ok, items = _get(self.actor.get_nowait_batch.remote(num_items))
        if not ok:
            raise Empty(f"Cannot get {num_items} items from queue of size {self.size()}.")
        return items

    def shutdown(self, force=False, grace_period_s=5):
        """Ends the queue's actor (its items go with it)."""
        if self.actor is not None:
            _actor.kill(self.actor)
        self.actor = None
