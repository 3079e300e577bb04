"""Static checks of the monorepo layout: package metadata and the no-sibling-import rule.

These read files only (no build, no install), so they run in well under a second.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = sorted(p.parent for p in (REPO / "packages").glob("*/pyproject.toml"))

# folder -> (distribution, import name), as in DESIGN.md section 1.
EXPECTED = {
    "tdict": ("rl-tdict", "tdict"),
    "rl-envs": ("rl-envs", "rl_envs"),
    "rl-collect": ("rl-collect", "rl_collect"),
    "rl-replay": ("rl-replay", "rl_replay"),
    "rl-objectives": ("rl-objectives", "rl_objectives"),
    "rl-llm": ("rl-llm", "rl_llm"),
    "rl-kernels": ("rl-kernels", "rl_kernels"),
}
IMPORT_NAMES = {imp for _, imp in EXPECTED.values()}
# rl_kernels is an optional accelerator: callers may import it, but only lazily (inside a
# function, behind the `[kernels]` extra) and always with a pure-torch fallback.
LAZY_ONLY = {"rl_kernels"}


def _pyproject(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))


def _req_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[(@]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_every_package_of_the_design_is_present() -> None:
    assert sorted(p.name for p in PACKAGE_DIRS) == sorted(EXPECTED)


@pytest.mark.parametrize("folder", PACKAGE_DIRS, ids=lambda p: p.name)
def test_package_metadata(folder: Path) -> None:
    dist, imp = EXPECTED[folder.name]
    data = _pyproject(folder)
    project = data["project"]
    assert data["build-system"]["build-backend"] == "hatchling.build"
    assert project["name"] == dist
    assert project["requires-python"] == ">=3.10"
    assert project["license"] == "MIT"
    assert project["readme"] == "README.md" and (folder / "README.md").is_file()
    assert (folder / "LICENSE").is_file()
    assert data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == [f"src/{imp}"]
    deps = {_req_name(r) for r in project.get("dependencies", [])}
    siblings = {d for d, _ in EXPECTED.values()} - {dist}
    # The only sibling a package may depend on is rl-tdict; rl-kernels only via an extra.
    assert deps & siblings <= {"rl-tdict"}
    if dist not in ("rl-tdict", "rl-kernels"):
        assert "rl-tdict" in deps
    assert "tensordict" not in deps, "the peer library belongs to the bench environment only"
    for extra, reqs in project.get("optional-dependencies", {}).items():
        assert {_req_name(r) for r in reqs} & siblings <= {"rl-kernels"}, extra


def _module_level_imports(tree: ast.Module) -> set[ast.AST]:
    """Import nodes that run at import time (not inside a function or lambda body)."""
    eager: set[ast.AST] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                eager.add(child)
            visit(child)

    visit(tree)
    return eager


def _source_files() -> list[tuple[str, Path]]:
    files = []
    for folder in PACKAGE_DIRS:
        own = EXPECTED[folder.name][1]
        files += [(own, path) for path in sorted((folder / "src").rglob("*.py"))]
    return files


def test_no_package_imports_a_sibling() -> None:
    problems = []
    for own, path in _source_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        eager = _module_level_imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in (own, "tdict") or top not in IMPORT_NAMES:
                    continue
                where = f"{path.relative_to(REPO)}:{node.lineno} imports {top}"
                if own == "tdict":
                    problems.append(f"{where} (tdict imports no rl_* package)")
                elif top not in LAZY_ONLY:
                    problems.append(f"{where} (siblings talk through the TensorDict protocol)")
                elif node in eager:
                    problems.append(f"{where} at import time (import it lazily, in a function)")
    assert not problems, "\n".join(problems)


def test_the_demo_environment_is_lean() -> None:
    """``hatch run demo`` runs in the default env: torch, the five RL packages and what the demo writes
    with; the test suite's libraries (Ray, dm-control, VMAS, transformers, ...) live in ``tests``."""
    envs = tomllib.loads((REPO / "hatch.toml").read_text(encoding="utf-8"))["envs"]
    default = envs["default"]
    assert sorted(_req_name(d) for d in default["dependencies"]) == [
        "matplotlib",
        "numpy",
        "tensorboard",
        "torch",
        "tqdm",
    ]
    assert sorted(Path(m).name for m in default["workspace"]["members"]) == sorted(
        ["tdict", "rl-envs", "rl-collect", "rl-replay", "rl-objectives"]
    )
    assert default["scripts"]["demo"].endswith("examples/sac_pendulum.py {args}")
    assert default["scripts"]["test"] == "hatch run tests:run {args}"
    assert envs["tests"]["workspace"]["members"] == ["packages/*"]


