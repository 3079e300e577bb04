"""Timing, cross-checking and reporting shared by the benchmark scripts.

Method (see README.md): every implementation of a workload is set up from identical seeded data,
run once and cross-checked against the peer, warmed up, calibrated to a number of calls per sample,
then sampled with the implementations interleaved (the order rotates each round). The reported
figure is the median per-call time; ratios are medians of per-round (paired) ratios. Ops that need
fresh state per call (``prepare``) are timed one call at a time, ``prepare`` outside the timing.
"""

from __future__ import annotations

import gc
import json
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

Op = Callable[[], Any]


@dataclass(frozen=True)
class Impl:
    """One implementation under test; ``kind`` selects which op of a workload it runs."""

    name: str  # key in results: "ours", "tensordict", "plain"
    label: str  # table heading
    kind: str  # "td" (TensorDict API) or "plain" (dict-of-tensors baseline)
    wrap: Callable[[dict, torch.Size], Any]  # nested dict of tensors -> container
    TensorDict: Any = None
    version: str | None = None


@dataclass(frozen=True)
class Workload:
    """A named operation.

    ``setup(impl)`` builds the inputs (untimed) and returns a context; ``td(ctx)`` / ``plain(ctx)``
    return a zero-argument callable that performs the op once. ``observe(ctx, out)`` returns what is
    cross-checked between implementations (default: the op's result). ``prepare(ctx)`` runs before
    every timed call, untimed; ``teardown(ctx)`` runs once at the end.
    """

    name: str
    group: str
    setup: Callable[[Impl], Any]
    td: Callable[[Any], Op]
    plain: Callable[[Any], Op]
    note: str = ""
    observe: Callable[[Any, Any], Any] = lambda ctx, out: out
    prepare: Callable[[Any], None] | None = None
    teardown: Callable[[Any], None] | None = None

    def op(self, impl: Impl, ctx: Any) -> Op:
        return (self.td if impl.kind == "td" else self.plain)(ctx)


@dataclass(frozen=True)
class Config:
    samples: int
    target_sample_s: float  # wall time of one sample (calls are batched up to this)
    warmup_s: float
    max_number: int = 1000
    fast_op_s: float = 50e-6  # ops faster than this run at least `min_fast_number` calls per sample
    min_fast_number: int = 100


def run_config(quick: bool, samples: int | None = None) -> Config:
    """The sampling plan every benchmark script uses: ``--quick`` (< 1 minute) or the full run."""
    cfg = (
        Config(samples=7, target_sample_s=0.002, warmup_s=0.02)
        if quick
        else Config(samples=41, target_sample_s=0.005, warmup_s=0.1)
    )
    return Config(samples=samples, target_sample_s=cfg.target_sample_s, warmup_s=cfg.warmup_s) if samples else cfg


def module_versions(*names: str) -> dict[str, str | None]:
    """``{name: __version__}`` of each importable module (``None`` when it is absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 (a peer may be missing from this environment)
            versions[name] = None
    return versions


def import_ours(*modules: str) -> list:
    """Imports our packages ``modules`` (``"rl_envs"``...); where they are not installed (a bare checkout),
    from the checkout's sources, ``tdict``'s included."""
    import importlib

    try:
        return [importlib.import_module(m) for m in modules]
    except ImportError:
        packages = Path(__file__).resolve().parents[1] / "packages"
        sys.path[:0] = [str(packages / folder / "src") for folder in ("tdict", *(m.replace("_", "-") for m in modules))]
        return [importlib.import_module(m) for m in modules]


def machine_info(impls: list[Impl], *modules: str, **extra: Any) -> dict:
    """What a report says about where it ran: Python, platform, CPUs, torch and its threads, and the
    versions of the implementations and of ``modules``; ``extra`` entries are added as given."""
    import os
    import platform

    versions = {i.name: i.version for i in impls if i.version} | module_versions(*modules)
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "versions": versions,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        **extra,
    }


def write_report(path: str | Path, report: dict, table: str | None = None) -> None:
    """Save a report as JSON (and ``table``, the printed text, beside it as ``<stem>_table.txt``) and
    say where (relative to the repository when inside it)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    if table is not None:
        out.with_name(out.stem + "_table.txt").write_text(table + "\n")
    repo = Path(__file__).resolve().parent.parent
    print(f"\nwrote {out.resolve().relative_to(repo) if out.resolve().is_relative_to(repo) else out}")


@dataclass
class Result:
    workload: Workload
    number: dict[str, int] = field(default_factory=dict)
    samples_s: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    mismatches: dict[str, str] = field(default_factory=dict)

    def median_us(self, name: str) -> float | None:
        s = self.samples_s.get(name)
        if not s or name in self.errors:
            return None
        return statistics.median(s) * 1e6

    def paired_ratio(self, num: str, den: str) -> float | None:
        """Median over rounds of num_time / den_time. Both were sampled in the same round, so drift
        that hits a whole round cancels; this is steadier than a ratio of the two medians."""
        a, b = self.samples_s.get(num), self.samples_s.get(den)
        if not a or not b or len(a) != len(b) or {num, den} & (self.errors.keys() | self.mismatches.keys()):
            return None
        return statistics.median(x / y for x, y in zip(a, b, strict=True))


