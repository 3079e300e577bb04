"""TensorDict micro-benchmarks: ours (``tdict``) vs ``tensordict`` vs plain nested dicts of tensors.

Usage::

    python benchmarks/bench_tdict.py [--quick] [--filter NAME[,NAME...]] [--out PATH] [--threads N]

All three implementations run in one process on identical seeded data; see README.md for the
method and the targets. ``tdict`` or ``tensordict`` that cannot be imported is skipped with a note.
"""

from __future__ import annotations

import argparse
import datetime as dt
import operator
import os
import platform
import shutil
import sys
import tempfile
from functools import partial
from pathlib import Path
from types import SimpleNamespace as NS

import torch

import _plain_dict as plain
from _harness import (
    Comparison,
    Impl,
    Workload,
    harness_overhead_ns,
    render,
    run_all,
    run_config,
    run_workload,
    summarize,
    write_report,
)

HERE = Path(__file__).resolve().parent
TDICT_SRC = HERE.parent / "packages" / "tdict" / "src"

# ----------------------------------------------------------------------------- data
# One environment step of a continuous-control task as a collector writes it (DESIGN.md §3):
# per-step scalars carry no trailing dim, s_{t+1}/r_t/done_{t+1} live under "next", plus a
# third level of episode statistics so that deep (depth-3) keys exist.
F32, BOOL, I64 = torch.float32, torch.bool, torch.int64
STEP = {
    "observation": ((17,), F32),
    "action": ((6,), F32),
    "loc": ((6,), F32),
    "scale": ((6,), F32),
    "sample_log_prob": ((), F32),
    "state_value": ((), F32),
    "done": ((), BOOL),
    "terminated": ((), BOOL),
    "truncated": ((), BOOL),
    "next": {
        "observation": ((17,), F32),
        "reward": ((), F32),
        "done": ((), BOOL),
        "terminated": ((), BOOL),
        "truncated": ((), BOOL),
        "info": {"episode_reward": ((), F32), "step_count": ((), I64)},
    },
}
UPDATE = {  # what a policy + env.step write back into a step
    "observation": STEP["observation"],
    "action": STEP["action"],
    "next": {"observation": STEP["next"]["observation"], "reward": STEP["next"]["reward"]},
}
BATCH = torch.Size([1000])  # a replay-buffer sample / a batch of transitions
N_ENVS, N_STEPS = 16, 100  # stack/unbind: a rollout of 100 steps of 16 vectorised envs
CAT_PARTS = 10  # cat: 10 chunks of 100 -> 1000
N_IDX = 256
DEEP = ("next", "info", "episode_reward")
MEMMAP_BYTES = 8 * 2**20


def flat_layout(n: int) -> dict:
    return {f"key{i:03d}": ((8,), F32) for i in range(n)}


def row_bytes(layout: dict) -> int:
    return sum(
        row_bytes(v) if isinstance(v, dict) else torch.Size(v[0]).numel() * v[1].itemsize for v in layout.values()
    )


def make_data(layout: dict, batch: tuple[int, ...] | torch.Size, seed: int = 0) -> dict:
    """Fresh tensors (never shared between implementations), identical for a given seed."""
    g = torch.Generator().manual_seed(seed)

    def build(node: dict) -> dict:
        out = {}
        for k, v in node.items():
            if isinstance(v, dict):
                out[k] = build(v)
                continue
            shape, dtype = (*batch, *v[0]), v[1]
            if dtype is BOOL:
                out[k] = torch.rand(shape, generator=g) < 0.1
            elif dtype.is_floating_point:
                out[k] = torch.randn(shape, generator=g, dtype=dtype)
            else:
                out[k] = torch.randint(0, 1000, shape, generator=g, dtype=dtype)
        return out

    return build(layout)


def container(impl: Impl, batch=BATCH, seed: int = 0, layout: dict = STEP):
    return impl.wrap(make_data(layout, batch, seed), torch.Size(batch))


def randn(*shape: int, seed: int = 2) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def rand_index(seed: int = 0) -> torch.Tensor:
    return torch.randperm(BATCH[0], generator=torch.Generator().manual_seed(seed))[:N_IDX]


def rand_mask(seed: int = 0) -> torch.Tensor:
    return torch.rand(BATCH, generator=torch.Generator().manual_seed(seed)) < 0.5


