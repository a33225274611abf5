"""troupe.experimental: Ray's experimental names (ray.experimental.collective)."""
