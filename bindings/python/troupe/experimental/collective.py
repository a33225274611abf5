"""``from troupe.experimental.collective import allreduce``: an allreduce inside a
compiled graph (Ray's ray.experimental.collective.allreduce; troupe.dag.allreduce)."""
from ..dag import allreduce  # noqa: F401
