"""The `troupe` command of a wheel (tools/wheel.sh puts the C program in troupe/_lib/,
linked to the libraries there): `troupe start --head`, `troupe status`, `troupe stop`, ...
as the README's "The troupe command" says. An install from source has no such program:
use Bazel's (`bazel-bin/api/cmd/troupe`) or tools/install.sh's."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "troupe")
    if not os.access(exe, os.X_OK):
        sys.exit("troupe: this install of the package carries no troupe command (only a "
                 "wheel from tools/wheel.sh does); build it with Bazel (//api/cmd:troupe) "
                 "or tools/install.sh")
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
