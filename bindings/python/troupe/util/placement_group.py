"""Ray's ray.util.placement_group: reserve bundles of resources, atomically, and run
actors and tasks in them (troupe._placement over tr_placement_group_*)."""
import warnings

from .. import _placement
from .._placement import PlacementGroup, PlacementGroupID  # noqa: F401 (Ray's names)


def placement_group(bundles, strategy="PACK", name="", lifetime=None,
                    _max_cpu_fraction_per_node=None, _soft_target_node_id=None,
                    bundle_label_selector=None):
    """Reserves bundles ([{"CPU": 1, "GPU": 1}, ...]) with strategy "PACK", "SPREAD",
    "STRICT_PACK" or "STRICT_SPREAD"; returns the PlacementGroup at once (it is placed
    now or when resources free up: ``pg.ready()``, ``pg.wait()``)."""
    if lifetime not in (None, "detached"):
        raise ValueError("placement group `lifetime` argument must be either `None` or "
                         f"'detached', got {lifetime!r}")
    if lifetime == "detached":
        warnings.warn("troupe ignores lifetime='detached' of a placement group: it ends "
                      "with its creator", stacklevel=2)
    for k, v in (("_max_cpu_fraction_per_node", _max_cpu_fraction_per_node),
                 ("_soft_target_node_id", _soft_target_node_id),
                 ("bundle_label_selector", bundle_label_selector)):
        if v is not None:
            warnings.warn(f"troupe ignores the placement group argument {k}", stacklevel=2)
    return _placement.create(bundles, strategy, name)


def remove_placement_group(placement_group):
    """Removes the group: its actors (and task workers) are killed, its resources given
    back."""
    _placement.remove(placement_group)


def get_placement_group(placement_group_name):
    """The live group of that name (ValueError if none)."""
    return _placement.get(placement_group_name)


def placement_group_table(placement_group=None):
    """The group's entry (state, strategy, bundles...), or every group's by id."""
    return _placement.table(placement_group)


def get_current_placement_group():
    """None: troupe does not tell a task or actor the group it runs in yet."""
    return None
