"""Placement groups over libtroupe's tr_placement_group_* (api/include/troupe/troupe.h):
the PlacementGroup handle, and the options that put an actor or a task into a bundle.
Every rule (strategies, empty bundles, quantities, bundle indexes, removed groups) is the
C library's; this module only translates Ray's spelling to its structs."""
import ctypes
import json

from . import _ffi
from ._errors import check
from ._ffi import byref, lib
from ._runtime import runtime

STRATEGIES = {"PACK": 0, "SPREAD": 1, "STRICT_PACK": 2, "STRICT_SPREAD": 3}
_ready_maker = None  # remote_function's (set_ready_maker): a task into bundle 0


def set_ready_maker(fn):
    """fn(pg) -> an ObjectRef of a task scheduled into pg's bundle 0 that returns pg (the
    layer that runs tasks gives it: this one is below it)."""
    global _ready_maker
    _ready_maker = fn


class PlacementGroupSchedulingStrategy:
    """Runs an actor or a task in bundle placement_group_bundle_index (-1: any) of
    placement_group (Ray's ray.util.scheduling_strategies class).
    placement_group_capture_child_tasks is taken and not done (tasks a task starts are
    scheduled as their own options say)."""

    def __init__(self, placement_group, placement_group_bundle_index=-1,
                 placement_group_capture_child_tasks=None):
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def __repr__(self):
        return (f"PlacementGroupSchedulingStrategy({self.placement_group!r}, "
                f"{self.placement_group_bundle_index})")


class NodeAffinitySchedulingStrategy:
    """Runs an actor or a task on the node of node_id (Ray's ray.util.scheduling_strategies
    class; ids as get_runtime_context().get_node_id() and nodes() give them): there only
    (soft=False: a node that is not alive is an error); soft=True: where troupe places
    it (this node first), never waiting for that node."""

    def __init__(self, node_id, soft, _spill_on_unavailable=False,
                 _fail_on_unavailable=False):
        if not isinstance(node_id, str):
            node_id = node_id.hex() if hasattr(node_id, "hex") else str(node_id)
        self.node_id = node_id
        self.soft = soft
        self._spill_on_unavailable = _spill_on_unavailable
        self._fail_on_unavailable = _fail_on_unavailable

    def __repr__(self):
        return f"NodeAffinitySchedulingStrategy({self.node_id!r}, soft={self.soft})"


_node_resolver = [None]  # actor's: node id -> (it is this node, its "node:<IP>" or None)


def set_node_resolver(fn):
    """fn(node_id) -> (local, resource): whether the node of node_id is this process's
    node, and the resource only that node has ("node:<IP>", in a cluster; None if no live
    node has that id). Set by the layer that reads the node's status (actor)."""
    _node_resolver[0] = fn


def affinity_resources(options, what):
    """The resources that pin an actor or a task to the node its options'
    NodeAffinitySchedulingStrategy names ({} for another strategy, this node, or a soft
    affinity to a node that is not alive); ValueError for a hard one to such a node."""
    ss = options.get("scheduling_strategy")
    if not isinstance(ss, NodeAffinitySchedulingStrategy) or _node_resolver[0] is None:
        return {}
    if ss.soft:  # (there if it can be: troupe places it itself, this node first)
        return {}
    local, resource = _node_resolver[0](ss.node_id)
    if local:
        return {}
    if resource is None:
        raise ValueError(f"{what}: NodeAffinitySchedulingStrategy(soft=False): no live node "
                         f"has the id {ss.node_id}")
    return {resource: 0.001}


class PlacementGroupID:
    """A group's id (Ray's PlacementGroupID): ``hex()``, ``binary()``."""

    def __init__(self, b):
        self._b = bytes(b)

    def hex(self):
        return self._b.hex()

    def binary(self):
        return self._b

    def __eq__(self, other):
        return isinstance(other, PlacementGroupID) and other._b == self._b

    def __hash__(self):
        return hash(self._b)

    def __repr__(self):
        return f"PlacementGroupID({self.hex()})"


class PlacementGroup:
    """A placement group (Ray's ray.util.placement_group.PlacementGroup): ``ready()`` (an
    ObjectRef that troupe.get and troupe.wait resolve once the group is placed, as Ray's:
    a task scheduled into its first bundle), ``wait(timeout_seconds)``, ``bundle_specs``,
    ``bundle_count``, ``id``."""

    def __init__(self, id_bytes, bundle_specs):
        self.id = PlacementGroupID(id_bytes)
        self._bundles = [dict(b) for b in bundle_specs]

    @property
    def bundle_specs(self):
        return [dict(b) for b in self._bundles]

    @property
    def bundle_count(self):
        return len(self._bundles)

    def _c(self):
        c = _ffi.Id16()
        ctypes.memmove(c.b, self.id.binary(), 16)
        return c

    def ready(self):
        return _ready_maker(self)

    def wait(self, timeout_seconds=30):
        """Whether the group is placed within timeout_seconds (None: no limit)."""
        ms = _ffi.FOREVER if timeout_seconds is None else max(0, int(timeout_seconds * 1000))
        rc = lib.tr_placement_group_wait(runtime(), self._c(), ms)
        if rc == _ffi.STATUS["TR_ETIMEDOUT"]:
            return False
        check(rc, "placement group wait")
        return True

    def __eq__(self, other):
        return isinstance(other, PlacementGroup) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __reduce__(self):
        return (PlacementGroup, (self.id.binary(), self._bundles))

    def __repr__(self):
        return f"PlacementGroup({self.id.hex()}, {self._bundles})"