# ----------------------------------------------------------------------------- checking


def canon(x: Any) -> Any:
    """Containers (TensorDict, dict, list) to plain dicts/lists so implementations compare."""
    if isinstance(x, torch.Tensor) or x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    items = getattr(x, "items", None)
    if callable(items):
        return {k: canon(v) for k, v in items()}
    raise TypeError(f"cannot compare a {type(x).__name__}")


def diff(a: Any, b: Any, path: str = "") -> str | None:
    """First difference between two canonical values, or None."""
    where = path or "<root>"
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{where}: {type(a).__name__} vs {type(b).__name__}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{where}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        return None if torch.equal(a, b) else f"{where}: values differ"
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where}: keys {sorted(a)} vs {sorted(b)}"
        return next((d for k in a if (d := diff(a[k], b[k], f"{path}/{k}"))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: length {len(a)} vs {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b, strict=True)) if (d := diff(x, y, f"{path}[{i}]"))), None)
    return None if a == b else f"{where}: {a!r} vs {b!r}"


# ----------------------------------------------------------------------------- timing


def _measure(fn: Op, number: int, prepare: Callable[[], None] | None) -> float:
    """Seconds per call."""
    if prepare is not None:
        prepare()
        t0 = perf_counter()
        fn()
        return perf_counter() - t0
    calls = repeat(None, number)
    t0 = perf_counter()
    for _ in calls:
        fn()
    return (perf_counter() - t0) / number


