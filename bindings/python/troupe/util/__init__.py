"""troupe.util: the collective library (troupe.util.collective, Ray's ray.util.collective)."""
