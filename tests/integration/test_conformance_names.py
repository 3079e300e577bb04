"""README lists every public TorchRL name in scope that our packages do not provide, with its reason."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "benchmarks" / "conformance"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_conformance_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


names = _load("names")
not_provided = _load("not_provided")
REPORT = json.loads((ROOT / "benchmarks" / "results" / "conformance_names.json").read_text())


def test_readme_shows_the_current_list_of_names_not_provided():
    readme = (ROOT / "README.md").read_text()
    section = names.readme_section(REPORT)
    assert section in readme, "README is stale: run `hatch run bench:conformance-names`"
    for module in names.TORCHRL_SCOPE:
        for name in REPORT["modules"][module]["missing"]:
            assert f"`{name}`" in section, name


def test_every_missing_name_falls_in_one_group():
    missing = {n for m in names.TORCHRL_SCOPE for n in REPORT["modules"][m]["missing"]}
    section = names.readme_section(REPORT)
    listed = [line for line in section.splitlines() if line.startswith("- **")]
    counted = sum(int(line.split("** (", 1)[1].split(")", 1)[0]) for line in listed)
    assert counted == len(missing)
    seen: set = set()
    for _, group in not_provided.REASONS:
        assert not (group & seen), f"listed under two reasons: {sorted(group & seen)}"
        seen |= group


def test_readme_block_rewrite():
    text = f"intro\n{names.README_START}\nold\n{names.README_END}\noutro\n"
    out = names.with_readme_section(text, f"{names.README_START}\nnew\n{names.README_END}")
    assert out == f"intro\n{names.README_START}\nnew\n{names.README_END}\noutro\n"
    with pytest.raises(ValueError, match="no .* block"):
        names.with_readme_section("no markers", "x")


def test_reason_for_known_and_unknown_names():
    assert "issue 17" in not_provided.reason_for("DreamerV3Loss")
    assert "micro-duck" in not_provided.reason_for("MicroDuckEnv")
    assert not_provided.reason_for("SomethingNew") == not_provided.NOT_BUILT_YET