def _calibrate(fn: Op, prepare: Callable[[], None] | None, cfg: Config) -> int:
    """Warms up, then picks how many calls one sample makes."""
    n, t0 = 0, perf_counter()
    while n < 3 or perf_counter() - t0 < cfg.warmup_s:
        if prepare is not None:
            prepare()
        fn()
        n += 1
    if prepare is not None:
        return 1
    per_call = min(_measure(fn, max(1, n // 10), None) for _ in range(3))
    number = max(1, min(cfg.max_number, math.ceil(cfg.target_sample_s / max(per_call, 1e-9))))
    if per_call < cfg.fast_op_s:
        number = max(number, cfg.min_fast_number)
    return number


def harness_overhead_ns(repeats: int = 7, number: int = 100_000) -> float:
    """Per-call cost of the timing loop itself (calling a no-op); included in every figure."""
    noop = lambda: None  # noqa: E731
    return min(_measure(noop, number, None) for _ in range(repeats)) * 1e9


def _error(e: Exception) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:200]


def run_workload(w: Workload, impls: list[Impl], cfg: Config, reference: str) -> Result:
    res = Result(w)
    contexts: list[Any] = []
    live: dict[str, tuple[Op, Callable[[], None] | None]] = {}
    observed: dict[str, Any] = {}
    try:
        for impl in impls:  # an unfinished implementation must not stop the run: record and skip it
            try:
                ctx = w.setup(impl)
                contexts.append(ctx)
                fn = w.op(impl, ctx)
                prepare = (lambda c=ctx: w.prepare(c)) if w.prepare else None
                if prepare:
                    prepare()
                observed[impl.name] = canon(w.observe(ctx, fn()))
                res.number[impl.name] = _calibrate(fn, prepare, cfg)
                res.samples_s[impl.name] = []
                live[impl.name] = (fn, prepare)
            except Exception as e:
                res.errors[impl.name] = _error(e)

        ref = reference if reference in observed else next(iter(observed), None)
        for name, value in observed.items():
            if name != ref and (d := diff(value, observed[ref])):
                res.mismatches[name] = f"vs {ref}: {d}"

        order = list(live)
        gc.collect()
        gc.freeze()  # long-lived objects (torch, inputs) leave the GC's scans; per-call garbage still counts
        try:
            for i in range(cfg.samples):
                k = i % max(len(order), 1)
                for name in order[k:] + order[:k]:
                    fn, prepare = live[name]
                    try:
                        res.samples_s[name].append(_measure(fn, res.number[name], prepare))
                    except Exception as e:
                        res.errors[name] = _error(e)
                        order.remove(name)
        finally:
            gc.unfreeze()
    finally:
        if w.teardown:
            for ctx in contexts:
                w.teardown(ctx)
    return res


def run_all(workloads: list[Workload], impls: list[Impl], cfg: Config, reference: str) -> list[Result]:
    results = []
    for i, w in enumerate(workloads, 1):
        t0 = perf_counter()
        results.append(run_workload(w, impls, cfg, reference))
        print(f"  [{i:2d}/{len(workloads)}] {w.name:<34} {perf_counter() - t0:5.1f}s", file=sys.stderr, flush=True)
    return results


# ----------------------------------------------------------------------------- reporting


def geomean(xs: list[float]) -> float | None:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def fmt_us(x: float | None) -> str:
    if x is None:
        return "—"
    if x < 10:
        return f"{x:.2f}"
    if x < 1000:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def fmt_ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}x"


@dataclass(frozen=True)
class Comparison:
    """Names of the three roles in a report: the candidate, the peer it must beat, the floor."""

    ours: str
    peer: str
    floor: str
    labels: dict[str, str]
    max_over_floor: float = 1.5
    min_geomean_speedup: float | None = 2.0  # None: no target on the geometric mean


def summarize(results: list[Result], cmp: Comparison) -> tuple[list[dict], dict]:
    """Per-workload rows and the summary, as JSON-ready dicts."""
    rows = []
    for r in results:
        med = {n: r.median_us(n) for n in (cmp.ours, cmp.peer, cmp.floor)}
        speedup = r.paired_ratio(cmp.peer, cmp.ours)  # None where either side errored or is wrong
        over_floor = r.paired_ratio(cmp.ours, cmp.floor)
        flags = [f"{n}: error: {e}" for n, e in r.errors.items()]
        flags += [f"{n}: WRONG RESULT {m}" for n, m in r.mismatches.items()]
        if speedup is not None and speedup < 1:
            flags.append(f"slower than {cmp.labels[cmp.peer]} ({speedup:.3f}x)")
        if over_floor is not None and over_floor > cmp.max_over_floor:
            flags.append(f"{over_floor:.2f}x {cmp.labels[cmp.floor]} (> {cmp.max_over_floor}x)")
        rows.append(
            {
                "name": r.workload.name,
                "group": r.workload.group,
                "note": r.workload.note,
                "median_us": med,
                "calls_per_sample": dict(r.number),
                "samples_us": {n: [round(s * 1e6, 4) for s in v] for n, v in r.samples_s.items()},
                "speedup_vs_peer": speedup,
                "ours_over_floor": over_floor,
                "peer_over_floor": r.paired_ratio(cmp.peer, cmp.floor),
                "errors": dict(r.errors),
                "mismatches": dict(r.mismatches),
                "flags": flags,
            }
        )
    speedups = [x["speedup_vs_peer"] for x in rows if x["speedup_vs_peer"]]
    overs = [x["ours_over_floor"] for x in rows if x["ours_over_floor"]]
    peer_overs = [x["peer_over_floor"] for x in rows if x["peer_over_floor"]]
    summary = {
        "geomean_speedup_vs_peer": geomean(speedups),
        "geomean_ours_over_floor": geomean(overs),
        "geomean_peer_over_floor": geomean(peer_overs),
        "workloads": len(rows),
        "workloads_compared": len(speedups),
        "slower_than_peer": [x["name"] for x in rows if x["speedup_vs_peer"] and x["speedup_vs_peer"] < 1],
        "over_floor_limit": [
            x["name"] for x in rows if x["ours_over_floor"] and x["ours_over_floor"] > cmp.max_over_floor
        ],
        "errors_or_mismatches": [x["name"] for x in rows if x["errors"] or x["mismatches"]],
    }
    return rows, summary


def render(rows: list[dict], summary: dict, cmp: Comparison) -> str:
    o, p, f = (cmp.labels[n] for n in (cmp.ours, cmp.peer, cmp.floor))
    head = ["workload", f"{o} (µs)", f"{p} (µs)", f"{f} (µs)", f"speed-up vs {p}", f"{o}/{f}", f"{p}/{f}"]
    body = [
        [
            x["name"],
            fmt_us(x["median_us"][cmp.ours]),
            fmt_us(x["median_us"][cmp.peer]),
            fmt_us(x["median_us"][cmp.floor]),
            fmt_ratio(x["speedup_vs_peer"]),
            fmt_ratio(x["ours_over_floor"]),
            fmt_ratio(x["peer_over_floor"]),
        ]
        for x in rows
    ]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]

    def line(cells: list[str]) -> str:  # first column left-aligned, numbers right-aligned
        padded = [c.rjust(w) for c, w in zip(cells, widths, strict=True)]
        return "  ".join([cells[0].ljust(widths[0]), *padded[1:]])

    out = [line(head), "  ".join("-" * w for w in widths), *map(line, body), ""]
    target = f" (target >= {cmp.min_geomean_speedup}x)" if cmp.min_geomean_speedup else ""
    out.append(
        f"geometric mean speed-up vs {p}: {fmt_ratio(summary['geomean_speedup_vs_peer'])}"
        f" over {summary['workloads_compared']}/{summary['workloads']} workloads{target}"
    )
    floor_target = f" (target <= {cmp.max_over_floor}x per workload)" if math.isfinite(cmp.max_over_floor) else ""
    out.append(
        f"geometric mean {o}/{f}: {fmt_ratio(summary['geomean_ours_over_floor'])}{floor_target};"
        f" {p}/{f}: {fmt_ratio(summary['geomean_peer_over_floor'])}"
    )
    flagged = [x for x in rows if x["flags"]]
    out.append("flags:" if flagged else "flags: none")
    out += [f"  {x['name']}: " + "; ".join(x["flags"]) for x in flagged]
    return "\n".join(out)
