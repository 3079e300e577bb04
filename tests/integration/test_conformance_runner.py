"""benchmarks/conformance/: the import aliases and the runner, on a small upstream-like folder.

The aliases must resolve the peers' names to our objects (the same objects, not copies), turn a
missing public name into a placeholder that fails only where it is used (and is counted), stub the
peers' process-global switches, and refuse private names unless mapped. The runner must copy the
tests out of the upstream folder, run them, and report per file and class what passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "benchmarks" / "conformance" / "shim"
sys.path.insert(0, str(ROOT / "benchmarks" / "conformance"))

import run as conformance  # noqa: E402


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SHIM), "CONFORMANCE_MISSING_OUT": str(tmp_path / "missing")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=300
    )


def test_aliases_resolve_to_our_objects_and_placeholders_fail_where_used(tmp_path):
    proc = _python(
        """
        import tdict, tdict.nn, tdict.specs, rl_replay, rl_objectives
        import tensordict
        from tensordict import TensorDict, TensorDictStore
        from tensordict.nn import TensorDictModule
        from tensordict._torch_func import _stack
        from tensordict._td import _private_helper
        from tensordict.utils import set_lazy_legacy, lazy_legacy
        from torchrl.data import Composite, ReplayBuffer
        from torchrl.objectives import DQNLoss
        assert TensorDict is tdict.TensorDict and TensorDictModule is tdict.nn.TensorDictModule
        assert Composite is tdict.specs.Composite and ReplayBuffer is rl_replay.ReplayBuffer
        assert DQNLoss is rl_objectives.DQNLoss and _stack is tdict.stack
        assert not isinstance(TensorDict(), TensorDictStore)
        try:
            TensorDictStore(a=1)
        except NotImplementedError as err:
            assert "tensordict.TensorDictStore" in str(err), err
        else:
            raise AssertionError("a placeholder was called without raising")
        try:
            list(TensorDictStore)  # no endless iteration through __getitem__
        except NotImplementedError as err:
            assert "(iterated)" in str(err), err
        assert TensorDictStore["a"] is TensorDictStore  # a generic base at import
        try:
            _private_helper()
        except NotImplementedError as err:
            assert "tensordict._td._private_helper" in str(err), err
        @set_lazy_legacy(True)
        def f():
            return 3
        with set_lazy_legacy(True):
            assert f() == 3 and lazy_legacy() is False
        print("ok")
        """,
        tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
    counts: dict = {}
    for part in tmp_path.glob("missing.*.json"):
        counts.update(json.loads(part.read_text()))
    assert counts == {"tensordict.TensorDictStore": 2, "tensordict._td._private_helper": 1}


def test_runner_reports_each_file_and_class(tmp_path):
    upstream = tmp_path / "upstream"
    (upstream / "test" / "tensordict").mkdir(parents=True)
    (upstream / "test" / "artifacts").mkdir()
    (upstream / "test" / "conftest.py").write_text("")
    (upstream / "test" / "_utils_internal.py").write_text("from tensordict import TensorDict\n")
    (upstream / "test" / "tensordict" / "test_small.py").write_text(
        textwrap.dedent(
            """
            import torch
            from _utils_internal import TensorDict
            from tensordict import TensorDictStore
            from tensordict._td import _hidden


            class TestSmall:
                def test_sum(self):
                    assert TensorDict(a=torch.ones(3), batch_size=[3]).sum()["a"] == 3

                def test_missing(self):
                    TensorDictStore()

                def test_private(self):
                    _hidden()


            def test_wrong():
                assert TensorDict().batch_size == (1,)
            """
        )
    )
    out = tmp_path / "conformance.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "conformance" / "run.py"),
            "tensordict",
            "--upstream",
            str(upstream),
            "--files",
            "test/tensordict/test_small.py",
            "--libs",
            "ours",
            "--out",
            str(out),
            "--cache",
            str(tmp_path / "cache"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (upstream / "junit").exists() and not list(upstream.rglob("*.xml"))  # nothing written upstream
    summary = json.loads(out.read_text())["summary"]
    small = summary["files"]["test/tensordict/test_small.py"]
    assert small["classes"]["TestSmall"]["tests"] == 3 and small["classes"]["TestSmall"]["ours_passed"] == 1
    assert small["classes"]["(module level)"]["tests"] == 1 and small["classes"]["(module level)"]["ours_passed"] == 0
    assert dict(summary["missing_names"]) == {"tensordict.TensorDictStore": 1, "tensordict._td._hidden": 1}
    cached = json.loads((tmp_path / "cache" / "tensordict.json").read_text())
    outcomes = {
        k.rsplit("::", 1)[-1]: v[0] for k, v in cached["runs"]["ours"]["test/tensordict/test_small.py"]["tests"].items()
    }
    assert outcomes == {
        "test_sum": "passed",
        "test_missing": "failed",
        "test_private": "failed",
        "test_wrong": "failed",
    }
    assert "| **all files** | 4 |" in out.with_suffix(".md").read_text()


def test_summary_sets_private_failures_apart_and_counts_only_the_real_librarys_passes():
    def run(**tests):
        return {"f.py": {"tests": {f"f.C::{k}": v for k, v in tests.items()}, "status": 0, "seconds": 1.0}}

    msg_private = "NotImplementedError: conformance: our packages have no tensordict._td._x"
    msg_not_built = "NotImplementedError: conformance: our packages have no tensordict.TensorDictStore"
    by_lib = {
        "ours": run(
            a=["passed", ""],
            b=["failed", msg_private],
            c=["failed", "KeyError: 'k'"],
            d=["passed", ""],
            e=["failed", msg_not_built],
        ),
        "real": run(a=["passed", ""], b=["passed", ""], c=["passed", ""], d=["failed", "x"], e=["passed", ""]),
    }
    summary = conformance.summarise(by_lib)
    c = summary["files"]["f.py"]["classes"]["C"]
    assert c == {"tests": 5, "ours_passed": 2, "real_passed": 4, "both_passed": 1, "private": 1, "not_built": 1}
    assert dict(summary["causes"]) == {"KeyError: 'k'": 1, msg_not_built: 1}
    row = conformance._row("x", conformance.Counter(c))
    # 1 of 4 real passes; 1 of 3 without the private one; 1 of 2 without the not-built one too
    assert row == "| x | 5 | 4 | 2 | 25.0% | 1 | 0 | 33.3% | 1 | 50.0% |"


def test_singleton_dim_mixes_count_as_deliberate_and_nothing_else():
    reason = "per-step scalars (reward, done, value, advantage, log-prob) have no trailing singleton dim"
    pattern = next(p for p, why in conformance.DELIBERATE if why == reason)
    mixes = [
        "ValueError: GAE: ('next', 'reward') has shape (2, 4, 1) but 'state_value' has shape (2, 4) (batch_size (2, 4));",
        "ValueError: TD0Estimator: ('next', 'chosen_action_value') has shape (2,) but ('next', 'reward') has shape (2, 1);",
        "ValueError: SACLoss: 'x' has shape (16, 1), expected (16,) (batch_size (16,)); per-step scalars",
        "ValueError: MultiAgentGAE: reward of shape (2, 4, 1) must have the values' shape (2, 4) (per agent)",
        "ValueError: DQNLoss: ('next', 'reward') has shape (1,) but ('next', 'chosen_action_value') has shape ();",
    ]
    others = [
        "ValueError: ClipPPOLoss: 'a' has shape (2,) but 'advantage' has shape (2, 8, 7, 1);",
        "ValueError: X: 'a' has shape (2, 5) but 'b' has shape (2, 1);",
        "ValueError: X: 'a' has shape (3, 1) but 'b' has shape (2,);",
    ]
    assert all(pattern.search(m) for m in mixes)
    assert not any(pattern.search(m) for m in others)


def test_env_flag_and_default_shape_patterns_count_as_deliberate_and_nothing_else():
    def pattern(reason: str):
        return next(p for p, why in conformance.DELIBERATE if why == reason)

    flags = pattern("an env's done flags and reward are per-step scalars: no trailing singleton dim")
    assert flags.search(
        "ValueError: TransformedEnv._step output 'done': expected shape [] and dtype torch.bool (from the spec), "
        "got shape [1] and dtype torch.bool."
    )
    assert flags.search(
        "ValueError: X._step output 'reward': expected shape [2] and dtype torch.float32 (from the specs), "
        "got shape [2, 1] and dtype torch.float32."
    )
    for other in (
        "ValueError: X._step output 'reward': expected shape [2] and dtype torch.float32 (from the spec), got shape [21]",
        "ValueError: X._step output 'obs': expected shape [] and dtype torch.float32 (from the spec), got shape [1]",
        "ValueError: X._step output 'done': expected shape [2] and dtype torch.bool (from the spec), got shape [3, 1]",
    ):
        assert not flags.search(other), other
    default = pattern(
        "Unbounded() and NonTensor() default to shape () (TorchRL: (1,)); per-step scalars have no trailing dim"
    )
    assert default.search("assert torch.Size([]) == torch.Size([1])")
    assert not default.search("assert torch.Size([2]) == torch.Size([2, 1])")
    assert not default.search("assert torch.Size([]) == torch.Size([3])")


def test_switch_read_back_counts_as_deliberate_and_nothing_else():
    reason = "no process-global behaviour switches (the runner's stubs report our one behaviour)"
    pattern = next(p for p, why in conformance.DELIBERATE if why == reason)
    assert pattern.search("assert False\n +  where False = get_defaults_to_none()")
    assert pattern.search("assert False\n +  where False = capture_non_tensor_stack()")
    assert pattern.search(
        "AssertionError: assert False is None\n +  where False = capture_non_tensor_stack(allow_none=True)"
    )
    assert not pattern.search("assert False\n +  where False = is_memmap()")
    assert not pattern.search("assert False\n +  where False = get_defaults_to_none_of_mine()")


def test_objectives_aliases_reach_the_functional_estimators(tmp_path):
    proc = _python(
        """
        import rl_objectives.value.functional as ours
        from torchrl.objectives.value.functional import vec_generalized_advantage_estimate
        from tensordict.nn import set_composite_lp_aggregate
        assert vec_generalized_advantage_estimate is ours.vec_generalized_advantage_estimate
        setter = set_composite_lp_aggregate(False)
        setter.set()
        setter.unset()  # the switch stubs undo nothing, without failing
        print("ok")
        """,
        tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
