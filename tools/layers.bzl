"""troupe's layers: which package may depend on which (docs/ARCHITECTURE.md draws them).

Each layer's BUILD sets `package(default_visibility = visible_above("//<its package>"))`,
so a target of a lower layer that names one of a higher layer fails to build ("target
... is not visible"). The public headers (//api:headers) are the contract every layer
implements a part of: visible to all. tools/check_layers.sh proves both ways that the
BUILD files enforce this table (each allowed edge builds, each other edge is refused)
and that docs/ARCHITECTURE.md lists the same edges.
"""

# package: the packages it may depend on (besides //api:headers and //third_party)
LAYERS = {
    "//core": [],
    "//objectstore": ["//core"],
    "//actor": ["//core", "//objectstore"],
    "//collective": ["//core"],
    "//dag": ["//core", "//objectstore", "//actor", "//collective"],
    "//api/node": ["//core", "//objectstore", "//actor", "//collective"],
    "//api": ["//core", "//objectstore", "//actor", "//collective", "//dag", "//api/node"],
    "//api/cmd": ["//core", "//api/node", "//api"],
}

# Beside the layers, free to use any of them: tests and benchmarks (which may measure
# internals), and the source checks of //tools.
SIDECARS = [
    "//tests:__subpackages__",
    "//bench:__pkg__",
    "//tools:__pkg__",
]

def visible_above(package):
    """The visibility of a layer's targets: the layers allowed to depend on it, and the sidecars."""
    return [p + ":__pkg__" for p, deps in LAYERS.items() if package in deps] + SIDECARS
