"""Ray's ``ray._private`` names that Ray's own examples use (internal_api)."""
from . import internal_api  # noqa: F401
