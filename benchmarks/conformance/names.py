"""Public names of the peers' modules, and which of them our packages provide under the aliases.

For each module in ``MODULES`` (TorchRL 0.14's and tensordict's public modules), lists its public
names (``__all__``, else what ``dir`` shows without a leading underscore, modules left out) in the
installed real library, then asks the conformance aliases (``shim/``) in a separate process which
of them resolve to one of our objects. Writes ``benchmarks/results/conformance_names.{json,md}``:
per module the count present and the names missing.

    hatch run bench:conformance-names
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
MODULES = [
    "tensordict",
    "tensordict.nn",
    "torchrl.envs",
    "torchrl.envs.transforms",
    "torchrl.data",
    "torchrl.modules",
    "torchrl.objectives",
    "torchrl.objectives.value",
    "torchrl.collectors",
    "torchrl.trainers",
]

_PROBE = """
import json, sys
import _conformance_alias as alias
import importlib
names = json.loads(sys.stdin.read())
def ours(proxy, name):
    try:
        return not isinstance(getattr(proxy, name), alias._MissingMeta)
    except Exception:  # our module fails to provide it
        return False
out = {}
for module, public in names.items():
    proxy = importlib.import_module(module)
    out[module] = [n for n in public if ours(proxy, n)]
print(json.dumps(out))
"""


def public_names(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    names = [n for n in (getattr(module, "__all__", None) or dir(module)) if not n.startswith("_")]
    return sorted(n for n in names if not isinstance(getattr(module, n, None), types.ModuleType))


def main() -> None:
    upstream = {m: public_names(m) for m in MODULES}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "shim"), os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], input=json.dumps(upstream), env=env, capture_output=True, text=True
    )
    if probe.returncode != 0:
        raise RuntimeError(f"the alias probe failed:\n{probe.stderr[-3000:]}")
    present = json.loads(probe.stdout)
    versions = {lib: importlib.import_module(lib).__version__ for lib in ("tensordict", "torchrl")}
    report = {
        "versions": versions,
        "date": time.strftime("%Y-%m-%d"),
        "modules": {
            m: {
                "public": len(upstream[m]),
                "present": len(present[m]),
                "missing": sorted(set(upstream[m]) - set(present[m])),
            }
            for m in MODULES
        },
    }
    (RESULTS / "conformance_names.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = [
        f"# Public names of tensordict {versions['tensordict']} and TorchRL {versions['torchrl']} under our imports",
        "",
        f"`hatch run bench:conformance-names`, {report['date']}. Present: the name resolves, through the",
        "conformance aliases (benchmarks/conformance/shim), to one of our objects.",
        "",
        "| module | public names | present |",
        "|---|---|---|",
    ]
    lines += [f"| `{m}` | {r['public']} | {r['present']} |" for m, r in report["modules"].items()]
    for m, r in report["modules"].items():
        if r["missing"]:
            lines += [
                "",
                f"## `{m}`: not provided ({len(r['missing'])})",
                "",
                ", ".join(f"`{n}`" for n in r["missing"]),
            ]
    (RESULTS / "conformance_names.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: 18 + len(MODULES)]))


if __name__ == "__main__":
    main()