# Attributes of tdict's containers that are implementation details (siblings use the public
# equivalents: TensorDict.unchecked, td.items(), td.batch_size, td.device, td.names, td.is_locked).
TDICT_PRIVATE_ATTRIBUTES = {"_new_unsafe", "_tensordict", "_is_locked", "_lock_ops"}


def test_siblings_use_only_tdict_public_api() -> None:
    """No module path or name with a leading underscore is imported from tdict, and no private attribute
    of its containers is read: a tdict release within the pinned minor range keeps the siblings working."""
    problems = []
    for own, path in _source_files():
        if own == "tdict":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "tdict" and any(p.startswith("_") for p in parts):
                        problems.append(f"{where} imports {alias.name}")
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                parts = node.module.split(".")
                if parts[0] != "tdict":
                    continue
                if any(p.startswith("_") for p in parts):
                    problems.append(f"{where} imports from {node.module}")
                problems += [f"{where} imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr in TDICT_PRIVATE_ATTRIBUTES:
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    problems.append(f"{where} reads .{node.attr}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "folder", [f for f in PACKAGE_DIRS if f.name not in ("tdict", "rl-kernels")], ids=lambda p: p.name
)
def test_siblings_pin_the_tdict_minor_release(folder: Path) -> None:
    """Before 1.0 a minor release of tdict may change its API: each sibling accepts one minor line."""
    reqs = [r for r in _pyproject(folder)["project"]["dependencies"] if _req_name(r) == "rl-tdict"]
    assert reqs == ["rl-tdict>=0.1,<0.2"]


@pytest.mark.parametrize("folder", PACKAGE_DIRS, ids=lambda p: p.name)
def test_every_package_ships_its_type_hints(folder: Path) -> None:
    """PEP 561: a ``py.typed`` marker beside the package's ``__init__.py`` (the wheel carries the whole folder)."""
    imp = EXPECTED[folder.name][1]
    assert (folder / "src" / imp / "py.typed").is_file()


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    """name -> relative module of the ``from .module import name`` lines under ``if TYPE_CHECKING:``."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.level == 1:
                    found.update({alias.name: stmt.module for alias in stmt.names})
    return found


def test_lazy_re_exports_are_visible_to_static_tools() -> None:
    """A package ``__init__`` that loads names on first use (``_LAZY`` + ``__getattr__``) also imports each of
    them under ``if TYPE_CHECKING:`` from the module ``_LAZY`` names, so IDEs and type checkers resolve them."""
    checked, problems = 0, []
    for _, path in _source_files():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        lazy = next(
            (n.value for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "_LAZY"),
            None,
        )
        if lazy is None:
            continue
        checked += 1
        table = eval(ast.unparse(lazy), {"__builtins__": {}, "dict": dict})  # a dict display, dict.fromkeys at most
        seen = _type_checking_imports(tree)
        problems += [
            f"{path.relative_to(REPO)}: {name} (from .{module})"
            for name, module in table.items()
            if seen.get(name) != module
        ]
        # a literal __all__ (documentation tools read it without running the module) naming every lazy name
        exported = next(
            (
                n.value
                for n in tree.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "__all__"
            ),
            None,
        )
        if not isinstance(exported, ast.List):
            problems.append(f"{path.relative_to(REPO)}: __all__ is not a list literal")
        else:
            missing = set(table) - set(ast.literal_eval(exported))
            problems += [f"{path.relative_to(REPO)}: {name} missing from __all__" for name in sorted(missing)]
    assert checked >= 4 and not problems, "\n".join(problems)
