"""Every package builds to a wheel that installs and imports on its own.

For each package a fresh virtual environment gets torch, the rl-tdict wheel and that one
package's wheel (with whatever third-party dependencies it declares), and nothing else from the
monorepo. The package must import from the installed wheel (not from the source tree), its
installed metadata must declare exactly the requirements of its pyproject.toml, and no sibling
``rl_*`` package may be importable.

To stay fast, all wheels are built once per session (one pip call, without build isolation when
hatchling is available); torch is provided once, as a directory holding only torch and its own
dependencies (symlinked from the running environment, or installed if that is impossible), that
each per-package environment sees through a ``.pth`` file; the per-package environments are
created without pip and driven by ``pip --python``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import venv
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = sorted(p.parent for p in (REPO / "packages").glob("*/pyproject.toml"))
CORE = "rl-tdict"
MIN_HATCHLING = Version("1.26")


def _pip_version() -> Version:
    # Not importlib.util.find_spec("pip"): with setuptools' distutils shim active, probing "pip"
    # through the import system switches the shim off for the whole process, and a later
    # `import setuptools` (torch inductor does one) then fails on the stdlib distutils.
    try:
        return Version(metadata.version("pip"))
    except metadata.PackageNotFoundError:
        return Version("0")


pytestmark = pytest.mark.skipif(
    _pip_version() < Version("22.3"),
    reason="needs pip >= 22.3 (for `pip --python`) in the test environment",
)


def _project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _import_name(folder: Path) -> str:
    data = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    (package,) = data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return package.rsplit("/", 1)[-1]


PACKAGES = {canonicalize_name(_project(f)["name"]): f for f in PACKAGE_DIRS}
IMPORT_NAMES = {dist: _import_name(folder) for dist, folder in PACKAGES.items()}


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kwargs)
    if proc.returncode != 0:
        pytest.fail(
            f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    return proc


def _clean_env() -> dict[str, str]:
    """The caller's environment (so pip keeps this machine's index configuration), minus
    variables that would leak the development environment into the fresh ones."""
    env = dict(os.environ)
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(var, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip(python: Path, *args: str) -> None:
    # pip from the test environment drives the target interpreter, so the fresh environments
    # need no pip of their own (creating them takes milliseconds instead of seconds).
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
        env=_clean_env(),
    )


def _create_venv(path: Path) -> tuple[Path, Path]:
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(path)
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = _run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    return python, Path(purelib)


def _torch_requirement() -> str:
    # Same torch release as the running environment (hatch.toml pins it), never a newer one.
    return f"torch=={Version(metadata.version('torch')).public}"


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out)]
    try:
        fast = Version(metadata.version("hatchling")) >= MIN_HATCHLING
    except metadata.PackageNotFoundError:
        fast = False
    if fast:  # no isolated build env to create per package: ~1 s instead of ~10 s
        cmd.append("--no-build-isolation")
    _run([*cmd, *map(str, PACKAGES.values())], env=_clean_env())
    built = {}
    for whl in out.glob("*.whl"):
        dist = canonicalize_name(whl.name.split("-", 1)[0])
        built[dist] = whl
    assert set(built) == set(PACKAGES), sorted(built)
    return built


def _dependency_closure(name: str) -> list[metadata.Distribution]:
    """``name`` and everything it requires (markers evaluated, no extras), as installed here."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [name]
    while todo:
        key = canonicalize_name(todo.pop())
        if key in seen:
            continue
        dist = metadata.distribution(key)
        seen[key] = dist
        for raw in dist.requires or []:
            req = Requirement(raw)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _link_torch_from_here(site: Path) -> None:
    """Fill ``site`` with symlinks to the torch installed in the running environment and to its
    dependencies (nothing else): the same files a fresh install would give, in milliseconds."""
    for dist in _dependency_closure("torch"):
        if not dist.files:
            raise LookupError(f"{dist.metadata['Name']} has no RECORD")
        for top in {f.parts[0] for f in dist.files if f.parts} - {"..", "__pycache__"}:
            source, target = Path(dist.locate_file(top)), site / top
            if source.exists() and not target.exists():
                target.symlink_to(source, target_is_directory=source.is_dir())


