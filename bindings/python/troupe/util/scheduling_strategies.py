"""Ray's ray.util.scheduling_strategies: PlacementGroupSchedulingStrategy, accepted by
the scheduling_strategy option of actors (``Cls.options(...)``) and remote functions
(``f.options(...)``): the actor or task runs in the group's bundle (troupe._placement)."""
from .._placement import PlacementGroupSchedulingStrategy  # noqa: F401 (Ray's name)
