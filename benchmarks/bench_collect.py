"""Collector throughput: ``rl_collect`` vs TorchRL 0.14's ``torchrl.collectors`` vs a hand-written loop.

Usage::

    python benchmarks/bench_collect.py [--quick] [--out PATH] [--threads N] [--filter SUBSTR,...] [--list]

Same method as ``bench_envs.py`` (``_harness``: one process, interleaved rounds, paired medians, 1 torch
thread by default). One call of a workload is one batch taken from a running collector (``next(it)``).

Workloads (issue 6's targets in brackets):

- ``Collector`` on ``PendulumEnv`` at batch ``[]`` and ``[16]`` with a 2x64 tanh MLP policy
  (``TensorDictModule`` on ``"observation" -> "action"``), ``STEPS`` steps per batch.
  Peer: ``torchrl.collectors.Collector`` on ``torchrl.envs.PendulumEnv`` (same dynamics). TorchRL's pendulum
  is stateless and batch-unlocked, so ``[16]`` uses TorchRL's own ``BatchSizeTransform(batch_size=[16])``
  (its reset then draws 16 parameter sets with ``gen_params``), one vectorised env as ours, not 16 envs in a
  ``SerialEnv``. TorchRL's pendulum has no ``"observation"`` entry (only ``th``/``thdot``), so its policy
  is the same MLP behind ``[cos th, sin th, thdot]`` computed inside the module (our env computes that
  vector in its step). Floor: a hand-written loop over our env and policy (``policy(td)``,
  ``env.step_and_maybe_reset``, ``torch.stack`` along time) [ours >= 3x torchrl's frames/s, >= 0.8x the
  hand loop's frames/s, i.e. ours/floor <= 1.25x].
- ``MultiSyncCollector`` with 2 worker processes vs one ``Collector``, on a pendulum whose step burns about
  1 ms of CPU (a busy wait), same frames per batch [>= 1.6x the single collector's frames/s]. Recorded as an
  error when ``rl_collect.MultiSyncCollector`` does not exist yet. The gain needs ``WORKERS + 1`` idle cores:
  the load average is recorded with the results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import time
import warnings
from pathlib import Path
from types import SimpleNamespace as NS

import torch
from _harness import (
    import_ours,
    Comparison,
    Impl,
    Workload,
    machine_info,
    render,
    run_all,
    run_config,
    summarize,
    write_report,
)
from torch import nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STEPS = 300  # env steps per batch
BATCH = 16
SLOW_STEP_S = 1e-3  # CPU cost of one step of the slow env
SLOW_FRAMES = 100  # frames per batch in the multi-process workload
WORKERS = 2


def _import_ours():
    return tuple(import_ours("rl_collect", "rl_envs"))


# ----------------------------------------------------------------------------- policies
def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))


class _FromAngle(nn.Module):
    """The same MLP, fed ``[cos th, sin th, thdot]`` (TorchRL's pendulum exposes only ``th``, ``thdot``)."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.mlp = mlp

    def forward(self, th: torch.Tensor, thdot: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.stack([th.cos(), th.sin(), thdot], -1))


def _our_policy():
    from tdict.nn import TensorDictModule

    return TensorDictModule(_mlp(), in_keys=["observation"], out_keys=["action"])


# ----------------------------------------------------------------------------- slow env (multi-process)
def _busy_wait(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def make_slow_pendulum(seed: int = 0):
    """A PendulumEnv whose every step costs ``SLOW_STEP_S`` of CPU (module level: picklable for workers)."""
    _, rl_envs = _import_ours()

    class SlowPendulum(rl_envs.PendulumEnv):
        def _step(self, tensordict):
            _busy_wait(SLOW_STEP_S)
            return super()._step(tensordict)

    return SlowPendulum(seed=seed)


_CONTROL_NET: nn.Module | None = None


def _control_work(steps: int) -> None:
    """Per-step work like the slow collector's, without rl_collect: the MLP on one observation, then the wait."""
    global _CONTROL_NET
    torch.set_num_threads(1)
    if _CONTROL_NET is None:
        _CONTROL_NET = _mlp()
    x = torch.zeros(3)
    with torch.no_grad():
        for _ in range(steps):
            _CONTROL_NET(x)
            _busy_wait(SLOW_STEP_S)


def machine_parallel_gain(rounds: int = 5) -> float:
    """What this machine allows right now: a bare ``multiprocessing`` pool of ``WORKERS`` processes
    sharing the slow workload's steps, vs one process doing them all (median of paired rounds)."""
    import multiprocessing as mp
    import statistics

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(WORKERS) as pool:
        pool.map(_control_work, [1] * WORKERS)
        ratios = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            _control_work(SLOW_FRAMES)
            single = time.perf_counter() - t0
            t0 = time.perf_counter()
            pool.map(_control_work, [SLOW_FRAMES // WORKERS] * WORKERS)
            ratios.append(single / (time.perf_counter() - t0))
    return statistics.median(ratios)


# ----------------------------------------------------------------------------- setups
def _next_batch(it):
    def op():
        return next(it)

    return op


def _hand_loop(env, policy, steps: int):
    """The floor: reset once, then policy / step_and_maybe_reset / stack, carrying the root across calls."""
    state = {"td": env.reset()}

    def op():
        td = state["td"]
        records = []
        with torch.no_grad():
            for _ in range(steps):
                td = policy(td)
                stepped, td = env.step_and_maybe_reset(td)
                records.append(stepped)
        state["td"] = td
        return torch.stack(records, len(env.batch_size))

    return op


def s_pendulum(batch: tuple):
    n = 1
    for b in batch:
        n *= b

    def setup(impl: Impl) -> NS:
        torch.manual_seed(0)
        if impl.name in ("ours", "plain"):
            rl_collect, rl_envs = _import_ours()
            env = rl_envs.PendulumEnv(batch_size=list(batch), seed=0)
            policy = _our_policy()
            if impl.name == "plain":
                return NS(op=_hand_loop(env, policy, STEPS))
            collector = rl_collect.Collector(env, policy, frames_per_batch=STEPS * n)
            return NS(op=_next_batch(iter(collector)), close=collector.shutdown)
        from tensordict.nn import TensorDictModule
        from torchrl.collectors import Collector
        from torchrl.envs import BatchSizeTransform, PendulumEnv, TransformedEnv

        env = PendulumEnv(seed=0)
        if batch:
            env = TransformedEnv(env, BatchSizeTransform(batch_size=list(batch)))
        policy = TensorDictModule(_FromAngle(_mlp()), in_keys=["th", "thdot"], out_keys=["action"])
        collector = Collector(env, policy, frames_per_batch=STEPS * n, total_frames=-1)
        return NS(op=_next_batch(iter(collector)), close=collector.shutdown)

    return setup


def s_multi(impl: Impl) -> NS:
    rl_collect, _ = _import_ours()
    torch.manual_seed(0)
    if impl.name == "plain":
        collector = rl_collect.Collector(make_slow_pendulum, _our_policy(), frames_per_batch=SLOW_FRAMES)
    else:
        multi = getattr(rl_collect, "MultiSyncCollector", None)
        if multi is None:  # written but not exported yet
            try:
                from rl_collect.multi_sync import MultiSyncCollector as multi
            except ImportError:
                multi = None
        if multi is None:
            raise RuntimeError("rl_collect.MultiSyncCollector does not exist yet")
        collector = multi(
            [make_slow_pendulum] * WORKERS,
            _our_policy(),
            frames_per_batch=SLOW_FRAMES,
            total_frames=-1,
        )
    return NS(op=_next_batch(iter(collector)), close=collector.shutdown)


def same_data_as_hand_loop(batch: tuple) -> bool:
    """Sanity check: with the same seed and weights, a Collector batch equals the hand loop's steps."""
    rl_collect, rl_envs = _import_ours()
    n = 1
    for b in batch:
        n *= b
    torch.manual_seed(0)
    ours = next(
        iter(
            rl_collect.Collector(
                rl_envs.PendulumEnv(batch_size=list(batch), seed=0),
                _our_policy(),
                frames_per_batch=20 * n,
            )
        )
    )
    torch.manual_seed(0)
    loop = _hand_loop(rl_envs.PendulumEnv(batch_size=list(batch), seed=0), _our_policy(), 20)()
    return bool((ours.exclude("collector") == loop).all())


def _observe(ctx: NS, out) -> list:
    """What is cross-checked: the frames per batch and the per-step scalar layout."""
    return [int(out.numel()), list(out.get(("next", "reward")).shape)[: out.batch_dims]]


def _observe_frames(ctx: NS, out) -> int:
    return int(out.numel())


def _teardown(ctx: NS) -> None:
    close = getattr(ctx, "close", None)
    if close is not None:
        close()


def _w(name: str, setup, note: str, observe=_observe) -> Workload:
    return Workload(
        name,
        "collect",
        setup,
        td=lambda c: c.op,
        plain=lambda c: c.op,
        note=note,
        observe=observe,
        teardown=_teardown,
    )


PENDULUM_1 = f"Collector PendulumEnv+MLP, batch [], {STEPS} steps"
PENDULUM_N = f"Collector PendulumEnv+MLP, batch [{BATCH}], {STEPS} steps"
MULTI = f"MultiSyncCollector({WORKERS}) vs Collector, 1 ms step, {SLOW_FRAMES} frames"

WORKLOADS = [
    _w(
        PENDULUM_1,
        s_pendulum(()),
        "torchrl: Collector(PendulumEnv); floor: hand loop over our env",
    ),
    _w(
        PENDULUM_N,
        s_pendulum((BATCH,)),
        f"torchrl: PendulumEnv + BatchSizeTransform([{BATCH}]); floor: hand loop",
    ),
]
MULTI_WORKLOAD = _w(
    MULTI,
    s_multi,
    "ours: MultiSyncCollector, 2 workers; floor: one Collector",
    observe=_observe_frames,
)


def targets(rows: list[dict], multi_row: dict | None) -> tuple[dict, dict]:
    by = {r["name"]: r for r in rows}
    derived: dict = {}
    checks: dict = {}
    for name in (PENDULUM_1, PENDULUM_N):
        if name not in by:
            continue
        r = by[name]
        n = BATCH if name == PENDULUM_N else 1
        for k, label in (
            ("ours", "rl_collect"),
            ("torchrl", "torchrl"),
            ("plain", "hand loop"),
        ):
            us = r["median_us"].get(k)
            derived[f"{name}: {label} frames/s"] = None if us is None else STEPS * n / (us * 1e-6)
        s = r["speedup_vs_peer"]
        o = r["ours_over_floor"]
        derived[f"{name}: speed-up vs torchrl"] = s
        derived[f"{name}: frames/s as a fraction of the hand loop"] = None if o is None else 1.0 / o
        checks[f"{name}: >= 3x torchrl"] = s is not None and s >= 3.0
        checks[f"{name}: >= 0.8x the hand loop"] = o is not None and 1.0 / o >= 0.8
    if multi_row is not None:
        ratio = multi_row["speedup_vs_peer"]
        derived[f"{MULTI}: speed-up vs one Collector"] = ratio
        for k, label in (("ours", "MultiSyncCollector"), ("plain", "Collector")):
            us = multi_row["median_us"].get(k)
            derived[f"{MULTI}: {label} frames/s"] = None if us is None else SLOW_FRAMES / (us * 1e-6)
        control = multi_row.get("machine_parallel_gain")
        derived[f"{MULTI}: control, bare {WORKERS}-process pool gain on the same work"] = control
        derived[f"{MULTI}: gain as a fraction of the control's"] = (
            None if ratio is None or not control else ratio / control
        )
        if multi_row["errors"]:
            derived[f"{MULTI}: errors"] = multi_row["errors"]
        checks[f"{MULTI}: >= 1.6x one Collector"] = ratio is not None and ratio >= 1.6
    return derived, checks


def environment(impls: list[Impl]) -> dict:
    return machine_info(impls, "tensordict", "tdict", "rl_envs", loadavg_at_start=os.getloadavg())


def load() -> list[Impl]:
    rl_collect, _ = _import_ours()
    impls = [Impl("ours", "rl_collect", "td", wrap=None, version=rl_collect.__version__)]
    try:
        import torchrl
        import torchrl.collectors

        impls.append(Impl("torchrl", "torchrl", "td", wrap=None, version=torchrl.__version__))
    except ImportError as e:
        print(f"note: skipping torchrl ({e})")
    impls.append(Impl("plain", "hand loop", "plain", wrap=None))
    return impls


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples (about a minute)")
    ap.add_argument("--out", default=str(HERE / "results" / "collect.json"))
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (default 1; 0 = torch's default)",
    )
    ap.add_argument(
        "--samples",
        type=int,
        help="samples per workload and implementation (overrides the mode)",
    )
    ap.add_argument(
        "--filter",
        default="",
        help="comma-separated substrings of workload names (case-insensitive)",
    )
    ap.add_argument("--list", action="store_true", help="print the workload names and exit")
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(w.name for w in [*WORKLOADS, MULTI_WORKLOAD]))
        return 0
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(1)
    warnings.filterwarnings("ignore")  # torchrl's deprecation chatter would drown the table
    cfg = run_config(args.quick, args.samples or (5 if args.quick else 15))
    wanted = [s.strip().lower() for s in args.filter.split(",") if s.strip()]
    keep = lambda w: not wanted or any(s in w.name.lower() for s in wanted)
    impls = load()
    env = environment(impls)
    print(
        f"torch {env['torch']}; {torch.get_num_threads()} thread(s); "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items())
        + "\n",
        flush=True,
    )
    labels = {"ours": "rl_collect", "torchrl": "torchrl", "plain": "hand loop"}
    cmp = Comparison("ours", "torchrl", "plain", labels, max_over_floor=1.25)
    results = run_all([w for w in WORKLOADS if keep(w)], impls, cfg, reference="plain")
    rows, summary = summarize(results, cmp)
    table = render(rows, summary, cmp)

    multi_row = None
    multi_text = ""
    if keep(MULTI_WORKLOAD):
        # ours = MultiSyncCollector, peer = floor = one Collector: speed-up vs peer is the parallel gain
        mimpls = [impls[0], Impl("plain", "Collector", "plain", wrap=None)]
        mres = run_all(
            [MULTI_WORKLOAD],
            mimpls,
            run_config(args.quick, 5 if args.quick else 9),
            reference="plain",
        )
        mcmp = Comparison(
            "ours",
            "plain",
            "plain",
            {"ours": "MultiSyncCollector", "plain": "Collector"},
            max_over_floor=float("inf"),
        )
        mrows, msummary = summarize(mres, mcmp)
        multi_row = mrows[0]
        multi_text = render(mrows, msummary, mcmp)
        control = machine_parallel_gain()
        multi_row["machine_parallel_gain"] = control
        load1 = os.getloadavg()[0]
        multi_text += (
            f"\nnote: {os.cpu_count()} CPUs, load average {env['loadavg_at_start'][0]:.2f} at start and {load1:.2f} now; "
            f"the {WORKERS}-worker gain needs {WORKERS + 1} otherwise idle cores (workers + the parent), so it is "
            "only meaningful on an unloaded machine with enough cores.\n"
            f"control: a bare {WORKERS}-process pool doing the same per-step work (MLP + 1 ms wait, no rl_collect) "
            f"gains {control:.2f}x over one process on this machine right now."
        )
        rows.append(multi_row)

    derived, checks = targets(rows, multi_row)
    for batch in ((), (BATCH,)):
        checks[f"Collector data == hand loop data, batch {list(batch)}"] = same_data_as_hand_loop(batch)
    lines = [table, ""]
    if multi_text:
        lines += [multi_text, ""]
    for name, value in derived.items():
        if isinstance(value, float):
            lines.append(f"  {name}: {value:,.2f}")
        else:
            lines.append(f"  {name}: {'—' if value is None else value}")
    for name, ok in checks.items():
        lines.append(f"  {'met' if ok else 'NOT MET'}: {name}")
    text = "\n".join(lines)
    print("\n" + text)
    report = {
        "benchmark": "collect",
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "environment": env,
        "steps_per_batch": STEPS,
        "method": {
            "samples": cfg.samples,
            "target_sample_s": cfg.target_sample_s,
            "warmup_s": cfg.warmup_s,
        },
        "derived": derived,
        "targets_met": checks,
        "summary": summary,
        "workloads": rows,
    }
    write_report(args.out, report, table=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
