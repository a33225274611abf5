"""``ray._private.ray_constants``, where Ray 2 keeps its constants (``ray.ray_constants``
is its deprecated alias): troupe's are in troupe.ray_constants, the same names here."""
from ..ray_constants import *  # noqa: F401,F403
from ..ray_constants import (FUNCTION_SIZE_ERROR_THRESHOLD,  # noqa: F401
                             FUNCTION_SIZE_WARN_THRESHOLD)