# ----------------------------------------------------------------------------- setups and checks


def s_td(impl: Impl, **extra) -> NS:
    return NS(impl=impl, td=container(impl), **extra)


def s_source(layout: dict):
    return lambda impl: NS(impl=impl, src=make_data(layout, BATCH))


def state(ctx: NS, out) -> object:  # for in-place ops: check the container, not the return value
    return ctx.td


def _leaves(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif hasattr(x, "items"):
        for v in x.values():
            yield from _leaves(v)


def one_storage(ctx: NS, out) -> tuple:
    return out, len({t.untyped_storage().data_ptr() for t in _leaves(out)}) == 1


def file_backed(ctx: NS, out) -> tuple:
    return out, all(t.untyped_storage().filename is not None for t in _leaves(out))


def sorted_keys(ctx: NS, out) -> list[str]:
    return sorted(k if isinstance(k, str) else "/".join(k) for k in out)


def s_memmap(impl: Impl) -> NS:
    batch = torch.Size([round(MEMMAP_BYTES / row_bytes(STEP))])
    return NS(impl=impl, src=container(impl, batch), root=tempfile.mkdtemp(prefix="tdict-bench-"), calls=0)


def p_memmap(ctx: NS) -> None:
    """A memmapped TensorDict cannot be memmapped again to another prefix (tensordict 0.14 raises),
    so every call gets an unmapped copy of the source and a new directory; the last one is removed."""
    if ctx.calls:
        shutil.rmtree(ctx.prefix, ignore_errors=True)
    ctx.calls += 1
    ctx.prefix = os.path.join(ctx.root, str(ctx.calls))
    ctx.fresh = ctx.src.clone() if ctx.impl.kind == "td" else plain.clone(ctx.src)


def add1(x: torch.Tensor) -> torch.Tensor:
    return x + 1


# ----------------------------------------------------------------------------- registry
# One workload per paragraph reads better than the formatter's one-argument-per-line.
# fmt: off
W = Workload
WORKLOADS: list[Workload] = [
    # construction: TensorDict(source, batch_size) from a (nested) dict of existing tensors
    W("construct flat 10 keys", "construct", s_source(flat_layout(10)),
      td=lambda c: partial(c.impl.TensorDict, c.src, batch_size=BATCH),
      plain=lambda c: partial(plain.from_dict, c.src, BATCH)),
    W("construct flat 100 keys", "construct", s_source(flat_layout(100)),
      td=lambda c: partial(c.impl.TensorDict, c.src, batch_size=BATCH),
      plain=lambda c: partial(plain.from_dict, c.src, BATCH)),
    W("construct nested 3 levels", "construct", s_source(STEP),
      td=lambda c: partial(c.impl.TensorDict, c.src, batch_size=BATCH),
      plain=lambda c: partial(plain.from_dict, c.src, BATCH),
      note="the 17-leaf step layout: root / next / next.info"),
    # single-key access
    W("get flat td.get(k)", "access", s_td,
      td=lambda c: partial(c.td.get, "observation"),
      plain=lambda c: partial(operator.getitem, c.td, "observation")),
    W("get flat td[k]", "access", s_td,
      td=lambda c: partial(operator.getitem, c.td, "observation"),
      plain=lambda c: partial(operator.getitem, c.td, "observation")),
    W("get nested depth 3", "access", s_td,
      td=lambda c: partial(c.td.get, DEEP),
      plain=lambda c: partial(plain.get, c.td, DEEP)),
    W("set flat", "access", lambda i: s_td(i, v=randn(*BATCH, 17)),
      td=lambda c: partial(c.td.set, "observation", c.v),
      plain=lambda c: partial(plain.set, c.td, "observation", c.v, BATCH), observe=state),
    W("set nested depth 3", "access", lambda i: s_td(i, v=randn(*BATCH)),
      td=lambda c: partial(c.td.set, DEEP, c.v),
      plain=lambda c: partial(plain.set, c.td, DEEP, c.v, BATCH), observe=state),
    W("keys(include_nested=True)", "access", s_td,
      td=lambda c: lambda: list(c.td.keys(include_nested=True)),
      plain=lambda c: lambda: list(plain.keys(c.td)), observe=sorted_keys),
    # indexing along the batch dim
    W("index int", "index", s_td,
      td=lambda c: partial(operator.getitem, c.td, 7),
      plain=lambda c: partial(plain.index, c.td, 7)),
    W("index slice", "index", s_td,
      td=lambda c: partial(operator.getitem, c.td, slice(100, 600)),
      plain=lambda c: partial(plain.index, c.td, slice(100, 600))),
    W(f"index {N_IDX} random (LongTensor)", "index", lambda i: s_td(i, idx=rand_index()),
      td=lambda c: partial(operator.getitem, c.td, c.idx),
      plain=lambda c: partial(plain.index, c.td, c.idx)),
    W("index bool mask", "index", lambda i: s_td(i, idx=rand_mask()),
      td=lambda c: partial(operator.getitem, c.td, c.idx),
      plain=lambda c: partial(plain.index, c.td, c.idx)),
    W(f"setitem td[idx] = td ({N_IDX})", "index",
      lambda i: s_td(i, idx=rand_index(), other=container(i, [N_IDX], seed=1)),
      td=lambda c: partial(operator.setitem, c.td, c.idx, c.other),
      plain=lambda c: partial(plain.setitem, c.td, c.idx, c.other), observe=state),
    # batch-shape ops
    W(f"torch.stack {N_STEPS} tds", "shape",
      lambda i: NS(tds=[container(i, [N_ENVS], seed=s) for s in range(N_STEPS)]),
      td=lambda c: partial(torch.stack, c.tds, 1),
      plain=lambda c: partial(plain.stack, c.tds, 1),
      note=f"{N_STEPS} steps of batch [{N_ENVS}] -> [{N_ENVS}, {N_STEPS}] (time is the last batch dim)"),
    W(f"unbind ({N_STEPS})", "shape", lambda i: NS(td=container(i, [N_ENVS, N_STEPS])),
      td=lambda c: partial(c.td.unbind, 1),
      plain=lambda c: partial(plain.unbind, c.td, 1),
      note=f"[{N_ENVS}, {N_STEPS}] along dim 1 -> {N_STEPS} x [{N_ENVS}]"),
    W(f"torch.cat {CAT_PARTS} tds", "shape",
      lambda i: NS(tds=[container(i, [BATCH[0] // CAT_PARTS], seed=s) for s in range(CAT_PARTS)]),
      td=lambda c: partial(torch.cat, c.tds, 0),
      plain=lambda c: partial(plain.cat, c.tds, 0)),
    # per-leaf ops
    W("apply(lambda x: x + 1)", "leaves", s_td,
      td=lambda c: partial(c.td.apply, add1),
      plain=lambda c: partial(plain.apply, c.td, add1)),
    W("clone", "leaves", s_td, td=lambda c: c.td.clone, plain=lambda c: partial(plain.clone, c.td)),
    W("to('cpu')", "leaves", s_td,
      td=lambda c: partial(c.td.to, "cpu"),
      plain=lambda c: partial(plain.to, c.td, "cpu"),
      note="source has device=None, so this builds a new cpu container"),
    W("td + td", "leaves", lambda i: s_td(i, other=container(i, seed=1)),
      td=lambda c: partial(operator.add, c.td, c.other),
      plain=lambda c: partial(plain.add, c.td, c.other)),
    W("update (4 keys, 2 nested)", "keys",
      lambda i: s_td(i, other=container(i, seed=2, layout=UPDATE)),
      td=lambda c: partial(c.td.update, c.other),
      plain=lambda c: partial(plain.update, c.td, c.other, BATCH), observe=state),
    W("select 3 keys", "keys", s_td,
      td=lambda c: partial(c.td.select, "observation", "action", ("next", "reward")),
      plain=lambda c: partial(plain.select, c.td, "observation", "action", ("next", "reward"))),
    W("exclude 3 keys", "keys", s_td,
      td=lambda c: partial(c.td.exclude, "loc", "scale", ("next", "info")),
      plain=lambda c: partial(plain.exclude, c.td, "loc", "scale", ("next", "info"))),
    # storage
    W("memmap_ 8 MiB (fresh dir)", "storage", s_memmap,
      td=lambda c: lambda: c.fresh.memmap_(prefix=c.prefix),
      plain=lambda c: lambda: plain.memmap(c.fresh, c.prefix),
      observe=file_backed, prepare=p_memmap, teardown=lambda c: shutil.rmtree(c.root, ignore_errors=True),
      note=f"step layout, batch [{round(MEMMAP_BYTES / row_bytes(STEP))}]; one new directory per call. "
           "none of the three fsync (ours: fsync=True opts in); ours still commits metadata last, atomically"),
    W("consolidate()", "storage", s_td,
      td=lambda c: c.td.consolidate,
      plain=lambda c: partial(plain.consolidate, c.td), observe=one_storage),
]
# fmt: on


# ----------------------------------------------------------------------------- implementations


def _td_impl(name: str, label: str, module) -> Impl:
    TD = module.TensorDict
    return Impl(
        name,
        label,
        "td",
        wrap=lambda src, batch: TD(src, batch_size=batch),
        TensorDict=TD,
        version=getattr(module, "__version__", None),
    )


def _import_ours() -> tuple[object | None, str | None]:
    """tdict as installed, else from this checkout's source tree; (None, None) if neither imports."""
    try:
        import tdict
        from tdict import MemoryMappedTensor, TensorDict  # noqa: F401  (the API this benchmark assumes)

        return tdict, "installed"
    except Exception as e:
        first = f"{type(e).__name__}: {e}"
    for m in [m for m in sys.modules if m == "tdict" or m.startswith("tdict.")]:
        del sys.modules[m]
    sys.path.insert(0, str(TDICT_SRC))
    try:
        import tdict
        from tdict import MemoryMappedTensor, TensorDict  # noqa: F401, F811

        return tdict, "source tree (packages/tdict/src)"
    except Exception as e:
        sys.path.remove(str(TDICT_SRC))
        print(
            f"note: skipping ours, cannot import tdict ({first}; from the source tree: {type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return None, None


def _import_peer() -> object | None:
    try:
        import tensordict

        return tensordict
    except Exception as e:
        print(f"note: skipping tensordict, cannot import it ({type(e).__name__}: {e})", file=sys.stderr)
        return None


def load_impls(wanted: set[str]) -> tuple[list[Impl], dict]:
    """The implementations to run, in table order, and where each TensorDict package came from."""
    impls, origin = [], {}
    if "ours" in wanted and (mod := _import_ours())[0] is not None:
        impls.append(_td_impl("ours", "ours", mod[0]))
        origin["tdict"] = mod[1]
    if "tensordict" in wanted and (peer := _import_peer()) is not None:
        impls.append(_td_impl("tensordict", "tensordict", peer))
        origin["tensordict"] = "installed"
    if "plain" in wanted:
        impls.append(Impl("plain", "plain dict", "plain", wrap=plain.from_dict))
    return impls, origin


# ----------------------------------------------------------------------------- python call floor
class MinimalContainer:
    """The cheapest possible Python-level container: ``get`` and ``[]`` only index the dict.

    Any container whose accessors are Python methods pays at least this much per call; the plain
    dict row pays a single C call. Timing it beside ours shows how much of the gap is ours.
    """

    __slots__ = ("_d",)

    def __init__(self, entries: dict, batch_size: torch.Size) -> None:
        self._d = entries

    def get(self, key: str, default: object = None) -> object:
        return self._d[key]

    def __getitem__(self, key: str) -> object:
        return self._d[key]


CALL_FLOOR_WORKLOADS = ("get flat td.get(k)", "get flat td[k]")


def python_call_floor(workloads: list[Workload], impls: list[Impl], cfg) -> list[dict]:
    """Times the single-key accessors of ours, MinimalContainer and the plain dict, interleaved."""
    by_name = {i.name: i for i in impls}
    if "ours" not in by_name or "plain" not in by_name:
        return []
    floor = Impl("python_floor", "minimal Python class", "td", wrap=MinimalContainer)
    trio = [by_name["ours"], floor, by_name["plain"]]
    rows = []
    for w in workloads:
        if w.name not in CALL_FLOOR_WORKLOADS:
            continue
        res = run_workload(w, trio, cfg, reference="plain")
        rows.append(
            {
                "workload": w.name,
                "ours_us": res.median_us("ours"),
                "python_floor_us": res.median_us("python_floor"),
                "plain_us": res.median_us("plain"),
                "ours_over_python_floor": res.paired_ratio("ours", "python_floor"),
                "python_floor_over_plain": res.paired_ratio("python_floor", "plain"),
            }
        )
    return rows


def render_call_floor(rows: list[dict]) -> str:
    lines = ["single-key access against the cost of any Python-level method call (same run):"]
    for r in rows:
        lines.append(
            f"  {r['workload']:<20} ours {r['ours_us'] * 1e3:5.1f} ns, minimal Python class {r['python_floor_us'] * 1e3:5.1f} ns, "
            f"plain dict {r['plain_us'] * 1e3:5.1f} ns: ours/minimal {r['ours_over_python_floor']:.2f}x, "
            f"minimal/plain {r['python_floor_over_plain']:.2f}x"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- main


def environment(impls: list[Impl], origin: dict) -> dict:
    versions = {i.name: i.version for i in impls if i.kind == "td"}
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "tensordict": versions.get("tensordict"),
        "tdict": versions.get("ours"),
        "import_origin": origin,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer, shorter samples (< 1 minute)")
    ap.add_argument("--filter", default="", help="comma-separated substrings of workload names (case-insensitive)")
    ap.add_argument("--out", default=str(HERE / "results" / "tdict.json"), help="JSON output path")
    ap.add_argument("--samples", type=int, help="samples per workload and implementation (overrides the mode)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1; 0 = torch's default)")
    ap.add_argument(
        "--impls",
        default="ours,tensordict,plain",
        help="comma-separated subset of ours,tensordict,plain (e.g. to check that loading one "
        "implementation does not change another's timings)",
    )
    ap.add_argument("--list", action="store_true", help="list workload names and exit")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads > 0:  # 0 keeps torch's defaults
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set (e.g. main() called twice in one process)
            pass
    words = [w.strip().lower() for w in args.filter.split(",") if w.strip()]
    workloads = [w for w in WORKLOADS if not words or any(s in w.name.lower() for s in words)]
    if args.list or not workloads:
        print("\n".join(w.name for w in WORKLOADS) if args.list else f"no workload matches {args.filter!r}")
        return 0 if args.list else 2

    cfg = run_config(args.quick, args.samples)
    impls, origin = load_impls({s.strip() for s in args.impls.split(",")})
    env = environment(impls, origin)
    overhead = harness_overhead_ns()
    header = (
        f"torch {env['torch']}, tensordict {env['tensordict']}, tdict {env['tdict']}, "
        f"python {env['python']}, {env['platform']}\n"
        f"torch threads: {env['torch_num_threads']} (interop {env['torch_num_interop_threads']}); "
        f"{cfg.samples} samples, median per call; harness overhead {overhead:.0f} ns/call (included)\n"
        f"implementations: {', '.join(i.label for i in impls)}; {len(workloads)} workloads\n"
    )
    print(header, flush=True)

    results = run_all(workloads, impls, cfg, reference="tensordict")
    cmp = Comparison("ours", "tensordict", "plain", {"ours": "ours", "tensordict": "tensordict", "plain": "plain dict"})
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    call_floor = python_call_floor(workloads, impls, cfg)
    if call_floor:
        table += "\n\n" + render_call_floor(call_floor)
    print("\n" + table)

    report = {
        "benchmark": "tdict",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "filter": args.filter or None,
        "environment": env,
        "method": {
            "statistic": "median of per-call times",
            "timer": "time.perf_counter",
            "samples": cfg.samples,
            "target_sample_s": cfg.target_sample_s,
            "warmup_s": cfg.warmup_s,
            "interleaved": "implementations alternate within each round; the order rotates every round",
            "ratios": "median over rounds of the per-round ratio of per-call times (paired)",
            "gc": "enabled; gc.freeze() after setup so only garbage made by the op is scanned",
            "harness_overhead_ns_per_call": round(overhead, 1),
        },
        "roles": {"ours": "ours", "peer": "tensordict", "floor": "plain"},
        "targets": {
            "min_speedup_vs_tensordict_each": 1.0,
            "min_geomean_speedup_vs_tensordict": 2.0,
            "max_ours_over_plain_each": cmp.max_over_floor,
        },
        "summary": summary,
        "workloads": rows,
        "python_call_floor": call_floor,
    }
    write_report(args.out, report, table=header + "\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