def _bundle_struct(i, spec, keep):
    if not isinstance(spec, dict):
        raise TypeError(f"placement group bundle {i}: a dict of resources is needed, not "
                        f"{spec!r}")
    b = _ffi.Bundle()
    lib.tr_bundle_init(byref(b))
    custom = []
    for k, v in spec.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"placement group bundle {i}: {k!r}: {v!r} is not a number")
        if k == "CPU":
            b.num_cpus = float(v)
        elif k == "GPU":
            b.num_gpus = float(v)
        else:
            custom.append((str(k), float(v)))
    if custom:
        arr = (_ffi.Resource * len(custom))()
        for j, (k, v) in enumerate(custom):
            kb = k.encode()
            keep.append(kb)
            arr[j].name, arr[j].quantity = kb, v
        keep.append(arr)
        b.resources, b.n_resources = arr, len(custom)
    return b


def create(bundles, strategy, name):
    if not isinstance(bundles, (list, tuple)):
        raise TypeError(f"placement_group: bundles must be a list of dicts, not {bundles!r}")
    keep = []
    arr = (_ffi.Bundle * max(1, len(bundles)))()
    for i, spec in enumerate(bundles):
        arr[i] = _bundle_struct(i, spec, keep)
    if not isinstance(strategy, str):
        raise TypeError(f"placement_group: strategy must be a str, not {strategy!r}")
    code = STRATEGIES.get(strategy, -1)  # (the library names what it accepts)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"placement_group: name must be a str, not {name!r}")
    out = _ffi.Id16()
    check(lib.tr_placement_group_create(runtime(), arr, len(bundles), code,
                                        name.encode() if name else None, byref(out)),
          f"placement_group (strategy {strategy!r})")
    return PlacementGroup(bytes(out.b), bundles)


def remove(pg):
    if not isinstance(pg, PlacementGroup):
        raise TypeError(f"remove_placement_group: a PlacementGroup is needed, not {pg!r}")
    check(lib.tr_placement_group_remove(runtime(), pg._c()), "remove_placement_group")


def _specs(text):
    out = []
    for part in text.split(";") if text else []:
        spec = {}
        for item in part.split(","):
            k, _, v = item.partition("=")
            spec[k] = float(v)
        out.append(spec)
    return out


def get(name):
    if not isinstance(name, str) or not name:
        raise ValueError(f"get_placement_group: a non-empty name is needed, not {name!r}")
    out = _ffi.Id16()
    rc = lib.tr_placement_group_get(runtime(), name.encode(), byref(out))
    if rc == _ffi.STATUS["TR_ENOTFOUND"]:
        raise ValueError(f"Failed to look up placement group with name: {name}")
    check(rc, "get_placement_group")
    info = _ffi.PgInfo()
    lib.tr_pg_info_init(byref(info))
    check(lib.tr_placement_group_info(runtime(), out, byref(info)), "get_placement_group")
    return PlacementGroup(bytes(out.b), _specs(info.bundles.decode()))


def table(pg=None):
    """Ray's placement_group_table: one group's entry, or {id hex: entry} for all the
    node knows (from tr_node_status)."""
    raw = ctypes.c_void_p()
    check(lib.tr_node_status(runtime(), byref(raw)), "placement_group_table")
    try:
        status = json.loads(ctypes.string_at(raw.value).decode())
    finally:
        lib.tr_free(raw)
    entries = {}
    for g in status.get("placement_groups", []):
        entries[g["id"]] = {
            "placement_group_id": g["id"], "strategy": g["strategy"],
            "name": (g["name"] or "").split("\x1f")[-1],  # (kept as namespace, 0x1f, name)
            "state": g["state"], "bundles": dict(enumerate(g["bundles"])),
            "bundles_to_node_id": {i: g["node"] for i in range(len(g["bundles"]))}
            if g["node"] else {},
            "stats": {"scheduling_state": g["state"], "reason": g["reason"]}}
    if pg is None:
        return entries
    if not isinstance(pg, PlacementGroup):
        raise TypeError(f"placement_group_table: a PlacementGroup or None, not {pg!r}")
    return entries.get(pg.id.hex(), {})


def apply_options(options, opts, what):
    """Puts opts (ActorOptions or TaskOptions) into the bundle that options name: Ray's
    scheduling_strategy=PlacementGroupSchedulingStrategy(...), or its older
    placement_group=, placement_group_bundle_index= options. The library checks the rest
    (an unknown or removed group, an index out of range)."""
    ss = options.get("scheduling_strategy")
    pg, index = options.get("placement_group"), options.get("placement_group_bundle_index", -1)
    if isinstance(ss, PlacementGroupSchedulingStrategy):
        pg, index = ss.placement_group, ss.placement_group_bundle_index
    if pg is None or pg == "default":
        return
    if not isinstance(pg, PlacementGroup):
        raise TypeError(f"{what}: placement_group must be a PlacementGroup, not {pg!r}")
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{what}: placement_group_bundle_index must be an int, not {index!r}")
    opts.placement_group = pg._c()
    opts.bundle_index = index


def check_strategy(options, what):
    """Whether options' scheduling strategy is one troupe does: None, "DEFAULT", a
    PlacementGroupSchedulingStrategy or a NodeAffinitySchedulingStrategy (True); False for
    another (the caller warns)."""
    ss = options.get("scheduling_strategy")
    return ss is None or ss == "DEFAULT" or isinstance(
        ss, (PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy))
