"""Ray's ray.util.scheduling_strategies: PlacementGroupSchedulingStrategy and
NodeAffinitySchedulingStrategy, accepted by the scheduling_strategy option of actors
(``Cls.options(...)``) and remote functions (``f.options(...)``): the actor or task runs
in the group's bundle, or on the node (troupe._placement)."""
from .._placement import (NodeAffinitySchedulingStrategy,  # noqa: F401 (Ray's names)
                          PlacementGroupSchedulingStrategy)
