"""Where a task's MuJoCo XML comes from: a path, or a model file that an installed package ships."""

from __future__ import annotations

import importlib.util
import os

__all__ = ["resolve_xml"]


def resolve_xml(xml_path: str | os.PathLike | None, default: tuple[str, str] | None, owner: str) -> str:
    """The model file to load: ``xml_path`` if given, else ``default = (package, path inside it)``.

    No third-party XML is copied into this repository: the locomotion tasks load the model files
    that Gymnasium ships (``pip install gymnasium``), found without importing Gymnasium.

    Examples:
        >>> path = resolve_xml(None, ("gymnasium", "envs/mujoco/assets/half_cheetah.xml"), "HalfCheetahEnv")
        >>> os.path.basename(path)
        'half_cheetah.xml'
    """
    if xml_path is not None:
        path = os.fspath(xml_path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{owner}: xml_path {path!r} is not a file.")
        return path
    if default is None:
        raise ValueError(f"{owner}: xml_path is required (this task has no default model file).")
    package, relative = default
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"{owner} loads its model from the {package!r} package, which is not installed: pip install {package} "
            "(or pass xml_path=...)."
        )
    path = os.path.join(list(spec.submodule_search_locations)[0], *relative.split("/"))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{owner}: the installed {package!r} has no {relative!r} (found {path!r}).")
    return path
