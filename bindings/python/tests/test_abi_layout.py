"""The package's ctypes structures against the C headers: every field at the offset and
of the size the C compiler gives it, every struct of the C size, and the initialisers'
struct_size as the C macros write it. Compiles a probe with the system C compiler against
api/include (skips, saying why, where there is none or the source tree is not here)."""
import ctypes
import os
import shutil
import subprocess
import tempfile

import pytest

from troupe import _ffi
from troupe._ffi import byref, lib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
INCLUDE = os.path.join(ROOT, "api", "include")

# ctypes structure -> (C type, its header)
STRUCTS = {
    _ffi.MethodDef: ("tr_method_def", "troupe/troupe.h"),
    _ffi.ActorClass: ("tr_actor_class", "troupe/troupe.h"),
    _ffi.Resource: ("tr_resource", "troupe/troupe.h"),
    _ffi.ActorOptions: ("tr_actor_options", "troupe/troupe.h"),
    _ffi.ActorDetails: ("tr_actor_details", "troupe/troupe.h"),
    _ffi.TaskOptions: ("tr_task_options", "troupe/troupe.h"),
    _ffi.CallOptions: ("tr_call_options", "troupe/troupe.h"),
    _ffi.StoreStats: ("tr_store_stats", "troupe/troupe.h"),
    _ffi.DagOptions: ("tr_dag_options", "troupe/dag.h"),
    _ffi.Bundle: ("tr_bundle", "troupe/troupe.h"),
    _ffi.PgInfo: ("tr_pg_info", "troupe/troupe.h"),
    _ffi.ConcurrencyGroup: ("tr_concurrency_group", "troupe/troupe.h"),
}
INIT_MACROS = {
    _ffi.ActorClass: ("TR_ACTOR_CLASS_INIT", "tr_actor_class_init"),
    _ffi.ActorOptions: ("TR_ACTOR_OPTIONS_INIT", "tr_actor_options_init"),
    _ffi.ActorDetails: ("TR_ACTOR_DETAILS_INIT", "tr_actor_details_init"),
    _ffi.TaskOptions: ("TR_TASK_OPTIONS_INIT", "tr_task_options_init"),
    _ffi.CallOptions: ("TR_CALL_OPTIONS_INIT", "tr_call_options_init"),
    _ffi.StoreStats: ("TR_STORE_STATS_INIT", "tr_store_stats_init"),
    _ffi.DagOptions: ("TR_DAG_OPTIONS_INIT", "tr_dag_options_init"),
    _ffi.Bundle: ("TR_BUNDLE_INIT", "tr_bundle_init"),
    _ffi.PgInfo: ("TR_PG_INFO_INIT", "tr_pg_info_init"),
}


@pytest.fixture(scope="module")
def c_layout():
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler on PATH: the layouts cannot be compared")
    if not os.path.isfile(os.path.join(INCLUDE, "troupe", "troupe.h")):
        pytest.skip("the source tree's api/include is not at %s" % INCLUDE)
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "troupe/troupe.h"',
             '#include "troupe/dag.h"', "int main(void) {"]
    for py, (ctype, _) in STRUCTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (ctype, ctype))
        for name, _t in py._fields_:
            lines.append('printf("%s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (ctype, name, ctype, name, ctype, name))
    for py, (macro, _) in INIT_MACROS.items():
        ctype = STRUCTS[py][0]
        lines.append('{ %s v = %s; printf("%s init %%u\\n", v.struct_size); }'
                     % (ctype, macro, ctype))
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "probe.c"), os.path.join(d, "probe")
        with open(src, "w") as f:
            f.write("\n".join(lines))
        subprocess.run([cc, "-std=c11", "-I", INCLUDE, src, "-o", exe], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    layout = {}
    for line in out.splitlines():
        parts = line.split()
        layout[(parts[0], parts[1])] = tuple(int(x) for x in parts[2:])
    return layout


@pytest.mark.parametrize("py", list(STRUCTS), ids=lambda s: s.__name__)
def test_every_field_where_c_has_it(c_layout, py):
    ctype = STRUCTS[py][0]
    assert c_layout[(ctype, "sizeof")] == (ctypes.sizeof(py),), ctype
    for name, _t in py._fields_:
        f = getattr(py, name)
        assert c_layout[(ctype, name)] == (f.offset, f.size), "%s.%s" % (ctype, name)


@pytest.mark.parametrize("py", list(INIT_MACROS), ids=lambda s: s.__name__)
def test_init_functions_write_what_the_macros_write(c_layout, py):
    ctype = STRUCTS[py][0]
    s = py()
    getattr(lib, INIT_MACROS[py][1])(byref(s))
    assert (s.struct_size,) == c_layout[(ctype, "init")]
    assert s.struct_size >> 16 == 0x5452, "TR_STRUCT_MAGIC in the high 16 bits"


def test_grown_options_default_to_no_placement_group():
    """tr_actor_options and tr_task_options grew placement_group (all zero: none) and
    bundle_index (-1: any) at their end; the init functions write those defaults."""
    for py, init in ((_ffi.ActorOptions, lib.tr_actor_options_init),
                     (_ffi.TaskOptions, lib.tr_task_options_init)):
        s = py()
        s.bundle_index = 7
        init(byref(s))
        assert bytes(s.placement_group.b) == bytes(16) and s.bundle_index == -1
        names = [f for f, _ in py._fields_]
        assert names.index("bundle_index") == names.index("placement_group") + 1
    o = _ffi.ActorOptions()  # and then detached (0: dies with its creator)
    o.detached = 5
    lib.tr_actor_options_init(byref(o))
    assert o.detached == 0 and _ffi.ActorOptions._fields_[-8][0] == "detached"
    o.max_concurrency = 0  # and then max_concurrency (1: one call at a time)
    lib.tr_actor_options_init(byref(o))
    assert o.max_concurrency == 1 and _ffi.ActorOptions._fields_[-7][0] == "max_concurrency"
    o.n_concurrency_groups = 3  # and then the concurrency groups (none)
    lib.tr_actor_options_init(byref(o))
    assert not o.concurrency_groups and o.n_concurrency_groups == 0
    assert [f for f, _ in _ffi.ActorOptions._fields_[-6:-4]] == ["concurrency_groups",
                                                                 "n_concurrency_groups"]
    o.class_label = b"x"  # and then the class's label (none: the C class's name)
    lib.tr_actor_options_init(byref(o))
    assert o.class_label is None and _ffi.ActorOptions._fields_[-4][0] == "class_label"
    o.binding_data = b"{}"  # and then a binding's data kept with the actor (none)
    lib.tr_actor_options_init(byref(o))
    assert o.binding_data is None and _ffi.ActorOptions._fields_[-3][0] == "binding_data"
    o.max_task_retries = 3  # and then how often a call in flight is sent again (never)
    lib.tr_actor_options_init(byref(o))
    assert o.max_task_retries == 0 and _ffi.ActorOptions._fields_[-2][0] == "max_task_retries"
    o.ns = b"elsewhere"  # and then its name's namespace (none: the runtime's)
    lib.tr_actor_options_init(byref(o))
    assert o.ns is None and _ffi.ActorOptions._fields_[-1][0] == "ns"
