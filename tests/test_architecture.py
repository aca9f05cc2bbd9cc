"""The architecture, checked: levels import only downward and nothing imports in a circle
(import-linter contracts in pyproject.toml, run on the installed layout), every framework package's
role modules are the ones its spec declares, the docs show the specs' table, the core names no
plugin, nothing outside ``cli/`` starts the CLI, no source file over 1,000 lines, and tests/ mirrors
the package without importing conftest."""

from __future__ import annotations

import ast
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = next(str(p) for p in pathlib.Path(__file__).resolve().parents
            if (p / 'pyproject.toml').exists())

SOURCE_ROOTS = {"deep500lite": "deep500lite", "frameworks": "deep500lite.frameworks", "metrics": "deep500lite.metrics"}
# the built-in framework packages: every folder of frameworks/ with a spec.py (the specs say their roles)
FRAMEWORK_PACKAGES = sorted(d for d in os.listdir(os.path.join(REPO, "frameworks"))
                            if os.path.exists(os.path.join(REPO, "frameworks", d, "spec.py")))
MAX_LINES = 1000


def _source_files():
    for folder in SOURCE_ROOTS:
        for root, dirs, files in os.walk(os.path.join(REPO, folder)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            for name in files:
                if name.endswith(".py"):
                    yield os.path.join(root, name)


def test_import_contracts_hold(installed_wheel):
    """lint-imports on the installed wheel: every contract in pyproject.toml is kept."""
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    assert lint, "import-linter is not installed (it is in the 'test' extra)"
    _, site = installed_wheel
    env = dict(os.environ, PYTHONPATH=str(site))
    # run outside the repository, so the working tree's deep500lite/ does not shadow the wheel's
    out = subprocess.run([lint, "--no-cache", "--no-logo", os.path.join(REPO, "pyproject.toml")],
                         capture_output=True, text=True, env=env, cwd=site.parent)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        contracts = f.read().count("[[tool.importlinter.contracts]]")
    assert contracts >= 11
    assert f"Contracts: {contracts} kept, 0 broken." in out.stdout, out.stdout


@pytest.mark.parametrize("module, source, contract, expected", [
    ("lv0/_upward.py", "import deep500lite.recipe\n", "levels",
     "deep500lite.lv0 is not allowed to import deep500lite.recipe"),
    ("metrics/_upward.py", "from deep500lite.lv2 import trainer\n", "leaves",
     "deep500lite.metrics is not allowed to import deep500lite.lv2"),
    ("lv2/_framework.py", "def f():\n    import torch\n", "no-framework-in-core",
     "deep500lite.lv2 is not allowed to import torch"),
])
def test_a_wrong_import_breaks_a_contract(installed_wheel, tmp_path, module, source, contract, expected):
    """The contracts can fail: one planted wrong import (even inside a function) is reported."""
    lint = shutil.which("lint-imports", path=os.path.dirname(sys.executable))
    _, site = installed_wheel
    planted = tmp_path / "site"
    shutil.copytree(site, planted)
    (planted / "deep500lite" / module).write_text(source)
    out = subprocess.run([lint, "--no-cache", "--no-logo", "--contract", contract,
                          os.path.join(REPO, "pyproject.toml")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(planted)), cwd=tmp_path)
    assert out.returncode != 0 and expected in out.stdout, out.stdout[-3000:]


def test_contracts_see_the_frameworks(installed_wheel):
    """The contracts would be vacuous if the graph missed frameworks/ or metrics/."""
    grimp = pytest.importorskip("grimp")
    _, site = installed_wheel
    code = ("import grimp; g = grimp.build_graph('deep500lite', include_external_packages=True); "
            "print(any(m.startswith('deep500lite.frameworks.torch.') for m in g.modules), "
            "any(m.startswith('deep500lite.metrics.') for m in g.modules)); "
            "print(g.direct_import_exists(importer='deep500lite.frameworks.torch.executor', imported='torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(site)), cwd=site.parent)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "True True"
    assert second == "True"
    del grimp


def test_no_source_file_over_1000_lines():
    long = {os.path.relpath(p, REPO): n for p in _source_files()
            if (n := sum(1 for _ in open(p, encoding="utf-8"))) > MAX_LINES}
    assert long == {}


@pytest.mark.parametrize("framework", FRAMEWORK_PACKAGES)
def test_framework_package_has_its_role_modules(framework):
    """The spec's roles and the package's role modules agree both ways (the roles table is the specs')."""
    from deep500lite.frameworkspec import ROLES
    from deep500lite.registry import FRAMEWORKS, ENTRY_POINT_GROUP
    import importlib.metadata

    spec = FRAMEWORKS[framework]
    assert spec.module == f"deep500lite.frameworks.{framework}"
    ep = [e for e in importlib.metadata.distribution("deep500lite").entry_points if e.group == ENTRY_POINT_GROUP]
    assert f"deep500lite.frameworks.{framework}.spec:SPEC" in [e.value for e in ep]
    folder = os.path.join(REPO, "frameworks", framework)
    present = {role for role in ROLES if os.path.exists(os.path.join(folder, role + ".py"))
               or os.path.exists(os.path.join(folder, role, "__init__.py"))}
    assert sorted(present) == sorted(spec.roles)
    assert not os.path.exists(os.path.join(folder, "operators.py"))


def test_docs_show_the_capability_table_of_the_specs():
    """docs/architecture.md's framework table is what ``list frameworks --capabilities`` generates."""
    from deep500lite.registry import capability_table

    text = open(os.path.join(REPO, "docs", "architecture.md"), encoding="utf-8").read()
    table = text.split("<!-- capability-table", 1)[1].split("-->", 1)[1].split("<!-- /capability-table -->")[0]
    documented = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]
    headers, rows = capability_table()
    assert documented[0] == headers
    documented_rows = {r[0]: r for r in documented[2:]}
    for row in rows:
        assert documented_rows.get(row[0]) == [str(c) for c in row], row[0]
    builtin = {r[0] for r in rows if r[1] == "deep500lite"}
    assert builtin <= set(documented_rows)


def test_the_core_names_no_plugin():
    """No file under deep500lite/ or frameworks/ names a framework that a folder of plugins/ registers."""
    tomllib = pytest.importorskip("tomllib")
    names = set()
    for plugin in os.listdir(os.path.join(REPO, "plugins")):
        with open(os.path.join(REPO, "plugins", plugin, "pyproject.toml"), "rb") as f:
            project = tomllib.load(f)["project"]
        names |= set(project["entry-points"]["deep500lite.frameworks"])
        names.add(project["name"].replace("-", "_"))
    assert "openvino" in names
    offenders = []
    for folder in ("deep500lite", "frameworks"):
        for root, dirs, files in os.walk(os.path.join(REPO, folder)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            for name in files:
                path = os.path.join(root, name)
                text = open(path, encoding="utf-8", errors="replace").read().lower()
                offenders += [f"{os.path.relpath(path, REPO)}: {n}" for n in names if n.lower() in text]
    assert offenders == []


def _string_constants(tree):
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def test_nothing_outside_cli_starts_the_cli():
    """Only deep500lite/cli/ names the CLI's modules: the library starts workers, not its own CLI."""
    cli_dir = os.path.join(REPO, "deep500lite", "cli") + os.sep
    offenders = []
    for path in _source_files():
        if path.startswith(cli_dir) or path.endswith(os.path.join("deep500lite", "__main__.py")):
            continue
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in _string_constants(tree):
            if "deep500lite.cli" in node.value:
                offenders.append(f"{os.path.relpath(path, REPO)}:{node.lineno}")
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(n == "deep500lite.cli" or n.startswith("deep500lite.cli.") for n in names):
                    offenders.append(f"{os.path.relpath(path, REPO)}:{node.lineno}")
    assert offenders == []


# tests/ mirrors the package: one folder per level and package, one per framework
TEST_FOLDERS = ["lv0", "lv1", "lv2", "lv3", "cli", "datasets", "recipe", "bench", "perfmodel", "deep500_ports"]


def _test_files():
    for root, dirs, files in os.walk(os.path.join(REPO, "tests")):
        dirs[:] = [d for d in dirs if not d.startswith((".", "__")) and d != "data"]
        for name in files:
            if name.endswith(".py"):
                yield os.path.join(root, name)


def test_tests_mirror_the_package():
    """tests/ has a folder per level, package and framework; pytest's default "prepend" import mode
    (no ``__init__.py`` in tests/) needs every test module's basename to be unique."""
    from deep500lite.registry import FRAMEWORKS

    tests = os.path.join(REPO, "tests")
    wanted = TEST_FOLDERS + [os.path.join("frameworks", fw) for fw in FRAMEWORKS]
    assert [d for d in wanted if not os.path.isdir(os.path.join(tests, d))] == []
    files = list(_test_files())
    assert [os.path.relpath(p, REPO) for p in files if os.path.basename(p) == "__init__.py"] == []
    frameworks_dir = os.path.join(tests, "frameworks")
    assert [n for n in os.listdir(frameworks_dir) if n.endswith(".py")] == [], "put tests in tests/frameworks/<fw>/"
    seen = {}
    for path in files:
        if os.path.basename(path).startswith("test_"):
            seen.setdefault(os.path.basename(path), []).append(os.path.relpath(path, REPO))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_no_test_imports_conftest():
    """Fixtures and markers come from conftest through pytest; plain helpers live in tests/support.py."""
    offenders = []
    for path in _test_files():
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n.split(".")[-1] == "conftest" for n in names):
                offenders.append(f"{os.path.relpath(path, REPO)}:{node.lineno}")
    assert offenders == []
