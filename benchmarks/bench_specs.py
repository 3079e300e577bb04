"""Spec sampling: ``tdict.specs`` vs TorchRL 0.14's specs vs building the same dict of tensors by hand.

Usage::

    python benchmarks/bench_specs.py [--quick] [--out PATH] [--threads N]

Same method as ``bench_tdict.py``. The workload is a 5-key ``Composite`` with batch ``[16]`` (a
continuous observation, a bounded image-like entry, a one-hot action, a scalar reward and a boolean
done flag). Target (issue 3): ``rand()`` and ``zero()`` at least 3x faster than TorchRL's. Results
are random, so implementations are cross-checked on keys, shapes and dtypes.
"""

from __future__ import annotations

import argparse
import datetime as dt
from functools import partial
from pathlib import Path
from types import SimpleNamespace as NS

import torch

from _harness import Comparison, Impl, Workload, render, run_all, run_config, summarize, write_report

HERE = Path(__file__).resolve().parent
TDICT_SRC = HERE.parent / "packages" / "tdict" / "src"
BATCH = (16,)


def build(specs, td_class) -> object:
    """The 5-key composite with a given spec module (tdict.specs or torchrl.data)."""
    return specs.Composite(
        observation=specs.Unbounded(shape=(*BATCH, 8)),
        pixels=specs.Bounded(low=0, high=1, shape=(*BATCH, 3, 8, 8)),
        action=specs.OneHot(4, shape=(*BATCH, 4)),
        reward=specs.Unbounded(shape=BATCH),
        done=specs.Categorical(2, shape=BATCH, dtype=torch.bool),
        shape=BATCH,
    )


def by_hand(zero: bool) -> dict:
    """What the composite produces, written directly with torch."""
    fill = torch.zeros if zero else torch.randn
    action = torch.zeros(*BATCH, 4, dtype=torch.bool)  # OneHot's default dtype
    if not zero:
        action.scatter_(-1, torch.randint(0, 4, (*BATCH, 1)), True)
    return {
        "observation": fill(*BATCH, 8),
        "pixels": torch.zeros(*BATCH, 3, 8, 8) if zero else torch.rand(*BATCH, 3, 8, 8),
        "action": action,
        "reward": fill(*BATCH),
        "done": torch.zeros(BATCH, dtype=torch.bool) if zero else torch.randint(0, 2, BATCH).bool(),
    }


def layout(ctx: NS, out) -> dict:
    return {k: [list(out[k].shape), str(out[k].dtype)] for k in ("observation", "pixels", "action", "reward", "done")}


def load() -> list[Impl]:
    impls = []
    try:
        import tdict.specs as ours
    except ImportError:
        import sys

        sys.path.insert(0, str(TDICT_SRC))
        import tdict.specs as ours
    impls.append(Impl("ours", "tdict.specs", "td", wrap=None, TensorDict=ours))
    try:
        import torchrl.data as peer

        impls.append(
            Impl("torchrl", "torchrl", "td", wrap=None, TensorDict=peer, version=__import__("torchrl").__version__)
        )
    except ImportError as e:
        print(f"note: skipping torchrl ({e})")
    impls.append(Impl("plain", "by hand", "plain", wrap=None))
    return impls


def setup(impl: Impl) -> NS:
    return NS(spec=build(impl.TensorDict, None)) if impl.kind == "td" else NS()


# fmt: off
WORKLOADS = [
    Workload("Composite.rand() 5 keys, batch [16]", "specs", setup,
             td=lambda c: c.spec.rand, plain=lambda c: partial(by_hand, False), observe=layout),
    Workload("Composite.zero() 5 keys, batch [16]", "specs", setup,
             td=lambda c: c.spec.zero, plain=lambda c: partial(by_hand, True), observe=layout),
]
# fmt: on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "specs.json"))
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = run_config(args.quick)
    impls = load()
    print(
        f"torch {torch.__version__}; {torch.get_num_threads()} thread(s); {', '.join(i.label for i in impls)}\n",
        flush=True,
    )
    results = run_all(WORKLOADS, impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "torchrl",
        "plain",
        {"ours": "tdict.specs", "torchrl": "torchrl", "plain": "by hand"},
        max_over_floor=float("inf"),
    )
    rows, summary = summarize(results, cmp)
    print("\n" + render(rows, summary, cmp))
    checks = {f"{r['name']}: >= 3x faster than torchrl": (r["speedup_vs_peer"] or 0) >= 3.0 for r in rows}
    for name, ok in checks.items():
        print(f"  {'met' if ok else 'NOT MET'}: {name}")
    report = {
        "benchmark": "specs",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "versions": {i.name: i.version for i in impls},
        "threads": torch.get_num_threads(),
        "targets_met": checks,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
