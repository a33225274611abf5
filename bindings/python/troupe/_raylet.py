"""ray._raylet's public names that Ray programs import from it (ObjectRef,
ObjectRefGenerator, as `from ray._raylet import ObjectRefGenerator` in Ray's generator
docs): troupe's own, under that module name."""
from ._runtime import DynamicObjectRefGenerator, ObjectRef, ObjectRefGenerator

__all__ = ["ObjectRef", "ObjectRefGenerator", "DynamicObjectRefGenerator"]
