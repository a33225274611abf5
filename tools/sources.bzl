"""The filegroup every package gives //tools for the source checks."""

def sources_filegroup():
    """Every C and C++ file of the calling package, as :sources, for //tools' checks."""
    native.filegroup(
        name = "sources",
        srcs = native.glob([
            "**/*.c",
            "**/*.h",
            "**/*.cc",
        ]),
        visibility = ["//tools:__pkg__"],
    )
