"""rl-kernels' reverse scans on CPU (GAE, TD(lambda), V-trace) vs TorchRL 0.14's fastest estimator vs our doubling scan.

Usage::

    python benchmarks/bench_kernels_scan.py [--quick] [--out PATH] [--threads N] [--candidates]

Same method as ``bench_objectives.py`` (one process, interleaved rounds, paired medians, 1 thread by
default). Columns: **ours** is ``rl_kernels.gae`` / ``td_lambda_return`` / ``vtrace`` (CPU: the compiled
C++ loop); **torchrl** is, per workload, the faster of TorchRL's loop and ``vec_`` estimator (picked by
timing both once at setup; the choice is in the workload's note); the floor is the same estimator with
the doubling scan (``rl_objectives.functional.vec_*`` with the rl-kernels dispatch off). Every result is
checked against a float64 loop over time (within 1e-4) before timing. Target (issue): ours at least 4x
faster than TorchRL at ``[64, 1000]`` with 1% dones.

``--candidates`` also times the CPU scan candidates on the raw scan (compiled loop, doubling, a Python
loop over T, Inductor's ``associative_scan`` under torch.compile, with its compile time).
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

import torch

HERE = Path(__file__).resolve().parent
for _src in ("rl-kernels", "rl-objectives", "tdict"):  # the bench env may lack an editable install
    _path = HERE.parent / "packages" / _src / "src"
    try:
        __import__(_src.replace("-", "_").replace("rl_tdict", "tdict"))
    except ImportError:
        sys.path.insert(0, str(_path))

from _harness import Comparison, Impl, Workload, module_versions, render, run_all, run_config, summarize, write_report  # noqa: E402

GAMMA, LMBDA = 0.99, 0.95


def rollout(n: int, t: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    terminated = torch.rand(n, t, generator=g) < 0.005
    done = terminated | (torch.rand(n, t, generator=g) < 0.005)  # 1% trajectory ends
    return {
        "value": torch.randn(n, t, generator=g),
        "next_value": torch.randn(n, t, generator=g),
        "reward": torch.randn(n, t, generator=g),
        "log_pi": 0.3 * torch.randn(n, t, generator=g),
        "log_mu": 0.3 * torch.randn(n, t, generator=g),
        "done": done,
        "terminated": terminated,
    }


def reference(kind: str, d: dict) -> torch.Tensor:
    """float64 loop over time (the first output of each estimator)."""
    v, nv, r = (d[k].double() for k in ("value", "next_value", "reward"))
    done, term = d["done"], d["terminated"]
    nv = torch.where(term, 0.0, nv)
    stop = done | term
    steps, out = r.shape[-1], [None] * r.shape[-1]
    if kind == "gae":
        acc = torch.zeros_like(r[:, 0])
        for t in reversed(range(steps)):
            acc = r[:, t] + GAMMA * nv[:, t] - v[:, t] + GAMMA * LMBDA * torch.where(stop[:, t], 0.0, acc)
            out[t] = acc
    elif kind == "td_lambda":
        acc = None
        for t in reversed(range(steps)):
            follow = nv[:, t] if acc is None else torch.where(stop[:, t], nv[:, t], acc)
            acc = r[:, t] + GAMMA * ((1 - LMBDA) * nv[:, t] + LMBDA * follow)
            out[t] = acc
    else:  # vtrace value targets
        rho = (d["log_pi"].double() - d["log_mu"].double()).exp()
        rho_bar, c = rho.clamp(max=1.0), rho.clamp(max=1.0)
        acc = torch.zeros_like(r[:, 0])
        for t in reversed(range(steps)):
            acc = rho_bar[:, t] * (r[:, t] + GAMMA * nv[:, t] - v[:, t]) + GAMMA * c[:, t] * torch.where(
                stop[:, t], 0.0, acc
            )
            out[t] = v[:, t] + acc
    return torch.stack(out, -1).float()  # pyright: ignore[reportArgumentType]  # every step is filled


# ----------------------------------------------------------------------------- implementations
def _ours():
    try:
        import rl_kernels
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping ours ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return rl_kernels


def _torchrl():
    try:
        import torchrl.objectives.value.functional as F  # pyright: ignore[reportMissingImports]  # bench-only peer
    except Exception as e:  # noqa: BLE001
        print(f"note: skipping torchrl ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    return F


def _floor():
    import rl_objectives.functional as F
    from rl_objectives.functional import value as value_mod

    return F, value_mod


def load_impls() -> list[Impl]:
    impls = []
    for name, mod in (("ours", _ours()), ("torchrl", _torchrl())):
        if mod is not None:
            impls.append(Impl(name, name, "td", wrap=lambda d, bs: None, TensorDict=NS(name=name, mod=mod)))
    impls.append(Impl("plain", "doubling scan", "plain", wrap=lambda d, bs: None))
    return impls


def _quick_ms(fn, n: int = 3) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def _call(kind: str, name: str, mod, d: dict, vectorized: bool = True):
    v, nv, r, lp, lm, done, term = (
        d[k] for k in ("value", "next_value", "reward", "log_pi", "log_mu", "done", "terminated")
    )
    if name == "ours":
        if kind == "gae":
            return lambda: mod.gae(GAMMA, LMBDA, v, nv, r, done, term)
        if kind == "td_lambda":
            return lambda: mod.td_lambda_return(GAMMA, LMBDA, nv, r, done, term)
        return lambda: mod.vtrace(GAMMA, lp, lm, v, nv, r, done, term)
    # torchrl: [N, T, 1], time_dim=-2
    v, nv, r, lp, lm, done, term = (x.unsqueeze(-1) for x in (v, nv, r, lp, lm, done, term))
    if kind == "gae":
        fn = mod.vec_generalized_advantage_estimate if vectorized else mod.generalized_advantage_estimate
        return lambda: fn(GAMMA, LMBDA, v, nv, r, done, term, time_dim=-2)
    if kind == "td_lambda":
        fn = mod.vec_td_lambda_return_estimate if vectorized else mod.td_lambda_return_estimate
        return lambda: fn(GAMMA, LMBDA, nv, r, done, term, time_dim=-2)
    return lambda: mod.vtrace_advantage_estimate(GAMMA, lp, lm, v, nv, r, done, term, time_dim=-2)


def setup(kind: str, n: int, t: int):
    def run(impl: Impl) -> NS:
        d = rollout(n, t)
        ctx = NS(d=d, ref=reference(kind, d), kind=kind, note="")
        if impl.TensorDict is None:
            return ctx
        name, mod = impl.TensorDict.name, impl.TensorDict.mod
        if name == "torchrl" and kind != "vtrace":  # the faster of TorchRL's two estimators
            loop, vec = _call(kind, name, mod, d, False), _call(kind, name, mod, d, True)
            t_loop, t_vec = _quick_ms(loop), _quick_ms(vec)
            ctx.op = vec if t_vec <= t_loop else loop
            ctx.note = f"torchrl: {'vec' if t_vec <= t_loop else 'loop'} (loop {t_loop:.2f} ms, vec {t_vec:.2f} ms)"
        else:
            ctx.op = _call(kind, name, mod, d)
        return ctx

    return run


def plain(ctx: NS):
    F, value_mod = _floor()
    d = ctx.d
    v, nv, r, lp, lm, done, term = (
        d[k] for k in ("value", "next_value", "reward", "log_pi", "log_mu", "done", "terminated")
    )
    fns = {
        "gae": lambda: F.vec_generalized_advantage_estimate(GAMMA, LMBDA, v, nv, r, done, term),
        "td_lambda": lambda: F.vec_td_lambda_return_estimate(GAMMA, LMBDA, nv, r, done, term),
        "vtrace": lambda: F.vtrace_advantage_estimate(GAMMA, lp, lm, v, nv, r, done, term),
    }
    fn = fns[ctx.kind]

    def run():
        saved = value_mod._kernel_scan
        setattr(value_mod, "_kernel_scan", lambda: None)  # no kernel: the doubling scan
        try:
            return fn()
        finally:
            setattr(value_mod, "_kernel_scan", saved)

    return run


def matches_reference(ctx: NS, out) -> bool:
    if ctx.kind == "vtrace":
        out = out[1]
    elif isinstance(out, tuple):
        out = out[0]
    out = out.squeeze(-1) if out.shape != ctx.ref.shape else out
    return bool(torch.allclose(out, ctx.ref, atol=1e-4, rtol=1e-4))


WORKLOADS = [
    Workload(
        f"{label}, {n} x {t}", "estimator", setup(kind, n, t), td=lambda c: c.op, plain=plain, observe=matches_reference
    )
    for kind, label in (("gae", "GAE"), ("td_lambda", "TD(lambda)"), ("vtrace", "V-trace"))
    for n, t in ((64, 1000), (8, 64))
]


# ----------------------------------------------------------------------------- scan candidates
def scan_candidates(shapes=((64, 1000), (8, 64), (1, 1000))) -> list[dict]:
    """Raw scan ``y_t = x_t + c_t * y_{t+1}`` (c zero at 1% of steps): each CPU candidate, median ms."""
    from torch._higher_order_ops.associative_scan import associative_scan

    from rl_kernels.scan import _doubling_scan, cpu_kernel

    def python_loop(x, c):
        out, y = torch.empty_like(x), torch.zeros_like(x[:, 0])
        for t in range(x.shape[1] - 1, -1, -1):
            y = torch.addcmul(x[:, t], c[:, t], y)
            out[:, t] = y
        return out

    def compose(later, now):
        return now[0] + now[1] * later[0], now[1] * later[1]

    def assoc(x, c):
        return associative_scan(compose, (x, c), dim=-1, reverse=True, combine_mode="generic")[0]

    compiled_loop = cpu_kernel(torch.float32)
    rows = []
    for n, t in shapes:
        g = torch.Generator().manual_seed(1)
        x = torch.randn(n, t, generator=g)
        c = torch.where(torch.rand(n, t, generator=g) < 0.01, 0.0, GAMMA * LMBDA)
        ref = python_loop(x.double(), c.double()).float()
        cands = {"doubling scan": lambda: _doubling_scan(x, c, None), "python loop over T": lambda: python_loop(x, c)}
        if compiled_loop is not None:
            cands["compiled C++ loop (ours)"] = lambda: compiled_loop(x, c, None)
        t0 = time.perf_counter()
        assoc_c = torch.compile(assoc, fullgraph=True, dynamic=False)
        assoc_c(x, c)
        compile_s = time.perf_counter() - t0
        cands["associative_scan, torch.compile"] = lambda: assoc_c(x, c)
        for name, fn in cands.items():
            err = (fn() - ref).abs().max().item()
            times = []
            for _ in range(25):
                t1 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t1) * 1e3)
            row = {"shape": [n, t], "candidate": name, "median_ms": statistics.median(times), "max_abs_err": err}
            if name.startswith("associative"):
                row["compile_s"] = compile_s
            rows.append(row)
            print(f"  [{n}, {t}] {name:<34} {row['median_ms']:8.3f} ms", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(HERE / "results" / "kernels_scan.json"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--candidates", action="store_true", help="also time the CPU scan candidates")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = run_config(args.quick)
    impls = load_impls()
    versions = module_versions("torch", "torchrl", "rl_kernels", "rl_objectives")
    header = f"{', '.join(f'{k} {v}' for k, v in versions.items())}; python {platform.python_version()}; {torch.get_num_threads()} thread(s)"
    print(header + "\n", flush=True)
    results = run_all(WORKLOADS, impls, cfg, reference="plain")
    cmp = Comparison(
        "ours",
        "torchrl",
        "plain",
        {"ours": "rl-kernels", "torchrl": "torchrl (fastest)", "plain": "doubling scan"},
        max_over_floor=1.0,
        min_geomean_speedup=4.0,
    )
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)
    target = [x for x in rows if x["name"] in ("GAE, 64 x 1000", "TD(lambda), 64 x 1000")]
    met = all(x["speedup_vs_peer"] and x["speedup_vs_peer"] >= 4 for x in target)
    table += f"\ntarget (>= 4x TorchRL at 64 x 1000, GAE and TD(lambda)): {'met' if met else 'NOT met'}"
    print("\n" + table)
    report = {
        "benchmark": "kernels_scan",
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": {
            "versions": versions,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch_num_threads": torch.get_num_threads(),
        },
        "method": {"samples": cfg.samples, "target_sample_s": cfg.target_sample_s, "warmup_s": cfg.warmup_s},
        "summary": {**summary, "target_4x_at_64x1000_met": met},
        "workloads": rows,
    }
    if args.candidates:
        report["scan_candidates"] = scan_candidates()
    write_report(args.out, report, table=header + "\n\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
