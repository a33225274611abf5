"""Compiled graphs (placeholder until the binding's graph support lands)."""


class CompiledDAGRef:
    pass


def _teardown_all():
    pass


class ClassMethodNode:
    def __init__(self, *a, **k):
        raise NotImplementedError("troupe.dag: compiled graphs are not in the Python "
                                  "binding yet")
