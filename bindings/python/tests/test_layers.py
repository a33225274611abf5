"""The package's layers (README.md, "Layers"): each module imports only the ones below it,
at its top, and uses only their public names; one table maps the library's status codes
to exceptions; Ray options troupe ignores warn once."""
import ast
import importlib.machinery
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import troupe
from troupe import _errors, _ffi, exceptions

PKG_DIR = os.path.dirname(os.path.abspath(troupe.__file__))

# lowest first: a module may import only modules before it (a package's __init__ counts as
# the package's name). The README's list, in the order the test enforces it.
LAYERS = [
    "troupe._cli",
    "troupe._ffi",
    "troupe._fast",
    "troupe.ray_constants",
    "troupe.job_config",
    "troupe.exceptions",
    "troupe._errors",
    "troupe._serial",
    "troupe._runtime",
    "troupe.cloudpickle",
    "troupe._private.internal_api",
    "troupe._private.ray_constants",
    "troupe._private",
    "troupe._raylet",
    "troupe._placement",
    "troupe.util.scheduling_strategies",
    "troupe.util.placement_group",
    "troupe.util",
    "troupe.util.collective.types",
    "troupe.util.collective.collective",
    "troupe.util.collective",
    "troupe.dag",
    "troupe.remote_function",
    "troupe.actor",
    "troupe.util.queue",
    "troupe.experimental",
    "troupe.experimental.collective",
    "troupe._worker",
    "troupe",
]


EXTENSIONS = {"troupe._fast"}  # (C: built where the interpreter and headers allow)


def _modules():
    """{module name: its source path} for every .py file of the installed package, and
    each extension module built (its .so: no Python imports to check)."""
    out = {}
    for root, _, files in os.walk(PKG_DIR):
        for f in files:
            ext = next((x for x in importlib.machinery.EXTENSION_SUFFIXES if f.endswith(x)),
                       None)
            if ext is not None:
                out["troupe." + f[:-len(ext)]] = os.path.join(root, f)
                continue
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, f), os.path.dirname(PKG_DIR))
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = os.path.join(root, f)
    return out


MODULES = _modules()


def _package_of(name, path):
    return name if path.endswith("__init__.py") else name.rpartition(".")[0]


def _imports(name, path):
    """(node, imported module, names imported from it, in a function?) for each import of
    the package's own modules in this file."""
    tree = ast.parse(open(path).read(), path)
    pkg = _package_of(name, path)
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:
                    if a.name.split(".")[0] == "troupe":
                        found.append((child, a.name, [], inner))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = pkg.split(".")
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == "troupe":
                    found.append((child, target, [a.name for a in child.names], inner))
            visit(child, inner)

    visit(tree, False)
    return tree, found


def _edges(target, names):
    """The modules an import makes this one depend on: `from pkg import mod` is mod's."""
    subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
    return subs if subs and len(subs) == len(names) else [target] + subs


def test_layers_are_known():
    assert sorted(MODULES) == sorted(m for m in LAYERS
                                     if m not in EXTENSIONS or m in MODULES), \
        "a new module: put it in LAYERS and the README"


def test_the_extension_is_built_and_used():
    """Where the interpreter is 3.11 or later (the stable ABI it is built for), the
    package carries troupe._fast and uses it, unless TROUPE_NO_EXTENSION=1."""
    from troupe import _runtime
    if sys.version_info < (3, 11):
        pytest.skip(f"Python {sys.version_info[:2]}: troupe._fast is for 3.11 and later")
    assert "troupe._fast" in MODULES, "troupe._fast was not built (python3-dev missing?)"
    off = os.environ.get("TROUPE_NO_EXTENSION", "") not in ("", "0")
    assert (_runtime.fast is None) == off