@pytest.fixture(scope="session")
def torch_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that holds torch (and its own dependencies) only, as one more site directory.

    Reuses the running environment's torch through symlinks (the release hatch.toml pins);
    where that is impossible (no RECORD files, no symlinks), installs the same torch release
    into a separate base environment instead.
    """
    base = tmp_path_factory.mktemp("torch-base")
    try:
        site = base / "site-packages"
        site.mkdir()
        _link_torch_from_here(site)
        return site
    except (LookupError, OSError, metadata.PackageNotFoundError):
        python, purelib = _create_venv(base / "venv")
        _pip(python, _torch_requirement())
        return purelib


# Real work each package must do with nothing but torch, rl-tdict and itself installed (no numpy,
# no gymnasium): an empty string means an import is all it offers today.
SMOKE = {
    "rl-envs": (
        "from rl_envs import PendulumEnv, StepCounter, TransformedEnv\n"
        "assert TransformedEnv(PendulumEnv(), StepCounter(5)).rollout(10).batch_size == (5,)"
    ),
    "rl-replay": (
        "import torch\nfrom tdict import TensorDict\nfrom rl_replay import LazyTensorStorage, ReplayBuffer\n"
        "rb = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)\n"
        "rb.extend(TensorDict(x=torch.arange(6), batch_size=[6]))\n"
        "assert rb.sample()['x'].max() < 6 and len(rb) == 6\n"
        "import os, tempfile\nfrom rl_replay import CompressedListStorage, PrioritizedReplayBuffer\n"
        "path = os.path.join(tempfile.mkdtemp(), 'ckpt')\nrb.dumps(path)\n"
        "rb2 = ReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)\nrb2.loads(path)\n"
        "assert torch.equal(rb2[:]['x'], torch.arange(6))\n"
        "cb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=CompressedListStorage(8), batch_size=2)\n"
        "cb.extend(TensorDict(x=torch.arange(4), batch_size=[4]))\ns, info = cb.sample(return_info=True)\n"
        "cb.update_priority(info['index'], torch.ones(2))"
    ),
    "rl-objectives": (
        "import torch\nfrom torch import nn\nfrom tdict import TensorDict\nfrom tdict.nn import TensorDictModule\n"
        "from rl_objectives import DQNLoss, SoftUpdate\nfrom rl_objectives.modules import MLP, QValueActor\n"
        "from rl_objectives.functional import vec_generalized_advantage_estimate as gae\n"
        "q = QValueActor(MLP(in_features=3, out_features=2), in_keys=['observation'], action_space='one_hot')\n"
        "loss = DQNLoss(q, action_space='one_hot')\n"
        "td = TensorDict({'observation': torch.randn(5, 3), 'action': torch.eye(2)[torch.tensor([0, 1, 0, 1, 1])].bool(),\n"
        "    'next': {'observation': torch.randn(5, 3), 'reward': torch.ones(5), 'done': torch.zeros(5, dtype=torch.bool),\n"
        "    'terminated': torch.zeros(5, dtype=torch.bool)}}, batch_size=[5])\n"
        "loss(td)['loss'].backward()\n"
        "adv, target = gae(0.9, 0.9, torch.zeros(2, 4), torch.zeros(2, 4), torch.ones(2, 4), torch.zeros(2, 4, dtype=torch.bool))\n"
        "assert adv.shape == (2, 4) and torch.allclose(adv[:, -1], torch.ones(2))"
    ),
}

PROBE = textwrap.dedent(
    """
    import importlib, importlib.util, json, sys
    from importlib import metadata
    dist, module_name, siblings = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    module = importlib.import_module(module_name)
    exec(sys.argv[4])
    found = {d.metadata["Name"] for d in metadata.distributions()}
    print(json.dumps({
        "file": module.__file__,
        "module_version": getattr(module, "__version__", None),
        "version": metadata.version(dist),
        "requires": metadata.requires(dist) or [],
        "extras": metadata.metadata(dist).get_all("Provides-Extra") or [],
        "requires_python": metadata.metadata(dist)["Requires-Python"],
        "license": metadata.metadata(dist)["License-Expression"],
        "importable_siblings": [s for s in siblings if s and importlib.util.find_spec(s)],
        "rl_dists": sorted(n for n in found if n.lower().startswith("rl-")),
    }))
    """
)


def _expected_requires(project: dict) -> set[str]:
    expected = {str(Requirement(r)) for r in project.get("dependencies", [])}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        for raw in reqs:
            req = Requirement(raw)
            marker = f"({req.marker}) and " if req.marker else ""
            req.marker = None
            expected.add(str(Requirement(f"{req}; {marker}extra == '{extra}'")))
    return expected


@pytest.mark.parametrize("dist", sorted(PACKAGES))
def test_wheel_installs_alone_and_imports(dist: str, wheels: dict[str, Path], torch_site: Path, tmp_path: Path) -> None:
    folder = PACKAGES[dist]
    project = _project(folder)
    module_name = IMPORT_NAMES[dist]
    env_dir = tmp_path / "venv"
    python, purelib = _create_venv(env_dir)
    (purelib / "_torch_base.pth").write_text(f"{torch_site}\n", encoding="utf-8")

    to_install = {wheels[CORE], wheels[dist]}
    _pip(python, *map(str, sorted(to_install)))

    siblings = sorted(IMPORT_NAMES[d] for d in IMPORT_NAMES if d not in (dist, CORE))
    workdir = tmp_path / "cwd"  # not the repository: the source tree must not shadow the wheel
    workdir.mkdir()
    probe = _run(
        [str(python), "-I", "-c", PROBE, project["name"], module_name, ",".join(siblings), SMOKE.get(dist, "")],
        cwd=workdir,
        env=_clean_env(),
    )
    info = json.loads(probe.stdout.strip().splitlines()[-1])

    assert info["file"], f"{module_name} imported as a namespace package: no __init__.py in the wheel"
    assert Path(info["file"]).resolve().is_relative_to(env_dir.resolve()), info["file"]
    assert info["version"] == project["version"]
    if info["module_version"] is not None:
        assert info["module_version"] == project["version"]
    assert info["requires_python"] == project["requires-python"]
    assert info["license"] == project["license"]
    assert {str(Requirement(r)) for r in info["requires"]} == _expected_requires(project)
    assert {canonicalize_name(e) for e in info["extras"]} == {
        canonicalize_name(e) for e in project.get("optional-dependencies", {})
    }
    assert info["importable_siblings"] == []
    assert {canonicalize_name(n) for n in info["rl_dists"]} == {dist, CORE}


def test_wheels_ship_only_their_package(wheels: dict[str, Path]) -> None:
    import zipfile

    for dist, whl in wheels.items():
        module_name = IMPORT_NAMES[dist]
        with zipfile.ZipFile(whl) as zf:
            tops = {name.split("/", 1)[0] for name in zf.namelist()}
        dist_info = {t for t in tops if t.endswith(".dist-info")}
        assert tops - dist_info == {module_name}, (dist, sorted(tops))
