"""Key-addressed module overhead: ``tdict.nn`` vs ``tensordict.nn`` vs calling the module directly.

Usage::

    python benchmarks/bench_nn.py [--quick] [--out PATH] [--threads N]

Same method as ``bench_tdict.py`` (one process, interleaved rounds, paired medians). The floor
("plain") calls the wrapped ``nn.Module`` on the tensor itself; a TensorDictModule's overhead is
its time minus that floor. Targets (issue 3): overhead at most 5 µs, at least 5x faster than
tensordict's TensorDictModule on the identity module, and a 3-module TensorDictSequential costing
at most 3x a single module's overhead.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
from functools import partial
from pathlib import Path
from types import SimpleNamespace as NS

import torch
from torch import nn

from _harness import Comparison, Impl, Workload, render, run_all, run_config, summarize, write_report
from bench_tdict import environment, load_impls

HERE = Path(__file__).resolve().parent
BATCH, FEATURES = 32, 8


def _nn_of(impl: Impl):
    """``tdict.nn`` or ``tensordict.nn``: the package that defines the implementation's TensorDict."""
    return importlib.import_module(impl.TensorDict.__module__.split(".")[0] + ".nn")


def _identity() -> nn.Module:
    return nn.Identity()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.Tanh(), nn.Linear(64, 64))


def s_module(make_net, impl: Impl) -> NS:
    net = make_net()
    x = torch.randn(BATCH, FEATURES, generator=torch.Generator().manual_seed(1))  # the same input for every impl
    if impl.kind == "plain":
        return NS(net=net, x=x)
    mod = _nn_of(impl).TensorDictModule(net, in_keys=["obs"], out_keys=["out"])
    return NS(mod=mod, td=impl.TensorDict({"obs": x}, batch_size=[BATCH]))


def s_sequence(impl: Impl) -> NS:
    nets, x = [_identity() for _ in range(3)], torch.randn(BATCH, FEATURES, generator=torch.Generator().manual_seed(1))
    if impl.kind == "plain":
        return NS(nets=nets, x=x)
    m = _nn_of(impl)
    keys = ["obs", "h1", "h2", "out"]
    seq = m.TensorDictSequential(
        *(m.TensorDictModule(n, in_keys=[keys[i]], out_keys=[keys[i + 1]]) for i, n in enumerate(nets))
    )
    return NS(mod=seq, td=impl.TensorDict({"obs": x}, batch_size=[BATCH]))


def _three(nets, x):
    return nets[2](nets[1](nets[0](x)))


def output(ctx: NS, out):
    return out if isinstance(out, torch.Tensor) else out["out"]


# fmt: off
WORKLOADS = [
    Workload("TensorDictModule(identity)", "nn", partial(s_module, _identity),
             td=lambda c: partial(c.mod, c.td), plain=lambda c: partial(c.net, c.x), observe=output),
    Workload(f"TensorDictModule(MLP 2x64) on [{BATCH}, {FEATURES}]", "nn", partial(s_module, _mlp),
             td=lambda c: partial(c.mod, c.td), plain=lambda c: partial(c.net, c.x), observe=output),
    Workload("TensorDictSequential of 3 identity modules", "nn", s_sequence,
             td=lambda c: partial(c.mod, c.td), plain=lambda c: partial(_three, c.nets, c.x), observe=output),
]
# fmt: on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "nn.json"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = run_config(args.quick)
    impls, origin = load_impls({"ours", "tensordict", "plain"})
    env = environment(impls, origin)
    print(
        f"torch {env['torch']}, tensordict {env['tensordict']}, tdict {env['tdict']}; {torch.get_num_threads()} thread(s)\n",
        flush=True,
    )
    results = run_all(WORKLOADS, impls, cfg, reference="tensordict")
    cmp = Comparison(
        "ours",
        "tensordict",
        "plain",
        {"ours": "ours", "tensordict": "tensordict", "plain": "module call"},
        max_over_floor=float("inf"),
    )
    rows, summary = summarize(results, cmp)
    print("\n" + render(rows, summary, cmp))

    med = {r["name"]: r["median_us"] for r in rows}
    single, mlp, seq = (med[w.name] for w in WORKLOADS)
    overhead = {
        "identity_us": single["ours"] - single["plain"],
        "mlp_us": mlp["ours"] - mlp["plain"],
        "sequence_over_single": (seq["ours"] - seq["plain"]) / (single["ours"] - single["plain"]),
        "identity_speedup_vs_tensordict": rows[0]["speedup_vs_peer"],
    }
    checks = {
        "overhead <= 5 us (identity, MLP)": max(overhead["identity_us"], overhead["mlp_us"]) <= 5.0,
        ">= 5x faster than tensordict (identity)": (overhead["identity_speedup_vs_tensordict"] or 0) >= 5.0,
        "sequence of 3 <= 3x one module's overhead": overhead["sequence_over_single"] <= 3.0,
    }
    print(
        f"\noverhead over the module call: identity {overhead['identity_us']:.2f} µs, MLP {overhead['mlp_us']:.2f} µs; "
        f"3-module sequence = {overhead['sequence_over_single']:.2f}x one module's overhead; "
        f"identity {overhead['identity_speedup_vs_tensordict']:.2f}x faster than tensordict"
    )
    for name, ok in checks.items():
        print(f"  {'met' if ok else 'NOT MET'}: {name}")
    report = {
        "benchmark": "nn",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "overhead": overhead,
        "targets_met": checks,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