@pytest.mark.parametrize("name", LAYERS)
def test_each_module_imports_alone(name):
    """In a fresh interpreter: `import troupe.X`, and X with only what it imports itself
    (its package's __init__ not run first), so no module leans on another's side effect."""
    alone = textwrap.dedent(f"""
        import importlib, importlib.util, sys, types
        spec = importlib.util.find_spec("troupe")
        pkg = types.ModuleType("troupe")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["troupe"] = pkg
        importlib.import_module({name!r})
    """)
    for code in (f"import {name}", alone if name != "troupe" else "import troupe"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr


def test_imports_go_down_at_the_top_and_use_public_names():
    rank = {m: i for i, m in enumerate(LAYERS)}
    problems = []
    for name, path in sorted(MODULES.items()):
        if name in EXTENSIONS:
            continue
        tree, imports = _imports(name, path)
        bound = set()  # names this file got from the package's modules
        for node, target, names, in_function in imports:
            where = f"{os.path.relpath(path, PKG_DIR)}:{node.lineno}"
            if in_function:
                problems.append(f"{where}: imports {', '.join(_edges(target, names))} "
                                f"inside a function")
            for dep in _edges(target, names):
                if dep != "troupe" and dep in rank and rank[dep] >= rank[name]:
                    problems.append(f"{where}: {name} imports {dep}, a layer above it")
            for a in node.names:
                local = a.asname or a.name.split(".")[0]
                bound.add(local)
                leaf = a.name.rsplit(".", 1)[-1]
                if leaf.startswith("_") and not leaf.startswith("__") and \
                        f"{target}.{leaf}" not in MODULES:
                    problems.append(f"{where}: imports {target}'s private {leaf}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr",
                                                      getattr(node.func, "id", "")) in (
                    "import_module", "__import__"):
                problems.append(f"{os.path.relpath(path, PKG_DIR)}:{node.lineno}: "
                                f"imports by name")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in bound and node.attr.startswith("_") and \
                    not node.attr.startswith("__"):
                problems.append(f"{os.path.relpath(path, PKG_DIR)}:{node.lineno}: "
                                f"{node.value.id}.{node.attr} is another module's private name")
    assert not problems, "\n".join(problems)


def test_status_codes_are_the_librarys():
    assert _ffi.STATUS["TR_EINVAL"] == -1  # (the one number the ABI promises outright)
    for name, rc in _ffi.STATUS.items():
        assert _ffi.errname(rc) == name and name.startswith("TR_E")
    assert len(set(_ffi.STATUS.values())) == len(_ffi.STATUS) >= 23
    # a code written by name in the package is one the library has (no typo goes unseen)
    for name, path in MODULES.items():
        if name in EXTENSIONS:
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"TR_E[A-Z_]+", node.value):
                assert node.value in _ffi.STATUS, f"{name}: {node.value}"


def test_check_maps_every_code_to_its_class():
    assert _errors.check(0) is None
    assert set(_errors.CLASSES) == set(_ffi.STATUS.values())
    for name, rc in _ffi.STATUS.items():
        with pytest.raises(Exception) as info:
            _errors.check(rc, "probing")
        e = info.value
        assert type(e) is _errors.CLASSES[rc] or isinstance(e, exceptions.TaskError)
        assert e.code == name and e.status == rc, name
        assert str(e).startswith("probing") and name in str(e)
        if rc != _errors.EINVAL:  # a group's ops: one class for all but a bad argument
            with pytest.raises(exceptions.CollectiveError) as info:
                _errors.check(rc, "probing", exceptions.CollectiveError)
            assert info.value.code == name and info.value.status == rc
    classes = {n: _errors.CLASSES[rc] for n, rc in _ffi.STATUS.items()}
    assert classes["TR_EINVAL"] is ValueError
    assert issubclass(classes["TR_ETIMEDOUT"], (exceptions.GetTimeoutError, TimeoutError))
    assert classes["TR_EACTOR_DIED"] is exceptions.RayActorError
    assert classes["TR_EOBJECT_LOST"] is exceptions.ObjectLostError
    assert classes["TR_ETASK"] is exceptions.RayTaskError
    assert classes["TR_EPEER_DIED"] is exceptions.TroupeError
    with pytest.raises(ValueError) as info:
        _errors.check(-1, "probing", exceptions.CollectiveError)


def test_an_error_carries_the_librarys_text():
    cfg = _ffi.c_void_p()
    assert _ffi.lib.tr_config_create(_ffi.byref(cfg)) == 0
    try:
        with pytest.raises(ValueError) as info:
            _errors.check(_ffi.lib.tr_config_set(cfg, b"no_such_key", b"1"), "setting")
    finally:
        _ffi.lib.tr_config_destroy(cfg)
    assert "no_such_key" in str(info.value) and info.value.code == "TR_EINVAL"
    assert info.value.status == _ffi.STATUS["TR_EINVAL"]


IGNORED = """
import json, warnings
warnings.simplefilter("always")
import troupe as ray

with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for _ in range(3):
        @ray.remote(lifetime="detached", max_concurrency=4, runtime_env={"pip": []})
        class A:
            def f(self):
                return 1
        A = A.options(lifetime="detached", num_cpus=1)
        ray.init(num_cpus=1, include_dashboard=False, namespace="n")
        a = A.remote()
        assert ray.get(a.f.options(num_returns=1).remote()) == 1
        ray.wait([a.f.remote()], fetch_local=False)
        ray.shutdown()
    try:
        ray.remote(colour="red")(A)
    except TypeError:
        pass
    else:
        raise SystemExit("an unknown option was taken")
print(json.dumps([[str(w.message), w.filename, w.lineno] for w in seen]))
"""


def test_ignored_options_warn_once(tmp_path):
    path = tmp_path / "ignored.py"
    path.write_text(IGNORED)
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    texts = sorted(m for m, _, _ in seen)
    for option in ("runtime_env", "fetch_local"):
        # (num_returns=1, lifetime, max_concurrency, include_dashboard, namespace are
        # honoured)
        assert sum(f"'{option}'" in t for t in texts) == 1, (option, texts)
    assert len(texts) == 2, texts
    assert all("troupe ignores" in t for t in texts)
    assert all(f == str(path) for _, f, _ in seen), seen  # the user's line, not ours
