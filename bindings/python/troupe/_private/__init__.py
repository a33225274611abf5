"""Ray's ``ray._private`` names that Ray's own examples and tests use (internal_api,
ray_constants)."""
from . import internal_api, ray_constants  # noqa: F401
